//===- Elementwise.cu - Row and elementwise kernels -----------*- CUDA -*-===//
//
// Embedding, rms_norm, activations, add/mul, bias_add, gather_rows, cast,
// and the fused steps of infer-fuse (split, add_rms_norm, silu_mul, and the
// `fused` register-program interpreter), over fp32, bf16 or f16 activations
// (Elements.cuh: loads widen to fp32, stores round once). Memory-bound:
// grid-stride loops over 16-byte packs of elements where the pointers and
// row lengths allow, else over single elements. rms_norm and silu_mul of
// bf16 rows that feed an fp8 GEMM also have forms that quantize their
// output (launchRmsNormFp8, launchSiluMulFp8, E4M3Rows.cuh): one kernel
// writes the bf16 row and its E4M3 codes and scale, which the GEMM would
// otherwise make by reading the row back (Gemm::linearQuantized).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/QuantizingKernels.h"
#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/cuda/kernels/E4M3Rows.cuh"
#include "runtime/cuda/kernels/Elements.cuh"

#include <utility>

namespace infer::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1)
                                                  : 65535 * 8);
}

__device__ __forceinline__ int64_t globalThread() {
  return blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t gridThreads() {
  return int64_t(gridDim.x) * blockDim.x;
}

/// The row a quantizing producer keeps where y is not stored (null y): the
/// block's dynamic shared memory (launchQuantizing).
template <typename T> __device__ __forceinline__ T *unstoredRow() {
  extern __shared__ uint4 unstoredRowWords[];
  return reinterpret_cast<T *>(unstoredRowWords);
}

/// A quantizing producer's launch, one block of kThreads per row: its row
/// in dynamic shared memory where y is null (raising the kernel's limit
/// past the default 48 KiB where the row needs it), none where it stores
/// y. cudaErrorInvalidValue for a null y past kMaxUnstoredRowElements.
template <typename... Params, typename... Args>
cudaError_t launchQuantizing(void (*kernel)(Params...), const void *y,
                             int64_t cols, int64_t rows, cudaStream_t stream,
                             Args &&...args) {
  size_t bytes = 0;
  if (!y) {
    if (cols > kMaxUnstoredRowElements)
      return cudaErrorInvalidValue;
    bytes = static_cast<size_t>(cols) * sizeof(__nv_bfloat16);
    if (bytes > 48 * 1024) {
      const cudaError_t status = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(bytes));
      if (status != cudaSuccess)
        return status;
    }
  }
  return launchDependent(kernel, static_cast<unsigned>(rows), kThreads, bytes,
                         stream, std::forward<Args>(args)...);
}

__device__ __forceinline__ float siluOf(float v) {
  return v / (1.0f + expf(-v));
}

__device__ __forceinline__ float geluTanhOf(float v) {
  const float c = 0.7978845608028654f; // sqrt(2 / pi)
  return 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
}

