//===- PrefillAttentionSm90.cuh - wgmma + TMA prefill attention *- CUDA -*-===//
//
// FlashAttention-3-style attention of the prefill, chunked-prefill and
// speculative-verification rows of a batch (sequences with two or more new
// tokens) over the paged pool, for Hopper (sm_90a). The rows of a sequence
// are packed as in PrefillAttention.cuh, (query, head of the kv head's
// group) query-major, so the heads sharing a kv head read each K/V tile
// once. One CTA of three warpgroups per (tile of 128 rows, kv head):
//
//   warpgroup 0 (producer)   loads K/V tiles of 128 keys into a ring of
//                            kStages shared-memory stages
//   warpgroups 1, 2          64 rows each: S = Q K^T (wgmma, Q and K in
//   (consumers)              shared memory), online softmax in fp32 (base
//                            2), O += P V (wgmma, P from registers as bf16)
//
// Handshakes are mbarriers: full[stage] (the producer's TMA bytes or 128
// producer arrivals) and empty[stage] (one arrival per consumer warp), for K
// and V apart so S of the next tile can start before V lands. Each consumer
// overlaps its softmax with its own P V product: it issues S(t) = Q K(t)^T
// and O += P(t-1) V(t-1), waits for S(t) alone, computes P(t), and rescales
// O once the product is done (FA3's intra-warpgroup pipelining); the two
// consumers' instruction streams interleave on the tensor cores.
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
// row each to bf16 (decode and scale, rotate keys in fp32 as
// ropeKeyElement does, round) into the stage. fp8 codes are not fed to the
// tensor cores as fp8: that would need q and P rounded to fp8 too.
//
// Keys outside [first visible, last + 1) in a tile read as zeros (staged) or
// are masked (-inf scores) and their value rows zeroed by the consumers
// before P V, so stale or unwritten slots (NaN) never reach the output.
// Tiles of the flat batch are numbered as PrefillAttention.cuh numbers them
// (kRows = 128); the grid is 1-d with the kv head fastest and runs the
// longest (last, causal) tiles first. Everything is read on the device, so
// launches can be captured in CUDA graphs.
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

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace infer::cuda::sm90 {

constexpr int kRows = 128;    ///< Rows of Q per CTA (two consumers x 64).
constexpr int kKeys = 128;    ///< Keys per K/V tile.
constexpr int kConsumers = 2; ///< Consumer warpgroups.
constexpr int kStages = 2;    ///< K/V stages in flight.
constexpr int kThreads = 128 * (1 + kConsumers);
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
  static constexpr int kProducerRegs = kStaged ? 56 : 24;
  static constexpr int kConsumerRegs = kStaged ? 224 : 240;
};

/// Shared memory, each piece 1024-byte aligned:
///   q        [halves][kRows][128 B]
///   k, v     [kStages][halves][kKeys][128 B]
///   staging  [2][k raw rows (, v raw rows)]   (staged variants)
///   barriers fullK, fullV, emptyK, emptyV [kStages], stagingFull [2]
template <int D, KVCacheDtype T, bool kRope> struct SharedLayout {
  using V = Variant<T, kRope>;
  static constexpr uint32_t kTileBytes = kKeys * D * 2;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + kRows * D * 2;
  static constexpr uint32_t kV = kK + kStages * kTileBytes;
  static constexpr uint32_t kRawRowBytes = D * V::kElementBytes;
  static constexpr uint32_t kRawTileBytes = kKeys * kRawRowBytes;
  static constexpr uint32_t kStagingBytes =
      V::kStaged ? kRawTileBytes * (V::kStagedV ? 2 : 1) : 0;
  static constexpr uint32_t kStaging = kV + kStages * kTileBytes;
  static constexpr uint32_t kBarriers = kStaging + 2 * kStagingBytes;
  static constexpr uint32_t kBarrierCount = 4 * kStages + 2;
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
};

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
  int numTiles, group, kvHead;
  const int32_t *table;
};

