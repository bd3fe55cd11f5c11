//===- CacheWrite.cu - KV-cache writes of bf16 and f16 rows ----*- CUDA -*-===//
//
// kv_cache_write, rope_kv_cache_write and rope_qkv_cache_write of activation
// rows (bf16, f16) into the paged pool, addressed and encoded as KVCache.cuh
// says (the layout and conversions the attention kernels read back):
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
#include "runtime/cuda/kernels/DependentLaunch.cuh"
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

/// One warp's head vector `row` (head `head` of the keys, kv = 0, or the
/// values) of a token into `slot`: lane l holds elements l, l + 32, ... as
/// fp32, the keys rotated by the token's factors ([half] cos, [half] sin)
/// when `rotate`, and stores each once in the pool's type.
template <KVCacheDtype D, bool rotate, typename T>
__device__ __forceinline__ void
writeRowElements(KVCachePool pool, CacheDims dims, int layer, const T *row,
                 int64_t slot, int head, int kv, const float *factors,
                 int rotaryDim) {
  using Storage = typename KVElement<D>::Storage;
  Storage *data = static_cast<Storage *>(pool.data);
  const int lane = threadIdx.x % 32;
  const int d = dims.headDim, half = rotaryDim / 2;
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
      const float c = factors[f], s = factors[half + f];
      const float2 y =
          ropeRotate(toFloat(row[f]), toFloat(row[f + half]), c, s);
      x[r] = e < half ? y.x : y.y;
    }
    amax = fmaxf(amax, fabsf(x[r]));
  }
  storeHeadVector<D>(data, pool.scales,
                     kvSlotOffset(dims, slot, layer, kv) + int64_t(head) * d, d,
                     x, amax, lane);
}

template <KVCacheDtype D, bool rotate, typename T>
__global__ void __launch_bounds__(kThreads)
    cacheWriteKernel(KVCachePool pool, CacheDims dims, int layer, const T *k,
                     const T *v, const int64_t *slots, const int32_t *positions,
                     int rotaryDim, const float *invFreq, int64_t t,
                     int64_t kLd, int64_t vLd, int longFrom,
                     DynamicRope dynamic) {
  __shared__ float factors[kTokens * kMaxHeadDim]; // ropeFactors' layout
  const int warp = threadIdx.x / 32;
  const int d = dims.headDim;
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
      writeRowElements<D, rotate>(pool, dims, layer, row, slot, head, kv,
                                  factors + tk * rotaryDim, rotaryDim);
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

/// Where rope_qkv_cache_write puts FreshKV's rows (null data: nowhere):
/// the call's tokens in key and value planes of `rows` rows.
struct FreshRows {
  __nv_bfloat16 *data;
  int64_t rows;
};

/// The FreshRows of a launch of `t` tokens: FreshKV's planes, or nowhere
/// unless `fresh` has a row per token.
inline FreshRows freshRowsOf(const FreshKV &fresh, int64_t t) {
  if (!fresh.data || fresh.rows != t || fresh.contextRows < 0)
    return {nullptr, 0};
  return {fresh.data, fresh.planeRows()};
}

/// Stores 8 values of a head vector at element `offset` of the pool, in the
/// pool's type (E4M3: the codes of value / scale; 0 codes for scale 0), and
/// with `fresh` (fp8 pools) their decoded values, the bf16 of code x scale
/// (decodeFp8x8 and the rounding of the Hopper prefill's staging), at
/// `freshOffset` of it.
template <KVCacheDtype D, bool kFresh = false>
__device__ __forceinline__ void
storePack(void *data, int64_t offset, const float (&x)[kRopePack], float scale,
          __nv_bfloat16 *fresh = nullptr, int64_t freshOffset = 0) {
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
    if constexpr (kFresh) {
      float y[kRopePack];
      decodeFp8x8<D>(make_uint2(w[0], w[1]), scale, y);
      *reinterpret_cast<uint4 *>(fresh + freshOffset) =
          packFloats<__nv_bfloat16>(y);
    }
  }
}

