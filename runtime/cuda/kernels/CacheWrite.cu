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
// for all their heads; pairs turned by ropeRotate, the CPU's arithmetic),
// and stores each once in the pool's type; an E4M3 pool takes the warp's
// amax for the scale, as cpu::KVPool::storeHead does.
//
// Rows in whole 16-byte packs (head_dim, rotaryDim / 2, kLd and vLd
// multiples of 8, k, v and the pool 16-byte aligned) take
// cacheWritePackedKernel instead, one token a block: a lane holds 8
// consecutive elements of a row (or, below rotaryDim / 2, 8 elements and
// their 8 partners, as ropePackedKernel in Rope.cu), loaded in 16-byte
// accesses, and stores them as 16 bytes of bf16 or 8 of fp8 codes:
//
//   token's rows   k head 0 .. kvh-1, then v head 0 .. kvh-1
//   a row          P = (head_dim - rotaryDim / 2) / 8 items on L lanes
//                  (L: P rounded up to a power of 2; 32 / L rows a warp)
//
// The E4M3 amax is the maximum over the row's L lanes (shuffles within the
// aligned group), the same value as the warp's above; each element takes
// the arithmetic it takes there, so both paths store the same bytes. A
// thread loads its first row before the block computes the factors, so
// the load's latency hides theirs.
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
          const float2 y =
              ropeRotate(toFloat(row[f]), toFloat(row[f + half]), c, s);
          x[r] = e < half ? y.x : y.y;
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

static_assert(kMaxHeadDim / kRopePack <= 32, "a row's items fit a warp");

/// A lane's items of cacheWritePackedKernel as raw words: elements [at,
/// at + 8) of the row, and [at + half, ...) for a pair item.
struct CacheItem {
  uint4 x1, x2;
  int at = 0;
  bool pair = false;
};

template <typename T>
__device__ __forceinline__ CacheItem loadCacheItem(const T *row, int item,
                                                   int half) {
  CacheItem it;
  const int j = item * kRopePack;
  it.pair = j < half;
  it.at = it.pair ? j : j + half;
  it.x1 = *reinterpret_cast<const uint4 *>(row + it.at);
  it.x2 = it.pair ? *reinterpret_cast<const uint4 *>(row + it.at + half)
                  : make_uint4(0, 0, 0, 0);
  return it;
}

/// Stores 8 values of a head vector at element `offset` of the pool, in the
/// pool's type (E4M3: the codes of value / scale; 0 codes for scale 0).
template <KVCacheDtype D>
__device__ __forceinline__ void storePack(void *data, int64_t offset,
                                          const float (&x)[kRopePack],
                                          float scale) {
  if constexpr (D == KVCacheDtype::kBf16) {
    __stwb(
        reinterpret_cast<uint4 *>(static_cast<__nv_bfloat16 *>(data) + offset),
        packFloats<__nv_bfloat16>(x));
  } else {
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < kRopePack; ++e) {
      uint32_t code;
      if constexpr (KVElement<D>::kScaled)
        code = scale == 0.0f ? 0u : encodeFp8<D>(x[e] / scale);
      else
        code = encodeFp8<D>(x[e]);
      w[e / 4] |= code << (8 * (e % 4));
    }
    __stwb(reinterpret_cast<uint2 *>(static_cast<uint8_t *>(data) + offset),
           make_uint2(w[0], w[1]));
  }
}