/// False when the CTA has nothing to do (a decode sequence, or a tile past
/// the sequence's rows).
__device__ __forceinline__ bool locateTile(const Sm90Params &p,
                                           TileGeometry &g) {
  const AttentionDims &a = p.a;
  g.group = a.numHeads / a.numKVHeads;
  g.kvHead = blockIdx.x % a.numKVHeads;
  const int64_t tiles = gridDim.x / a.numKVHeads;
  const int64_t tile = tiles - 1 - blockIdx.x / a.numKVHeads;
  int64_t lo = 0, hi = p.numSeqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (int64_t(p.queryStartLoc[mid]) * g.group / kRows + mid <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t seq = lo;
  g.seqStart = p.queryStartLoc[seq];
  const int64_t newTokens = p.queryStartLoc[seq + 1] - g.seqStart;
  if (newTokens < 2)
    return false;
  g.flatBegin = (tile - (g.seqStart * g.group / kRows + seq)) * kRows;
  const int64_t flatCount = newTokens * g.group;
  if (g.flatBegin >= flatCount)
    return false;
  g.flatLast =
      (g.flatBegin + kRows < flatCount ? g.flatBegin + kRows : flatCount) - 1;
  g.firstPos = p.contextLens[seq] - newTokens;
  g.posLo = g.firstPos + g.flatBegin / g.group;
  g.posHi = g.firstPos + g.flatLast / g.group;
  const int window = a.slidingWindow;
  g.keyBegin =
      window > 0 && g.posLo - window + 1 > 0 ? g.posLo - window + 1 : 0;
  g.keyEnd = g.posHi + 1;
  g.tileBegin = g.keyBegin / kKeys * kKeys;
  g.numTiles = static_cast<int>((g.keyEnd - g.tileBegin + kKeys - 1) / kKeys);
  g.table = p.blockTables + seq * p.maxBlocksPerSeq;
  return true;
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

/// The producer of the bf16 variant: warp 0's lanes issue one TMA box each
/// for the K tile, then the V tile, of every tile in turn.
template <int D>
__device__ __forceinline__ void
produceDirect(const CUtensorMap &map, const Sm90Params &p,
              const TileGeometry &g, uint8_t *smem, uint64_t *fullK,
              uint64_t *fullV, uint64_t *emptyK, uint64_t *emptyV,
              uint32_t kOffset, uint32_t vOffset) {
  constexpr int kHalves = D / 64;
  constexpr uint32_t kTileBytes = kKeys * D * 2;
  const int lane = threadIdx.x % 32;
  const int blockSize = p.dims.blockSize;
  const int rows = blockSize < kKeys ? blockSize : kKeys;
  for (int t = 0; t < g.numTiles; ++t) {
    const int stage = t % kStages;
    const uint32_t phase = (t / kStages) & 1;
    const Box b = boxOf<kHalves>(g, blockSize, rows,
                                 g.tileBegin + int64_t(t) * kKeys, lane);
    const uint32_t bytes =
        __popc(__ballot_sync(0xffffffffu, b.valid)) * uint32_t(rows) * 128;
    const uint32_t dst = uint32_t(b.half) * kHalfBytes +
                         uint32_t(b.key0 - g.tileBegin - t * kKeys) * 128;
    for (int kv = 0; kv < 2; ++kv) {
      uint64_t *full = kv == 0 ? fullK : fullV;
      mbarrierWait(&(kv == 0 ? emptyK : emptyV)[stage], phase ^ 1);
      if (lane == 0)
        mbarrierArriveExpectTx(&full[stage], bytes);
      __syncwarp();
      if (b.valid)
        tmaLoad4d(smem + (kv == 0 ? kOffset : vOffset) + stage * kTileBytes +
                      dst,
                  &map, &full[stage], b.half * 64, g.kvHead, b.key0 % blockSize,
                  planeOf(p.dims, p.a.layer, b.block, kv));
    }
  }
}

/// Row `row` of a staged raw tile (`src`, the pool's element type) converted
/// into row `row` of a bf16 tile in the 128-byte swizzle: decoded (E4M3:
/// times `scale`), keys rotated at `position` when kRotate, rounded; zeros
/// when !valid. Chunks are visited in an order rotated by the row, so the
/// lanes of a warp read different banks of the unswizzled staging rows.
template <int D, KVCacheDtype T, bool kRotate>
__device__ __forceinline__ void
convertRow(const uint8_t *src, uint8_t *dst, int row, bool valid, float scale,
           const AttentionDims &a, int64_t position) {
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
/// each of the 128 threads converts row threadIdx.x of every tile.
template <int D, KVCacheDtype T, bool kRope>
__device__ __forceinline__ void
produceStaged(const CUtensorMap &direct, const CUtensorMap &raw,
              const Sm90Params &p, const TileGeometry &g, uint8_t *smem,
              uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK,
              uint64_t *emptyV, uint64_t *stagingFull) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  constexpr int kHalves = D / 64;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int blockSize = p.dims.blockSize;
  const int rows = blockSize < kKeys ? blockSize : kKeys;
  const AttentionDims &a = p.a;

  auto issueRaw = [&](int t) {
    const int buffer = t % 2;
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
    const int stage = t % kStages;
    const Box b = boxOf<kHalves>(g, blockSize, rows,
                                 g.tileBegin + int64_t(t) * kKeys, lane);
    const uint32_t bytes =
        __popc(__ballot_sync(0xffffffffu, b.valid)) * uint32_t(rows) * 128;
    mbarrierWait(&emptyV[stage], ((t / kStages) & 1) ^ 1);
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
  for (int t = 0; t < g.numTiles; ++t) {
    const int stage = t % kStages, buffer = t % 2;
    const uint32_t phase = (t / kStages) & 1;
    const int64_t key = g.tileBegin + int64_t(t) * kKeys + tid;
    const bool valid = key >= g.keyBegin && key < g.keyEnd;
    // E4M3 scales of this row's key and value, loaded before the waits.
    float kScale = 1.0f, vScale = 1.0f;
    if constexpr (KVElement<T>::kScaled) {
      if (valid) {
        const int64_t slot =
            int64_t(g.table[key / blockSize]) * blockSize + key % blockSize;
        const int64_t k =
            kvSlotOffset(p.dims, slot, a.layer, 0) + int64_t(g.kvHead) * D;
        kScale = p.scales[k / D];
        vScale = p.scales[k / D + int64_t(blockSize) * p.dims.numKVHeads];
      }
    }
    if constexpr (!V::kStagedV) {
      if (warp == 0)
        issueDirectV(t);
    }
    const uint8_t *staging = smem + L::kStaging + buffer * L::kStagingBytes;
    mbarrierWait(&stagingFull[buffer], (t / 2) & 1);
    mbarrierWait(&emptyK[stage], phase ^ 1);
    convertRow<D, T, kRope>(staging + tid * L::kRawRowBytes,
                            smem + L::kK + stage * L::kTileBytes, tid, valid,
                            kScale, a, key);
    fenceProxyAsync();
    mbarrierArrive(&fullK[stage]);
    if constexpr (V::kStagedV) {
      mbarrierWait(&emptyV[stage], phase ^ 1);
      convertRow<D, T, false>(
          staging + L::kRawTileBytes + tid * L::kRawRowBytes,
          smem + L::kV + stage * L::kTileBytes, tid, valid, vScale, a, key);
      fenceProxyAsync();
      mbarrierArrive(&fullV[stage]);
    }
    // Every thread is done with this staging buffer before TMA refills it.
    namedBarrier(kProducerBarrier, 128);
    if (warp == 0 && t + 2 < g.numTiles)
      issueRaw(t + 2);
  }
}

/// The consumers: warpgroup `wg` (0 or 1) owns rows 64 wg .. 64 wg + 63 of
/// the CTA's tile. Thread l of its warp w holds rows r0 = 64 wg + 16 w + l/4
/// and r0 + 8 of S and O, columns 8c + 2 (l % 4) + {0, 1} (Sm90.cuh).
template <int D, KVCacheDtype T, bool kRope, typename TQ>
__device__ __forceinline__ void
consume(const Sm90Params &p, const TileGeometry &g, uint8_t *smem,
        uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK, uint64_t *emptyV,
        int wg) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  constexpr int kChunks = D / 8;       // 16-byte chunks of a bf16 row
  constexpr int kKSteps = D / 16;      // k16 steps of Q K^T
  constexpr int kPVSteps = kKeys / 16; // k16 steps of P V
  const AttentionDims &a = p.a;
  const int wtid = threadIdx.x % 128, warp = wtid / 32, lane = wtid % 32;
  const int quad = lane % 4;

  // Q rows of this warpgroup, as bf16 in the swizzled layout.
  {
    constexpr int kRowsPerPass = 128 / kChunks;
    const int c = wtid % kChunks;
#pragma unroll
    for (int pass = 0; pass < 64 / kRowsPerPass; ++pass) {
      const int r = 64 * wg + wtid / kChunks + pass * kRowsPerPass;
      const int64_t flat = g.flatBegin + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (flat <= g.flatLast) {
        const int64_t query = flat / g.group;
        const int64_t head = int64_t(g.kvHead) * g.group + flat % g.group;
        const int64_t offset =
            ((g.seqStart + query) * a.numHeads + head) * D + c * 8;
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
      *reinterpret_cast<uint4 *>(smem + L::kQ + (c / 8) * kHalfBytes +
                                 swizzle128(r, c % 8)) = v;
    }
    fenceProxyAsync();
    namedBarrier(kQBarrier + wg, 128);
  }

  // This thread's rows: positions (rows past the tile's last clamp to its
  // last position, so they see no key past the loaded ones).
  // Positions fit in int32 (context_lens do).
  int pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t flat = g.flatBegin + 64 * wg + 16 * warp + lane / 4 + 8 * i;
    pos[i] = static_cast<int>(flat <= g.flatLast ? g.firstPos + flat / g.group
                                                 : g.posHi);
  }
  const int window = a.slidingWindow;
  const float scaleLog2 = a.scale * 1.4426950408889634f;

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
      const int64_t tileStart = g.tileBegin + int64_t(t) * kKeys;
      const int from = t == 0 ? static_cast<int>(g.keyBegin - tileStart) : 0;
      const int64_t end = g.keyEnd - tileStart;
      if (from > 0)
        zeroValues(t % kStages, 0, from);
      if (end < kKeys)
        zeroValues(t % kStages, static_cast<int>(end), kKeys);
    }
  };
  // Masks S of tile t, updates the running max and sum, turns S into P
  // (fp32) and sets `correction`, the factor of the old O and sum.
  auto softmax = [&](int t) {
    const int64_t tileStart = g.tileBegin + int64_t(t) * kKeys;
    const bool mask = tileStart + kKeys - 1 > g.posLo ||
                      (window > 0 && tileStart <= g.posHi - window);
    if (mask) {
      // Positions relative to the tile's first key.
      const int rel[2] = {pos[0] - static_cast<int>(tileStart),
                          pos[1] - static_cast<int>(tileStart)};
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
      // A row with no visible key yet keeps max -inf; exponents use 0.
      const float base = m == -INFINITY ? 0.0f : m * scaleLog2;
      correction[i] = exp2f(rowMax[i] * scaleLog2 - base);
      rowMax[i] = m;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = exp2f(fmaf(s[4 * n + 2 * i + e], scaleLog2, -base));
          s[4 * n + 2 * i + e] = x;
          sum += x;
        }
      rowSum[i] = rowSum[i] * correction[i] + sum;
    }
  };
  auto rescaleAndPack = [&] {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[4 * n + e] *= correction[e / 2];
#pragma unroll
    for (int k = 0; k < kPVSteps; ++k)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pFrag[k][r] = packBf16(s[8 * k + 2 * r], s[8 * k + 2 * r + 1]);
  };

  // Ping-pong: consumer wg issues its products of tile t after the other
  // one issued its products of tile t (wg 1) or t - 1 (wg 0), and lets the
  // other go on once its own are issued. Each side waits numTiles times and
  // is let go numTiles times (consumer 1's first signal is the one here; it
  // gives none after its last tile), so no arrival is left pending.
  const bool pingPong = p.pingPong;
  auto takeTurn = [&] {
    if (pingPong)
      namedBarrier(kSchedulerBarrier + wg, 128 * kConsumers);
  };
  auto passTurn = [&](int t) {
    if (pingPong && (wg == 0 || t + 1 < g.numTiles))
      namedBarrierArrive(kSchedulerBarrier + (wg ^ 1), 128 * kConsumers);
  };
  if (pingPong && wg == 1)
    namedBarrierArrive(kSchedulerBarrier, 128 * kConsumers);

  mbarrierWait(&fullK[0], 0);
  takeTurn();
  issueS(0);
  passTurn(0);
  wgmmaWait<0>();
  fenceRegisters(s);
  release(emptyK, 0);
  softmax(0);
  rescaleAndPack();
  for (int t = 1; t < g.numTiles; ++t) {
    const int stage = t % kStages, previous = (t - 1) % kStages;
    mbarrierWait(&fullK[stage], (t / kStages) & 1);
    // Values of the previous tile are ready (and their invisible rows
    // zeroed, a barrier of both consumers) before this consumer's turn.
    mbarrierWait(&fullV[previous], ((t - 1) / kStages) & 1);
    prepareValues(t - 1);
    takeTurn();
    issueS(stage);
    issuePV(previous);
    passTurn(t);
    wgmmaWait<1>();
    fenceRegisters(s);
    release(emptyK, stage);
    softmax(t);
    wgmmaWait<0>();
    fenceRegisters(o);
    release(emptyV, previous);
    rescaleAndPack();
  }
  const int last = (g.numTiles - 1) % kStages;
  mbarrierWait(&fullV[last], ((g.numTiles - 1) / kStages) & 1);
  prepareValues(g.numTiles - 1);
  issuePV(last);
  wgmmaWait<0>();
  fenceRegisters(o);
  release(emptyV, last);

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = rowSum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t flat = g.flatBegin + 64 * wg + 16 * warp + lane / 4 + 8 * i;
    if (flat > g.flatLast)
      continue;
    const int64_t query = flat / g.group;
    const int64_t head = int64_t(g.kvHead) * g.group + flat % g.group;
    const int64_t offset = ((g.seqStart + query) * a.numHeads + head) * D;
    const float inv = 1.0f / sum;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float x0 = o[4 * n + 2 * i] * inv, x1 = o[4 * n + 2 * i + 1] * inv;
      const int64_t e = offset + n * 8 + quad * 2;
      if constexpr (std::is_same_v<TQ, __nv_bfloat16>)
        *reinterpret_cast<uint32_t *>(static_cast<__nv_bfloat16 *>(p.out) + e) =
            packBf16(x0, x1);
      else
        *reinterpret_cast<float2 *>(static_cast<float *>(p.out) + e) =
            make_float2(x0, x1);
    }
  }
}