struct Identity {
  __device__ float operator()(float v) const { return v; }
};
struct Silu {
  __device__ float operator()(float v) const { return siluOf(v); }
};
struct GeluTanh {
  __device__ float operator()(float v) const { return geluTanhOf(v); }
};
/// Exact GELU, as torch computes it in fp32.
__device__ __forceinline__ float geluOf(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}
struct Gelu {
  __device__ float operator()(float v) const { return geluOf(v); }
};
/// cap * tanh(v / cap): Gemma 2's logit soft-capping.
struct Softcap {
  float cap;
  __device__ float operator()(float v) const { return cap * tanhf(v / cap); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

/// y[i] = f(x[i]) in packs of N, then the last n % N elements one by one.
template <int N, typename X, typename Y, typename F>
__global__ void unaryKernel(const X *x, Y *y, int64_t n, F f) {
  const int64_t packs = n / N;
  for (int64_t p = globalThread(); p < packs; p += gridThreads()) {
    float v[N];
    loadFloats<N>(x + p * N, v);
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[e] = f(v[e]);
    storeFloats<N>(y + p * N, v);
  }
  for (int64_t i = packs * N + globalThread(); i < n; i += gridThreads())
    y[i] = fromFloat<Y>(f(toFloat(x[i])));
}

template <typename X, typename Y, typename F>
cudaError_t launchUnary(const X *x, Y *y, int64_t n, cudaStream_t stream, F f) {
  if (n <= 0)
    return cudaSuccess;
  constexpr int N = kPack<X, Y>;
  if (packAligned(x) && packAligned(y))
    unaryKernel<N>
        <<<blocksFor((n + N - 1) / N), kThreads, 0, stream>>>(x, y, n, f);
  else
    unaryKernel<1><<<blocksFor(n), kThreads, 0, stream>>>(x, y, n, f);
  return cudaGetLastError();
}

/// y[i] = f(a[i], b[i]), as unaryKernel.
template <int N, typename T, typename F>
__global__ void binaryKernel(const T *a, const T *b, T *y, int64_t n, F f) {
  const int64_t packs = n / N;
  for (int64_t p = globalThread(); p < packs; p += gridThreads()) {
    float va[N], vb[N];
    loadFloats<N>(a + p * N, va);
    loadFloats<N>(b + p * N, vb);
#pragma unroll
    for (int e = 0; e < N; ++e)
      va[e] = f(va[e], vb[e]);
    storeFloats<N>(y + p * N, va);
  }
  for (int64_t i = packs * N + globalThread(); i < n; i += gridThreads())
    y[i] = fromFloat<T>(f(toFloat(a[i]), toFloat(b[i])));
}

template <typename T, typename F>
cudaError_t launchBinary(const T *a, const T *b, T *y, int64_t n,
                         cudaStream_t stream, F f) {
  if (n <= 0)
    return cudaSuccess;
  constexpr int N = kPack<T>;
  if (packAligned(a) && packAligned(b) && packAligned(y))
    binaryKernel<N>
        <<<blocksFor((n + N - 1) / N), kThreads, 0, stream>>>(a, b, y, n, f);
  else
    binaryKernel<1><<<blocksFor(n), kThreads, 0, stream>>>(a, b, y, n, f);
  return cudaGetLastError();
}

/// Sums v over the block (blockDim.x a multiple of 32); every thread gets
/// the total.
__device__ float blockSum(float v, float *partial) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0)
      partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

/// One block per row of h elements, in packs of N (h % N == 0). Quantize:
/// the row's E4M3 codes and scale too, from the stored values
/// (launchRmsNormFp8; a null y keeps them in shared memory, unstoredRow);
/// the norm's arithmetic is the same either way.
template <int N, bool Quantize, typename T, typename P>
__global__ void rmsNormKernel(const T *x, const P *w, T *y, int64_t h,
                              float epsilon, float weightOffset, uint8_t *codes,
                              float *scales) {
  waitForPriorGrids();
  allowDependentGrids();
  const T *xr = x + blockIdx.x * h;
  T *yr = !Quantize || y ? y + blockIdx.x * h : unstoredRow<T>();
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * int64_t(N); i < h; i += blockDim.x * N) {
    float v[N];
    loadFloats<N>(xr + i, v);
#pragma unroll
    for (int e = 0; e < N; ++e)
      sum += v[e] * v[e];
  }
  __shared__ float partial[32];
  const float inv =
      rsqrtf(blockSum(sum, partial) / static_cast<float>(h) + epsilon);
  [[maybe_unused]] float amax = 0.0f;
  for (int64_t i = threadIdx.x * int64_t(N); i < h; i += blockDim.x * N) {
    float v[N], wv[N];
    loadFloats<N>(xr + i, v);
    loadFloats<N>(w + i, wv);
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[e] = (wv[e] + weightOffset) * (v[e] * inv);
    storeFloats<N>(yr + i, v);
    if constexpr (Quantize)
      amax = storedAmax<T>(amax, v);
  }
  if constexpr (Quantize)
    quantizeStoredRow<N>(yr, h, amax, codes + blockIdx.x * h,
                         scales + blockIdx.x);
}

