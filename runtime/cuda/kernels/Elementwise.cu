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

__global__ void addRmsNormKernel(const float *a, const float *b, const float *w,
                                 float *sum, float *y, int64_t h,
                                 float epsilon) {
  const int64_t row = blockIdx.x * h;
  float squares = 0.0f;
  // Each thread reads back only the sums it wrote itself.
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    const float s = a[row + i] + b[row + i];
    sum[row + i] = s;
    squares += s * s;
  }
  __shared__ float partial[32];
  const float total = blockSum(squares, partial);
  const float inv = rsqrtf(total / static_cast<float>(h) + epsilon);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
    y[row + i] = w[i] * (sum[row + i] * inv);
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
  addRmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      a, b, w, sum, y, h, epsilon);
  return cudaGetLastError();
}

cudaError_t launchSiluMul(const float *gate, const float *up, float *y,
                          int64_t n, cudaStream_t stream) {
  return launchMap(
      n, stream, [=] __device__(int64_t i) { y[i] = siluOf(gate[i]) * up[i]; });
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