template <int D, KVCacheDtype T, bool kRope, typename TQ>
__global__ void __launch_bounds__(kThreads, 1)
    prefillAttentionSm90Kernel(const __grid_constant__ CUtensorMap direct,
                               const __grid_constant__ CUtensorMap raw,
                               const Sm90Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  TileGeometry g;
  if (!locateTile(p, g))
    return;
  extern __shared__ uint8_t sharedRaw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(sharedRaw) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + L::kBarriers);
  uint64_t *fullK = bars, *fullV = bars + kStages;
  uint64_t *emptyK = bars + 2 * kStages, *emptyV = bars + 3 * kStages;
  uint64_t *stagingFull = bars + 4 * kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrierInit(&fullK[s], V::kStagedK ? 128 : 1);
      mbarrierInit(&fullV[s], V::kStagedV ? 128 : 1);
      mbarrierInit(&emptyK[s], 4 * kConsumers);
      mbarrierInit(&emptyV[s], 4 * kConsumers);
    }
    mbarrierInit(&stagingFull[0], 1);
    mbarrierInit(&stagingFull[1], 1);
    fenceBarrierInit();
  }
  if (threadIdx.x == 32) {
    prefetchTensorMap(&direct);
    prefetchTensorMap(&raw);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    lowerRegisters<V::kProducerRegs>();
    if constexpr (V::kStaged) {
      produceStaged<D, T, kRope>(direct, raw, p, g, smem, fullK, fullV, emptyK,
                                 emptyV, stagingFull);
    } else {
      if (threadIdx.x < 32)
        produceDirect<D>(direct, p, g, smem, fullK, fullV, emptyK, emptyV,
                         L::kK, L::kV);
    }
  } else {
    raiseRegisters<V::kConsumerRegs>();
    consume<D, T, kRope, TQ>(p, g, smem, fullK, fullV, emptyK, emptyV,
                             warpgroup - 1);
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

template <int D, KVCacheDtype T, bool kRope, typename TQ>
cudaError_t launchVariant(const Sm90Params &p, KVCachePool pool, int64_t t,
                          cudaStream_t stream) {
  using L = SharedLayout<D, T, kRope>;
  using V = Variant<T, kRope>;
  CUtensorMap direct, raw;
  std::memset(&direct, 0, sizeof(direct));
  std::memset(&raw, 0, sizeof(raw));
  cudaError_t status = cudaSuccess;
  if (T == KVCacheDtype::kBf16)
    status = encodePoolMap(&direct, pool.data, p.dims, 2, 64, true);
  if (status == cudaSuccess && V::kStaged)
    status = encodePoolMap(&raw, pool.data, p.dims, V::kElementBytes, D, false);
  if (status != cudaSuccess)
    return status;
  const int64_t group = p.a.numHeads / p.a.numKVHeads;
  const int64_t tiles = t * group / kRows + p.numSeqs;
  const int64_t blocks = tiles * p.a.numKVHeads;
  if (blocks > 0x7fffffff)
    return cudaErrorInvalidValue;
  auto *kernel = prefillAttentionSm90Kernel<D, T, kRope, TQ>;
  // Above 48 KiB a kernel's dynamic shared memory needs this opt-in (per
  // device, so on every launch; it enqueues nothing and may be captured).
  status = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (status != cudaSuccess)
    return status;
  kernel<<<static_cast<unsigned>(blocks), kThreads, L::kBytes, stream>>>(
      direct, raw, p);
  return cudaGetLastError();
}

template <int D, typename TQ>
cudaError_t launchOfPool(const Sm90Params &p, KVCachePool pool, int64_t t,
                         cudaStream_t stream) {
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return p.a.keyRotaryDim > 0
               ? launchVariant<D, KVCacheDtype::kBf16, true, TQ>(p, pool, t,
                                                                 stream)
               : launchVariant<D, KVCacheDtype::kBf16, false, TQ>(p, pool, t,
                                                                  stream);
  case KVCacheDtype::kF8E5M2:
    return launchVariant<D, KVCacheDtype::kF8E5M2, false, TQ>(p, pool, t,
                                                              stream);
  case KVCacheDtype::kF8E4M3:
    return launchVariant<D, KVCacheDtype::kF8E4M3, false, TQ>(p, pool, t,
                                                              stream);
  }
  return cudaErrorInvalidValue;
}

/// Whether the consumers ping-pong (Sm90Params::pingPong): on unless
/// INFER_SM90_PINGPONG is 0 (read once; for comparisons in the benchmark).
bool pingPongOn();

/// launchPrefillAttentionSm90 (Kernels.h) for q and out of type TQ.
template <typename TQ>
cudaError_t launch(const TQ *q, KVCachePool pool, CacheDims dims,
                   AttentionDims attention, const int32_t *blockTables,
                   int64_t maxBlocksPerSeq, const int32_t *contextLens,
                   const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                   TQ *out, cudaStream_t stream) {
  if (t <= 0 || numSeqs <= 0)
    return cudaSuccess;
  if (!prefillAttentionSm90Supports(attention, dims, pool.dtype) ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  const Sm90Params p{q,           out,           blockTables, maxBlocksPerSeq,
                     contextLens, queryStartLoc, numSeqs,     pool.scales,
                     dims,        attention,     pingPongOn()};
  if (attention.headDim == 64)
    return launchOfPool<64, TQ>(p, pool, t, stream);
  return launchOfPool<128, TQ>(p, pool, t, stream);
}

} // namespace infer::cuda::sm90

#endif // INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTIONSM90_CUH
