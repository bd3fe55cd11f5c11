//===- DecodeAttention.cuh - Split-KV, GQA-aware paged decode --*- CUDA -*-===//
//
// Attention of the decode rows of a batch (sequences with one new token)
// over the paged pool (bf16 or fp8, KVCache.cuh). One thread block of 4
// warps per (sequence, kv head, tile of up to 8 of its query heads, split):
//
//   grid = [splits][kv heads * head tiles][sequences]
//
// Each K/V vector is read once for all query heads of the tile (GQA/MQA).
// A key is read by L = head_dim / 8 lanes, 8 elements each (16 bytes of
// bf16, 8 of fp8), so a warp's lane groups read 32 / L keys at once. The
// kernel is bound by the bytes of the keys and values it reads, so each
// lane group loads kUnroll keys an iteration (32 registers of raw K/V), and
// the loop is software-pipelined: iteration i + 1's loads (block table
// entries, keys, values) are issued before iteration i's arithmetic, so a
// block keeps 16 to 32 KiB in flight all the time:
//
//   iteration i, lane group g, slot u:  key = first + (i kUnroll + u) G + g
//
// (G lane groups per block). Key addresses are products of the table entry
// (no 64-bit division; slots by shift and mask for power-of-two block
// sizes). The scores of a slot are reduced over the L
// lanes; the online softmax (running max and sum per head, base 2: q is
// scaled by scale * log2(e) as it is loaded) is updated once per iteration
// for its kUnroll keys, and the lane groups merge through shared memory at
// the end.
//
// Split-KV: a sequence's visible keys (first .. position, the sliding
// window's or all) are cut into `splits` equal ranges, one per block. With
// one split the block writes the output; otherwise it writes its normalized
// partial output, max and sum to the workspace, and splitKVCombineKernel
// merges them:
//
//   M = max_i m_i,  w_i = l_i 2^(m_i - M),  out = sum_i w_i o_i / sum_i w_i
//
// The split count is chosen on the host from the longest context the block
// tables can hold and the blocks the SMs hold at once (blocksPerSmOf: one
// wave, no tail of a few blocks) (never from the batch's lengths, which
// live on the device), so launches read the batch on the device only and
// can be captured in a CUDA graph.
//
// A warp's first iteration goes out before griddepcontrol.wait where it
// holds no key of this forward call (see the kernel), while the kernel
// before it drains: H100, infer-attention-bench --layers 32, bf16, us: 1 x
// 128 6.5 against 7.3-7.9, 1 x 2048 10.9 against 11.6, 8 x 2048 34.5
// against 36.0, 1 x 32768 69.0 against 70.1.
//
// Streaming plans (AttentionDims::keyRotaryDim > 0): each lane rotates its
// 8 elements of key j at position j as it loads them (ropeKeyElement, the
// fp32 kernel's arithmetic; the partner elements are read from the pool).
// Soft-capped plans (AttentionDims::logitSoftcap > 0, a template flag like
// the rotation) cap each base-2 score x = log2(e) s as log2(e) cap
// tanh(x / (log2(e) cap)) = log2(e) cap tanh(s / cap) (fastSoftcapScore:
// the kernel is near its bandwidth bound, and tanhf's two MUFU operations
// a score took 11-16% of it) before the softmax update.
//
// The kernels and launchers are templates of the q/out element type (fp32
// or bf16); DecodeAttention.cu instantiates the bf16 ones,
// DecodeAttentionF32.cu the fp32 ones. bf16 launches that fill the GPU
// (short contexts: blocks of few iterations, bound by issue and latency)
// take the tensor-core kernel of DecodeAttentionMma.cuh instead
// (decodeKernelOf).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTION_CUH
#define INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTION_CUH

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/cuda/kernels/KVCache.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace infer::cuda::decode {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
/// Query heads per block: larger groups take several head tiles.
constexpr int kMaxHeadTile = 8;
/// Most blocks per SM the split count aims at (blocksPerSmOf; the
/// workspace is sized for this many).
constexpr int kBlocksPerSm = 4;
/// Fewest keys worth a split of their own.
constexpr int kMinKeysPerSplit = 64;
constexpr int kMaxSplits = 256;

/// Keys a lane group loads per iteration (the loop holds two iterations'
/// worth): 4, halved for tiles of 8 heads, whose q and accumulators take 128
/// registers (bf16: 64 registers of raw keys and values in the two buffers;
/// fp8 slots are half as large, but their decoding and E4M3 scales take
/// the registers that more keys would: 8 spilled). Rotated keys cost more
/// arithmetic (cos and sin per element) than bytes: one at a time.
template <KVCacheDtype T, int kHeadTile, bool kRotate>
__host__ __device__ constexpr int unrollOf() {
  if (kRotate)
    return 1;
  return kHeadTile >= 8 ? 2 : 4;
}

/// Blocks per SM the kernel is compiled for (__launch_bounds__: 3 leaves
/// 168 registers a thread, 2 for tiles of 8 heads 255) and the split count
/// aims at, so that the splits of a short batch run in one wave.
__host__ __device__ constexpr int blocksPerSmOf(int headTile) {
  return headTile >= 8 ? 2 : 3;
}

/// Element offsets in the pool of the keys of one (sequence, kv head),
/// as both decode kernels address them, division-free: int64 products of
/// the table entry, the slot by shift and mask where the block size is a
/// power of two (one int32 division otherwise). A key's value is
/// valueDelta elements past it.
template <int D> struct KeyAddress {
  const int32_t *table;
  int blockSize, blockShift;
  int64_t valueDelta, blockStride, headOffset;
  int slotElements;

  __device__ __forceinline__ KeyAddress(const CacheDims &dims, int layer,
                                        int kvHead, const int32_t *table)
      : table(table), blockSize(dims.blockSize),
        blockShift(shiftOf(dims.blockSize)),
        valueDelta(int64_t(dims.blockSize) * dims.numKVHeads * D),
        blockStride(2 * int64_t(dims.numLayers) * valueDelta),
        headOffset(2 * int64_t(layer) * valueDelta + int64_t(kvHead) * D),
        slotElements(dims.numKVHeads * D) {}

  /// log2 of a power-of-two block size, else -1.
  static __device__ __forceinline__ int shiftOf(int blockSize) {
    return (blockSize & (blockSize - 1)) == 0 ? __ffs(blockSize) - 1 : -1;
  }

  /// The offset of key j (j-th slot of the sequence's cache).
  __device__ __forceinline__ int64_t operator()(int j) const {
    int index, inBlock;
    if (blockShift >= 0) {
      index = j >> blockShift;
      inBlock = j & (blockSize - 1);
    } else {
      index = j / blockSize;
      inBlock = j - index * blockSize;
    }
    return int64_t(table[index]) * blockStride + headOffset +
           inBlock * slotElements;
  }
};

/// The raw 8 elements of a K or V row a lane loads: 16 bytes of bf16 or 8
/// of fp8.
template <KVCacheDtype T>
using Raw8 = std::conditional_t<T == KVCacheDtype::kBf16, uint4, uint2>;

template <KVCacheDtype T>
__device__ __forceinline__ Raw8<T> loadRaw8(const void *data, int64_t offset) {
  return *reinterpret_cast<const Raw8<T> *>(
      static_cast<const typename KVElement<T>::Storage *>(data) + offset);
}

template <KVCacheDtype T>
__device__ __forceinline__ void decodeRaw8(const Raw8<T> &raw, float scale,
                                           float (&x)[8]) {
  if constexpr (T == KVCacheDtype::kBf16) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 pair;
      *reinterpret_cast<uint32_t *>(&pair) = words[i];
      const float2 f = __bfloat1622float2(pair);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  } else {
    decodeFp8x8<T>(raw, scale, x);
  }
}

