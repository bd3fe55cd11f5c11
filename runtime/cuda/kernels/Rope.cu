//===- Rope.cu - Rotary position embedding --------------------*- CUDA -*-===//
//
// One block per kTokens tokens (grid-stride): the block first takes the
// cosine and sine of each of its tokens' rotaryDim / 2 pairs into shared
// memory (ropeFactors), then its threads rotate every head's pairs with them
// (pair f < rotaryDim / 2 rotates elements f and f + rotaryDim / 2) and copy
// the elements past the rotary dims. As in the CPU reference, the angle is
// position * inv_freq in fp32 and its cosine and sine are taken in double
// then rounded, so both backends rotate by the same fp32 factors; the
// double sin and cos are the kernel's costliest instructions, so each
// (token, pair) takes them once for all heads. q and k are fp32, bf16 or
// f16 (Elements.cuh): rotated in fp32, each result rounded once. The
// inverse frequency comes from the table, or for a dynamic NTK rope from
// the token's sequence length (RopeFrequency.cuh).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/Elements.cuh"
#include "runtime/cuda/kernels/RopeFrequency.cuh"

namespace infer::cuda {

namespace {

constexpr int kThreads = 256;
/// Tokens a block rotates at once (their factors computed together): 4
/// was slower than 1 on an H100 (fewer blocks for the same bytes).
constexpr int kTokens = 1;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ropeKernel(const T *x, int64_t xLd, T *y, int64_t t, int heads, int headDim,
               int rotaryDim, const int32_t *positions, const float *invFreq,
               int longFrom, DynamicRope dynamic) {
  extern __shared__ float factors[]; // per token: [half] cos, [half] sin
  const int half = rotaryDim / 2;
  // Per head: `half` rotated pairs, then headDim - rotaryDim copies.
  const int perHead = headDim - half;
  const int items = heads * perHead;
  for (int64_t first = blockIdx.x * int64_t(kTokens); first < t;
       first += int64_t(gridDim.x) * kTokens) {
    const int count =
        static_cast<int>(t - first < kTokens ? t - first : kTokens);
    __syncthreads(); // the last tokens' factors are read
    ropeFactors(factors, first, count, rotaryDim, invFreq, longFrom, positions,
                dynamic);
    __syncthreads();
    for (int i = threadIdx.x; i < count * items; i += kThreads) {
      const int tk = i / items, w = i - tk * items;
      const int h = w / perHead, j = w - h * perHead;
      const int64_t token = first + tk;
      const T *xh = x + token * xLd + int64_t(h) * headDim;
      T *yh = y + (token * heads + h) * int64_t(headDim);
      if (j >= half) {
        yh[j + half] = xh[j + half];
        continue;
      }
      const float c = factors[tk * rotaryDim + j],
                  s = factors[tk * rotaryDim + half + j];
      const float x1 = toFloat(xh[j]), x2 = toFloat(xh[j + half]);
      yh[j] = fromFloat<T>(x1 * c - x2 * s);
      yh[j + half] = fromFloat<T>(x2 * c + x1 * s);
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
  // The block's factors fit the default 48 KiB of shared memory.
  if (heads * (headDim - rotaryDim / 2) > (int64_t(1) << 28) ||
      rotaryDim > 3072)
    return cudaErrorInvalidValue;
  const int64_t tiles = (t + kTokens - 1) / kTokens;
  const int64_t blocks =
      tiles < (int64_t(1) << 20) ? tiles : (int64_t(1) << 20);
  ropeKernel<<<static_cast<unsigned>(blocks), kThreads,
               static_cast<size_t>(kTokens) * rotaryDim * sizeof(float),
               stream>>>(x, xLd ? xLd : heads * headDim, y, t,
                         static_cast<int>(heads), headDim, rotaryDim, positions,
                         invFreq, longFrom, dynamic);
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
