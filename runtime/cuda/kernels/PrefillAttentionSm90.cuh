//===- PrefillAttentionSm90.cuh - wgmma + TMA prefill attention *- CUDA -*-===//
//
// FlashAttention-3-style attention of the prefill, chunked-prefill and
// speculative-verification rows of a batch (sequences with two or more new
// tokens) over the paged pool, for Hopper (sm_90a). The rows of a sequence
// are packed as in PrefillAttention.cuh, (query, head of the kv head's
// group) query-major, so the heads sharing a kv head read each K/V tile
// once. A work item is a (tile of 128 rows, kv head); CTAs of three
// warpgroups (four with fp8 pools), one per SM, work through the items as one
// stream of tiles (persistent: the producer fills the ring with the next item's
// K/V while the consumers finish the last one; a consumer copies the next
// item's Q rows in once the last S product of an item is done, and issues the
// next item's first S with the last P V, so the epilogue runs under them):
//
//   warpgroup 0 (producer)   loads K/V tiles of 128 keys into a ring of
//                            Variant::kStages shared-memory stages (bf16
//                            pools: warps 0-1 issue the K boxes, 2-3 the V
//                            boxes)
//   warpgroups 1, 2          64 rows each: S = Q K^T (wgmma, Q and K in
//   (consumers)              shared memory), online softmax in fp32 (base
//                            2, rescaled lazily: the base moves only when a
//                            tile raises a row's max past 2^8), O += P V
//                            (wgmma, P from registers as bf16)
//   warpgroup 3 (converter)  fp8 pools: converts the value rows of each
//                            staged tile to bf16 (below)
//
// Handshakes are mbarriers: full[stage] (the producer's TMA bytes or 128
// converting threads' arrivals) and empty[stage] (one arrival per consumer
// warp), for K and V apart so S of the next tile can start before V lands. Each
// consumer overlaps its softmax with its own P V product: it issues S(t) = Q
// K(t)^T and O += P(t-1) V(t-1), waits for S(t) alone, computes P(t), and
// rescales O once the product is done (FA3's intra-warpgroup pipelining). The
// two consumers take turns issuing their products (FA3's ping-pong: named
// barriers), so one's softmax runs while the other's wgmma keep the tensor
// cores busy.
//
// Loads through the block tables, per tile of 128 keys (tiles aligned to
// 128 keys from the first visible one): every block (box of min(bs, 128)
// rows) with a visible key is one TMA box per 64-column half,
//
//   box = pool[block][layer][k|v][rows][kv_head][64 columns]
//
// landing in the tile in the 128-byte swizzle wgmma reads (Sm90.cuh); block
// sizes 8..128 (powers of two) and multiples of 128 take this path. Pools
// that need a conversion (fp8 codes, E4M3 scales; keys rotated at their
// cache index for streaming plans) are staged: TMA brings the raw rows into
// one of two staging buffers, and the producer's 128 threads convert one
// key row each to bf16 (decode and scale, rotate keys in fp32 as
// ropeKeyElement does, round) into the stage. With fp8 pools a fourth
// warpgroup, the converter, converts the value rows meanwhile (the
// producer leaves it each row's scale): one warpgroup doing both was what
// held the consumers (H100, infer-attention-bench, TFLOP/s: E4M3 2048
// tokens 253 against 211, 8192 315 against 250; E5M2 275 / 344 against
// 248 / 300). fp8 codes are not fed to the tensor cores as fp8: that would
// need q and P rounded to fp8 too.
// Soft-capped plans (AttentionDims::logitSoftcap > 0, a template flag of
// the consumers) cap S in place before the masks, in the raw units the
// consumers keep it in: s -> (cap / scale) tanh(s scale / cap), which the
// softmax's scale then turns into cap tanh(s scale / cap) (fastSoftcapScore).
//
// Keys outside [first visible, last + 1) in a tile read as zeros (staged) or
// are masked (-inf scores) and their value rows zeroed by the consumers
// before P V, so stale or unwritten slots (NaN) never reach the output.
// Tiles of the flat batch are numbered as PrefillAttention.cuh numbers them
// (kRows = 128); items are numbered with the kv head fastest and the longest
// (last, causal) tiles first, and CTA i takes items i, 2G - 1 - i, 2G + i,
// ... of a grid of G (snake order, so the CTAs' totals even out).
// Everything is read on the device, so launches can be captured in CUDA
// graphs. Given a workspace, a one-block launch first lists the row tiles
// of the sequences with two or more new tokens (tileMapKernel), and the
// items are those tiles alone: a batch of many decode rows and a few
// prompts otherwise leaves most of the flat batch's tiles empty, each
// costing a persistent CTA a search. INFER_SM90_PINGPONG=0,
// INFER_SM90_PERSISTENT=0 (or a CTA count) and INFER_SM90_TILE_MAP=0 turn
// the three off for comparisons.
//
// The kernels and launchers are templates of the q/out element type (fp32
// or bf16); PrefillAttentionSm90.cu instantiates the bf16 ones,
// PrefillAttentionSm90F32.cu the fp32 ones.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTIONSM90_CUH
#define INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTIONSM90_CUH

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/KVCache.cuh"
#include "runtime/cuda/kernels/Sm90.cuh"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace infer::cuda::sm90 {

constexpr int kRows = 128;    ///< Rows of Q per CTA (two consumers x 64).
constexpr int kKeys = 128;    ///< Keys per K/V tile.
constexpr int kConsumers = 2; ///< Consumer warpgroups.
/// How far (base 2) a tile may raise a row's running max before the
/// consumers move the softmax base and rescale O (lazy rescaling).
constexpr float kLazyRescaleLog2 = 8.0f;
/// Bytes of one 64-column half of a Q or K/V tile (128 rows of 128 bytes).
constexpr uint32_t kHalfBytes = 128 * 128;
static_assert(kRows == 128 && kKeys == 128, "halves assume 128 rows");

// Named barriers (0 is __syncthreads).
constexpr int kProducerBarrier = 1;
constexpr int kQBarrier = 2; ///< + consumer index
constexpr int kConsumersBarrier = 4;
constexpr int kSchedulerBarrier = 5; ///< + consumer index

/// What a variant does with the pool: K and V straight from the pool by TMA
/// (bf16, no key rope), or through the staging buffers.
template <KVCacheDtype T, bool kRope> struct Variant {
  static constexpr bool kStagedK = T != KVCacheDtype::kBf16 || kRope;
  static constexpr bool kStagedV = T != KVCacheDtype::kBf16;
  static constexpr bool kStaged = kStagedK;
  static constexpr int kElementBytes = T == KVCacheDtype::kBf16 ? 2 : 1;
  /// K/V stages in flight: three where TMA fills them straight from the
  /// pool (two left the consumers waiting for K a fifth of their time at
  /// 8192 tokens, ncu), two where the staging buffers take the room.
  static constexpr int kStages = kStaged ? 2 : 3;
  /// fp8 pools: a fourth warpgroup converts the values while the producer
  /// converts the keys. One warpgroup converting both held the consumers
  /// (they waited for K a third of their time, ncu): its 4 warps, one a
  /// scheduler, issue a conversion's dependent chain with little to hide
  /// its latencies.
  static constexpr bool kConverter = kStagedV;
  static constexpr int kWarpgroups = 1 + kConsumers + (kConverter ? 1 : 0);
  static constexpr int kThreads = 128 * kWarpgroups;
  // With a converter, 48 + 32 + 2 x 216 of the four warpgroups' 4 x 128
  // (ptxas: 40 spills the producer, 24 the converter, 208 the consumers;
  // this split spills 8 bytes in the D = 128 launches without a tile map).
  static constexpr int kProducerRegs = kConverter ? 48 : kStaged ? 56 : 40;
  static constexpr int kConverterRegs = kConverter ? 32 : 0;
  static constexpr int kConsumerRegs = kConverter ? 216 : kStaged ? 224 : 232;
  // setmaxnreg moves registers between the warpgroups of a CTA: the
  // consumers' raise waits for registers the others gave back, so together
  // they may not ask for more than the launch gave each thread (65536 /
  // kThreads, in steps of 8: 168 for three warpgroups, 128 for four), or
  // the raise never returns.
  static_assert(kProducerRegs + kConverterRegs + kConsumers * kConsumerRegs <=
                    kWarpgroups * (65536 / kThreads / 8 * 8),
                "the warpgroups ask for more registers than the CTA has");
  /// Whether a CTA works through several items (persistentCtas): not with
  /// rotated keys, whose producer has no registers to spare for the loop.
  static constexpr bool kPersistent = !kRope;
};

/// Shared memory, each piece 1024-byte aligned:
///   q        [halves][kRows][128 B]
///   k, v     [kStages][halves][kKeys][128 B]
///   staging  [2][k raw rows (, v raw rows)]   (staged variants)
///   values   [2][kKeys] float scales, [2] int   (the converter's: each
///            value row's scale, -inf for rows out of range; whether the
///            producer is done)
///   barriers fullK, fullV, emptyK, emptyV [kStages], stagingFull [2]
///            (, valuesFull [2]: the producer wrote a tile's value scales)
template <int D, KVCacheDtype T, bool kRope> struct SharedLayout {
  using V = Variant<T, kRope>;
  static constexpr int kStages = V::kStages;
  static constexpr uint32_t kTileBytes = kKeys * D * 2;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + kRows * D * 2;
  static constexpr uint32_t kV = kK + kStages * kTileBytes;
  static constexpr uint32_t kRawRowBytes = D * V::kElementBytes;
  static constexpr uint32_t kRawTileBytes = kKeys * kRawRowBytes;
  static constexpr uint32_t kStagingBytes =
      V::kStaged ? kRawTileBytes * (V::kStagedV ? 2 : 1) : 0;
  static constexpr uint32_t kStaging = kV + kStages * kTileBytes;
  static constexpr uint32_t kValues = kStaging + 2 * kStagingBytes;
  static constexpr uint32_t kValuesBytes =
      V::kConverter ? 2 * kKeys * sizeof(float) + 2 * sizeof(int) : 0;
  static constexpr uint32_t kBarriers = (kValues + kValuesBytes + 7) / 8 * 8;
  static constexpr uint32_t kBarrierCount =
      4 * kStages + 2 + (V::kConverter ? 2 : 0);
  /// Dynamic shared memory to ask for: the pieces, and slack to align the
  /// base to 1024 bytes.
  static constexpr uint32_t kBytes = kBarriers + 8 * kBarrierCount + 1024;
};