template <typename TQ> __device__ __forceinline__ float toFloat(TQ x) {
  if constexpr (std::is_same_v<TQ, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return x;
}

template <typename TQ> __device__ __forceinline__ TQ fromFloat(float x) {
  if constexpr (std::is_same_v<TQ, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}

template <int D, int kHeadTile, KVCacheDtype T, bool kRotate, bool kSoftcap,
          typename TQ>
__global__ void __launch_bounds__(kThreads, blocksPerSmOf(kHeadTile))
    splitKVDecodeKernel(const TQ *q, KVCachePool pool, CacheDims dims,
                        AttentionDims a, const int32_t *blockTables,
                        int64_t maxBlocksPerSeq, const int32_t *contextLens,
                        const int32_t *queryStartLoc, int splits, TQ *out,
                        float *partialOut, float *partialMax,
                        float *partialSum) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kGroups = kWarps * kKeysPerWarp; // lane groups per block
  constexpr int kUnroll = unrollOf<T, kHeadTile, kRotate>();
  __shared__ float groupMax[kGroups][kHeadTile], groupSum[kGroups][kHeadTile];
  __shared__ float groupAcc[kGroups][kHeadTile][D];

  const int64_t seq = blockIdx.z;
  const int64_t token = queryStartLoc[seq];
  if (queryStartLoc[seq + 1] - token != 1)
    return; // an exit counts as allowDependentGrids
  const int split = blockIdx.x;
  const int group = a.numHeads / a.numKVHeads;
  const int headTiles = (group + kHeadTile - 1) / kHeadTile;
  const int kvHead = blockIdx.y / headTiles;
  const int firstHead = kvHead * group + (blockIdx.y % headTiles) * kHeadTile;
  const int lastHead = min(firstHead + kHeadTile, (kvHead + 1) * group);
  const int heads = lastHead - firstHead;

  // Positions fit in int32 (context_lens do).
  const int position = contextLens[seq] - 1;
  const int first = a.slidingWindow > 0 && position - a.slidingWindow + 1 > 0
                        ? position - a.slidingWindow + 1
                        : 0;
  const int perSplit = (position - first + splits) / splits;
  const int keyBegin = first + split * perSplit;
  const int keyEnd = min(keyBegin + perSplit, position + 1);
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanesPerKey;
  const int laneGroup = warp * kKeysPerWarp + lane / kLanesPerKey;
  const KeyAddress<D> address(dims, a.layer, kvHead, table);
  const int64_t valueDelta = address.valueDelta;
  auto keyOffset = [&](int j) { return address(j); };

  // The raw keys and values of one iteration's kUnroll slots per lane
  // group; keys at or past keyEnd are not read (zeros, invalid).
  struct Slots {
    Raw8<T> k[kUnroll], v[kUnroll];
    float kScale[kUnroll], vScale[kUnroll];
    int64_t offset[kUnroll];
    bool valid[kUnroll];
  };
  auto load = [&](Slots &b, int base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kGroups + lane / kLanesPerKey;
      b.valid[u] = j < keyEnd;
      b.k[u] = {};
      b.v[u] = {};
      b.kScale[u] = b.vScale[u] = 1.0f;
      b.offset[u] = 0;
      if (b.valid[u]) {
        b.offset[u] = keyOffset(j);
        b.k[u] = loadRaw8<T>(pool.data, b.offset[u] + sub * 8);
        b.v[u] = loadRaw8<T>(pool.data, b.offset[u] + valueDelta + sub * 8);
        if constexpr (KVElement<T>::kScaled) {
          b.kScale[u] = pool.scales[b.offset[u] / D];
          b.vScale[u] = pool.scales[(b.offset[u] + valueDelta) / D];
        }
      }
    }
  };

  // The warp's first iteration reads keys firstBase .. firstBase + kStep -
  // 1 at most. Where none of them is the row's last (position, which the
  // kernel before this one writes), its loads go out before
  // waitForPriorGrids, as mmaDecodeKernel's first step does (see there why
  // no grid that may still run writes the others).
  constexpr int kStep = kUnroll * kGroups;
  const int firstBase = keyBegin + warp * kKeysPerWarp;
  const bool loadsEarly = firstBase + kStep <= position;
  Slots current;
  if (loadsEarly && firstBase < keyEnd)
    load(current, firstBase);
  waitForPriorGrids();
  allowDependentGrids();
  if (!loadsEarly && firstBase < keyEnd)
    load(current, firstBase);

  // q in base-2 units: scores come out as scale * log2(e) * q.k.
  const float qScale = a.scale * 1.4426950408889634f;
  const float capLog2 = a.logitSoftcap * 1.4426950408889634f;
  const float inverseCapLog2 = kSoftcap ? 1.0f / capLog2 : 0.0f;
  float qv[kHeadTile][8], acc[kHeadTile][8];
  float runningMax[kHeadTile], runningSum[kHeadTile];
#pragma unroll
  for (int h = 0; h < kHeadTile; ++h) {
    runningMax[h] = -INFINITY;
    runningSum[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      acc[h][e] = 0.0f;
      qv[h][e] =
          h < heads
              ? qScale * toFloat(q[(token * a.numHeads + firstHead + h) * D +
                                   sub * 8 + e])
              : 0.0f;
    }
  }

  auto consume = [&](const Slots &b, int base) {
    // Scores of every slot, reduced over the key's lanes.
    float score[kHeadTile][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kx[8];
      decodeRaw8<T>(b.k[u], b.kScale[u], kx);
      if constexpr (kRotate) {
        if (b.valid[u]) {
          const int j = base + u * kGroups + lane / kLanesPerKey;
#pragma unroll
          for (int e = 0; e < 8; ++e)
            kx[e] = ropeKeyElement<T>(pool.data, b.offset[u], b.kScale[u], a,
                                      sub * 8 + e, kx[e], j);
        }
      }
#pragma unroll
      for (int h = 0; h < kHeadTile; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          dot += qv[h][e] * kx[e];
#pragma unroll
        for (int offset = kLanesPerKey / 2; offset > 0; offset /= 2)
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        if constexpr (kSoftcap)
          dot = fastSoftcapScore(dot, capLog2, inverseCapLog2);
        score[h][u] = b.valid[u] ? dot : -INFINITY;
      }
    }
    // One softmax update for the slots; a group with no valid slot (past
    // the end) keeps its state.
    float p[kHeadTile][kUnroll];
#pragma unroll
    for (int h = 0; h < kHeadTile; ++h) {
      float m = runningMax[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        m = fmaxf(m, score[h][u]);
      const float correction =
          m == -INFINITY ? 1.0f : fastExp2(runningMax[h] - m);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[h][u] = m == -INFINITY ? 0.0f : fastExp2(score[h][u] - m);
        sum += p[h][u];
      }
      runningSum[h] = runningSum[h] * correction + sum;
      runningMax[h] = m;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[h][e] *= correction;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vx[8];
      decodeRaw8<T>(b.v[u], b.vScale[u], vx);
#pragma unroll
      for (int h = 0; h < kHeadTile; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[h][e] += p[h][u] * vx[e];
    }
  };

  // Warp-uniform trip count: the score reductions shuffle across the whole
  // warp, so a lane group past the end computes on zeros and discards them.
  // Software-pipelined: the loads of the next iteration (table entries,
  // keys, values) are issued before this one's arithmetic, so every warp
  // keeps its bytes in flight while it computes.
  if (firstBase < keyEnd) {
    for (int base = firstBase; base < keyEnd; base += kStep) {
      Slots next;
      load(next, base + kStep);
      consume(current, base);
      current = next;
    }
  }

#pragma unroll
  for (int h = 0; h < kHeadTile; ++h) {
    if (sub == 0) {
      groupMax[laneGroup][h] = runningMax[h];
      groupSum[laneGroup][h] = runningSum[h];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
      groupAcc[laneGroup][h][sub * 8 + e] = acc[h][e];
  }
  __syncthreads();

  for (int i = threadIdx.x; i < heads * D; i += kThreads) {
    const int h = i / D, e = i % D;
    float m = -INFINITY;
    for (int g = 0; g < kGroups; ++g)
      m = fmaxf(m, groupMax[g][h]);
    float sum = 0.0f, value = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      if (groupSum[g][h] == 0.0f)
        continue;
      const float w = fastExp2(groupMax[g][h] - m);
      sum += groupSum[g][h] * w;
      value += groupAcc[g][h][e] * w;
    }
    const int64_t row = token * a.numHeads + firstHead + h;
    if (splits == 1) {
      out[row * D + e] = fromFloat<TQ>(value / sum);
      continue;
    }
    // Partial results per (sequence, head, split), normalized; an empty
    // split has sum 0 and weighs nothing in the combine.
    const int64_t entry = (seq * a.numHeads + firstHead + h) * splits + split;
    partialOut[entry * D + e] = sum > 0.0f ? value / sum : 0.0f;
    if (e == 0) {
      partialMax[entry] = m;
      partialSum[entry] = sum;
    }
  }
}

/// One block per (sequence, head) of the decode rows: merges the splits.
template <int D, typename TQ>
__global__ void __launch_bounds__(D)
    splitKVCombineKernel(const int32_t *queryStartLoc, int numHeads, int splits,
                         const float *partialOut, const float *partialMax,
                         const float *partialSum, TQ *out) {
  waitForPriorGrids();
  allowDependentGrids();
  const int64_t seq = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t token = queryStartLoc[seq];
  if (queryStartLoc[seq + 1] - token != 1)
    return;
  const int64_t base = (seq * numHeads + head) * splits;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s)
    if (partialSum[base + s] > 0.0f)
      m = fmaxf(m, partialMax[base + s]);
  float total = 0.0f, value = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float sum = partialSum[base + s];
    if (sum == 0.0f)
      continue;
    const float w = sum * fastExp2(partialMax[base + s] - m);
    total += w;
    value += w * partialOut[(base + s) * D + threadIdx.x];
  }
  out[(token * numHeads + head) * D + threadIdx.x] =
      fromFloat<TQ>(value / total);
}

