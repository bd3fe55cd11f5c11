//===- DecodeAttentionMma.cuh - Tensor-core paged decode -------*- CUDA -*-===//
//
// Decode attention of big batches of short contexts on tensor cores: one
// warp per (sequence, kv head, split), 4 a block, no merge across warps
// (the keys of few long sequences are split as the split-KV kernel splits
// them, mmaDecodeSplits, and splitKVCombineKernel merges the splits).
// mma.sync m16n8k16 (bf16 operands, fp32 accumulators), 16 keys a step,
// the kv head's query heads (up to 16; one tile of 8 for groups of up to
// 8) in M of the scores and N of the output:
//
//   S^T[head, key] = Q K^T    2 n-tiles of 8 keys x D/16 k-tiles of d
//   O^T[d, head]  += V^T P^T  D/16 m-tiles of d x 1 k-tile of the 16 keys
//
// Lane (g, t) = (lane / 4, lane % 4) loads keys j0 + g and j0 + 8 + g of a
// step, 16 bytes at a time: chunks c = 4 i + t (elements 8 c .. 8 c + 7)
// for i < D / 32. A dot product does not care about the order of its
// terms, so chunk c's elements 0-3 fill k-tile 2 i and elements 4-7 k-tile
// 2 i + 1 of K^T's B fragment (a lane holds k = 2t, 2t+1, 2t+8, 2t+9 of
// key n = g), and q's A fragments hold the same elements of each head:
//
//   chunk 4i+t of key g:  | e0 e1 | e2 e3 | e4 e5 | e6 e7 |
//                           b0(2i) b1(2i)  b0(2i+1) b1(2i+1)
//
// S^T's C fragment (head g, keys 2t, 2t+1 of both n-tiles) is P^T's B
// fragment as it stands. V^T's A fragment wants two keys of one d in a
// register: word m of a lane's chunk i is a row of an 8 x 8 matrix (8 keys
// x 8 d of 4 lanes' chunks), and movmatrix.trans turns it into keys 2t,
// 2t+1 of
//
//   d(i, m, g) = 8 (4 i + g/2) + 2 m + g % 2,
//
// m-tile 2 i + p taking m = 2p (rows g) and 2p + 1 (rows g + 8). Lanes g
// and g ^ 1 so end with the even and odd d of chunk 4 i + g/2 of heads 2t
// and 2t + 1; one trade makes each a whole 16-byte chunk of one head.
//
// Per 16 keys a warp runs 16 LDG.128 a lane, 3 D/16 mma and D/4 movmatrix,
// against ~150 instructions per key of the CUDA-core kernel, whose short
// blocks are bound by issue and latency. The online softmax is base 2
// (scores times scale * log2(e)), its running sum kept per lane and
// reduced over the quad at the end; probabilities are rounded to bf16 for
// V^T P^T (the prefill kernels' ~1e-3).
//
// A step's loads (a lane's 2 x D / 32 16-byte chunks of keys and of values)
// wait for DRAM before its arithmetic, and with 4 warps a block nothing else
// of the warp is in flight meanwhile. With prefetch (prefetchesSteps: bf16
// pools by default, setDecodePrefetch) the loop issues step j + 1's loads
// before computing step j, holding both in registers (210 a thread for
// bf16, D = 128: 2 blocks an SM): H100, infer-attention-bench --layers 32,
// bf16, us: 64 x 128 14.8 against 16.6, 256 x 128 56.1 against 58.4, 1024 x
// 128 206.0 against 215.3, 256 x 2048 713 against 728. fp8 pools keep one
// step: prefetching there (3 blocks an SM) lost at every shape but 64 x 128
// (E4M3 256 x 128 43.5 against 36.0 us, 256 x 2048 502.5 against 407.5).
//
// A decode row's first step goes out before griddepcontrol.wait where it
// holds no key of this forward call (see the kernel), while the kernel
// before it drains: H100, infer-attention-bench --layers 32, us: bf16 256 x
// 128 53.8 against 56.4, 64 x 128 14.0 against 15.0; E4M3 256 x 128 33.5
// against 36.2; 256 x 2048 within 1%.
//
// Takes every pool without key rotation, head_dim 64 or 128, groups up to
// 16 query heads, bf16 q and out (mmaDecodeSupports); keys past a
// sequence's end are never read. fp8 codes enter the mma as the bf16 of
// their values, which bf16 holds exactly; an E4M3 pool's per-row scales are
// applied late, in fp32: a key's to its scores, a value's to its
// probabilities before P^T is rounded to bf16. That rounds once per
// product where scaling each element before the mma (as the prefills stage
// them) rounded the scaled keys and values too, and it takes a multiply per
// element out of the loop: H200, infer-attention-bench --layers 8, E4M3,
// us: 465 x 2112 628.2 against 650.9, 232 x 2112 318.2 against 331.7 (bf16
// in the same runs 924.2 / 459.2 against 904.7 / 450.0).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTIONMMA_CUH
#define INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTIONMMA_CUH

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/DecodeAttention.cuh"
#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/cuda/kernels/KVCache.cuh"
#include "runtime/cuda/kernels/PrefillAttention.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace infer::cuda::decode_mma {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
/// Blocks per SM of the launch bounds: 4 (128 registers a thread) for one
/// head tile, 3 (168) for two, whose accumulators take 32 more. A kernel
/// that holds two steps' keys and values (prefetch) takes 2 (255) on bf16
/// pools and 3 on fp8 ones, whose steps are half the registers.
__host__ __device__ constexpr int
blocksPerSmOf(bool highRows, bool prefetch = false, bool fp8 = false) {
  return prefetch ? (fp8 ? 3 : 2) : highRows ? 3 : 4;
}