/// Row `row` of a token in the packed path: key heads 0 .. kvh-1, then
/// value heads.
template <typename T>
__device__ __forceinline__ const T *cacheRow(const T *kt, const T *vt, int row,
                                             int kvh, int d) {
  return row < kvh ? kt + row * d : vt + (row - kvh) * d;
}

/// The lanes of the packed path: a row's item `item` on lane l of the
/// row's rowLanes, each warp's rows together (so the E4M3 shuffles see whole
/// rows), a thread starting at row `first` and stepping by `step`.
struct CacheLanes {
  int item, first, step;
  __device__ explicit CacheLanes(int rowLanes)
      : item(threadIdx.x % 32 % rowLanes),
        first(threadIdx.x / 32 * (32 / rowLanes) + threadIdx.x % 32 / rowLanes),
        step(blockDim.x / rowLanes) {}
};

/// The thread's first item of a token's rows (loaded before the block takes
/// the factors, so that the load's latency hides theirs).
template <typename T>
__device__ __forceinline__ CacheItem firstCacheItem(const T *kt, const T *vt,
                                                    CacheDims dims, int half,
                                                    int rowLanes) {
  const CacheLanes lanes(rowLanes);
  const int packs = (dims.headDim - half) / kRopePack;
  CacheItem it;
  if (lanes.first < 2 * dims.numKVHeads && lanes.item < packs)
    it = loadCacheItem(
        cacheRow(kt, vt, lanes.first, dims.numKVHeads, dims.headDim),
        lanes.item, half);
  return it;
}

/// Writes a token's key and value rows into `slot` from 16-byte packs, `it`
/// the thread's first item (firstCacheItem): the keys rotated by the
/// token's factors when `rotate`, each element stored once in the pool's
/// type. With kFresh (fp8 pools), also their decoded values into row
/// `token` of `fresh`.
template <KVCacheDtype D, bool rotate, typename T, bool kFresh = false>
__device__ __forceinline__ void
writeRowsPacked(KVCachePool pool, CacheDims dims, int layer, const T *kt,
                const T *vt, int64_t slot, CacheItem it, const float *factors,
                int half, int rowLanes, FreshRows fresh = {nullptr, 0},
                int64_t token = 0) {
  const int d = dims.headDim, kvh = dims.numKVHeads;
  const int packs = (d - half) / kRopePack, rows = 2 * kvh;
  const int lane = threadIdx.x % 32;
  const CacheLanes lanes(rowLanes);
  const int item = lanes.item, warpRow = lanes.first - lane / rowLanes;
  for (int base = warpRow; base < rows; base += lanes.step) {
    int row = base + lane / rowLanes;
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
      // FreshKV's element offset of this row's head vector.
      const int64_t freshRow =
          ((int64_t(kv) * fresh.rows + token) * kvh + head) * d;
      storePack<D, kFresh>(pool.data, dst + it.at, x1, scale, fresh.data,
                           freshRow + it.at);
      if (it.pair)
        storePack<D, kFresh>(pool.data, dst + it.at + half, x2, scale,
                             fresh.data, freshRow + it.at + half);
    }
    row += lanes.step;
    if (row < rows && item < packs)
      it = loadCacheItem(cacheRow(kt, vt, row, kvh, d), item, half);
  }
}