/// The kernel's arguments besides the tensor maps; q and out are TQ.
struct Sm90Params {
  const void *q;
  void *out;
  const int32_t *blockTables;
  int64_t maxBlocksPerSeq;
  const int32_t *contextLens;
  const int32_t *queryStartLoc;
  int64_t numSeqs;
  const float *scales; ///< E4M3 pools.
  CacheDims dims;
  AttentionDims a;
  /// The consumers take turns issuing their products (FA3's ping-pong), so
  /// one's softmax runs under the other's tensor-core work.
  bool pingPong;
  /// Work items: (tile of kRows rows, kv head) pairs, numbered as
  /// locateTile reads them; a CTA takes items blockIdx.x, then the others
  /// workItem gives it (one each with gridDim.x == numWork). With a tile
  /// map, numWork is a bound and the map's count the number.
  int64_t numWork;
  /// The row tiles of the sequences with two or more new tokens, in flat
  /// order (tileMapKernel; null: every tile of the flat batch is an item,
  /// those of decode rows empty): count [0] = items (tiles x kv heads),
  /// tiles (sequence, tile of the sequence) from [2] as int2.
  const int32_t *tileMap;
  /// Which sequences tileMapKernel lists: 0 all, 1 those that read
  /// FreshKV (rowBases), 2 the others.
  int freshFilter = 0;
  /// With FreshKV (rowBasesKernel): per sequence, FreshKV's row of its key
  /// 0, or -1 for a sequence that reads the pool.
  const int32_t *rowBases = nullptr;
};

/// Bytes of a tile map of `numWork` items at most.
inline size_t tileMapBytes(int64_t numWork, int numKVHeads) {
  return sizeof(int32_t) * 2 + sizeof(int2) * size_t(numWork / numKVHeads);
}

/// Sm90Params::numWork, or the tile map's count. kMapped (whether the
/// launch has a tile map) is a template flag of the kernel: a run-time
/// branch between the two ways of locating a tile spilled the producer's
/// 40 registers (408-640 bytes of spills, the 8192-token prefill 18%
/// slower on an H100).
template <bool kMapped>
__device__ __forceinline__ int64_t workCount(const Sm90Params &p) {
  if constexpr (kMapped)
    return p.tileMap[0];
  else
    return p.numWork;
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint4 packBf16x8(const float (&x)[8]) {
  return make_uint4(packBf16(x[0], x[1]), packBf16(x[2], x[3]),
                    packBf16(x[4], x[5]), packBf16(x[6], x[7]));
}

/// Where a CTA's rows and keys are in the flat batch (the same on every
/// thread).
struct TileGeometry {
  int64_t seqStart, flatBegin, flatLast, firstPos, posLo, posHi;
  int64_t keyBegin, keyEnd, tileBegin;
  int numTiles, group, kvHead, seq;
  const int32_t *table;
};

/// The geometry of the row tile of sequence `seq` whose first flat row
/// (query-major, the group's heads) is `flatBegin`; g.group set. False for
/// a decode sequence or past the sequence's rows.
__device__ __forceinline__ bool tileGeometryOf(const Sm90Params &p, int64_t seq,
                                               int64_t flatBegin,
                                               TileGeometry &g) {
  const AttentionDims &a = p.a;
  g.seqStart = p.queryStartLoc[seq];
  const int64_t newTokens = p.queryStartLoc[seq + 1] - g.seqStart;
  if (newTokens < 2)
    return false;
  g.flatBegin = flatBegin;
  const int64_t flatCount = newTokens * g.group;
  if (g.flatBegin >= flatCount)
    return false;
  g.flatLast =
      (g.flatBegin + kRows < flatCount ? g.flatBegin + kRows : flatCount) - 1;
  g.firstPos = p.contextLens[seq] - newTokens;
  g.posLo = g.firstPos + static_cast<int>(g.flatBegin) / g.group;
  g.posHi = g.firstPos + static_cast<int>(g.flatLast) / g.group;
  const int window = a.slidingWindow;
  g.keyBegin =
      window > 0 && g.posLo - window + 1 > 0 ? g.posLo - window + 1 : 0;
  g.keyEnd = g.posHi + 1;
  g.tileBegin = g.keyBegin / kKeys * kKeys;
  g.numTiles = static_cast<int>((g.keyEnd - g.tileBegin + kKeys - 1) / kKeys);
  g.table = p.blockTables + seq * p.maxBlocksPerSeq;
  g.seq = static_cast<int>(seq);
  return true;
}

/// False when work item `w` has nothing to do (a decode sequence, or a
/// tile past the sequence's rows).
template <bool kMapped>
__device__ __forceinline__ bool locateTile(const Sm90Params &p, int64_t w,
                                           TileGeometry &g) {
  const AttentionDims &a = p.a;
  g.group = a.numHeads / a.numKVHeads;
  // int32 divisions (numWork < 2^31, checked by the launcher; rows of a
  // sequence, t * group, fit too): 64-bit ones are calls that take more
  // registers than the producer has.
  const int item = static_cast<int>(w);
  g.kvHead = item % a.numKVHeads;
  const int tiles = static_cast<int>(workCount<kMapped>(p)) / a.numKVHeads;
  const int64_t tile = tiles - 1 - item / a.numKVHeads;
  if constexpr (kMapped) {
    const int2 entry = reinterpret_cast<const int2 *>(p.tileMap + 2)[tile];
    return tileGeometryOf(p, entry.x, int64_t(entry.y) * kRows, g);
  }
  int64_t lo = 0, hi = p.numSeqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (int64_t(p.queryStartLoc[mid]) * g.group / kRows + mid <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t start = p.queryStartLoc[lo];
  return tileGeometryOf(p, lo, (tile - (start * g.group / kRows + lo)) * kRows,
                        g);
}

/// Bins of tileMapKernel's counting sort: tiles of more key tiles share the
/// last.
constexpr int kCostBins = 4096;

/// The exclusive prefix sum over the block's threads (blockDim.x a
/// multiple of 32, at most 1024) of each thread's `mine`; the block's total
/// in *total. Every thread of the block calls it.
template <typename T>
__device__ __forceinline__ T blockExclusiveSum(T mine, T *total) {
  __shared__ T warpTotals[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inclusive = mine;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const T v = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d)
      inclusive += v;
  }
  if (lane == 31)
    warpTotals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T sum = lane < int(blockDim.x) / 32 ? warpTotals[lane] : T(0);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const T v = __shfl_up_sync(0xffffffffu, sum, d);
      if (lane >= d)
        sum += v;
    }
    warpTotals[lane] = sum; // inclusive over warps
  }
  __syncthreads();
  const T before = inclusive - mine + (warp > 0 ? warpTotals[warp - 1] : T(0));
  *total = warpTotals[blockDim.x / 32 - 1];
  __syncthreads(); // warpTotals free for another call
  return before;
}

/// The tile map of a launch (Sm90Params::tileMap, p's own null): the row
/// tiles of the sequences with two or more new tokens, ordered by their
/// count of key tiles (a counting sort in shared memory; one block, each
/// thread a run of sequences). Items run from the map's end, so the CTAs
/// take them longest first whatever the batch's order of sequences and
/// lengths, which the snake order needs to even out their totals. Batches
/// that mix decode rows with a few prompts leave most tiles of the flat
/// batch empty; a persistent CTA walked those at ~2 us each.
static __global__ void __launch_bounds__(1024)
    tileMapKernel(const Sm90Params p, int32_t *map) {
  const int threads = blockDim.x, tid = threadIdx.x;
  const int group = p.a.numHeads / p.a.numKVHeads;
  const int64_t per = (p.numSeqs + threads - 1) / threads;
  const int64_t begin = tid * per < p.numSeqs ? tid * per : p.numSeqs;
  const int64_t end = begin + per < p.numSeqs ? begin + per : p.numSeqs;
  __shared__ int bins[kCostBins];
  for (int i = tid; i < kCostBins; i += threads)
    bins[i] = 0;
  __syncthreads();
  // Each tile of this thread's sequences with its bin: f(seq, tile, bin).
  auto forTiles = [&](auto f) {
    for (int64_t s = begin; s < end; ++s) {
      TileGeometry g;
      g.group = group;
      for (int j = 0; tileGeometryOf(p, s, int64_t(j) * kRows, g); ++j) {
        if (p.freshFilter != 0 && (p.rowBases[s] >= 0) != (p.freshFilter == 1))
          break; // the other launch's sequence
        f(s, j, g.numTiles < kCostBins ? g.numTiles : kCostBins - 1);
      }
    }
  };
  forTiles([&](int64_t, int, int bin) { atomicAdd(&bins[bin], 1); });
  __syncthreads();
  // Exclusive scan of the bins: each thread kCostBins / threads of them,
  // then over the warps and the warps' totals.
  constexpr int kMaxThreads = 1024;
  static_assert(kCostBins % kMaxThreads == 0, "whole runs of bins");
  const int run = kCostBins / threads;
  int mine = 0;
  for (int i = 0; i < run; ++i)
    mine += bins[tid * run + i];
  int items;
  int offset = blockExclusiveSum(mine, &items);
  for (int i = 0; i < run; ++i) {
    const int count = bins[tid * run + i];
    bins[tid * run + i] = offset;
    offset += count;
  }
  __syncthreads();
  int2 *tiles = reinterpret_cast<int2 *>(map + 2);
  forTiles([&](int64_t s, int j, int bin) {
    tiles[atomicAdd(&bins[bin], 1)] = make_int2(static_cast<int>(s), j);
  });
  if (tid == 0)
    map[0] = items * p.a.numKVHeads;
}