/// Whether a launch on a pool of `dtype` (one head tile, no softcap) loads
/// the keys and values of its next step before computing the current one.
inline bool prefetchesSteps(KVCacheDtype dtype) {
  const DecodePrefetch prefetch = decodePrefetch();
  return prefetch == DecodePrefetch::kAll ||
         (prefetch == DecodePrefetch::kBf16 && dtype == KVCacheDtype::kBf16);
}
/// Keys a warp reads per step: two n-tiles of 8.
constexpr int kStepKeys = 16;
/// Most query heads per kv head: the M of the mma.
constexpr int kMaxGroup = 16;

/// Transposes the 8 x 8 bf16 matrix whose row r is held by lanes 4r .. 4r
/// + 3 (one 32-bit word each).
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t wordOf(const uint4 &x, int i) {
  return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w;
}

/// 8 fp8 codes as the 8 bf16 of their unscaled values, which bf16 holds
/// exactly (E4M3 and E5M2 alike): an E4M3 pool's scales are applied to the
/// scores and the probabilities instead (kScaleLate). Through the
/// conversion instructions (fp8 -> f16 -> f32 -> bf16): moving each code's
/// bits into a bf16's and one bf16 multiply by 2^120 (E4M3) or 2^112
/// (E5M2) gives the same bits in integer and FMA work, and made the decode
/// 6% slower (H200, infer-attention-bench, 465 x 2112: E4M3 662 against
/// 625 us; bench/RESULTS.md, the twentieth session). launchDecodeOperandBf16
/// is its test's hook.
template <KVCacheDtype T>
__device__ __forceinline__ uint4 codesToBf16x8(const decode::Raw8<T> &raw) {
  static_assert(T != KVCacheDtype::kBf16, "fp8 codes");
  float x[8];
  decodeFp8x8<T, /*kApplyScale=*/false>(raw, 1.0f, x);
  return fa2::packBf16x8(x);
}

/// A step's keys or values as the mma takes them: fp8 codes unscaled (E4M3
/// scales come later; E5M2 has none), bf16 as loaded.
template <KVCacheDtype T>
__device__ __forceinline__ uint4 operandBf16x8(const decode::Raw8<T> &raw) {
  if constexpr (T == KVCacheDtype::kBf16)
    return raw;
  else
    return codesToBf16x8<T>(raw);
}

/// The raw keys and values of a step: keys j0 + g (half 0) and j0 + 8 + g
/// (half 1), chunks 4 i + t, and their E4M3 scales.
template <KVCacheDtype T, int kChunks> struct Step {
  decode::Raw8<T> k[2][kChunks], v[2][kChunks];
  float kScale[2], vScale[2];
};