/// Query heads of a block for groups of `group` heads per kv head.
inline int headTileOf(int group) {
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : kMaxHeadTile;
}

template <typename TQ> struct Launch {
  const TQ *q;
  KVCachePool pool;
  CacheDims dims;
  AttentionDims attention;
  const int32_t *blockTables;
  int64_t maxBlocksPerSeq;
  const int32_t *contextLens;
  const int32_t *queryStartLoc;
  int64_t numSeqs;
  int splits;
  TQ *out;
  SplitKVWorkspace workspace;
  cudaStream_t stream;
};

template <int D, int kHeadTile, KVCacheDtype T, bool kRotate, bool kSoftcap,
          typename TQ>
cudaError_t launchDecode(const Launch<TQ> &l) {
  const AttentionDims &a = l.attention;
  const int group = a.numHeads / a.numKVHeads;
  const int headTiles = (group + kHeadTile - 1) / kHeadTile;
  const int64_t entries = l.numSeqs * a.numHeads * l.splits;
  float *partialOut = l.workspace.data;
  float *partialMax = partialOut + entries * D;
  float *partialSum = partialMax + entries;
  dim3 grid(static_cast<unsigned>(l.splits),
            static_cast<unsigned>(a.numKVHeads * headTiles),
            static_cast<unsigned>(l.numSeqs));
  const cudaError_t status = launchDependent(
      splitKVDecodeKernel<D, kHeadTile, T, kRotate, kSoftcap, TQ>, grid,
      kThreads, 0, l.stream, l.q, l.pool, l.dims, a, l.blockTables,
      l.maxBlocksPerSeq, l.contextLens, l.queryStartLoc, l.splits, l.out,
      partialOut, partialMax, partialSum);
  if (status != cudaSuccess || l.splits == 1)
    return status;
  dim3 combineGrid(static_cast<unsigned>(l.numSeqs),
                   static_cast<unsigned>(a.numHeads));
  return launchDependent(splitKVCombineKernel<D, TQ>, combineGrid, D, 0,
                         l.stream, l.queryStartLoc, a.numHeads, l.splits,
                         partialOut, partialMax, partialSum, l.out);
}