/// Whether sequence `s` (group query heads per kv head) reads its keys as
/// FreshKV context rows where they fit, and its context length: keys
/// cached before the call and kFreshContextMinRows query rows or more
/// (freshContextRows says the same on the host).
__host__ __device__ __forceinline__ bool
takesContextRows(const int32_t *queryStartLoc, const int32_t *contextLens,
                 int64_t s, int group, int64_t &length) {
  const int64_t newTokens = queryStartLoc[s + 1] - queryStartLoc[s];
  length = contextLens[s];
  return newTokens * group >= kFreshContextMinRows && length > newTokens;
}

/// Sm90Params::rowBases of a launch whose FreshKV has `rows` rows and
/// `contextRows` context rows, and the list contextRowsKernel fills them
/// from: [0] its count of sequences, then (first row, sequence) pairs in
/// row order. A sequence with nothing cached reads its new tokens' rows;
/// those that take context rows (takesContextRows) get them in order while
/// they fit (the first that does not ends them, so the host's count of a
/// batch is exact); the rest read the pool (-1). One block, each thread a
/// run of sequences.
static __global__ void __launch_bounds__(1024)
    rowBasesKernel(const Sm90Params p, int64_t rows, int64_t contextRows,
                   int32_t *bases, int32_t *list) {
  const int threads = blockDim.x, tid = threadIdx.x;
  const int group = p.a.numHeads / p.a.numKVHeads;
  const int64_t per = (p.numSeqs + threads - 1) / threads;
  const int64_t begin = tid * per < p.numSeqs ? tid * per : p.numSeqs;
  const int64_t end = begin + per < p.numSeqs ? begin + per : p.numSeqs;
  // This run's sequences that take context rows (high bits) and their
  // rows (low bits; a batch's contexts sum to less than 2^40).
  constexpr int kCountShift = 40;
  constexpr long long kRowsMask = (1ll << kCountShift) - 1;
  long long mine = 0;
  for (int64_t s = begin; s < end; ++s) {
    int64_t length;
    if (takesContextRows(p.queryStartLoc, p.contextLens, s, group, length))
      mine += (1ll << kCountShift) + length;
  }
  long long all;
  const long long before = blockExclusiveSum(mine, &all);
  __shared__ int listed;
  if (tid == 0)
    listed = 0;
  __syncthreads();
  int64_t index = before >> kCountShift, offset = before & kRowsMask;
  int fits = 0;
  for (int64_t s = begin; s < end; ++s) {
    const int32_t first = p.queryStartLoc[s];
    const int64_t newTokens = p.queryStartLoc[s + 1] - first;
    int64_t length;
    int32_t base = -1;
    if (newTokens >= 2 && p.contextLens[s] == newTokens) {
      base = first;
    } else if (takesContextRows(p.queryStartLoc, p.contextLens, s, group,
                                length)) {
      if (offset + length <= contextRows) {
        base = static_cast<int32_t>(rows + offset);
        list[1 + 2 * index] = base;
        list[2 + 2 * index] = static_cast<int32_t>(s);
        ++fits;
      }
      offset += length;
      ++index;
    }
    bases[s] = base;
  }
  atomicAdd(&listed, fits);
  __syncthreads();
  if (tid == 0)
    list[0] = listed;
}

/// FreshKV's context rows (rowBasesKernel's list) from an fp8 pool of type
/// T: each 8 elements of a key or value head vector decoded as the
/// staging decodes them (loadKV8, packBf16x8), a thread each.
template <KVCacheDtype T>
static __global__ void __launch_bounds__(256)
    contextRowsKernel(KVCachePool pool, const Sm90Params p, const int32_t *list,
                      __nv_bfloat16 *fresh, int64_t rows, int64_t contextRows) {
  static_assert(T != KVCacheDtype::kBf16, "fp8 pools");
  const int count = list[0];
  const CacheDims &dims = p.dims;
  const int chunks = dims.headDim / 8, kvh = dims.numKVHeads;
  const int bs = dims.blockSize;
  const int64_t perRow = int64_t(2) * kvh * chunks;
  const int64_t planeRows = rows + contextRows;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       count > 0 && i < contextRows * perRow;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t row = static_cast<int32_t>(rows + i / perRow);
    int rest = static_cast<int>(i % perRow);
    const int kv = rest / (kvh * chunks);
    rest %= kvh * chunks;
    const int h = rest / chunks, c = rest % chunks;
    // The listed sequence whose rows hold `row`: the last to start at or
    // before it.
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (list[1 + 2 * mid] <= row)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t s = list[2 + 2 * lo];
    const int key = row - list[1 + 2 * lo];
    if (key < 0 || key >= p.contextLens[s])
      continue; // past the last listed context
    const int block = p.blockTables[s * p.maxBlocksPerSeq + key / bs];
    const int inBlock = key % bs;
    float scale = 1.0f;
    if constexpr (KVElement<T>::kScaled)
      scale = pool.scales[kvScaleIndex(dims, block, inBlock, p.a.layer, h) +
                          int64_t(kv) * bs * kvh];
    const int64_t offset =
        ((int64_t(block) * dims.numLayers + p.a.layer) * 2 + kv) * bs * kvh *
            dims.headDim +
        (int64_t(inBlock) * kvh + h) * dims.headDim + c * 8;
    float x[8];
    loadKV8<T>(pool.data, offset, scale, x);
    *reinterpret_cast<uint4 *>(
        fresh + ((int64_t(kv) * planeRows + row) * kvh + h) * dims.headDim +
        c * 8) = packBf16x8(x);
  }
}

/// The `k`-th work item of this CTA (k = 0, 1, ...): rounds of gridDim.x
/// items, CTA i taking item i of even rounds and item gridDim.x - 1 - i of
/// odd ones. Items run longest first (locateTile), so the snake order
/// evens out the CTAs' totals when the grid is persistent (fewer CTAs than
/// items); -1 past the last item.
template <bool kMapped>
__device__ __forceinline__ int64_t workItem(const Sm90Params &p, int k) {
  const int64_t round = int64_t(k) * gridDim.x;
  const int64_t w =
      round + (k % 2 == 0 ? blockIdx.x : gridDim.x - 1 - blockIdx.x);
  return w < workCount<kMapped>(p) ? w : -1;
}

/// Advances `k` to this CTA's next work item with rows (from item k on) and
/// locates it in `g`; false when the CTA has no more.
template <bool kMapped>
__device__ __forceinline__ bool nextWork(const Sm90Params &p, int &k,
                                         TileGeometry &g) {
  for (;; ++k) {
    const int64_t w = workItem<kMapped>(p, k);
    if (w < 0)
      return false;
    if (locateTile<kMapped>(p, w, g))
      return true;
  }
}

/// The TMA box of lane `lane` in tile `tileStart`: box `lane / halves` of
/// kKeys / rows boxes of `rows` keys, column half `lane % halves`. Valid
/// when the box holds a visible key; then `block` is its pool block.
struct Box {
  bool valid;
  int key0, half, block;
};

template <int kHalves>
__device__ __forceinline__ Box boxOf(const TileGeometry &g, int blockSize,
                                     int rows, int64_t tileStart, int lane) {
  Box b;
  const int box = lane / kHalves;
  b.half = lane % kHalves;
  b.key0 = static_cast<int>(tileStart) + box * rows;
  b.valid =
      box < kKeys / rows && b.key0 + rows > g.keyBegin && b.key0 < g.keyEnd;
  b.block = b.valid ? g.table[b.key0 / blockSize] : 0;
  return b;
}

/// TMA coordinate 3 of the keys (kv 0) or values (kv 1) of `block`.
__device__ __forceinline__ int planeOf(const CacheDims &dims, int layer,
                                       int block, int kv) {
  return (block * dims.numLayers + layer) * 2 + kv;
}

/// What the producer of the bf16 variant keeps of an item's geometry;
/// with kFresh, rowBase is FreshKV's row of the sequence's key 0
/// (Sm90Params::rowBases).
struct ProducerItem {
  const int32_t *table;
  int tileBegin, keyBegin, keyEnd, numTiles, kvHead, rowBase;
};

template <bool kFresh>
__device__ __forceinline__ ProducerItem producerItemOf(const Sm90Params &p,
                                                       const TileGeometry &g) {
  return {g.table,
          static_cast<int>(g.tileBegin),
          static_cast<int>(g.keyBegin),
          static_cast<int>(g.keyEnd),
          g.numTiles,
          g.kvHead,
          kFresh ? p.rowBases[g.seq] : 0};
}

/// The TMA box of lane `lane` in tile `tileStart` of `item` (boxOf); with
/// kFresh no block (FreshKV's rows are the flat batch's).
template <int kHalves, bool kFresh = false>
__device__ __forceinline__ Box boxOfItem(const ProducerItem &item,
                                         int blockSize, int rows, int tileStart,
                                         int lane) {
  Box b;
  const int box = lane / kHalves;
  b.half = lane % kHalves;
  b.key0 = tileStart + box * rows;
  b.valid = box < kKeys / rows && b.key0 + rows > item.keyBegin &&
            b.key0 < item.keyEnd;
  b.block = b.valid && !kFresh ? item.table[b.key0 / blockSize] : 0;
  return b;
}

