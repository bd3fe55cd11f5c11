//===- Elementwise.cu - Row and elementwise kernels -----------------------===//
//
// Embedding, rms_norm, activations, add/mul, gather_rows, the fp32 ->
// bf16 conversion of GEMM operands, and the fused steps of infer-fuse
// (split, add_rms_norm, silu_mul, and the `fused` register-program
// interpreter). Memory-bound: grid-stride loops over
// contiguous fp32 elements.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>

namespace infer::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1)
                                                  : 65535 * 8);
}

template <typename F> __global__ void mapKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f(i);
}

template <typename F> cudaError_t launchMap(int64_t n, cudaStream_t s, F f) {
  if (n <= 0)
    return cudaSuccess;
  mapKernel<<<blocksFor(n), kThreads, 0, s>>>(n, f);
  return cudaGetLastError();
}

__global__ void rmsNormKernel(const float *x, const float *w, float *y,
                              int64_t h, float epsilon) {
  const float *xr = x + blockIdx.x * h;
  float *yr = y + blockIdx.x * h;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
    sum += xr[i] * xr[i];
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    sum = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0)
      partial[0] = sum;
  }
  __syncthreads();
  const float inv = rsqrtf(partial[0] / static_cast<float>(h) + epsilon);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
    yr[i] = w[i] * (xr[i] * inv);
}

/// Sums v over the block; every thread gets the total.
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

__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ float4 add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float squares(float a) { return a * a; }
__device__ __forceinline__ float squares(float4 a) {
  return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
}
/// w * (x * inv), per element.
__device__ __forceinline__ float scaled(float w, float x, float inv) {
  return w * (x * inv);
}
__device__ __forceinline__ float4 scaled(float4 w, float4 x, float inv) {
  return make_float4(w.x * (x.x * inv), w.y * (x.y * inv), w.z * (x.z * inv),
                     w.w * (x.w * inv));
}

/// One block per row of h floats, as `n` vectors V (float4 where h and the
/// pointers allow).
template <typename V>
__global__ void addRmsNormKernel(const V *a, const V *b, const V *w, V *sum,
                                 V *y, int64_t n, int64_t h, float epsilon) {
  const int64_t row = blockIdx.x * n;
  float total = 0.0f;
  // Each thread reads back only the sums it wrote itself.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const V s = add(a[row + i], b[row + i]);
    sum[row + i] = s;
    total += squares(s);
  }
  __shared__ float partial[32];
  total = blockSum(total, partial);
  const float inv = rsqrtf(total / static_cast<float>(h) + epsilon);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    y[row + i] = scaled(w[i], sum[row + i], inv);
}

__device__ __forceinline__ float siluOf(float v) {
  return v / (1.0f + expf(-v));
}

__device__ __forceinline__ float geluTanhOf(float v) {
  const float c = 0.7978845608028654f; // sqrt(2 / pi)
  return 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
}

__global__ void fusedKernel(FusedProgram p, int64_t n) {
  float regs[kMaxFusedInputs + kMaxFusedInstructions];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    for (int r = 0; r < p.numInputs; ++r)
      regs[r] = p.inputs[r][i];
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
      default: // kSiluMul
        out = siluOf(x) * regs[p.arg1[k]];
        break;
      }
      regs[p.numInputs + k] = out;
    }
    for (int r = 0; r < p.numOutputs; ++r)
      p.outputs[r][i] = regs[p.yields[r]];
  }
}

__device__ __forceinline__ float siluMulOf(float g, float u) {
  return siluOf(g) * u;
}

__device__ __forceinline__ float4 siluMulOf(float4 g, float4 u) {
  return make_float4(siluOf(g.x) * u.x, siluOf(g.y) * u.y, siluOf(g.z) * u.z,
                     siluOf(g.w) * u.w);
}

/// silu_mul over rows whose operands have their own row strides (in V
/// units): grid.x covers the columns, grid.y strides over the rows.
template <typename V>
__global__ void siluMulRowsKernel(const V *gate, int64_t gateLd, const V *up,
                                  int64_t upLd, V *y, int64_t rows,
                                  int64_t cols) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= cols)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    y[r * cols + col] = siluMulOf(gate[r * gateLd + col], up[r * upLd + col]);
}

} // namespace