/// One block per row of h elements, in packs of N (h % N == 0). The second
/// pass adds a and b again rather than reading `sum` back, so the norm sees
/// the fp32 sums, not their rounding to T (hence sum may not alias a or b).
template <int N, typename T, typename P>
__global__ void addRmsNormKernel(const T *a, const T *b, const P *w, T *sum,
                                 T *y, int64_t h, float epsilon,
                                 float weightOffset) {
  const int64_t row = blockIdx.x * h;
  float total = 0.0f;
  for (int64_t i = threadIdx.x * int64_t(N); i < h; i += blockDim.x * N) {
    float va[N], vb[N];
    loadFloats<N>(a + row + i, va);
    loadFloats<N>(b + row + i, vb);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      va[e] += vb[e];
      total += va[e] * va[e];
    }
    storeFloats<N>(sum + row + i, va);
  }
  __shared__ float partial[32];
  const float inv =
      rsqrtf(blockSum(total, partial) / static_cast<float>(h) + epsilon);
  for (int64_t i = threadIdx.x * int64_t(N); i < h; i += blockDim.x * N) {
    float va[N], vb[N], wv[N];
    loadFloats<N>(a + row + i, va);
    loadFloats<N>(b + row + i, vb);
    loadFloats<N>(w + i, wv);
#pragma unroll
    for (int e = 0; e < N; ++e)
      va[e] = (wv[e] + weightOffset) * ((va[e] + vb[e]) * inv);
    storeFloats<N>(y + row + i, va);
  }
}

/// silu_mul over rows whose operands have their own row strides (in
/// elements, multiples of N): grid.x covers the columns in packs of N,
/// grid.y strides over the rows. Y: the result's type (T's, or bf16 of fp32
/// operands).
template <int N, typename T, typename Y = T>
__global__ void siluMulRowsKernel(const T *gate, int64_t gateLd, const T *up,
                                  int64_t upLd, Y *y, int64_t rows,
                                  int64_t cols) {
  waitForPriorGrids();
  allowDependentGrids();
  const int64_t col = globalThread() * N;
  if (col >= cols)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float g[N], u[N];
    loadFloats<N>(gate + r * gateLd + col, g);
    loadFloats<N>(up + r * upLd + col, u);
#pragma unroll
    for (int e = 0; e < N; ++e)
      g[e] = siluOf(g[e]) * u[e];
    storeFloats<N>(y + r * cols + col, g);
  }
}

/// silu_mul with the E4M3 codes and scale of each row of y
/// (launchSiluMulFp8): one block per row, so that the block has the row's
/// amax; each element is siluMulRowsKernel's. A null y keeps the row in
/// shared memory (unstoredRow).
template <int N, typename T>
__global__ void
siluMulQuantizeKernel(const T *gate, int64_t gateLd, const T *up, int64_t upLd,
                      T *y, int64_t cols, uint8_t *codes, float *scales) {
  waitForPriorGrids();
  allowDependentGrids();
  const int64_t r = blockIdx.x;
  T *yr = y ? y + r * cols : unstoredRow<T>();
  float amax = 0.0f;
  for (int64_t c = threadIdx.x * int64_t(N); c < cols; c += blockDim.x * N) {
    float g[N], u[N];
    loadFloats<N>(gate + r * gateLd + c, g);
    loadFloats<N>(up + r * upLd + c, u);
#pragma unroll
    for (int e = 0; e < N; ++e)
      g[e] = siluOf(g[e]) * u[e];
    storeFloats<N>(yr + c, g);
    amax = storedAmax<T>(amax, g);
  }
  quantizeStoredRow<N>(yr, cols, amax, codes + r * cols, scales + r);
}

/// y[r, c] = x[r, c] + bias[c]: packs of N never cross a row (cols % N ==
/// 0), so each pack's bias is one pack too.
template <int N, typename T, typename P>
__global__ void biasAddKernel(const T *x, const P *bias, T *y, int64_t rows,
                              int64_t cols) {
  const int64_t packs = rows * cols / N;
  for (int64_t p = globalThread(); p < packs; p += gridThreads()) {
    const int64_t i = p * N;
    float v[N], b[N];
    loadFloats<N>(x + i, v);
    loadFloats<N>(bias + i % cols, b);
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[e] += b[e];
    storeFloats<N>(y + i, v);
  }
}