/// The producer of the bf16 variant, for the CTA's work items from item `k`
/// (geometry `g`) on: warps 0 and 1 issue the K tiles' TMA boxes, warps 2
/// and 3 the V tiles', one box a lane (box j of a tile to warp j % 2 of its
/// pair), each pair arriving on its own ring of barriers. A box takes a
/// dozen instructions to issue (the compiler loops over the lanes, moving
/// each lane's coordinates into uniform registers): one warp issuing all of
/// them made the consumers wait for K a sixth of their time at 8192 tokens
/// (ncu), and two warps took 436 to 539 TFLOP/s. A warp loads the next
/// tile's block table entries before it waits for the stage to empty, and
/// at an item's last tile it locates the next item (the work list, the
/// sequence's lengths) and loads its first tile's entries then, so that
/// their latency passes while the ring is full rather than when the
/// consumers reach the item. With kFresh, `map` is FreshKV's (freshMap)
/// and a tile is one box of kKeys rows per half at the sequence's flat
/// rows.
template <int D, int kStages, bool kPersistent, bool kMapped, bool kFresh>
__device__ __forceinline__ void
produceDirect(const CUtensorMap &map, const Sm90Params &p, int k,
              const TileGeometry &g, uint8_t *smem, uint64_t *fullK,
              uint64_t *fullV, uint64_t *emptyK, uint64_t *emptyV,
              uint32_t kOffset, uint32_t vOffset) {
  constexpr int kHalves = D / 64;
  constexpr uint32_t kTileBytes = kKeys * D * 2;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kv = warp / 2; // 0: keys, 1: values
  const int j = 2 * lane + warp % 2;
  uint64_t *full = kv == 0 ? fullK : fullV;
  uint64_t *empty = kv == 0 ? emptyK : emptyV;
  uint8_t *tiles = smem + (kv == 0 ? kOffset : vOffset);
  const int blockSize = kFresh ? kKeys : p.dims.blockSize;
  const int rows = blockSize < kKeys ? blockSize : kKeys;
  ProducerItem item = producerItemOf<kFresh>(p, g), nextItem = item;
  Box b = boxOfItem<kHalves, kFresh>(item, blockSize, rows, item.tileBegin, j);
  for (int it0 = 0;;) {
    bool more = false;
    for (int t = 0; t < item.numTiles; ++t) {
      const int stage = (it0 + t) % kStages;
      const uint32_t phase = ((it0 + t) / kStages) & 1;
      const uint32_t bytes =
          __popc(__ballot_sync(0xffffffffu, b.valid)) * uint32_t(rows) * 128;
      const uint32_t dst = uint32_t(b.half) * kHalfBytes +
                           uint32_t(b.key0 - item.tileBegin - t * kKeys) * 128;
      Box next = b;
      if (t + 1 < item.numTiles) {
        next = boxOfItem<kHalves, kFresh>(item, blockSize, rows,
                                          item.tileBegin + (t + 1) * kKeys, j);
      } else if (kPersistent) {
        TileGeometry n;
        ++k;
        more = nextWork<kMapped>(p, k, n);
        if (more) {
          nextItem = producerItemOf<kFresh>(p, n);
          next = boxOfItem<kHalves, kFresh>(nextItem, blockSize, rows,
                                            nextItem.tileBegin, j);
        }
      }
      mbarrierWait(&empty[stage], phase ^ 1);
      // Each warp of the pair arrives once, with its own boxes' bytes.
      if (lane == 0)
        mbarrierArriveExpectTx(&full[stage], bytes);
      __syncwarp();
      if (b.valid) {
        if constexpr (kFresh)
          tmaLoad4d(tiles + stage * kTileBytes + dst, &map, &full[stage],
                    b.half * 64, item.kvHead, item.rowBase + b.key0, kv);
        else
          tmaLoad4d(tiles + stage * kTileBytes + dst, &map, &full[stage],
                    b.half * 64, item.kvHead, b.key0 % blockSize,
                    planeOf(p.dims, p.a.layer, b.block, kv));
      }
      b = next;
    }
    if (!more)
      return;
    it0 += item.numTiles;
    item = nextItem;
  }
}

/// convertRow of an fp8 row without key rotation, through 32-bit shared
/// addresses: ld.shared / st.shared rather than generic loads and stores,
/// whose 64-bit address arithmetic took more of the producer's instructions
/// than the conversion (ncu, E5M2 pool, 2048 tokens). Groups of chunks:
/// their loads issue together, then their conversions and stores.
template <int D, KVCacheDtype T, int kMaxGroup = 4>
__device__ __forceinline__ void
convertFp8Row(uint32_t src, uint32_t dst, int row, bool valid, float scale) {
  static_assert(T != KVCacheDtype::kBf16, "fp8 rows");
  // E4M3's scale multiplies take the registers of two more chunks in
  // flight (the 56-register producer spilled with 4); kMaxGroup caps it
  // further (the 32-register converter).
  constexpr int kChunks = D / 8, kPoolGroup = KVElement<T>::kScaled ? 2 : 4,
                kGroup = kPoolGroup < kMaxGroup ? kPoolGroup : kMaxGroup;
  static_assert(kChunks % kGroup == 0, "whole groups of chunks");
#pragma unroll 1
  for (int i = 0; i < kChunks; i += kGroup) {
    uint2 raw[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int c = (i + j + row) % kChunks;
      raw[j] = valid ? loadShared8(src + c * 8) : make_uint2(0, 0);
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int c = (i + j + row) % kChunks;
      float x[8];
      decodeFp8x8<T>(raw[j], scale, x);
      storeShared16(dst + (c / 8) * kHalfBytes + swizzle128(row, c % 8),
                    packBf16x8(x));
    }
  }
}

template <int D, KVCacheDtype T, bool kRotate>
__device__ __forceinline__ void
convertRow(const uint8_t *src, uint8_t *dst, int row, bool valid, float scale,
           const AttentionDims &a, int64_t position) {
  if constexpr (T != KVCacheDtype::kBf16 && !kRotate) {
    convertFp8Row<D, T>(smemAddress(src), smemAddress(dst), row, valid, scale);
    return;
  }
  constexpr int kChunks = D / 8;
#pragma unroll 4
  for (int i = 0; i < kChunks; ++i) {
    const int c = (i + row) % kChunks;
    float x[8] = {};
    if (valid) {
      loadKV8<T>(src, c * 8, scale, x);
      if constexpr (kRotate) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = ropeKeyElement<T>(src, 0, scale, a, c * 8 + e, x[e], position);
      }
    }
    *reinterpret_cast<uint4 *>(dst + (c / 8) * kHalfBytes +
                               swizzle128(row, c % 8)) = packBf16x8(x);
  }
}