cudaError_t launchEmbedding(const __nv_bfloat16 *table, int64_t rows,
                            int64_t hidden, int64_t vocabOffset,
                            const int32_t *ids, int64_t t, float *y,
                            cudaStream_t stream) {
  return launchMap(t * hidden, stream, [=] __device__(int64_t i) {
    const int64_t row = ids[i / hidden] - vocabOffset, col = i % hidden;
    y[i] = row >= 0 && row < rows ? __bfloat162float(table[row * hidden + col])
                                  : 0.0f;
  });
}

cudaError_t launchRmsNorm(const float *x, const float *w, float *y,
                          int64_t rows, int64_t h, float epsilon,
                          cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  rmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, w, y, h, epsilon);
  return cudaGetLastError();
}

cudaError_t launchSilu(const float *x, float *y, int64_t n,
                       cudaStream_t stream) {
  return launchMap(n, stream,
                   [=] __device__(int64_t i) { y[i] = siluOf(x[i]); });
}

cudaError_t launchGeluTanh(const float *x, float *y, int64_t n,
                           cudaStream_t stream) {
  return launchMap(n, stream,
                   [=] __device__(int64_t i) { y[i] = geluTanhOf(x[i]); });
}

cudaError_t launchAdd(const float *a, const float *b, float *y, int64_t n,
                      cudaStream_t stream) {
  return launchMap(n, stream,
                   [=] __device__(int64_t i) { y[i] = a[i] + b[i]; });
}

cudaError_t launchMul(const float *a, const float *b, float *y, int64_t n,
                      cudaStream_t stream) {
  return launchMap(n, stream,
                   [=] __device__(int64_t i) { y[i] = a[i] * b[i]; });
}

cudaError_t launchGatherRows(const float *x, int64_t cols,
                             const int32_t *indices, int64_t count, float *y,
                             cudaStream_t stream) {
  return launchMap(count * cols, stream, [=] __device__(int64_t i) {
    y[i] = x[indices[i / cols] * cols + i % cols];
  });
}

cudaError_t launchToBf16(const float *x, __nv_bfloat16 *y, int64_t n,
                         cudaStream_t stream) {
  return launchMap(n, stream, [=] __device__(int64_t i) {
    y[i] = __float2bfloat16_rn(x[i]);
  });
}

cudaError_t launchAddBias(float *y, const float *bias, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  return launchMap(rows * cols, stream,
                   [=] __device__(int64_t i) { y[i] += bias[i % cols]; });
}

cudaError_t launchSplitColumns(const float *x, int64_t rows, int64_t cols,
                               int64_t column, int64_t width, float *y,
                               cudaStream_t stream) {
  return launchMap(rows * width, stream, [=] __device__(int64_t i) {
    y[i] = x[(i / width) * cols + column + i % width];
  });
}

cudaError_t launchAddRmsNorm(const float *a, const float *b, const float *w,
                             float *sum, float *y, int64_t rows, int64_t h,
                             float epsilon, cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  const auto aligned = [](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  if (h % 4 == 0 && aligned(a) && aligned(b) && aligned(w) && aligned(sum) &&
      aligned(y))
    addRmsNormKernel<float4>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            reinterpret_cast<const float4 *>(a),
            reinterpret_cast<const float4 *>(b),
            reinterpret_cast<const float4 *>(w),
            reinterpret_cast<float4 *>(sum), reinterpret_cast<float4 *>(y),
            h / 4, h, epsilon);
  else
    addRmsNormKernel<float>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(a, b, w, sum, y,
                                                               h, h, epsilon);
  return cudaGetLastError();
}

cudaError_t launchSiluMul(const float *gate, int64_t gateLd, const float *up,
                          int64_t upLd, float *y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return cudaSuccess;
  if (gateLd < cols || upLd < cols)
    return cudaErrorInvalidValue;
  const auto aligned = [](const float *p, int64_t ld) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0;
  };
  const unsigned rowBlocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  if (cols % 4 == 0 && aligned(gate, gateLd) && aligned(up, upLd) &&
      aligned(y, cols)) {
    const int64_t quads = cols / 4;
    const dim3 grid(static_cast<unsigned>((quads + kThreads - 1) / kThreads),
                    rowBlocks);
    siluMulRowsKernel<float4><<<grid, kThreads, 0, stream>>>(
        reinterpret_cast<const float4 *>(gate), gateLd / 4,
        reinterpret_cast<const float4 *>(up), upLd / 4,
        reinterpret_cast<float4 *>(y), rows, quads);
  } else {
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    rowBlocks);
    siluMulRowsKernel<float>
        <<<grid, kThreads, 0, stream>>>(gate, gateLd, up, upLd, y, rows, cols);
  }
  return cudaGetLastError();
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

} // namespace infer::cuda