/// y[i, :] = x[row(i) * ld + column, +width) for `count` rows of `width`
/// elements, copied as they are in packs of N (width, ld and column
/// multiples of N); row(i) = indices[i], or i where indices is null.
template <int N, typename T>
__global__ void copyRowsKernel(const T *x, int64_t ld, int64_t column,
                               const int32_t *indices, int64_t count,
                               int64_t width, T *y) {
  waitForPriorGrids();
  allowDependentGrids();
  const int64_t packsPerRow = width / N;
  for (int64_t p = globalThread(); p < count * packsPerRow;
       p += gridThreads()) {
    const int64_t i = p / packsPerRow, c = (p % packsPerRow) * N;
    const int64_t row = indices ? indices[i] : i;
    copyElements<N>(x + row * ld + column + c, y + i * width + c);
  }
}

template <typename T>
cudaError_t launchCopyRows(const T *x, int64_t ld, int64_t column,
                           const int32_t *indices, int64_t count, int64_t width,
                           T *y, cudaStream_t stream) {
  if (count <= 0 || width <= 0)
    return cudaSuccess;
  constexpr int N = kPack<T>;
  if (width % N == 0 && ld % N == 0 && column % N == 0 && packAligned(x) &&
      packAligned(y))
    return launchDependent(copyRowsKernel<N, T>, blocksFor(count * width / N),
                           kThreads, 0, stream, x, ld, column, indices, count,
                           width, y);
  return launchDependent(copyRowsKernel<1, T>, blocksFor(count * width),
                         kThreads, 0, stream, x, ld, column, indices, count,
                         width, y);
}

/// y[i, :] = table[ids[i] - offset, :] converted to T, or zeros where that
/// row is outside the table, in packs of N (hidden % N == 0).
template <int N, typename T>
__global__ void embeddingKernel(const __nv_bfloat16 *table, int64_t rows,
                                int64_t hidden, int64_t vocabOffset,
                                const int32_t *ids, int64_t t, T *y,
                                float scale) {
  // Gemma: the normalizer is a tensor of the activation dtype.
  const float s = toFloat(fromFloat<T>(scale));
  const int64_t packsPerRow = hidden / N;
  for (int64_t p = globalThread(); p < t * packsPerRow; p += gridThreads()) {
    const int64_t i = p / packsPerRow, c = (p % packsPerRow) * N;
    const int64_t row = ids[i] - vocabOffset;
    float v[N] = {};
    if (row >= 0 && row < rows)
      loadFloats<N>(table + row * hidden + c, v);
    if (scale != 1.0f) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[e] *= s;
    }
    storeFloats<N>(y + i * hidden + c, v);
  }
}

__global__ void fusedKernel(FusedProgram p, int64_t n) {
  float regs[kMaxFusedInputs + kMaxFusedInstructions];
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    for (int r = 0; r < p.numInputs; ++r)
      regs[r] = loadAs(p.inputs[r], p.inputTypes[r], i);
    for (int k = 0; k < p.numInstructions; ++k) {
      const float x = regs[p.arg0[k]];
      float out;
      switch (p.op[k]) {
      case FusedOp::kAdd:
        out = x + regs[p.arg1[k]];
        break;
      case FusedOp::kMul:
        out = x * regs[p.arg1[k]];
        break;
      case FusedOp::kSilu:
        out = siluOf(x);
        break;
      case FusedOp::kGeluTanh:
        out = geluTanhOf(x);
        break;
      case FusedOp::kGelu:
        out = geluOf(x);
        break;
      default: // kSiluMul
        out = siluOf(x) * regs[p.arg1[k]];
        break;
      }
      regs[p.numInputs + k] = out;
    }
    for (int r = 0; r < p.numOutputs; ++r)
      storeAs(p.outputs[r], p.outputTypes[r], i, regs[p.yields[r]]);
  }
}

} // namespace

template <typename T>
cudaError_t launchEmbedding(const __nv_bfloat16 *table, int64_t rows,
                            int64_t hidden, int64_t vocabOffset,
                            const int32_t *ids, int64_t t, T *y,
                            cudaStream_t stream, float scale) {
  if (t <= 0 || hidden <= 0)
    return cudaSuccess;
  constexpr int N = kPack<__nv_bfloat16, T>;
  if (hidden % N == 0 && packAligned(table) && packAligned(y))
    embeddingKernel<N><<<blocksFor(t * hidden / N), kThreads, 0, stream>>>(
        table, rows, hidden, vocabOffset, ids, t, y, scale);
  else
    embeddingKernel<1><<<blocksFor(t * hidden), kThreads, 0, stream>>>(
        table, rows, hidden, vocabOffset, ids, t, y, scale);
  return cudaGetLastError();
}

