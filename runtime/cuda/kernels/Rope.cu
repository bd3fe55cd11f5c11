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
// f16 (Elements.cuh): rotated in fp32, each result rounded once; bf16 and
// f16 pairs by ropeRotate, the CPU's fp32 arithmetic. The inverse
// frequency comes from the table, or for a dynamic NTK rope from the
// token's sequence length (RopeFrequency.cuh).
//
// bf16 and f16 rows whose pairs fall in whole 16-byte packs take
// ropePackedKernel, one token a block: a thread rotates V = 8 consecutive
// pairs (or copies 8 elements past the rotary dims) with 16-byte loads and
// stores, each element's arithmetic that of ropeKernel (the same bits):
//
//   head vector   [ x1 of the pairs | their x2        | copied        ]
//                 0                half              rotaryDim   headDim
//   rotated item  x1 [g*V, g*V + V) and x2 [half + g*V, ...)   (g*V < half)
//   copied item   [half + g*V, half + g*V + V)                 (g*V >= half)
//
// It needs headDim, rotaryDim / 2 and xLd multiples of 8 and x and y
// 16-byte aligned; other rows (odd column views, rotary dims such as 24,
// fp32) take ropeKernel's element accesses. A thread loads its first item
// before the block computes the factors, so the load's latency hides
// theirs.
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
      if constexpr (std::is_same_v<T, float>) {
        // fp32 rows keep the contracted arithmetic of Attention.cu's fp32
        // rope_kv_cache_write, which equals this rope + kv_cache_write.
        yh[j] = x1 * c - x2 * s;
        yh[j + half] = x2 * c + x1 * s;
      } else {
        const float2 r = ropeRotate(x1, x2, c, s);
        yh[j] = fromFloat<T>(r.x);
        yh[j + half] = fromFloat<T>(r.y);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ropePackedKernel(const T *x, int64_t xLd, T *y, int64_t t, int heads,
                     int headDim, int rotaryDim, const int32_t *positions,
                     const float *invFreq, int longFrom, DynamicRope dynamic) {
  extern __shared__ float factors[]; // [half] cos, [half] sin
  const int half = rotaryDim / 2;
  const int packsPerHead = (headDim - half) / kRopePack;
  const int items = heads * packsPerHead;
  for (int64_t token = blockIdx.x; token < t; token += gridDim.x) {
    const T *xt = x + token * xLd;
    T *yt = y + token * heads * int64_t(headDim);
    int i = threadIdx.x;
    RopeItem item;
    if (i < items)
      item = loadRopeItem(xt, i, packsPerHead, headDim, half);
    __syncthreads(); // the last token's factors are read
    ropeFactors(factors, token, 1, rotaryDim, invFreq, longFrom, positions,
                dynamic);
    __syncthreads();
    while (i < items) {
      storeRopeItem(yt, item, factors, half);
      i += blockDim.x;
      if (i < items)
        item = loadRopeItem(xt, i, packsPerHead, headDim, half);
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
  const int64_t ld = xLd ? xLd : heads * headDim;
  if constexpr (sizeof(T) == 2) {
    if (headDim % kRopePack == 0 && rotaryDim / 2 % kRopePack == 0 &&
        ld % kRopePack == 0 && packAligned(x) && packAligned(y)) {
      // A thread an item, a block of up to kThreads threads looping over
      // the items of wider rows.
      const int64_t items = heads * ((headDim - rotaryDim / 2) / kRopePack);
      const int threads = static_cast<int>(
          std::clamp<int64_t>((items + 31) / 32 * 32, 32, kThreads));
      const int64_t blocks = std::min<int64_t>(t, int64_t(1) << 20);
      ropePackedKernel<<<static_cast<unsigned>(blocks), threads,
                         static_cast<size_t>(rotaryDim) * sizeof(float),
                         stream>>>(x, ld, y, t, static_cast<int>(heads),
                                   headDim, rotaryDim, positions, invFreq,
                                   longFrom, dynamic);
      return cudaGetLastError();
    }
  }
  const int64_t tiles = (t + kTokens - 1) / kTokens;
  const int64_t blocks =
      tiles < (int64_t(1) << 20) ? tiles : (int64_t(1) << 20);
  ropeKernel<<<static_cast<unsigned>(blocks), kThreads,
               static_cast<size_t>(kTokens) * rotaryDim * sizeof(float),
               stream>>>(x, ld, y, t, static_cast<int>(heads), headDim,
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