/// The producer of the staged variants: warp 0 issues the raw K (and V)
/// rows of tile t + 2 into staging buffer t % 2 once tile t is converted;
/// each of the 128 threads converts key row threadIdx.x of every tile, and
/// with fp8 pools hands the converter (convertValues) its value row's scale
/// first.
template <int D, KVCacheDtype T, bool kRope>
__device__ __forceinline__ void
produceStaged(const CUtensorMap &direct, const CUtensorMap &raw,
              const Sm90Params &p, const TileGeometry &g, uint8_t *smem,
              uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK,
              uint64_t *emptyV, uint64_t *stagingFull, uint64_t *valuesFull,
              int it0) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  constexpr int kStages = V::kStages;
  constexpr int kHalves = D / 64;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int blockSize = p.dims.blockSize;
  const int rows = blockSize < kKeys ? blockSize : kKeys;
  const AttentionDims &a = p.a;

  auto issueRaw = [&](int t) {
    const int buffer = (it0 + t) % 2;
    const int64_t tileStart = g.tileBegin + int64_t(t) * kKeys;
    const Box b = boxOf<1>(g, blockSize, rows, tileStart, lane);
    const uint32_t bytes = __popc(__ballot_sync(0xffffffffu, b.valid)) *
                           uint32_t(rows) * L::kRawRowBytes *
                           (V::kStagedV ? 2 : 1);
    if (lane == 0)
      mbarrierArriveExpectTx(&stagingFull[buffer], bytes);
    __syncwarp();
    if (!b.valid)
      return;
    uint8_t *dst = smem + L::kStaging + buffer * L::kStagingBytes +
                   uint32_t(b.key0 - tileStart) * L::kRawRowBytes;
    tmaLoad4d(dst, &raw, &stagingFull[buffer], 0, g.kvHead, b.key0 % blockSize,
              planeOf(p.dims, a.layer, b.block, 0));
    if constexpr (V::kStagedV)
      tmaLoad4d(dst + L::kRawTileBytes, &raw, &stagingFull[buffer], 0, g.kvHead,
                b.key0 % blockSize, planeOf(p.dims, a.layer, b.block, 1));
  };
  // Values straight from the pool (bf16 pools whose keys are rotated).
  auto issueDirectV = [&](int t) {
    const int stage = (it0 + t) % kStages;
    const Box b = boxOf<kHalves>(g, blockSize, rows,
                                 g.tileBegin + int64_t(t) * kKeys, lane);
    const uint32_t bytes =
        __popc(__ballot_sync(0xffffffffu, b.valid)) * uint32_t(rows) * 128;
    mbarrierWait(&emptyV[stage], (((it0 + t) / kStages) & 1) ^ 1);
    if (lane == 0)
      mbarrierArriveExpectTx(&fullV[stage], bytes);
    __syncwarp();
    if (b.valid)
      tmaLoad4d(smem + L::kV + stage * L::kTileBytes +
                    uint32_t(b.half) * kHalfBytes +
                    uint32_t(b.key0 - g.tileBegin - t * kKeys) * 128,
                &direct, &fullV[stage], b.half * 64, g.kvHead,
                b.key0 % blockSize, planeOf(p.dims, a.layer, b.block, 1));
  };

  if (warp == 0) {
    issueRaw(0);
    if (g.numTiles > 1)
      issueRaw(1);
  }
  // E4M3 scales of this thread's row of tile t: its key's and its value's.
  // A tile's are loaded once the tile before it has its keys converted, so
  // that their dependent loads (the block table, then the scales) pass
  // under the conversion of its values rather than hold up the tile's own
  // (with its 48-56 registers, the producer spills if it loads them
  // earlier).
  // Positions fit in int32 (as context_lens do): no 64-bit divisions,
  // which are calls that take more registers than the producer has.
  auto loadScales = [&](int t, float &kScale, float &vScale) {
    kScale = 1.0f;
    vScale = 1.0f;
    if constexpr (KVElement<T>::kScaled) {
      const int key = static_cast<int>(g.tileBegin) + t * kKeys + tid;
      if (key >= g.keyBegin && key < g.keyEnd) {
        const int64_t k = kvScaleIndex(p.dims, g.table[key / blockSize],
                                       key % blockSize, a.layer, g.kvHead);
        kScale = p.scales[k];
        vScale = p.scales[k + blockSize * p.dims.numKVHeads];
      }
    }
  };
  float nextKScale, nextVScale;
  loadScales(0, nextKScale, nextVScale);
  for (int t = 0; t < g.numTiles; ++t) {
    const int it = it0 + t, stage = it % kStages, buffer = it % 2;
    const uint32_t phase = (it / kStages) & 1;
    const int64_t key = g.tileBegin + int64_t(t) * kKeys + tid;
    const bool valid = key >= g.keyBegin && key < g.keyEnd;
    const float kScale = nextKScale, vScale = nextVScale;
    if constexpr (V::kConverter) {
      // This slot's last reader (tile it - 2) is past the barrier below.
      reinterpret_cast<float *>(smem + L::kValues)[buffer * kKeys + tid] =
          valid ? vScale : -INFINITY;
      mbarrierArrive(&valuesFull[buffer]);
    } else {
      if (warp == 0)
        issueDirectV(t);
    }
    const uint8_t *staging = smem + L::kStaging + buffer * L::kStagingBytes;
    mbarrierWait(&stagingFull[buffer], (it / 2) & 1);
    mbarrierWait(&emptyK[stage], phase ^ 1);
    convertRow<D, T, kRope>(staging + tid * L::kRawRowBytes,
                            smem + L::kK + stage * L::kTileBytes, tid, valid,
                            kScale, a, key);
    fenceProxyAsync();
    mbarrierArrive(&fullK[stage]);
    if (t + 1 < g.numTiles)
      loadScales(t + 1, nextKScale, nextVScale);
    // Every thread (the converter's too) is done with this staging buffer
    // before TMA refills it.
    namedBarrier(kProducerBarrier, 128 * (V::kConverter ? 2 : 1));
    if (warp == 0 && t + 2 < g.numTiles)
      issueRaw(t + 2);
  }
}

/// The converter of fp8 pools (Variant::kConverter, the last warpgroup):
/// thread i converts value row i of every tile the producer stages, in the
/// producer's order (the CTA's items one after another), with the scale the
/// producer left for it, until the producer marks the next slot done.
template <int D, KVCacheDtype T, bool kRope>
__device__ __forceinline__ void
convertValues(uint8_t *smem, uint64_t *fullV, uint64_t *emptyV,
              uint64_t *stagingFull, uint64_t *valuesFull) {
  using L = SharedLayout<D, T, kRope>;
  constexpr int kStages = L::kStages;
  const int row = threadIdx.x % 128;
  const float *scales = reinterpret_cast<const float *>(smem + L::kValues);
  const int *done = reinterpret_cast<const int *>(scales + 2 * kKeys);
  const uint32_t staging = smemAddress(smem + L::kStaging + L::kRawTileBytes +
                                       row * L::kRawRowBytes);
  const uint32_t values = smemAddress(smem + L::kV);
  for (int it = 0;; ++it) {
    const int stage = it % kStages, buffer = it % 2;
    mbarrierWait(&valuesFull[buffer], (it / 2) & 1);
    if (done[buffer])
      return;
    // A row out of range reads as zeros (not 0 x -inf).
    const float scale = scales[buffer * kKeys + row];
    const bool valid = scale != -INFINITY;
    mbarrierWait(&stagingFull[buffer], (it / 2) & 1);
    mbarrierWait(&emptyV[stage], ((it / kStages) & 1) ^ 1);
    convertFp8Row<D, T, 2>(staging + buffer * L::kStagingBytes,
                           values + stage * L::kTileBytes, row, valid,
                           valid ? scale : 1.0f);
    fenceProxyAsync();
    mbarrierArrive(&fullV[stage]);
    namedBarrier(kProducerBarrier, 256);
  }
}

/// This consumer thread's part of the Q rows of warpgroup `wg` of a tile,
/// as bf16: chunk wtid % kChunks of kPasses rows.
template <int D> struct QRows {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = 128 / kChunks;
  static constexpr int kPasses = 64 / kRowsPerPass;
  uint4 v[kPasses];
};

/// Loads this thread's part of the Q rows of warpgroup `wg` of tile `g`
/// (zeros past the tile's last row) into registers.
template <int D, typename TQ>
__device__ __forceinline__ void
loadQRows(const Sm90Params &p, const TileGeometry &g, int wg, QRows<D> &q) {
  using Q = QRows<D>;
  const int wtid = threadIdx.x % 128;
  const int c = wtid % Q::kChunks;
#pragma unroll
  for (int pass = 0; pass < Q::kPasses; ++pass) {
    const int r = 64 * wg + wtid / Q::kChunks + pass * Q::kRowsPerPass;
    const int64_t flat = g.flatBegin + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (flat <= g.flatLast) {
      const int64_t query = static_cast<int>(flat) / g.group;
      const int64_t head =
          int64_t(g.kvHead) * g.group + static_cast<int>(flat) % g.group;
      const int64_t offset =
          ((g.seqStart + query) * p.a.numHeads + head) * D + c * 8;
      if constexpr (std::is_same_v<TQ, __nv_bfloat16>) {
        v = *reinterpret_cast<const uint4 *>(
            static_cast<const __nv_bfloat16 *>(p.q) + offset);
      } else {
        const float *src = static_cast<const float *>(p.q) + offset;
        const float4 x0 = *reinterpret_cast<const float4 *>(src);
        const float4 x1 = *reinterpret_cast<const float4 *>(src + 4);
        v = make_uint4(packBf16(x0.x, x0.y), packBf16(x0.z, x0.w),
                       packBf16(x1.x, x1.y), packBf16(x1.z, x1.w));
      }
    }
    q.v[pass] = v;
  }
}

/// The bf16 Q rows of loadQRows copied by cp.async straight into the Q tile
/// (no registers; storeQRows' wait then waits for them).
template <int D>
__device__ __forceinline__ void
copyQRows(const Sm90Params &p, const TileGeometry &g, int wg, uint8_t *q) {
  using Q = QRows<D>;
  const int wtid = threadIdx.x % 128;
  const int c = wtid % Q::kChunks;
  const __nv_bfloat16 *src = static_cast<const __nv_bfloat16 *>(p.q);
#pragma unroll
  for (int pass = 0; pass < Q::kPasses; ++pass) {
    const int r = 64 * wg + wtid / Q::kChunks + pass * Q::kRowsPerPass;
    const int64_t flat = g.flatBegin + r;
    const bool valid = flat <= g.flatLast;
    int64_t offset = 0;
    if (valid) {
      const int64_t query = static_cast<int>(flat) / g.group;
      const int64_t head =
          int64_t(g.kvHead) * g.group + static_cast<int>(flat) % g.group;
      offset = ((g.seqStart + query) * p.a.numHeads + head) * D + c * 8;
    }
    cpAsync16(smemAddress(q + (c / 8) * kHalfBytes + swizzle128(r, c % 8)),
              src + offset, valid);
  }
}

/// Stores the rows of loadQRows into the Q tile (the 128-byte swizzle) and
/// waits for the warpgroup's other threads: its wgmma may then read them.
template <int D>
__device__ __forceinline__ void storeQRows(uint8_t *q, int wg,
                                           const QRows<D> &rows) {
  using Q = QRows<D>;
  const int wtid = threadIdx.x % 128;
  const int c = wtid % Q::kChunks;
#pragma unroll
  for (int pass = 0; pass < Q::kPasses; ++pass) {
    const int r = 64 * wg + wtid / Q::kChunks + pass * Q::kRowsPerPass;
    *reinterpret_cast<uint4 *>(q + (c / 8) * kHalfBytes +
                               swizzle128(r, c % 8)) = rows.v[pass];
  }
  fenceProxyAsync();
  namedBarrier(kQBarrier + wg, 128);
}

/// The consumers: warpgroup `wg` (0 or 1) owns rows 64 wg .. 64 wg + 63 of
/// the tile of each of the CTA's work items in turn, from item `k` (geometry
/// `g`, its Q rows already in shared memory: storeQRows) on. The items run as
/// one stream of tiles: once the last S product of an item is done (its Q is
/// dead) the warpgroup copies the next item's Q rows in, and the next item's
/// first S product is issued with the last P V product of the one before, so
/// the tensor cores stay busy over the item boundary while the softmax of
/// the new tile and then the epilogue of the old item run (the epilogue
/// stores O straight from registers). Thread l of its warp w holds rows
/// r0 = 64 wg + 16 w + l/4 and r0 + 8 of S and O, columns 8c + 2 (l % 4) + {0,
/// 1} (Sm90.cuh).
template <int D, KVCacheDtype T, bool kRope, bool kSoftcap, typename TQ,
          bool kMapped>
