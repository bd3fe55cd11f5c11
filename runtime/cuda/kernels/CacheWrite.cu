//===- CacheWrite.cu - KV-cache writes of bf16 and f16 rows ----*- CUDA -*-===//
//
// kv_cache_write and rope_kv_cache_write of activation rows (bf16, f16)
// into the paged pool, addressed and encoded as KVCache.cuh says (the
// layout and conversions the attention kernels read back):
//
//   pool[block][layer][k|v][slot in block][kv_head][head_dim]
//   E4M3 scale of the head vector at element offset o: scales[o / head_dim]
//
// One block per kTokens tokens (grid-stride), its warps taking the (token,
// kv head, k|v) rows in turn: lane l holds elements l, l + 32, ... of the
// head vector as fp32 (the key rotated as ropeKernel in Rope.cu rotates it,
// when `rotate`: the block takes the cosine and sine of each of its tokens'
// pairs once, in double as Rope.cu does (ropeFactors), into shared memory
// for all their heads), and stores each once in the pool's type; an E4M3 pool
// takes the warp's amax for the scale, as cpu::KVPool::storeHead does.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CacheWriteKernels.h"
#include "runtime/cuda/kernels/Elements.cuh"
#include "runtime/cuda/kernels/KVCache.cuh"
#include "runtime/cuda/kernels/RopeFrequency.cuh"

namespace infer::cuda {
namespace {

constexpr int kPerLane = kMaxHeadDim / 32;

constexpr int kThreads = 256, kWarpsPerBlock = kThreads / 32;
/// Tokens a block writes at once (their rope factors computed together): 4
/// was slower than 1 on an H100 (fewer blocks for the same bytes).
constexpr int kTokens = 1;

template <KVCacheDtype D, bool rotate, typename T>
__global__ void __launch_bounds__(kThreads)
    cacheWriteKernel(KVCachePool pool, CacheDims dims, int layer, const T *k,
                     const T *v, const int64_t *slots, const int32_t *positions,
                     int rotaryDim, const float *invFreq, int64_t t,
                     int64_t kLd, int64_t vLd, int longFrom,
                     DynamicRope dynamic) {
  using Storage = typename KVElement<D>::Storage;
  __shared__ float factors[kTokens * kMaxHeadDim]; // ropeFactors' layout
  Storage *data = static_cast<Storage *>(pool.data);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int d = dims.headDim, half = rotaryDim / 2;
  for (int64_t first = blockIdx.x * int64_t(kTokens); first < t;
       first += int64_t(gridDim.x) * kTokens) {
    const int count =
        static_cast<int>(t - first < kTokens ? t - first : kTokens);
    if constexpr (rotate) {
      __syncthreads(); // the last tokens' factors are read
      ropeFactors(factors, first, count, rotaryDim, invFreq, longFrom,
                  positions, dynamic);
      __syncthreads();
    }
    // Warps take the (token, kv head, k|v) rows in turn.
    for (int item = warp; item < count * 2 * dims.numKVHeads;
         item += kWarpsPerBlock) {
      const int tk = item / (2 * dims.numKVHeads);
      const int head = (item / 2) % dims.numKVHeads, kv = item % 2;
      const int64_t token = first + tk;
      const int64_t slot = slots[token];
      if (slot < 0)
        continue;
      const T *row =
          kv == 0 ? k + token * kLd + head * d : v + token * vLd + head * d;
      float x[kPerLane];
      float amax = 0.0f;
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int e = lane + 32 * r;
        x[r] = 0.0f;
        if (e >= d)
          continue;
        x[r] = toFloat(row[e]);
        if (rotate && kv == 0 && e < rotaryDim) {
          const int f = e < half ? e : e - half;
          const float c = factors[tk * rotaryDim + f],
                      s = factors[tk * rotaryDim + half + f];
          const float x1 = toFloat(row[f]), x2 = toFloat(row[f + half]);
          x[r] = e < half ? x1 * c - x2 * s : x2 * c + x1 * s;
        }
        amax = fmaxf(amax, fabsf(x[r]));
      }
      const int64_t dst =
          kvSlotOffset(dims, slot, layer, kv) + int64_t(head) * d;
      if constexpr (D == KVCacheDtype::kBf16) {
#pragma unroll
        for (int r = 0; r < kPerLane; ++r)
          if (lane + 32 * r < d)
            data[dst + lane + 32 * r] = __float2bfloat16_rn(x[r]);
      } else if constexpr (!KVElement<D>::kScaled) {
#pragma unroll
        for (int r = 0; r < kPerLane; ++r)
          if (lane + 32 * r < d)
            data[dst + lane + 32 * r] = encodeFp8<D>(x[r]);
      } else {
        for (int offset = 16; offset > 0; offset /= 2)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        // A head whose scale is 0 (all zeros, or an amax so small that
        // amax / 448 underflows) keeps codes 0: no 0 / 0.
        const float scale = amax / 448.0f;
        if (lane == 0)
          pool.scales[dst / d] = scale;
#pragma unroll
        for (int r = 0; r < kPerLane; ++r)
          if (lane + 32 * r < d)
            data[dst + lane + 32 * r] =
                scale == 0.0f ? uint8_t(0) : encodeFp8<D>(x[r] / scale);
      }
    }
  }
}

template <KVCacheDtype D, bool rotate, typename T>
cudaError_t launchWrite(KVCachePool pool, CacheDims dims, int layer, const T *k,
                        const T *v, const int64_t *slots,
                        const int32_t *positions, int64_t t, int rotaryDim,
                        const float *invFreq, cudaStream_t stream, int64_t kLd,
                        int64_t vLd, int longFrom, DynamicRope dynamic) {
  const int64_t tiles = (t + kTokens - 1) / kTokens;
  const int64_t blocks =
      tiles < (int64_t(1) << 20) ? tiles : (int64_t(1) << 20);
  cacheWriteKernel<D, rotate>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          pool, dims, layer, k, v, slots, positions, rotaryDim, invFreq, t, kLd,
          vLd, longFrom, dynamic);
  return cudaGetLastError();
}