template <KVCacheDtype D, bool rotate, typename T, bool kFresh = false>
__global__ void __launch_bounds__(kThreads)
    cacheWritePackedKernel(KVCachePool pool, CacheDims dims, int layer,
                           const T *k, const T *v, const int64_t *slots,
                           const int32_t *positions, int rotaryDim,
                           const float *invFreq, int64_t t, int64_t kLd,
                           int64_t vLd, int longFrom, DynamicRope dynamic,
                           int rowLanes, FreshRows fresh) {
  __shared__ float factors[kMaxHeadDim]; // [half] cos, [half] sin
  const int half = rotate ? rotaryDim / 2 : 0;
  for (int64_t token = blockIdx.x; token < t; token += gridDim.x) {
    const int64_t slot = slots[token];
    const T *kt = k + token * kLd, *vt = v + token * vLd;
    const CacheItem it = firstCacheItem(kt, vt, dims, half, rowLanes);
    if constexpr (rotate) {
      __syncthreads(); // the last token's factors are read
      ropeFactors(factors, token, 1, rotaryDim, invFreq, longFrom, positions,
                  dynamic);
      __syncthreads();
    }
    if (slot < 0)
      continue; // the whole block's token
    writeRowsPacked<D, rotate, T, kFresh>(pool, dims, layer, kt, vt, slot, it,
                                          factors, half, rowLanes, fresh,
                                          token);
  }
}

template <KVCacheDtype D, bool rotate, typename T>
cudaError_t launchWrite(KVCachePool pool, CacheDims dims, int layer, const T *k,
                        const T *v, const int64_t *slots,
                        const int32_t *positions, int64_t t, int rotaryDim,
                        const float *invFreq, cudaStream_t stream, int64_t kLd,
                        int64_t vLd, int longFrom, DynamicRope dynamic,
                        FreshRows fresh, bool *freshWritten) {
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
    if constexpr (D != KVCacheDtype::kBf16) {
      if (fresh.data && packAligned(fresh.data)) {
        *freshWritten = true;
        cacheWritePackedKernel<D, rotate, T, true>
            <<<static_cast<unsigned>(blocks), 32 * warps, 0, stream>>>(
                pool, dims, layer, k, v, slots, positions, rotaryDim, invFreq,
                t, kLd, vLd, longFrom, dynamic, rowLanes, fresh);
        return cudaGetLastError();
      }
    }
    cacheWritePackedKernel<D, rotate>
        <<<static_cast<unsigned>(blocks), 32 * warps, 0, stream>>>(
            pool, dims, layer, k, v, slots, positions, rotaryDim, invFreq, t,
            kLd, vLd, longFrom, dynamic, rowLanes, FreshRows{nullptr, 0});
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
                          DynamicRope dynamic = {}, FreshKV fresh = {},
                          bool *freshWritten = nullptr) {
  bool unused = false;
  bool &written = freshWritten ? *freshWritten : unused;
  written = false;
  const FreshRows rows = freshRowsOf(fresh, t);
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
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  case KVCacheDtype::kF8E5M2:
    return launchWrite<KVCacheDtype::kF8E5M2, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  case KVCacheDtype::kF8E4M3:
    return launchWrite<KVCacheDtype::kF8E4M3, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  }
  return cudaErrorInvalidValue;
}

/// The queries of rope_qkv_cache_write: rows of `heads` head vectors, q's
/// `ld` elements apart, rotated into `out` (contiguous).
template <typename T> struct QueryRows {
  const T *q;
  T *out;
  int64_t ld;
  int heads;
};