/// kHighRows: the group has more than 8 heads, so M rows 8-15 are heads
/// too (else they are zeros and their arithmetic is skipped).
template <int D, KVCacheDtype T, bool kHighRows, bool kSoftcap,
          bool kPrefetch = false>
__global__ void __launch_bounds__(kThreads,
                                  blocksPerSmOf(kHighRows, kPrefetch,
                                                T != KVCacheDtype::kBf16))
    mmaDecodeKernel(const __nv_bfloat16 *q, KVCachePool pool, CacheDims dims,
                    AttentionDims a, const int32_t *blockTables,
                    int64_t maxBlocksPerSeq, const int32_t *contextLens,
                    const int32_t *queryStartLoc, int64_t units, int splits,
                    __nv_bfloat16 *out, float *partialOut, float *partialMax,
                    float *partialSum) {
  constexpr int kChunks = D / 32; // 16-byte chunks a lane loads per key
  // E4M3 codes enter the mma unscaled (exact in bf16); their scales are
  // applied to the scores and the probabilities.
  constexpr bool kScaleLate = KVElement<T>::kScaled;
  constexpr int kMTiles = D / 16; // of O^T = V^T P^T
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Warps of one unit's splits side by side.
  const int64_t task = int64_t(blockIdx.x) * kWarps + warp;
  if (task >= units * splits)
    return; // an exit counts as allowDependentGrids
  const int64_t unit = task / splits;
  const int split = int(task % splits);
  const int64_t seq = unit / a.numKVHeads;
  const int kvHead = int(unit % a.numKVHeads);
  const int group = a.numHeads / a.numKVHeads;
  const int firstHead = kvHead * group;

  // The visible keys (first .. position) cut into `splits` equal ranges,
  // as the split-KV kernel cuts them.
  const int position = contextLens[seq] - 1;
  const int first = a.slidingWindow > 0 && position - a.slidingWindow + 1 > 0
                        ? position - a.slidingWindow + 1
                        : 0;
  const int perSplit = (position - first + splits) / splits;
  const int keyBegin = first + split * perSplit;
  const int keyEnd = min(keyBegin + perSplit, position + 1);
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;
  const decode::KeyAddress<D> address(dims, a.layer, kvHead, table);
  const int64_t valueDelta = address.valueDelta;
  auto keyOffset = [&](int j) { return address(j); };

  // Keys j0 + g and j0 + 8 + g of a step; keys past the end are zeros, not
  // read.
  auto loadStep = [&](int j0, Step<T, kChunks> &kv) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = j0 + 8 * half + g;
      kv.kScale[half] = kv.vScale[half] = 1.0f;
      if (j < keyEnd) {
        const int64_t offset = keyOffset(j);
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          kv.k[half][i] =
              decode::loadRaw8<T>(pool.data, offset + 8 * (4 * i + t));
          kv.v[half][i] = decode::loadRaw8<T>(pool.data, offset + valueDelta +
                                                             8 * (4 * i + t));
        }
        if constexpr (KVElement<T>::kScaled) {
          kv.kScale[half] = pool.scales[offset / D];
          kv.vScale[half] = pool.scales[(offset + valueDelta) / D];
        }
      } else {
#pragma unroll
        for (int i = 0; i < kChunks; ++i)
          kv.k[half][i] = kv.v[half][i] = {};
      }
    }
  };
  // A decode row's keys before its last (position) were written by
  // earlier forward calls; so where its first step holds no key of this
  // call, that step's loads go out before waitForPriorGrids, while the
  // kernel before this one drains. Of the grids that may still run (that
  // one: each launchDependent kernel waits before it allows the next), none
  // writes them: the batch inputs (contextLens, blockTables, queryStartLoc)
  // and copy-on-write block copies precede the call's first kernel in
  // stream order, and prefix-cache blocks are published after the call
  // that computes them. Otherwise the loads go out after the wait, before q
  // (a short context has few steps: the prologue's latencies overlap).
  const int64_t token = queryStartLoc[seq];
  const bool decodeRow = queryStartLoc[seq + 1] - token == 1;
  const bool loadsEarly = decodeRow && keyBegin + kStepKeys <= position;
  Step<T, kChunks> kv;
  if (loadsEarly)
    loadStep(keyBegin, kv);
  waitForPriorGrids();
  allowDependentGrids();
  if (!decodeRow)
    return;
  if (!loadsEarly)
    loadStep(keyBegin, kv);
  if (keyBegin >= keyEnd) {
    // An empty split weighs nothing in the combine.
    if (lane < group)
      partialSum[(seq * a.numHeads + firstHead + lane) * splits + split] = 0.0f;
    return;
  }

  // q's A fragments, kept in shared memory (registers are what hold the
  // keys and values in flight): lane (g, t)'s chunks 4 i + t of heads g and
  // g + 8 are words 0, 2 (k-tile 2 i) and 1, 3 (k-tile 2 i + 1) of rows g
  // and g + 8, as K^T's B fragments take them.
  constexpr int kHeadTiles = kHighRows ? 2 : 1;
  __shared__ uint4 qShared[kWarps][kHeadTiles][kChunks][32];
  {
    const __nv_bfloat16 *qRow = q + (token * a.numHeads + firstHead) * D;
#pragma unroll
    for (int r = 0; r < kHeadTiles; ++r)
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        qShared[warp][r][i][lane] =
            g + 8 * r < group ? *reinterpret_cast<const uint4 *>(
                                    qRow + (g + 8 * r) * D + 8 * (4 * i + t))
                              : make_uint4(0, 0, 0, 0);
    __syncwarp();
  }
  // Read each step (volatile: not hoisted into registers).
  auto loadQ = [&](int r, int i) {
    uint4 x;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                 : "r"(fa2::sharedAddress(&qShared[warp][r][i][lane])));
    return x;
  };

  const float qScale = a.scale * 1.4426950408889634f;
  const float capLog2 = a.logitSoftcap * 1.4426950408889634f;
  const float inverseCapLog2 = kSoftcap ? 1.0f / capLog2 : 0.0f;
  // Head tiles of 8: heads 8 r + g of S^T's rows g + 8 r, heads 8 r + 2t,
  // 8 r + 2t + 1 of O^T's columns.
  float acc[kHeadTiles][kMTiles][4];
  float runningMax[kHeadTiles], runningSum[kHeadTiles];