__device__ __forceinline__ void
consume(const Sm90Params &p, int k, const TileGeometry &first, uint8_t *smem,
        uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK, uint64_t *emptyV,
        int wg) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  constexpr int kStages = V::kStages;
  constexpr int kChunks = D / 8;       // 16-byte chunks of a bf16 row
  constexpr int kKSteps = D / 16;      // k16 steps of Q K^T
  constexpr int kPVSteps = kKeys / 16; // k16 steps of P V
  const AttentionDims &a = p.a;
  const int wtid = threadIdx.x % 128, warp = wtid / 32, lane = wtid % 32;
  const int quad = lane % 4;

  // The item's geometry, as int32 where the loop needs it (positions fit in
  // int32, as context_lens do): the int64 geometry is located again for the
  // epilogue rather than kept in registers through the loop.
  int numTiles, tileBegin, keyBegin, keyEnd, posLo, posHi;
  int pos[2];
  // The K/V ring's position: the tiles of the CTA's items before this one.
  int it0 = 0;
  auto setItem = [&](const TileGeometry &g) {
    numTiles = g.numTiles;
    tileBegin = static_cast<int>(g.tileBegin);
    keyBegin = static_cast<int>(g.keyBegin);
    keyEnd = static_cast<int>(g.keyEnd);
    posLo = static_cast<int>(g.posLo);
    posHi = static_cast<int>(g.posHi);
    // This thread's rows: positions (rows past the tile's last clamp to its
    // last position, so they see no key past the loaded ones).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t flat = g.flatBegin + 64 * wg + 16 * warp + lane / 4 + 8 * i;
      pos[i] = static_cast<int>(
          flat <= g.flatLast ? g.firstPos + static_cast<int>(flat) / g.group
                             : g.posHi);
    }
  };
  setItem(first);
  const int window = a.slidingWindow;
  const float scaleLog2 = a.scale * 1.4426950408889634f;
  // The cap in the raw units of S (q.k before the scale).
  const float rawCap = a.logitSoftcap / a.scale;
  const float inverseRawCap = kSoftcap ? 1.0f / rawCap : 0.0f;

  const uint64_t qDesc =
      matrixDescriptor(smemAddress(smem + L::kQ) + 64 * wg * 128, 16, 1024);
  const uint32_t kBase = smemAddress(smem + L::kK);
  const uint32_t vBase = smemAddress(smem + L::kV);

  float s[64];
  float o[D / 2];
  uint32_t pFrag[kPVSteps][4];
#pragma unroll
  for (int i = 0; i < D / 2; ++i)
    o[i] = 0.0f;
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  float correction[2];
  bool rescale = true;

  auto issueS = [&](int stage) {
    const uint64_t kDesc =
        matrixDescriptor(kBase + stage * L::kTileBytes, 16, 1024);
    wgmmaFence();
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      const uint32_t step = (k / 4) * kHalfBytes + (k % 4) * 32;
      wgmmaSS128(s, advance(qDesc, step), advance(kDesc, step), k > 0);
    }
    wgmmaCommit();
  };
  auto issuePV = [&](int stage) {
    const uint64_t vDesc =
        matrixDescriptor(vBase + stage * L::kTileBytes, kHalfBytes, 1024);
    wgmmaFence();
#pragma unroll
    for (int k = 0; k < kPVSteps; ++k) {
      if constexpr (D == 128)
        wgmmaRS128(o, pFrag[k], advance(vDesc, k * 16 * 128));
      else
        wgmmaRS64(o, pFrag[k], advance(vDesc, k * 16 * 128));
    }
    wgmmaCommit();
  };
  auto release = [&](uint64_t *empty, int stage) {
    __syncwarp();
    if (lane == 0)
      mbarrierArrive(&empty[stage]);
  };
  // Zeros the value rows [from, to) of `stage` (keys outside the visible
  // range that TMA left stale or brought unwritten), shared by both
  // consumers, before either multiplies by them.
  auto zeroValues = [&](int stage, int from, int to) {
    uint8_t *tile = smem + L::kV + stage * L::kTileBytes;
    const int ctid = threadIdx.x - 128;
    for (int i = ctid; i < (to - from) * kChunks; i += 128 * kConsumers) {
      const int row = from + i / kChunks, c = i % kChunks;
      *reinterpret_cast<uint4 *>(tile + (c / 8) * kHalfBytes + row * 128 +
                                 (c % 8) * 16) = make_uint4(0, 0, 0, 0);
    }
    fenceProxyAsync();
    namedBarrier(kConsumersBarrier, 128 * kConsumers);
  };
  auto prepareValues = [&](int t) {
    if constexpr (!V::kStagedV) {
      const int tileStart = tileBegin + t * kKeys;
      const int from = t == 0 ? keyBegin - tileStart : 0;
      const int end = keyEnd - tileStart;
      if (from > 0)
        zeroValues((it0 + t) % kStages, 0, from);
      if (end < kKeys)
        zeroValues((it0 + t) % kStages, static_cast<int>(end), kKeys);
    }
  };
  // Masks S of tile t, updates the running max and sum, turns S into P
  // (fp32) and sets `correction`, the factor of the old O and sum.
  auto softmax = [&](int t) {
    const int tileStart = tileBegin + t * kKeys;
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < 64; ++i)
        s[i] = fastSoftcapScore(s[i], rawCap, inverseRawCap);
    }
    const bool mask = tileStart + kKeys - 1 > posLo ||
                      (window > 0 && tileStart <= posHi - window);
    if (mask) {
      // Positions relative to the tile's first key.
      const int rel[2] = {pos[0] - tileStart, pos[1] - tileStart};
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n * 8 + quad * 2 + (e & 1);
          if (key > rel[e / 2] || (window > 0 && key <= rel[e / 2] - window))
            s[4 * n + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float m = rowMax[i];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
        m = fmaxf(m, fmaxf(s[4 * n + 2 * i], s[4 * n + 2 * i + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      // Lazy rescaling (FlashAttention-4's): the exponent base moves only
      // when the tile raises the row's max by more than kLazyRescaleLog2 in
      // base-2 units; below that the old max stays the base (terms up to
      // 2^kLazyRescaleLog2: exact in fp32, the same relative rounding in
      // bf16), the correction is 1, and a warp none of whose rows moved
      // skips rescaling O (64 multiplies a thread a tile).
      if (rowMax[i] != -INFINITY &&
          (m - rowMax[i]) * scaleLog2 <= kLazyRescaleLog2)
        m = rowMax[i];
      // A row with no visible key yet keeps max -inf; exponents use 0.
      const float base = m == -INFINITY ? 0.0f : m * scaleLog2;
      correction[i] =
          m == rowMax[i] ? 1.0f : fastExp2(rowMax[i] * scaleLog2 - base);
      rowMax[i] = m;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x =
              fastExp2(fmaf(s[4 * n + 2 * i + e], scaleLog2, -base));
          s[4 * n + 2 * i + e] = x;
          sum += x;
        }
      rowSum[i] = rowSum[i] * correction[i] + sum;
    }
    rescale =
        __any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f);
  };
  auto rescaleAndPack = [&] {
    if (rescale) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[4 * n + e] *= correction[e / 2];
    }
#pragma unroll
    for (int k = 0; k < kPVSteps; ++k)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pFrag[k][r] = packBf16(s[8 * k + 2 * r], s[8 * k + 2 * r + 1]);
  };

  // Ping-pong: consumer wg issues its products of a step (a tile's S and
  // the previous tile's P V) after the other one issued its products of the
  // same step (wg 1) or of the step before (wg 0), and lets the other go on
  // once its own are issued. Both take the same steps (every tile of the
  // CTA's items, and the last P V), so each waits as often as it is let go:
  // consumer 1's first signal is the one here, and it gives none after its
  // last step.
  const bool pingPong = p.pingPong;
  auto takeTurn = [&] {
    if (pingPong)
      namedBarrier(kSchedulerBarrier + wg, 128 * kConsumers);
  };
  auto passTurn = [&](bool lastStep) {
    if (pingPong && (wg == 0 || !lastStep))
      namedBarrierArrive(kSchedulerBarrier + (wg ^ 1), 128 * kConsumers);
  };
  if (pingPong && wg == 1)
    namedBarrierArrive(kSchedulerBarrier, 128 * kConsumers);

  // O of item `item` divided by its row sums, stored from registers.
  auto storeOutput = [&](int item, const float(&sums)[2]) {
    TileGeometry g;
    locateTile<kMapped>(p, workItem<kMapped>(p, item), g);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = sums[i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t flat = g.flatBegin + 64 * wg + 16 * warp + lane / 4 + 8 * i;
      if (flat > g.flatLast)
        continue;
      const int64_t query = static_cast<int>(flat) / g.group;
      const int64_t head =
          int64_t(g.kvHead) * g.group + static_cast<int>(flat) % g.group;
      const int64_t offset = ((g.seqStart + query) * a.numHeads + head) * D;
      const float inv = 1.0f / sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const float x0 = o[4 * n + 2 * i] * inv,
                    x1 = o[4 * n + 2 * i + 1] * inv;
        const int64_t e = offset + n * 8 + quad * 2;
        if constexpr (std::is_same_v<TQ, __nv_bfloat16>)
          *reinterpret_cast<uint32_t *>(static_cast<__nv_bfloat16 *>(p.out) +
                                        e) = packBf16(x0, x1);
        else
          *reinterpret_cast<float2 *>(static_cast<float *>(p.out) + e) =
              make_float2(x0, x1);
      }
    }
  };

  // Ring stage and phase parity of the CTA's tile it0 + t.
  auto stageOf = [&](int t) { return (it0 + t) % kStages; };
  auto parityOf = [&](int t) { return uint32_t((it0 + t) / kStages) & 1; };
  mbarrierWait(&fullK[stageOf(0)], parityOf(0));
  takeTurn();
  // bf16 q: the next item's Q rows by cp.async (no registers); fp32 q, which
  // needs rounding, through registers.
  constexpr bool kCopyQ = std::is_same_v<TQ, __nv_bfloat16>;
  // The next item (`next`, `more`) is looked up, and its bf16 Q rows copied
  // in, once this item's last S product is done (its Q rows are then dead)
  // and packed into P, at the end of its last tile's step: the lookup's
  // dependent loads and the copy's latency pass under the wait for the last
  // tile's values and the boundary's bookkeeping rather than with the tensor
  // cores waiting. The soft-capped variants, whose consumers spill with it
  // there, look ahead at the boundary.
  constexpr bool kEarly = !kSoftcap;
  int next = k + 1;
  bool more = false;
  auto lookAhead = [&] {
    TileGeometry g;
    more = V::kPersistent && nextWork<kMapped>(p, next, g);
    if (kCopyQ && more)
      copyQRows<D>(p, g, wg, smem + L::kQ);
  };
  issueS(stageOf(0));
  passTurn(false);
  wgmmaWait<0>();
  fenceRegisters(s);
  release(emptyK, stageOf(0));
  softmax(0);
  rescaleAndPack();
  if (kEarly && numTiles == 1)
    lookAhead();
  for (;;) {
    for (int t = 1; t < numTiles; ++t) {
      const int stage = stageOf(t), previous = stageOf(t - 1);
      mbarrierWait(&fullK[stage], parityOf(t));
      // Values of the previous tile are ready (and their invisible rows
      // zeroed, a barrier of both consumers) before this consumer's turn.
      mbarrierWait(&fullV[previous], parityOf(t - 1));
      prepareValues(t - 1);
      takeTurn();
      issueS(stage);
      issuePV(previous);
      passTurn(false);
      wgmmaWait<1>();
      fenceRegisters(s);
      release(emptyK, stage);
      softmax(t);
      wgmmaWait<0>();
      fenceRegisters(o);
      release(emptyV, previous);
      rescaleAndPack();
      if (kEarly && t == numTiles - 1)
        lookAhead();
    }
    // Every S product of the item is done, and the next item's Q rows are
    // on their way (lookAhead).
    const int done = k;
    const int last = stageOf(numTiles - 1);
    if (!kEarly)
      lookAhead();
    mbarrierWait(&fullV[last], parityOf(numTiles - 1));
    prepareValues(numTiles - 1);
    if (!more) {
      takeTurn();
      issuePV(last);
      passTurn(true);
      wgmmaWait<0>();
      fenceRegisters(o);
      release(emptyV, last);
      storeOutput(done, rowSum);
      return;
    }
    it0 += numTiles;
    k = next;
    next = k + 1;
    {
      TileGeometry g;
      locateTile<kMapped>(p, workItem<kMapped>(p, k), g);
      setItem(g);
      if constexpr (!kCopyQ) {
        QRows<D> q;
        loadQRows<D, TQ>(p, g, wg, q);
        storeQRows<D>(smem + L::kQ, wg, q);
      }
    }
    if constexpr (kCopyQ) {
      cpAsyncWaitAll();
      fenceProxyAsync();
      namedBarrier(kQBarrier + wg, 128);
    }
    // The next item's first S with the last P V of this one.
    mbarrierWait(&fullK[stageOf(0)], parityOf(0));
    takeTurn();
    issueS(stageOf(0));
    issuePV(last);
    passTurn(false);
    wgmmaWait<1>();
    fenceRegisters(s);
    release(emptyK, stageOf(0));
    const float sums[2] = {rowSum[0], rowSum[1]};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      rowMax[i] = -INFINITY;
      rowSum[i] = 0.0f;
    }
    softmax(0);
    wgmmaWait<0>();
    fenceRegisters(o);
    release(emptyV, last);
    // P of the new tile packed first (its fp32 S no longer live under the
    // epilogue); O is not rescaled but restarts from zeros after the store
    // (a row with no visible key in the new tile keeps correction 1).
    rescale = false;
    rescaleAndPack();
    storeOutput(done, sums);
