//===- Rope.cu - Rotary position embedding --------------------------------===//
//
// One thread per output element. As in the CPU reference, the angle is
// position * inv_freq in fp32 and its cosine and sine are taken in double
// then rounded, so both backends rotate by the same fp32 factors.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"

namespace infer::cuda {

namespace {

__global__ void ropeKernel(const float *x, float *y, int64_t n, int64_t heads,
                           int headDim, int rotaryDim, const int32_t *positions,
                           const float *invFreq) {
  const int half = rotaryDim / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int e = static_cast<int>(i % headDim);
    if (e >= rotaryDim) {
      y[i] = x[i];
      continue;
    }
    const int64_t token = i / (heads * headDim);
    const int f = e < half ? e : e - half;
    const float angle = static_cast<float>(positions[token]) * invFreq[f];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    const int64_t base = i - e;
    const float x1 = x[base + f], x2 = x[base + f + half];
    y[i] = e < half ? x1 * c - x2 * s : x2 * c + x1 * s;
  }
}

} // namespace

cudaError_t launchRope(const float *x, float *y, int64_t t, int64_t heads,
                       int headDim, int rotaryDim, const int32_t *positions,
                       const float *invFreq, cudaStream_t stream) {
  const int64_t n = t * heads * headDim;
  if (n <= 0)
    return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ropeKernel<<<static_cast<unsigned>(blocks < 524280 ? blocks : 524280),
               kThreads, 0, stream>>>(x, y, n, heads, headDim, rotaryDim,
                                      positions, invFreq);
  return cudaGetLastError();
}

} // namespace infer::cuda
