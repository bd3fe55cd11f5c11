//===- Rope.cu - Rotary position embedding --------------------*- CUDA -*-===//
//
// One thread per (token, group of kHeadsPerThread heads, pair): pair
// f < rotaryDim / 2 rotates elements f and f + rotaryDim / 2 of each head of
// its group, the others copy one element past the rotary dims. As in the CPU
// reference, the angle is position * inv_freq in fp32 and its cosine and
// sine are taken in double then rounded, so both backends rotate by the same
// fp32 factors; a thread takes them once for its heads. q and k are fp32,
// bf16 or f16 (Elements.cuh): rotated in fp32, each result rounded once.
// The inverse frequency comes from the table, or for a dynamic NTK rope
// from the token's sequence length (RopeFrequency.cuh).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/Elements.cuh"
#include "runtime/cuda/kernels/RopeFrequency.cuh"

namespace infer::cuda {

namespace {

constexpr int kHeadsPerThread = 4;

template <typename T>
__global__ void ropeKernel(const T *x, int64_t xLd, T *y, int64_t t, int heads,
                           int headDim, int rotaryDim, const int32_t *positions,
                           const float *invFreq, int longFrom,
                           DynamicRope dynamic) {
  const int half = rotaryDim / 2;
  // Per head: `half` rotated pairs, then headDim - rotaryDim copies.
  const int perHead = headDim - half;
  const int groups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t n = t * groups * perHead;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % perHead);
    const int64_t tg = i / perHead;
    const int group = static_cast<int>(tg % groups);
    const int64_t token = tg / groups;
    const T *xr = x + token * xLd;
    T *yr = y + token * int64_t(heads) * headDim;
    const int first = group * kHeadsPerThread;
    const int last = min(first + kHeadsPerThread, heads);
    if (j >= half) {
      const int e = j + half;
      for (int h = first; h < last; ++h)
        yr[h * headDim + e] = xr[h * headDim + e];
      continue;
    }
    const float angle =
        static_cast<float>(positions[token]) *
        ropeInvFreq(invFreq, j, rotaryDim, longFrom, positions, token, dynamic);
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    for (int h = first; h < last; ++h) {
      const float x1 = toFloat(xr[h * headDim + j]),
                  x2 = toFloat(xr[h * headDim + j + half]);
      yr[h * headDim + j] = fromFloat<T>(x1 * c - x2 * s);
      yr[h * headDim + j + half] = fromFloat<T>(x2 * c + x1 * s);
    }
  }
}

} // namespace

template <typename T>
cudaError_t launchRope(const T *x, T *y, int64_t t, int64_t heads, int headDim,
                       int rotaryDim, const int32_t *positions,
                       const float *invFreq, cudaStream_t stream, int64_t xLd,
                       int longFrom, DynamicRope dynamic) {
  if (t <= 0 || heads <= 0)
    return cudaSuccess;
  if (heads > (int64_t(1) << 30) || rotaryDim % 2 != 0 || rotaryDim > headDim ||
      (xLd != 0 && xLd < heads * headDim) ||
      (dynamic.queryStartLoc && (dynamic.numSeqs <= 0 || rotaryDim <= 2 ||
                                 dynamic.originalMaxPositionEmbeddings <= 0)))
    return cudaErrorInvalidValue;
  const int64_t groups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t n = t * groups * (headDim - rotaryDim / 2);
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ropeKernel<<<static_cast<unsigned>(blocks < 524280 ? blocks : 524280),
               kThreads, 0, stream>>>(
      x, xLd ? xLd : heads * headDim, y, t, static_cast<int>(heads), headDim,
      rotaryDim, positions, invFreq, longFrom, dynamic);
  return cudaGetLastError();
}

#define INFER_ROPE_KERNEL(T)                                                   \
  template cudaError_t launchRope<T>(const T *, T *, int64_t, int64_t, int,    \
                                     int, const int32_t *, const float *,      \
                                     cudaStream_t, int64_t, int, DynamicRope);
INFER_ROPE_KERNEL(float)
INFER_ROPE_KERNEL(__nv_bfloat16)
INFER_ROPE_KERNEL(__half)
#undef INFER_ROPE_KERNEL

} // namespace infer::cuda