/// rope_qkv_cache_write, rows in whole 16-byte packs: a block a token,
/// whose threads load their first query item (ropePackedKernel's) and cache
/// item (cacheWritePackedKernel's), take the token's factors once, rotate
/// the query packs and then write the key and value rows, each element by
/// the arithmetic of those two kernels.
///
/// Occupancy bounds it: a block holds one token from its loads to its
/// stores, so the tokens in flight per SM set the speed. At most 64
/// registers keep four blocks on an SM for every pool; the E4M3 path's
/// scale and divisions (80 registers unbounded, three blocks) spill a few
/// bytes around the factors instead. On an H100 the unbounded E4M3 kernel
/// was slower than rope + rope_kv_cache_write (100.6 against 91.0 us for
/// 8192 tokens), while bf16 and E5M2 pools, already at 64, were faster.
template <KVCacheDtype D, typename T, bool kFresh = false>
__global__ void __launch_bounds__(kThreads, 4) ropeQKVCacheWritePackedKernel(
    QueryRows<T> query, KVCachePool pool, CacheDims dims, int layer, const T *k,
    const T *v, const int64_t *slots, const int32_t *positions, int rotaryDim,
    const float *invFreq, int64_t t, int64_t kLd, int64_t vLd, int longFrom,
    DynamicRope dynamic, int rowLanes, FreshRows fresh) {
  waitForPriorGrids();
  allowDependentGrids();
  __shared__ float factors[kMaxHeadDim]; // [half] cos, [half] sin
  const int d = dims.headDim, half = rotaryDim / 2;
  const int packsPerHead = (d - half) / kRopePack;
  const int queryItems = query.heads * packsPerHead;
  for (int64_t token = blockIdx.x; token < t; token += gridDim.x) {
    const int64_t slot = slots[token];
    const T *qt = query.q + token * query.ld;
    T *yt = query.out + token * query.heads * int64_t(d);
    const T *kt = k + token * kLd, *vt = v + token * vLd;
    int i = threadIdx.x;
    RopeItem qItem;
    if (i < queryItems)
      qItem = loadRopeItem(qt, i, packsPerHead, d, half);
    const CacheItem it = firstCacheItem(kt, vt, dims, half, rowLanes);
    __syncthreads(); // the last token's factors are read
    ropeFactors(factors, token, 1, rotaryDim, invFreq, longFrom, positions,
                dynamic);
    __syncthreads();
    while (i < queryItems) {
      storeRopeItem(yt, qItem, factors, half);
      i += blockDim.x;
      if (i < queryItems)
        qItem = loadRopeItem(qt, i, packsPerHead, d, half);
    }
    if (slot < 0)
      continue; // a padding token: its queries rotated, nothing cached
    writeRowsPacked<D, true, T, kFresh>(pool, dims, layer, kt, vt, slot, it,
                                        factors, half, rowLanes, fresh, token);
  }
}

/// rope_qkv_cache_write of other rows: a block a token taking its factors
/// once, its threads rotating the query pairs by ropeKernel's element
/// arithmetic, then its warps writing the key and value rows as
/// cacheWriteKernel does.
template <KVCacheDtype D, typename T>
__global__ void __launch_bounds__(kThreads)
    ropeQKVCacheWriteKernel(QueryRows<T> query, KVCachePool pool,
                            CacheDims dims, int layer, const T *k, const T *v,
                            const int64_t *slots, const int32_t *positions,
                            int rotaryDim, const float *invFreq, int64_t t,
                            int64_t kLd, int64_t vLd, int longFrom,
                            DynamicRope dynamic) {
  waitForPriorGrids();
  allowDependentGrids();
  __shared__ float factors[kMaxHeadDim]; // [half] cos, [half] sin
  const int d = dims.headDim, half = rotaryDim / 2;
  // Per query head: `half` rotated pairs, then d - rotaryDim copies.
  const int perHead = d - half, queryItems = query.heads * perHead;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t token = blockIdx.x; token < t; token += gridDim.x) {
    __syncthreads(); // the last token's factors are read
    ropeFactors(factors, token, 1, rotaryDim, invFreq, longFrom, positions,
                dynamic);
    __syncthreads();
    for (int i = threadIdx.x; i < queryItems; i += blockDim.x) {
      const int h = i / perHead, j = i - h * perHead;
      const T *xh = query.q + token * query.ld + int64_t(h) * d;
      T *yh = query.out + (token * query.heads + h) * int64_t(d);
      if (j >= half) {
        yh[j + half] = xh[j + half];
        continue;
      }
      const float2 r = ropeRotate(toFloat(xh[j]), toFloat(xh[j + half]),
                                  factors[j], factors[half + j]);
      yh[j] = fromFloat<T>(r.x);
      yh[j + half] = fromFloat<T>(r.y);
    }
    const int64_t slot = slots[token];
    if (slot < 0)
      continue;
    for (int item = warp; item < 2 * dims.numKVHeads; item += warps) {
      const int head = item / 2, kv = item % 2;
      const T *row =
          kv == 0 ? k + token * kLd + head * d : v + token * vLd + head * d;
      writeRowElements<D, true>(pool, dims, layer, row, slot, head, kv, factors,
                                rotaryDim);
    }
  }
}