/// The kernel of the launch's score options (specializedScoreOptions: a
/// key rope or a soft-cap or neither).
template <int D, int kHeadTile, KVCacheDtype T, typename TQ>
cudaError_t launchOfScores(const Launch<TQ> &l) {
  if (l.attention.keyRotaryDim > 0)
    return launchDecode<D, kHeadTile, T, true, false>(l);
  if (l.attention.logitSoftcap > 0)
    return launchDecode<D, kHeadTile, T, false, true>(l);
  return launchDecode<D, kHeadTile, T, false, false>(l);
}

template <int D, int kHeadTile, typename TQ>
cudaError_t launchOfDtype(const Launch<TQ> &l) {
  switch (l.pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchOfScores<D, kHeadTile, KVCacheDtype::kBf16>(l);
  case KVCacheDtype::kF8E5M2:
    return launchOfScores<D, kHeadTile, KVCacheDtype::kF8E5M2>(l);
  case KVCacheDtype::kF8E4M3:
    return launchOfScores<D, kHeadTile, KVCacheDtype::kF8E4M3>(l);
  }
  return cudaErrorInvalidValue;
}

template <int D, typename TQ>
cudaError_t launchOfHeadTile(const Launch<TQ> &l) {
  switch (headTileOf(l.attention.numHeads / l.attention.numKVHeads)) {
  case 1:
    return launchOfDtype<D, 1>(l);
  case 2:
    return launchOfDtype<D, 2>(l);
  case 4:
    return launchOfDtype<D, 4>(l);
  default:
    return launchOfDtype<D, kMaxHeadTile>(l);
  }
}