#pragma unroll
    for (int i = 0; i < D / 2; ++i)
      o[i] = 0.0f;
    if (kEarly && numTiles == 1)
      lookAhead();
  }
}

template <int D, KVCacheDtype T, bool kRope, bool kSoftcap, typename TQ,
          bool kMapped, bool kFresh = false>
__global__ void __launch_bounds__(Variant<T, kRope>::kThreads, 1)
    prefillAttentionSm90Kernel(const __grid_constant__ CUtensorMap direct,
                               const __grid_constant__ CUtensorMap raw,
                               const Sm90Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  static_assert(!kFresh || !V::kStaged, "FreshKV rows are bf16 tiles");
  constexpr int kStages = V::kStages;
  int k = 0;
  TileGeometry g;
  if (!nextWork<kMapped>(p, k, g))
    return;
  extern __shared__ uint8_t sharedRaw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(sharedRaw) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + L::kBarriers);
  uint64_t *fullK = bars, *fullV = bars + kStages;
  uint64_t *emptyK = bars + 2 * kStages, *emptyV = bars + 3 * kStages;
  uint64_t *stagingFull = bars + 4 * kStages;
  uint64_t *valuesFull = bars + 4 * kStages + 2;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Arrivals: the 128 converting threads (staged), the one warp
      // issuing V of a staged variant, or the two warps of a direct pair.
      mbarrierInit(&fullK[s], V::kStagedK ? 128 : 2);
      mbarrierInit(&fullV[s], V::kStagedV ? 128 : (V::kStaged ? 1 : 2));
      mbarrierInit(&emptyK[s], 4 * kConsumers);
      mbarrierInit(&emptyV[s], 4 * kConsumers);
    }
    mbarrierInit(&stagingFull[0], 1);
    mbarrierInit(&stagingFull[1], 1);
    if constexpr (V::kConverter) {
      mbarrierInit(&valuesFull[0], 128);
      mbarrierInit(&valuesFull[1], 128);
      int *done = reinterpret_cast<int *>(smem + L::kValues) + 2 * kKeys;
      done[0] = done[1] = 0;
    }
    fenceBarrierInit();
  }
  if (threadIdx.x == 32) {
    prefetchTensorMap(&direct);
    prefetchTensorMap(&raw);
  }
  __syncthreads();

  // Broadcast from lane 0, so the compiler knows it is warp-uniform (and
  // the consumers' shared-memory descriptors, which depend on it, can live
  // in uniform registers), as CUTLASS's canonical_warp_group_idx does.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    lowerRegisters<V::kProducerRegs>();
    // The CTA's work items in turn, the ring's stages and phases going on
    // from one to the next.
    if constexpr (V::kStaged) {
      int it = 0;
      do {
        produceStaged<D, T, kRope>(direct, raw, p, g, smem, fullK, fullV,
                                   emptyK, emptyV, stagingFull, valuesFull, it);
        it += g.numTiles;
        ++k;
      } while (V::kPersistent && nextWork<kMapped>(p, k, g));
      if constexpr (V::kConverter) {
        // The converter's next slot says done (its last reader, tile it -
        // 2, is past the producer's barrier).
        if (threadIdx.x == 0)
          reinterpret_cast<int *>(smem + L::kValues)[2 * kKeys + it % 2] = 1;
        mbarrierArrive(&valuesFull[it % 2]);
      }
    } else {
      produceDirect<D, V::kStages, V::kPersistent, kMapped, kFresh>(
          direct, p, k, g, smem, fullK, fullV, emptyK, emptyV, L::kK, L::kV);
    }
  } else if (V::kConverter && warpgroup == 1 + kConsumers) {
    if constexpr (V::kConverter) {
      lowerRegisters<V::kConverterRegs>();
      convertValues<D, T, kRope>(smem, fullV, emptyV, stagingFull, valuesFull);
    }
  } else {
    raiseRegisters<V::kConsumerRegs>();
    const int wg = warpgroup - 1;
    {
      QRows<D> q;
      loadQRows<D, TQ>(p, g, wg, q);
      storeQRows<D>(smem + L::kQ, wg, q);
    }
    consume<D, T, kRope, kSoftcap, TQ, kMapped>(p, k, g, smem, fullK, fullV,
                                                emptyK, emptyV, wg);
  }
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// The pool as a 4-d tensor (head_dim, kv head, slot in block, (block,
/// layer, k|v) plane) of `elementBytes`-byte elements, boxes of
/// (boxColumns, 1, min(block size, kKeys), 1): swizzled 128-byte rows for
/// wgmma (bf16, boxColumns 64) or plain rows for the staging buffers.
cudaError_t encodePoolMap(CUtensorMap *map, const void *pool,
                          const CacheDims &dims, int elementBytes,
                          int boxColumns, bool swizzle);

/// FreshKV as a 4-d tensor (head_dim, kv head, row, k|v) of bf16, boxes of
/// (64, 1, kKeys, 1) in the swizzle wgmma reads; rows past
/// fresh.planeRows() read as zeros.
cudaError_t encodeFreshMap(CUtensorMap *map, const FreshKV &fresh,
                           const CacheDims &dims);

/// Whether the consumers ping-pong (Sm90Params::pingPong): on unless
/// INFER_SM90_PINGPONG is 0 (read once; for comparisons in the benchmark).
bool pingPongOn();

/// Whether a launch with a workspace makes a tile map (Sm90Params::
/// tileMap): on unless INFER_SM90_TILE_MAP is 0 (read once; for
/// comparisons in the benchmark).
bool tileMapOn();