template <KVCacheDtype D, typename T>
cudaError_t launchQKVWrite(QueryRows<T> query, KVCachePool pool, CacheDims dims,
                           int layer, const T *k, const T *v,
                           const int64_t *slots, const int32_t *positions,
                           int64_t t, int rotaryDim, const float *invFreq,
                           cudaStream_t stream, int64_t kLd, int64_t vLd,
                           int longFrom, DynamicRope dynamic, FreshRows fresh,
                           bool *freshWritten) {
  const int d = dims.headDim, half = rotaryDim / 2;
  const int64_t blocks = std::min<int64_t>(t, int64_t(1) << 20);
  if (d % kRopePack == 0 && half % kRopePack == 0 &&
      query.ld % kRopePack == 0 && kLd % kRopePack == 0 &&
      vLd % kRopePack == 0 && packAligned(query.q) && packAligned(query.out) &&
      packAligned(k) && packAligned(v) && packAligned(pool.data)) {
    // Threads for the larger of the query items (one each) and the cache
    // rows (cacheWritePackedKernel's warps), up to kThreads looping.
    const int packs = (d - half) / kRopePack;
    int rowLanes = 1;
    while (rowLanes < packs)
      rowLanes *= 2;
    const int rowsPerWarp = 32 / rowLanes;
    const int64_t cacheThreads =
        32 * int64_t((2 * dims.numKVHeads + rowsPerWarp - 1) / rowsPerWarp);
    const int64_t queryThreads = (int64_t(query.heads) * packs + 31) / 32 * 32;
    const int threads = static_cast<int>(std::clamp<int64_t>(
        std::max(cacheThreads, queryThreads), 32, kThreads));
    if constexpr (D != KVCacheDtype::kBf16) {
      if (fresh.data && packAligned(fresh.data)) {
        *freshWritten = true;
        return launchDependent(ropeQKVCacheWritePackedKernel<D, T, true>,
                               static_cast<unsigned>(blocks), threads, 0,
                               stream, query, pool, dims, layer, k, v, slots,
                               positions, rotaryDim, invFreq, t, kLd, vLd,
                               longFrom, dynamic, rowLanes, fresh);
      }
    }
    return launchDependent(ropeQKVCacheWritePackedKernel<D, T>,
                           static_cast<unsigned>(blocks), threads, 0, stream,
                           query, pool, dims, layer, k, v, slots, positions,
                           rotaryDim, invFreq, t, kLd, vLd, longFrom, dynamic,
                           rowLanes, FreshRows{nullptr, 0});
  }
  return launchDependent(ropeQKVCacheWriteKernel<D, T>,
                         static_cast<unsigned>(blocks), kThreads, 0, stream,
                         query, pool, dims, layer, k, v, slots, positions,
                         rotaryDim, invFreq, t, kLd, vLd, longFrom, dynamic);
}

} // namespace

template <typename T>
cudaError_t launchKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                               const T *k, const T *v, const int64_t *slots,
                               int64_t t, cudaStream_t stream, int64_t kLd,
                               int64_t vLd, FreshKV fresh, bool *freshWritten) {
  return dispatchWrite<false>(pool, dims, layer, k, v, slots, nullptr, t, 0,
                              nullptr, stream, kLd, vLd, 0, {}, fresh,
                              freshWritten);
}