#pragma unroll
  for (int r = 0; r < kHeadTiles; ++r) {
    runningMax[r] = -INFINITY;
    runningSum[r] = 0.0f;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
      acc[r][m][0] = acc[r][m][1] = acc[r][m][2] = acc[r][m][3] = 0.0f;
  }

  // Warp-uniform steps: key j0 < keyEnd, so every step has a valid key and
  // a finite running max.
  for (int j0 = keyBegin;;) {
    Step<T, kChunks> next;
    if constexpr (kPrefetch) {
      if (j0 + kStepKeys < keyEnd)
        loadStep(j0 + kStepKeys, next);
    }
    float s[2][4] = {};
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const uint4 low = loadQ(0, i);
      const uint4 high =
          kHighRows ? loadQ(kHeadTiles - 1, i) : make_uint4(0, 0, 0, 0);
      const uint32_t qa[2][4] = {{low.x, high.x, low.y, high.y},
                                 {low.z, high.z, low.w, high.w}};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint4 key = operandBf16x8<T>(kv.k[half][i]);
        fa2::mma(s[half], qa[0], key.x, key.y);
        fa2::mma(s[half], qa[1], key.z, key.w);
      }
    }
    // An E4M3 step's scales, of the keys of this lane's scores and
    // probabilities (keys j0 + 8 half + 2t + c), from the lanes that loaded
    // them (g = 2t + c): a key's scale multiplies its scores, a value's its
    // probabilities, in fp32, before P^T is rounded to bf16.
    float kScaleOf[2][2], vScaleOf[2][2];
    if constexpr (kScaleLate) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          kScaleOf[half][c] =
              __shfl_sync(0xffffffffu, kv.kScale[half], 4 * (2 * t + c));
          vScaleOf[half][c] =
              __shfl_sync(0xffffffffu, kv.vScale[half], 4 * (2 * t + c));
        }
    }

    // V^T's A fragments: m-tile 2 i + p has rows d(i, 2p, g) and d(i, 2p +
    // 1, g) (see the header), keys 2t, 2t+1 then 8 + 2t, 8 + 2t + 1.
    uint32_t vt[kMTiles][4];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const uint4 low = operandBf16x8<T>(kv.v[0][i]);
      const uint4 high = operandBf16x8<T>(kv.v[1][i]);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        vt[2 * i + p][0] = transpose8x8(wordOf(low, 2 * p));
        vt[2 * i + p][1] = transpose8x8(wordOf(low, 2 * p + 1));
        vt[2 * i + p][2] = transpose8x8(wordOf(high, 2 * p));
        vt[2 * i + p][3] = transpose8x8(wordOf(high, 2 * p + 1));
      }
    }

    // s[half][2 r + c]: head 8 r + g, key j0 + 8 half + 2 t + c, which is
    // P^T's B fragment as it stands.