template <bool rotate, typename T>
cudaError_t dispatchWrite(KVCachePool pool, CacheDims dims, int layer,
                          const T *k, const T *v, const int64_t *slots,
                          const int32_t *positions, int64_t t, int rotaryDim,
                          const float *invFreq, cudaStream_t stream,
                          int64_t kLd, int64_t vLd, int longFrom = 0,
                          DynamicRope dynamic = {}) {
  if (t <= 0 || dims.numKVHeads <= 0)
    return cudaSuccess;
  const int64_t width = int64_t(dims.numKVHeads) * dims.headDim;
  kLd = kLd ? kLd : width;
  vLd = vLd ? vLd : width;
  if (kLd < width || vLd < width || dims.headDim <= 0 ||
      dims.headDim > kMaxHeadDim ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  if (rotate &&
      (rotaryDim <= 0 || rotaryDim % 2 != 0 || rotaryDim > dims.headDim))
    return cudaErrorInvalidValue;
  if (dynamic.queryStartLoc &&
      (!rotate || dynamic.numSeqs <= 0 || rotaryDim <= 2 ||
       dynamic.originalMaxPositionEmbeddings <= 0))
    return cudaErrorInvalidValue;
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchWrite<KVCacheDtype::kBf16, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic);
  case KVCacheDtype::kF8E5M2:
    return launchWrite<KVCacheDtype::kF8E5M2, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic);
  case KVCacheDtype::kF8E4M3:
    return launchWrite<KVCacheDtype::kF8E4M3, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic);
  }
  return cudaErrorInvalidValue;
}

} // namespace

template <typename T>
cudaError_t launchKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                               const T *k, const T *v, const int64_t *slots,
                               int64_t t, cudaStream_t stream, int64_t kLd,
                               int64_t vLd) {
  return dispatchWrite<false>(pool, dims, layer, k, v, slots, nullptr, t, 0,
                              nullptr, stream, kLd, vLd);
}

template <typename T>
cudaError_t
launchRopeKVCacheWrite(KVCachePool pool, CacheDims dims, int layer, const T *k,
                       const T *v, const int64_t *slots,
                       const int32_t *positions, int64_t t, int rotaryDim,
                       const float *invFreq, cudaStream_t stream, int64_t kLd,
                       int64_t vLd, int longFrom, DynamicRope dynamic) {
  return dispatchWrite<true>(pool, dims, layer, k, v, slots, positions, t,
                             rotaryDim, invFreq, stream, kLd, vLd, longFrom,
                             dynamic);
}

#define INFER_CACHE_WRITE_KERNELS(T)                                           \
  template cudaError_t launchKVCacheWrite<T>(                                  \
      KVCachePool, CacheDims, int, const T *, const T *, const int64_t *,      \
      int64_t, cudaStream_t, int64_t, int64_t);                                \
  template cudaError_t launchRopeKVCacheWrite<T>(                              \
      KVCachePool, CacheDims, int, const T *, const T *, const int64_t *,      \
      const int32_t *, int64_t, int, const float *, cudaStream_t, int64_t,     \
      int64_t, int, DynamicRope);
INFER_CACHE_WRITE_KERNELS(__nv_bfloat16)
INFER_CACHE_WRITE_KERNELS(__half)
#undef INFER_CACHE_WRITE_KERNELS

} // namespace infer::cuda