/// CTAs of a persistent launch (0: one CTA per work item):
/// setPrefillAttentionSm90Ctas' value, else INFER_SM90_PERSISTENT's (read
/// once), else the current device's SM count.
int persistentCtas();

/// One launch of the kernel of pool type T; with kFresh (T bf16), K and V
/// from `fresh` (FreshKV) for the tile map's sequences.
template <int D, KVCacheDtype T, bool kRope, bool kSoftcap, typename TQ,
          bool kFresh = false>
cudaError_t launchVariant(const Sm90Params &p, KVCachePool pool,
                          cudaStream_t stream, const FreshKV &fresh = {}) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  // An sm_90 block takes at most 227 KiB of dynamic shared memory.
  static_assert(L::kBytes <= 227 * 1024, "the stages do not fit");
  static_assert(!kFresh || T == KVCacheDtype::kBf16, "fresh rows are bf16");
  CUtensorMap direct, raw;
  std::memset(&direct, 0, sizeof(direct));
  std::memset(&raw, 0, sizeof(raw));
  cudaError_t status = cudaSuccess;
  if (kFresh)
    status = encodeFreshMap(&direct, fresh, p.dims);
  else if (T == KVCacheDtype::kBf16)
    status = encodePoolMap(&direct, pool.data, p.dims, 2, 64, true);
  if (status == cudaSuccess && V::kStaged)
    status = encodePoolMap(&raw, pool.data, p.dims, V::kElementBytes, D, false);
  if (status != cudaSuccess)
    return status;
  // Persistent: one CTA per SM (the kernel's shared memory allows no more)
  // working through the items; else one CTA per item.
  if (p.numWork > 0x7fffffff)
    return cudaErrorInvalidValue;
  const int ctas = V::kPersistent ? persistentCtas() : 0;
  const int64_t blocks = ctas > 0 && p.numWork > ctas ? ctas : p.numWork;
  if (blocks > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (kFresh && !p.tileMap)
    return cudaErrorInvalidValue;
  auto *kernel =
      kFresh
          ? prefillAttentionSm90Kernel<D, T, kRope, kSoftcap, TQ, true, kFresh>
      : p.tileMap
          ? prefillAttentionSm90Kernel<D, T, kRope, kSoftcap, TQ, true>
          : prefillAttentionSm90Kernel<D, T, kRope, kSoftcap, TQ, false>;
  // Above 48 KiB a kernel's dynamic shared memory needs this opt-in (per
  // device, so on every launch; it enqueues nothing and may be captured).
  status = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (status != cudaSuccess)
    return status;
  kernel<<<static_cast<unsigned>(blocks), V::kThreads, L::kBytes, stream>>>(
      direct, raw, p);
  return cudaGetLastError();
}

/// The variant of the launch's score options for a pool without key rope:
/// soft-capped or not.
template <int D, KVCacheDtype T, typename TQ>
cudaError_t launchOfSoftcap(const Sm90Params &p, KVCachePool pool,
                            cudaStream_t stream) {
  return p.a.logitSoftcap > 0
             ? launchVariant<D, T, false, true, TQ>(p, pool, stream)
             : launchVariant<D, T, false, false, TQ>(p, pool, stream);
}

template <int D, typename TQ>
cudaError_t launchOfPool(const Sm90Params &p, KVCachePool pool,
                         cudaStream_t stream) {
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return p.a.keyRotaryDim > 0
               ? launchVariant<D, KVCacheDtype::kBf16, true, false, TQ>(p, pool,
                                                                        stream)
               : launchOfSoftcap<D, KVCacheDtype::kBf16, TQ>(p, pool, stream);
  case KVCacheDtype::kF8E5M2:
    return launchOfSoftcap<D, KVCacheDtype::kF8E5M2, TQ>(p, pool, stream);
  case KVCacheDtype::kF8E4M3:
    return launchOfSoftcap<D, KVCacheDtype::kF8E4M3, TQ>(p, pool, stream);
  }
  return cudaErrorInvalidValue;
}

/// contextRowsKernel's launch for the pool's type.
inline cudaError_t launchContextRows(const Sm90Params &p, KVCachePool pool,
                                     const FreshKV &fresh, const int32_t *list,
                                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t threads =
      fresh.contextRows * 2 * p.dims.numKVHeads * (p.dims.headDim / 8);
  const int64_t blocks =
      std::min<int64_t>((threads + kThreads - 1) / kThreads, int64_t(1) << 16);
  if (blocks <= 0)
    return cudaSuccess;
  if (pool.dtype == KVCacheDtype::kF8E4M3)
    contextRowsKernel<KVCacheDtype::kF8E4M3>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            pool, p, list, fresh.data, fresh.rows, fresh.contextRows);
  else if (pool.dtype == KVCacheDtype::kF8E5M2)
    contextRowsKernel<KVCacheDtype::kF8E5M2>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            pool, p, list, fresh.data, fresh.rows, fresh.contextRows);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

/// The launches of a batch with FreshKV rows (launch): the row bases (and
/// the context rows they list), then the sequences that read FreshKV on
/// the bf16 pool's kernel and the others from the pool, each launch with
/// its tile map of those sequences alone. `scratch` holds the row bases
/// (numSeqs) and the list (1 + 2 numSeqs).
template <int D, typename TQ>
cudaError_t launchWithFresh(Sm90Params p, KVCachePool pool,
                            const FreshKV &fresh, int32_t *maps[2],
                            int32_t *scratch, cudaStream_t stream) {
  int32_t *bases = scratch, *list = scratch + p.numSeqs;
  rowBasesKernel<<<1, 1024, 0, stream>>>(p, fresh.rows, fresh.contextRows,
                                         bases, list);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && fresh.contextRows > 0)
    status = launchContextRows(p, pool, fresh, list, stream);
  if (status != cudaSuccess)
    return status;
  p.rowBases = bases;
  for (int launch = 0; launch < 2; ++launch) {
    p.freshFilter = launch + 1;
    tileMapKernel<<<1, 1024, 0, stream>>>(p, maps[launch]);
    status = cudaGetLastError();
    if (status != cudaSuccess)
      return status;
    p.tileMap = maps[launch];
    if (launch == 0)
      status =
          p.a.logitSoftcap > 0
              ? launchVariant<D, KVCacheDtype::kBf16, false, true, TQ, true>(
                    p, pool, stream, fresh)
              : launchVariant<D, KVCacheDtype::kBf16, false, false, TQ, true>(
                    p, pool, stream, fresh);
    else
      status = launchOfPool<D, TQ>(p, pool, stream);
    if (status != cudaSuccess)
      return status;
  }
  return cudaSuccess;
}

/// launchPrefillAttentionSm90 (Kernels.h) for q and out of type TQ.
template <typename TQ>
cudaError_t launch(const TQ *q, KVCachePool pool, CacheDims dims,
                   AttentionDims attention, const int32_t *blockTables,
                   int64_t maxBlocksPerSeq, const int32_t *contextLens,
                   const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                   TQ *out, cudaStream_t stream, SplitKVWorkspace workspace,
                   FreshKV fresh = {}) {
  if (t <= 0 || numSeqs <= 0)
    return cudaSuccess;
  if (!prefillAttentionSm90Supports(attention, dims, pool.dtype) ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  // Work items: the row tiles of the flat batch (at most one partial tile
  // per sequence beyond t * group / kRows) per kv head.
  const int64_t group = attention.numHeads / attention.numKVHeads;
  const int64_t numWork = (t * group / kRows + numSeqs) * attention.numKVHeads;
  // With room in the workspace, the items of the prompts' tiles alone
  // (tileMapKernel), where decode rows would leave most of them empty.
  Sm90Params p{q,           out,           blockTables,  maxBlocksPerSeq,
               contextLens, queryStartLoc, numSeqs,      pool.scales,
               dims,        attention,     pingPongOn(), numWork,
               nullptr};
  // FreshKV: two maps, the second 256-byte aligned, then the row bases
  // and the context rows' list.
  const size_t mapBytes =
      (tileMapBytes(numWork, attention.numKVHeads) + 255) / 256 * 256;
  const size_t scratchBytes = sizeof(int32_t) * size_t(1 + 3 * numSeqs);
  if constexpr (std::is_same_v<TQ, __nv_bfloat16>) {
    if (fresh.data && fresh.rows == t && fresh.contextRows >= 0 &&
        fresh.planeRows() < (int64_t(1) << 31) &&
        pool.dtype != KVCacheDtype::kBf16 && attention.keyRotaryDim == 0 &&
        freshKVReadsOn() && workspace.data &&
        workspace.bytes >= 2 * mapBytes + scratchBytes) {
      auto *base = reinterpret_cast<char *>(workspace.data);
      int32_t *maps[2] = {reinterpret_cast<int32_t *>(base),
                          reinterpret_cast<int32_t *>(base + mapBytes)};
      auto *scratch = reinterpret_cast<int32_t *>(base + 2 * mapBytes);
      if (attention.headDim == 64)
        return launchWithFresh<64, TQ>(p, pool, fresh, maps, scratch, stream);
      return launchWithFresh<128, TQ>(p, pool, fresh, maps, scratch, stream);
    }
  }
  if (numSeqs > 1 && workspace.data && tileMapOn() &&
      workspace.bytes >= tileMapBytes(numWork, attention.numKVHeads)) {
    int32_t *map = reinterpret_cast<int32_t *>(workspace.data);
    tileMapKernel<<<1, 1024, 0, stream>>>(p, map);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess)
      return status;
    p.tileMap = map;
  }
  if (attention.headDim == 64)
    return launchOfPool<64, TQ>(p, pool, stream);
  return launchOfPool<128, TQ>(p, pool, stream);
}

} // namespace infer::cuda::sm90

#endif // INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTIONSM90_CUH