#pragma unroll
    for (int r = 0; r < kHeadTiles; ++r) {
      float x[2][2];
      float m = runningMax[r];
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float score = s[half][2 * r + c] * qScale;
          if constexpr (kScaleLate)
            score *= kScaleOf[half][c];
          if constexpr (kSoftcap)
            score = fastSoftcapScore(score, capLog2, inverseCapLog2);
          x[half][c] = j0 + 8 * half + 2 * t + c < keyEnd ? score : -INFINITY;
          m = fmaxf(m, x[half][c]);
        }
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const float correction = fastExp2(runningMax[r] - m);
      float p[2][2], sum = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          p[half][c] = fastExp2(x[half][c] - m);
          sum += p[half][c];
        }
      runningSum[r] = runningSum[r] * correction + sum;
      runningMax[r] = m;
      // This lane's accumulator columns are heads 2t and 2t + 1, whose
      // corrections lanes 8t and 8t + 4 computed.
      const float correctionEven = __shfl_sync(0xffffffffu, correction, 8 * t);
      const float correctionOdd =
          __shfl_sync(0xffffffffu, correction, 8 * t + 4);
      if constexpr (kScaleLate) {
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            p[half][c] *= vScaleOf[half][c];
      }
      const uint32_t b0 = fa2::packBf16(p[0][0], p[0][1]);
      const uint32_t b1 = fa2::packBf16(p[1][0], p[1][1]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        acc[r][mt][0] *= correctionEven;
        acc[r][mt][1] *= correctionOdd;
        acc[r][mt][2] *= correctionEven;
        acc[r][mt][3] *= correctionOdd;
        fa2::mma(acc[r][mt], vt[mt], b0, b1);
      }
    }
    j0 += kStepKeys;
    if (j0 >= keyEnd)
      break;
    if constexpr (kPrefetch)
      kv = next;
    else
      loadStep(j0, kv);
  }

  // acc[r][2 i + p][2 q + e]: head 8 r + 2t + e at d(i, 2p + q, g) = 8 (4 i
  // + g/2) + 2 (2p + q) + g % 2. Lanes g and g ^ 1 (lane ^ 4) hold the even
  // and odd d of chunk 4 i + g/2: each keeps head 2t + g % 2 and trades the
  // other head's values for its partner's, then stores 16 bytes.
  // With splits, the normalized fp32 partial output, max and sum of each
  // head go to the workspace for splitKVCombineKernel.
  const int parity = g % 2;