template <typename T>
cudaError_t launchRopeKVCacheWrite(
    KVCachePool pool, CacheDims dims, int layer, const T *k, const T *v,
    const int64_t *slots, const int32_t *positions, int64_t t, int rotaryDim,
    const float *invFreq, cudaStream_t stream, int64_t kLd, int64_t vLd,
    int longFrom, DynamicRope dynamic, FreshKV fresh, bool *freshWritten) {
  return dispatchWrite<true>(pool, dims, layer, k, v, slots, positions, t,
                             rotaryDim, invFreq, stream, kLd, vLd, longFrom,
                             dynamic, fresh, freshWritten);
}

template <typename T>
cudaError_t launchRopeQKVCacheWrite(
    const T *q, T *qOut, int64_t qHeads, KVCachePool pool, CacheDims dims,
    int layer, const T *k, const T *v, const int64_t *slots,
    const int32_t *positions, int64_t t, int rotaryDim, const float *invFreq,
    cudaStream_t stream, int64_t qLd, int64_t kLd, int64_t vLd, int longFrom,
    DynamicRope dynamic, FreshKV fresh, bool *freshWritten) {
  bool unused = false;
  bool &written = freshWritten ? *freshWritten : unused;
  written = false;
  if (t <= 0 || qHeads <= 0 || dims.numKVHeads <= 0)
    return cudaSuccess;
  const int64_t width = int64_t(dims.numKVHeads) * dims.headDim;
  qLd = qLd ? qLd : qHeads * dims.headDim;
  kLd = kLd ? kLd : width;
  vLd = vLd ? vLd : width;
  if (qHeads > (int64_t(1) << 24) || qLd < qHeads * dims.headDim ||
      kLd < width || vLd < width || dims.headDim <= 0 ||
      dims.headDim > kMaxHeadDim ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales) || rotaryDim <= 0 ||
      rotaryDim % 2 != 0 || rotaryDim > dims.headDim ||
      (dynamic.queryStartLoc && (dynamic.numSeqs <= 0 || rotaryDim <= 2 ||
                                 dynamic.originalMaxPositionEmbeddings <= 0)))
    return cudaErrorInvalidValue;
  const QueryRows<T> query{q, qOut, qLd, static_cast<int>(qHeads)};
  const FreshRows rows = freshRowsOf(fresh, t);
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchQKVWrite<KVCacheDtype::kBf16>(
        query, pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  case KVCacheDtype::kF8E5M2:
    return launchQKVWrite<KVCacheDtype::kF8E5M2>(
        query, pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  case KVCacheDtype::kF8E4M3:
    return launchQKVWrite<KVCacheDtype::kF8E4M3>(
        query, pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd, longFrom, dynamic, rows, &written);
  }
  return cudaErrorInvalidValue;
}

#define INFER_CACHE_WRITE_KERNELS(T)                                           \
  template cudaError_t launchKVCacheWrite<T>(                                  \
      KVCachePool, CacheDims, int, const T *, const T *, const int64_t *,      \
      int64_t, cudaStream_t, int64_t, int64_t, FreshKV, bool *);               \
  template cudaError_t launchRopeKVCacheWrite<T>(                              \
      KVCachePool, CacheDims, int, const T *, const T *, const int64_t *,      \
      const int32_t *, int64_t, int, const float *, cudaStream_t, int64_t,     \
      int64_t, int, DynamicRope, FreshKV, bool *);                             \
  template cudaError_t launchRopeQKVCacheWrite<T>(                             \
      const T *, T *, int64_t, KVCachePool, CacheDims, int, const T *,         \
      const T *, const int64_t *, const int32_t *, int64_t, int,               \
      const float *, cudaStream_t, int64_t, int64_t, int64_t, int,             \
      DynamicRope, FreshKV, bool *);
INFER_CACHE_WRITE_KERNELS(__nv_bfloat16)
INFER_CACHE_WRITE_KERNELS(__half)
#undef INFER_CACHE_WRITE_KERNELS

} // namespace infer::cuda