/// launchSplitKVDecode (Kernels.h) for q and out of type TQ.
template <typename TQ>
cudaError_t launch(const TQ *q, KVCachePool pool, CacheDims dims,
                   AttentionDims attention, const int32_t *blockTables,
                   int64_t maxBlocksPerSeq, const int32_t *contextLens,
                   const int32_t *queryStartLoc, int64_t numSeqs, TQ *out,
                   SplitKVWorkspace workspace, cudaStream_t stream) {
  if (numSeqs <= 0)
    return cudaSuccess;
  if (!splitKVDecodeSupports(attention, dims) || numSeqs > 65535 ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  const Launch<TQ> l{q,
                     pool,
                     dims,
                     attention,
                     blockTables,
                     maxBlocksPerSeq,
                     contextLens,
                     queryStartLoc,
                     numSeqs,
                     splitKVSplits(attention, dims.blockSize, maxBlocksPerSeq,
                                   numSeqs, workspace.bytes),
                     out,
                     workspace,
                     stream};
  if (attention.headDim == 64)
    return launchOfHeadTile<64>(l);
  if (attention.headDim == 128)
    return launchOfHeadTile<128>(l);
  return launchOfHeadTile<256>(l);
}

} // namespace infer::cuda::decode

#endif // INFER_RUNTIME_CUDA_KERNELS_DECODEATTENTION_CUH