#pragma unroll
  for (int r = 0; r < kHeadTiles; ++r) {
    float sum = runningSum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    // Lane 8t + 4 parity holds head 2t + parity's sum and max.
    const int source = 8 * t + 4 * parity;
    const float total = __shfl_sync(0xffffffffu, sum, source);
    const float headMax = __shfl_sync(0xffffffffu, runningMax[r], source);
    const int head = 8 * r + 2 * t + parity;
    const float inverse = 1.0f / total;
    const int64_t entry =
        (seq * a.numHeads + firstHead + head) * splits + split;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      float values[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float *tile = acc[r][2 * i + w / 2] + 2 * (w % 2);
        // The partner's value is of this lane's head: its sum scales it.
        const float kept = tile[parity] * inverse;
        const float partner =
            __shfl_xor_sync(0xffffffffu, tile[1 - parity], 4) * inverse;
        values[2 * w] = parity == 0 ? kept : partner;
        values[2 * w + 1] = parity == 0 ? partner : kept;
      }
      if (head >= group)
        continue;
      const int d = 8 * (4 * i + g / 2);
      if (splits == 1) {
        *reinterpret_cast<uint4 *>(
            out + (token * a.numHeads + firstHead + head) * D + d) =
            make_uint4(fa2::packBf16(values[0], values[1]),
                       fa2::packBf16(values[2], values[3]),
                       fa2::packBf16(values[4], values[5]),
                       fa2::packBf16(values[6], values[7]));
      } else {
        float4 *dst = reinterpret_cast<float4 *>(partialOut + entry * D + d);
        dst[0] = make_float4(values[0], values[1], values[2], values[3]);
        dst[1] = make_float4(values[4], values[5], values[6], values[7]);
      }
    }
    if (splits > 1 && head < group && g < 2) {
      partialMax[entry] = headMax;
      partialSum[entry] = total;
    }
  }
}

template <int D, KVCacheDtype T, bool kHighRows, bool kSoftcap,
          bool kPrefetch = false>
cudaError_t launchOf(const decode::Launch<__nv_bfloat16> &l) {
  const AttentionDims &a = l.attention;
  const int64_t units = l.numSeqs * a.numKVHeads;
  const int64_t entries = l.numSeqs * a.numHeads * l.splits;
  float *partialOut = l.workspace.data;
  float *partialMax = partialOut + entries * D;
  float *partialSum = partialMax + entries;
  const int64_t blocks = (units * l.splits + kWarps - 1) / kWarps;
  const cudaError_t status = launchDependent(
      mmaDecodeKernel<D, T, kHighRows, kSoftcap, kPrefetch>,
      static_cast<unsigned>(blocks), kThreads, 0, l.stream, l.q, l.pool, l.dims,
      a, l.blockTables, l.maxBlocksPerSeq, l.contextLens, l.queryStartLoc,
      units, l.splits, l.out, partialOut, partialMax, partialSum);
  if (status != cudaSuccess || l.splits == 1)
    return status;
  dim3 combineGrid(static_cast<unsigned>(l.numSeqs),
                   static_cast<unsigned>(a.numHeads));
  return launchDependent(decode::splitKVCombineKernel<D, __nv_bfloat16>,
                         combineGrid, D, 0, l.stream, l.queryStartLoc,
                         a.numHeads, l.splits, partialOut, partialMax,
                         partialSum, l.out);
}

template <int D, KVCacheDtype T>
cudaError_t launchOfPool(const decode::Launch<__nv_bfloat16> &l) {
  const bool highRows = l.attention.numHeads / l.attention.numKVHeads > 8;
  const bool softcap = l.attention.logitSoftcap > 0;
  if (!highRows && !softcap && prefetchesSteps(T))
    return launchOf<D, T, false, false, true>(l);
  if (highRows)
    return softcap ? launchOf<D, T, true, true>(l)
                   : launchOf<D, T, true, false>(l);
  return softcap ? launchOf<D, T, false, true>(l)
                 : launchOf<D, T, false, false>(l);
}

/// The tensor-core decode of every decode row of the batch, its keys split
/// l.splits ways (the caller checked mmaDecodeSupports and sized the splits
/// by mmaDecodeSplits).
template <int D> cudaError_t launch(const decode::Launch<__nv_bfloat16> &l) {
  switch (l.pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchOfPool<D, KVCacheDtype::kBf16>(l);
  case KVCacheDtype::kF8E5M2:
    return launchOfPool<D, KVCacheDtype::kF8E5M2>(l);
  case KVCacheDtype::kF8E4M3:
    return launchOfPool<D, KVCacheDtype::kF8E4M3>(l);
  }
  return cudaErrorInvalidValue;
}

} // namespace infer::cuda::decode_mma

#endif // INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTIONMMA_CUH