template <typename T, typename P>
cudaError_t launchRmsNorm(const T *x, const P *w, T *y, int64_t rows, int64_t h,
                          float epsilon, cudaStream_t stream,
                          float weightOffset) {
  if (rows <= 0 || h <= 0)
    return cudaSuccess;
  constexpr int N = kPack<T, P>;
  const unsigned grid = static_cast<unsigned>(rows);
  if (h % N == 0 && packAligned(x) && packAligned(w) && packAligned(y))
    return launchDependent(rmsNormKernel<N, false, T, P>, grid, kThreads, 0,
                           stream, x, w, y, h, epsilon, weightOffset, nullptr,
                           nullptr);
  return launchDependent(rmsNormKernel<1, false, T, P>, grid, kThreads, 0,
                         stream, x, w, y, h, epsilon, weightOffset, nullptr,
                         nullptr);
}

template <typename P>
cudaError_t launchRmsNormFp8(const __nv_bfloat16 *x, const P *w,
                             __nv_bfloat16 *y, uint8_t *codes, float *scales,
                             int64_t rows, int64_t h, float epsilon,
                             cudaStream_t stream, float weightOffset) {
  if (rows <= 0 || h <= 0)
    return cudaSuccess;
  if (!packAligned(codes))
    return cudaErrorInvalidValue;
  // launchRmsNorm's choice of N: it fixes the order of the sum of squares.
  constexpr int N = kPack<__nv_bfloat16, P>;
  const bool packs =
      h % N == 0 && packAligned(x) && packAligned(w) && packAligned(y);
  return launchQuantizing(packs ? rmsNormKernel<N, true, __nv_bfloat16, P>
                                : rmsNormKernel<1, true, __nv_bfloat16, P>,
                          y, h, rows, stream, x, w, y, h, epsilon, weightOffset,
                          codes, scales);
}

template <typename T>
cudaError_t launchSilu(const T *x, T *y, int64_t n, cudaStream_t stream) {
  return launchUnary(x, y, n, stream, Silu{});
}

template <typename T>
cudaError_t launchGeluTanh(const T *x, T *y, int64_t n, cudaStream_t stream) {
  return launchUnary(x, y, n, stream, GeluTanh{});
}

template <typename T>
cudaError_t launchGelu(const T *x, T *y, int64_t n, cudaStream_t stream) {
  return launchUnary(x, y, n, stream, Gelu{});
}

cudaError_t launchSoftcap(float *y, int64_t n, float cap, cudaStream_t stream) {
  if (!(cap > 0))
    return cudaErrorInvalidValue;
  return launchUnary(y, y, n, stream, Softcap{cap});
}

template <typename T>
cudaError_t launchAdd(const T *a, const T *b, T *y, int64_t n,
                      cudaStream_t stream) {
  return launchBinary(a, b, y, n, stream, Add{});
}

template <typename T>
cudaError_t launchMul(const T *a, const T *b, T *y, int64_t n,
                      cudaStream_t stream) {
  return launchBinary(a, b, y, n, stream, Mul{});
}

template <typename T>
cudaError_t launchGatherRows(const T *x, int64_t cols, const int32_t *indices,
                             int64_t count, T *y, cudaStream_t stream) {
  return launchCopyRows(x, cols, 0, indices, count, cols, y, stream);
}

template <typename From, typename To>
cudaError_t launchCast(const From *x, To *y, int64_t n, cudaStream_t stream) {
  return launchUnary(x, y, n, stream, Identity{});
}