template <KVCacheDtype D, bool rotate, typename T>
__global__ void __launch_bounds__(kThreads)
    cacheWritePackedKernel(KVCachePool pool, CacheDims dims, int layer,
                           const T *k, const T *v, const int64_t *slots,
                           const int32_t *positions, int rotaryDim,
                           const float *invFreq, int64_t t, int64_t kLd,
                           int64_t vLd, int longFrom, DynamicRope dynamic,
                           int rowLanes) {
  __shared__ float factors[kMaxHeadDim]; // [half] cos, [half] sin
  const int d = dims.headDim, kvh = dims.numKVHeads;
  const int half = rotate ? rotaryDim / 2 : 0;
  const int packs = (d - half) / kRopePack, rows = 2 * kvh;
  const int lane = threadIdx.x % 32, item = lane % rowLanes;
  // Each warp's rows together, so the E4M3 shuffles see whole rows.
  const int warpRow = threadIdx.x / 32 * (32 / rowLanes),
            rowStep = blockDim.x / rowLanes;
  for (int64_t token = blockIdx.x; token < t; token += gridDim.x) {
    const int64_t slot = slots[token];
    const T *kt = k + token * kLd, *vt = v + token * vLd;
    auto rowStart = [&](int row) {
      return row < kvh ? kt + row * d : vt + (row - kvh) * d;
    };
    int row = warpRow + lane / rowLanes;
    CacheItem it;
    if (row < rows && item < packs)
      it = loadCacheItem(rowStart(row), item, half);
    if constexpr (rotate) {
      __syncthreads(); // the last token's factors are read
      ropeFactors(factors, token, 1, rotaryDim, invFreq, longFrom, positions,
                  dynamic);
      __syncthreads();
    }
    if (slot < 0)
      continue; // the whole block's token
    for (int base = warpRow; base < rows; base += rowStep) {
      row = base + lane / rowLanes;
      const bool active = row < rows && item < packs;
      float x1[kRopePack], x2[kRopePack];
      float amax = 0.0f;
      if (active) {
        unpackFloats<T>(it.x1, x1);
        unpackFloats<T>(it.x2, x2);
        if (rotate && it.pair && row < kvh) {
#pragma unroll
          for (int e = 0; e < kRopePack; ++e) {
            const float2 y = ropeRotate(x1[e], x2[e], factors[it.at + e],
                                        factors[half + it.at + e]);
            x1[e] = y.x;
            x2[e] = y.y;
          }
        }
#pragma unroll
        for (int e = 0; e < kRopePack; ++e) // a copied item's x2: zeros
          amax = fmaxf(amax, fmaxf(fabsf(x1[e]), fabsf(x2[e])));
      }
      float scale = 0.0f;
      if constexpr (KVElement<D>::kScaled) {
        for (int offset = rowLanes / 2; offset > 0; offset /= 2)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        // As the element path: a scale of 0 keeps codes 0.
        scale = amax / 448.0f;
      }
      if (active) {
        const int kv = row < kvh ? 0 : 1, head = row - kv * kvh;
        const int64_t dst =
            kvSlotOffset(dims, slot, layer, kv) + int64_t(head) * d;
        if (KVElement<D>::kScaled && item == 0)
          pool.scales[dst / d] = scale;
        storePack<D>(pool.data, dst + it.at, x1, scale);
        if (it.pair)
          storePack<D>(pool.data, dst + it.at + half, x2, scale);
      }
      row += rowStep;
      if (row < rows && item < packs)
        it = loadCacheItem(rowStart(row), item, half);
    }
  }
}

template <KVCacheDtype D, bool rotate, typename T>
cudaError_t launchWrite(KVCachePool pool, CacheDims dims, int layer, const T *k,
                        const T *v, const int64_t *slots,
                        const int32_t *positions, int64_t t, int rotaryDim,
                        const float *invFreq, cudaStream_t stream, int64_t kLd,
                        int64_t vLd, int longFrom, DynamicRope dynamic) {
  const int half = rotate ? rotaryDim / 2 : 0;
  if (dims.headDim % kRopePack == 0 && half % kRopePack == 0 &&
      kLd % kRopePack == 0 && vLd % kRopePack == 0 && packAligned(k) &&
      packAligned(v) && packAligned(pool.data)) {
    const int packs = (dims.headDim - half) / kRopePack;
    int rowLanes = 1;
    while (rowLanes < packs)
      rowLanes *= 2;
    const int rowsPerWarp = 32 / rowLanes;
    const int warps = std::min(
        kWarpsPerBlock, (2 * dims.numKVHeads + rowsPerWarp - 1) / rowsPerWarp);
    const int64_t blocks = std::min<int64_t>(t, int64_t(1) << 20);
    cacheWritePackedKernel<D, rotate>
        <<<static_cast<unsigned>(blocks), 32 * warps, 0, stream>>>(
            pool, dims, layer, k, v, slots, positions, rotaryDim, invFreq, t,
            kLd, vLd, longFrom, dynamic, rowLanes);
    return cudaGetLastError();
  }
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