template <typename T, typename P>
cudaError_t launchBiasAdd(const T *x, const P *bias, T *y, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return cudaSuccess;
  constexpr int N = kPack<T, P>;
  const int64_t n = rows * cols;
  if (cols % N == 0 && packAligned(x) && packAligned(bias) && packAligned(y))
    biasAddKernel<N>
        <<<blocksFor(n / N), kThreads, 0, stream>>>(x, bias, y, rows, cols);
  else
    biasAddKernel<1>
        <<<blocksFor(n), kThreads, 0, stream>>>(x, bias, y, rows, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launchSplitColumns(const T *x, int64_t rows, int64_t cols,
                               int64_t column, int64_t width, T *y,
                               cudaStream_t stream) {
  return launchCopyRows(x, cols, column, nullptr, rows, width, y, stream);
}

template <typename T, typename P>
cudaError_t launchAddRmsNorm(const T *a, const T *b, const P *w, T *sum, T *y,
                             int64_t rows, int64_t h, float epsilon,
                             cudaStream_t stream, float weightOffset) {
  if (rows <= 0 || h <= 0)
    return cudaSuccess;
  if (sum == a || sum == b)
    return cudaErrorInvalidValue;
  constexpr int N = kPack<T, P>;
  const unsigned grid = static_cast<unsigned>(rows);
  if (h % N == 0 && packAligned(a) && packAligned(b) && packAligned(w) &&
      packAligned(sum) && packAligned(y))
    addRmsNormKernel<N><<<grid, kThreads, 0, stream>>>(a, b, w, sum, y, h,
                                                       epsilon, weightOffset);
  else
    addRmsNormKernel<1><<<grid, kThreads, 0, stream>>>(a, b, w, sum, y, h,
                                                       epsilon, weightOffset);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launchSiluMul(const T *gate, int64_t gateLd, const T *up,
                          int64_t upLd, T *y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return cudaSuccess;
  if (gateLd < cols || upLd < cols)
    return cudaErrorInvalidValue;
  constexpr int N = kPack<T>;
  const auto packed = [](const T *p, int64_t ld) {
    return packAligned(p) && ld % N == 0;
  };
  const unsigned rowBlocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  if (cols % N == 0 && packed(gate, gateLd) && packed(up, upLd) &&
      packed(y, cols)) {
    const int64_t packs = cols / N;
    const dim3 grid(static_cast<unsigned>((packs + kThreads - 1) / kThreads),
                    rowBlocks);
    return launchDependent(siluMulRowsKernel<N, T>, grid, kThreads, 0, stream,
                           gate, gateLd, up, upLd, y, rows, cols);
  }
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  rowBlocks);
  return launchDependent(siluMulRowsKernel<1, T>, grid, kThreads, 0, stream,
                         gate, gateLd, up, upLd, y, rows, cols);
}

cudaError_t launchSiluMulF32(const float *gate, int64_t gateLd, const float *up,
                             int64_t upLd, __nv_bfloat16 *y, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return cudaSuccess;
  if (gateLd < cols || upLd < cols)
    return cudaErrorInvalidValue;
  constexpr int N = kPack<float, __nv_bfloat16>;
  const unsigned rowBlocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  if (cols % N == 0 && gateLd % N == 0 && upLd % N == 0 && packAligned(gate) &&
      packAligned(up) && packAligned(y)) {
    const dim3 grid(static_cast<unsigned>((cols / N + kThreads - 1) / kThreads),
                    rowBlocks);
    return launchDependent(siluMulRowsKernel<N, float, __nv_bfloat16>, grid,
                           kThreads, 0, stream, gate, gateLd, up, upLd, y, rows,
                           cols);
  }
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  rowBlocks);
  return launchDependent(siluMulRowsKernel<1, float, __nv_bfloat16>, grid,
                         kThreads, 0, stream, gate, gateLd, up, upLd, y, rows,
                         cols);
}

cudaError_t launchSiluMulFp8(const __nv_bfloat16 *gate, int64_t gateLd,
                             const __nv_bfloat16 *up, int64_t upLd,
                             __nv_bfloat16 *y, uint8_t *codes, float *scales,
                             int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return cudaSuccess;
  if (gateLd < cols || upLd < cols || !packAligned(codes))
    return cudaErrorInvalidValue;
  constexpr int N = kPack<__nv_bfloat16>;
  const auto packed = [](const __nv_bfloat16 *p, int64_t ld) {
    return packAligned(p) && ld % N == 0;
  };
  const bool packs = cols % N == 0 && packed(gate, gateLd) &&
                     packed(up, upLd) && packed(y, cols);
  return launchQuantizing(packs ? siluMulQuantizeKernel<N, __nv_bfloat16>
                                : siluMulQuantizeKernel<1, __nv_bfloat16>,
                          y, cols, rows, stream, gate, gateLd, up, upLd, y,
                          cols, codes, scales);
}

cudaError_t launchFused(const FusedProgram &program, int64_t n,
                        cudaStream_t stream) {
  if (program.numInputs > kMaxFusedInputs ||
      program.numInstructions > kMaxFusedInstructions ||
      program.numOutputs > kMaxFusedOutputs)
    return cudaErrorInvalidValue;
  if (n <= 0)
    return cudaSuccess;
  fusedKernel<<<blocksFor(n), kThreads, 0, stream>>>(program, n);
  return cudaGetLastError();
}

// The instantiations: every activation type T, norm weights and biases of
// type T or fp32, casts between every two types.
#define INFER_ACTIVATION_KERNELS(T)                                            \
  template cudaError_t launchEmbedding<T>(const __nv_bfloat16 *, int64_t,      \
                                          int64_t, int64_t, const int32_t *,   \
                                          int64_t, T *, cudaStream_t, float);  \
  template cudaError_t launchSilu<T>(const T *, T *, int64_t, cudaStream_t);   \
  template cudaError_t launchGeluTanh<T>(const T *, T *, int64_t,              \
                                         cudaStream_t);                        \
  template cudaError_t launchGelu<T>(const T *, T *, int64_t, cudaStream_t);   \
  template cudaError_t launchAdd<T>(const T *, const T *, T *, int64_t,        \
                                    cudaStream_t);                             \
  template cudaError_t launchMul<T>(const T *, const T *, T *, int64_t,        \
                                    cudaStream_t);                             \
  template cudaError_t launchGatherRows<T>(                                    \
      const T *, int64_t, const int32_t *, int64_t, T *, cudaStream_t);        \
  template cudaError_t launchSplitColumns<T>(                                  \
      const T *, int64_t, int64_t, int64_t, int64_t, T *, cudaStream_t);       \
  template cudaError_t launchSiluMul<T>(const T *, int64_t, const T *,         \
                                        int64_t, T *, int64_t, int64_t,        \
                                        cudaStream_t);
#define INFER_PARAMETER_KERNELS(T, P)                                          \
  template cudaError_t launchRmsNorm<T, P>(const T *, const P *, T *, int64_t, \
                                           int64_t, float, cudaStream_t,       \
                                           float);                             \
  template cudaError_t launchAddRmsNorm<T, P>(const T *, const T *, const P *, \
                                              T *, T *, int64_t, int64_t,      \
                                              float, cudaStream_t, float);     \
  template cudaError_t launchBiasAdd<T, P>(const T *, const P *, T *, int64_t, \
                                           int64_t, cudaStream_t);
#define INFER_CAST_KERNEL(From, To)                                            \
  template cudaError_t launchCast<From, To>(const From *, To *, int64_t,       \
                                            cudaStream_t);

INFER_ACTIVATION_KERNELS(float)
INFER_ACTIVATION_KERNELS(__nv_bfloat16)
INFER_ACTIVATION_KERNELS(__half)
INFER_PARAMETER_KERNELS(float, float)
INFER_PARAMETER_KERNELS(__nv_bfloat16, __nv_bfloat16)
INFER_PARAMETER_KERNELS(__nv_bfloat16, float)
INFER_PARAMETER_KERNELS(__half, __half)
INFER_PARAMETER_KERNELS(__half, float)
INFER_CAST_KERNEL(float, __nv_bfloat16)
INFER_CAST_KERNEL(float, __half)
INFER_CAST_KERNEL(__nv_bfloat16, float)
INFER_CAST_KERNEL(__nv_bfloat16, __half)
INFER_CAST_KERNEL(__half, float)
INFER_CAST_KERNEL(__half, __nv_bfloat16)
template cudaError_t
launchRmsNormFp8<__nv_bfloat16>(const __nv_bfloat16 *, const __nv_bfloat16 *,
                                __nv_bfloat16 *, uint8_t *, float *, int64_t,
                                int64_t, float, cudaStream_t, float);
template cudaError_t launchRmsNormFp8<float>(const __nv_bfloat16 *,
                                             const float *, __nv_bfloat16 *,
                                             uint8_t *, float *, int64_t,
                                             int64_t, float, cudaStream_t,
                                             float);

#undef INFER_ACTIVATION_KERNELS
#undef INFER_PARAMETER_KERNELS
#undef INFER_CAST_KERNEL

} // namespace infer::cuda
