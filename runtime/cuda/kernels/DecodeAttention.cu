//===- DecodeAttention.cu - Split-KV, GQA-aware paged decode ---*- CUDA -*-===//
//
// Attention of the decode rows of a batch (sequences with one new token)
// over the paged pool (bf16 or fp8, KVCache.cuh). One thread block of 4
// warps per (sequence, kv head, tile of up to 8 of its query heads, split):
//
//   grid = [splits][kv heads * head tiles][sequences]
//
// Each K/V vector is read once for all query heads of the tile (GQA/MQA).
// A key is read by L = head_dim / 8 lanes, 8 elements each (16 bytes of
// bf16, 8 of fp8), so a warp reads 32 / L keys at once; the scores of each
// head are reduced over those L lanes and every group of L lanes keeps its
// own online softmax (running max and sum per head), merged through shared
// memory at the end.
//
// Split-KV: a sequence's visible keys (first .. position, the sliding
// window's or all) are cut into `splits` equal ranges, one per block. With
// one split the block writes the output; otherwise it writes its normalized
// partial output, max and sum to the workspace, and splitKVCombineKernel
// merges them:
//
//   M = max_i m_i,  w_i = l_i exp(m_i - M),  out = sum_i w_i o_i / sum_i w_i
//
// The split count is chosen on the host from the longest context the block
// tables can hold and the SM count (never from the batch's lengths, which
// live on the device), so launches read the batch on the device only and
// can be captured in a CUDA graph.
//
// Streaming plans (AttentionDims::keyRotaryDim > 0): each lane rotates its
// 8 elements of key j at position j as it loads them (ropeKeyElement, the
// fp32 kernel's arithmetic; the partner elements are read from the pool).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/KVCache.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

namespace infer::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
/// Query heads per block: larger groups take several head tiles.
constexpr int kMaxHeadTile = 8;
/// Blocks per SM the split count aims at (memory-level parallelism).
constexpr int kBlocksPerSm = 4;
/// Fewest keys worth a split of their own.
constexpr int kMinKeysPerSplit = 64;
constexpr int kMaxSplits = 256;

template <int D, int kHeadTile, KVCacheDtype T, bool kRotate>
__global__ void __launch_bounds__(kThreads)
    splitKVDecodeKernel(const float *q, KVCachePool pool, CacheDims dims,
                        AttentionDims a, const int32_t *blockTables,
                        int64_t maxBlocksPerSeq, const int32_t *contextLens,
                        const int32_t *queryStartLoc, int splits, float *out,
                        float *partialOut, float *partialMax,
                        float *partialSum) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kGroups = kWarps * kKeysPerWarp; // lane groups per block
  __shared__ float groupMax[kGroups][kHeadTile], groupSum[kGroups][kHeadTile];
  __shared__ float groupAcc[kGroups][kHeadTile][D];

  const int64_t seq = blockIdx.z;
  const int64_t token = queryStartLoc[seq];
  if (queryStartLoc[seq + 1] - token != 1)
    return;
  const int split = blockIdx.x;
  const int group = a.numHeads / a.numKVHeads;
  const int headTiles = (group + kHeadTile - 1) / kHeadTile;
  const int kvHead = blockIdx.y / headTiles;
  const int firstHead = kvHead * group + (blockIdx.y % headTiles) * kHeadTile;
  const int lastHead = min(firstHead + kHeadTile, (kvHead + 1) * group);
  const int heads = lastHead - firstHead;

  const int64_t position = contextLens[seq] - 1;
  const int64_t first =
      a.slidingWindow > 0 && position - a.slidingWindow + 1 > 0
          ? position - a.slidingWindow + 1
          : 0;
  const int64_t perSplit = (position - first + splits) / splits;
  const int64_t keyBegin = first + split * perSplit;
  const int64_t keyEnd = min(keyBegin + perSplit, position + 1);
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanesPerKey;
  const int laneGroup = warp * kKeysPerWarp + lane / kLanesPerKey;

  float qv[kHeadTile][8], acc[kHeadTile][8];
  float runningMax[kHeadTile], runningSum[kHeadTile];
#pragma unroll
  for (int h = 0; h < kHeadTile; ++h) {
    runningMax[h] = -INFINITY;
    runningSum[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      acc[h][e] = 0.0f;
      qv[h][e] = h < heads
                     ? q[(token * a.numHeads + firstHead + h) * D + sub * 8 + e]
                     : 0.0f;
    }
  }

  // Warp-uniform trip count: the score reductions shuffle across the whole
  // warp, so a lane group past the end computes on zeros and discards them.
  for (int64_t base = keyBegin + warp * kKeysPerWarp; base < keyEnd;
       base += kGroups) {
    const int64_t j = base + lane / kLanesPerKey;
    const bool valid = j < keyEnd;
    float kx[8] = {}, vx[8] = {};
    if (valid) {
      const int64_t slot = int64_t(table[j / dims.blockSize]) * dims.blockSize +
                           j % dims.blockSize;
      const int64_t kOffset =
          kvSlotOffset(dims, slot, a.layer, 0) + int64_t(kvHead) * D;
      const int64_t vOffset =
          kOffset + int64_t(dims.blockSize) * dims.numKVHeads * D;
      float kScale = 1.0f, vScale = 1.0f;
      if constexpr (KVElement<T>::kScaled) {
        kScale = pool.scales[kOffset / D];
        vScale = pool.scales[vOffset / D];
      }
      loadKV8<T>(pool.data, kOffset + sub * 8, kScale, kx);
      loadKV8<T>(pool.data, vOffset + sub * 8, vScale, vx);
      // Streaming: key j is cached unrotated and rotated at j.
      if constexpr (kRotate) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          kx[e] = ropeKeyElement<T>(pool.data, kOffset, kScale, a, sub * 8 + e,
                                    kx[e], j);
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
      if (!valid)
        continue;
      const float score = dot * a.scale;
      const float newMax = fmaxf(runningMax[h], score);
      const float correction = expf(runningMax[h] - newMax);
      const float p = expf(score - newMax);
      runningSum[h] = runningSum[h] * correction + p;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[h][e] = acc[h][e] * correction + p * vx[e];
      runningMax[h] = newMax;
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
      const float w = expf(groupMax[g][h] - m);
      sum += groupSum[g][h] * w;
      value += groupAcc[g][h][e] * w;
    }
    const int64_t row = token * a.numHeads + firstHead + h;
    if (splits == 1) {
      out[row * D + e] = value / sum;
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
template <int D>
__global__ void __launch_bounds__(D)
    splitKVCombineKernel(const int32_t *queryStartLoc, int numHeads, int splits,
                         const float *partialOut, const float *partialMax,
                         const float *partialSum, float *out) {
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
    const float w = sum * expf(partialMax[base + s] - m);
    total += w;
    value += w * partialOut[(base + s) * D + threadIdx.x];
  }
  out[(token * numHeads + head) * D + threadIdx.x] = value / total;
}

int headTileOf(int group) {
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : kMaxHeadTile;
}

int smCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess)
    return 1;
  return sms;
}

struct Launch {
  const float *q;
  KVCachePool pool;
  CacheDims dims;
  AttentionDims attention;
  const int32_t *blockTables;
  int64_t maxBlocksPerSeq;
  const int32_t *contextLens;
  const int32_t *queryStartLoc;
  int64_t numSeqs;
  int splits;
  float *out;
  SplitKVWorkspace workspace;
  cudaStream_t stream;
};

template <int D, int kHeadTile, KVCacheDtype T>
cudaError_t launchDecode(const Launch &l) {
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
  if (a.keyRotaryDim > 0)
    splitKVDecodeKernel<D, kHeadTile, T, true><<<grid, kThreads, 0, l.stream>>>(
        l.q, l.pool, l.dims, a, l.blockTables, l.maxBlocksPerSeq,
        l.contextLens, l.queryStartLoc, l.splits, l.out, partialOut,
        partialMax, partialSum);
  else
    splitKVDecodeKernel<D, kHeadTile, T, false>
        <<<grid, kThreads, 0, l.stream>>>(
            l.q, l.pool, l.dims, a, l.blockTables, l.maxBlocksPerSeq,
            l.contextLens, l.queryStartLoc, l.splits, l.out, partialOut,
            partialMax, partialSum);
  if (l.splits == 1)
    return cudaGetLastError();
  dim3 combineGrid(static_cast<unsigned>(l.numSeqs),
                   static_cast<unsigned>(a.numHeads));
  splitKVCombineKernel<D><<<combineGrid, D, 0, l.stream>>>(
      l.queryStartLoc, a.numHeads, l.splits, partialOut, partialMax, partialSum,
      l.out);
  return cudaGetLastError();
}

template <int D, int kHeadTile> cudaError_t launchOfDtype(const Launch &l) {
  switch (l.pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchDecode<D, kHeadTile, KVCacheDtype::kBf16>(l);
  case KVCacheDtype::kF8E5M2:
    return launchDecode<D, kHeadTile, KVCacheDtype::kF8E5M2>(l);
  case KVCacheDtype::kF8E4M3:
    return launchDecode<D, kHeadTile, KVCacheDtype::kF8E4M3>(l);
  }
  return cudaErrorInvalidValue;
}

template <int D> cudaError_t launchOfHeadTile(const Launch &l) {
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

} // namespace

bool splitKVDecodeSupports(const AttentionDims &attention,
                           const CacheDims &dims) {
  return (attention.headDim == 64 || attention.headDim == 128 ||
          attention.headDim == 256) &&
         validKeyRope(attention) && attention.headDim == dims.headDim &&
         attention.numKVHeads == dims.numKVHeads && attention.numKVHeads > 0 &&
         attention.numHeads % attention.numKVHeads == 0 &&
         attention.numKVHeads * ((attention.numHeads / attention.numKVHeads +
                                  kMaxHeadTile - 1) /
                                 kMaxHeadTile) <=
             65535;
}

size_t splitKVWorkspaceBytes(int headDim) {
  // Splits > 1 only while blocks (units = sequences * kv heads * head
  // tiles) < the target, so sequences * heads * splits < 2 * target *
  // kMaxHeadTile partial results.
  const int64_t target = int64_t(kBlocksPerSm) * smCount();
  return size_t(2 * target * kMaxHeadTile) * (headDim + 2) * sizeof(float);
}

int splitKVSplits(const AttentionDims &attention, int blockSize,
                  int64_t maxBlocksPerSeq, int64_t numSeqs,
                  size_t workspaceBytes) {
  if (numSeqs <= 0 || attention.numKVHeads <= 0)
    return 1;
  const int group = attention.numHeads / attention.numKVHeads;
  const int headTile = headTileOf(group);
  const int64_t units =
      numSeqs * attention.numKVHeads * ((group + headTile - 1) / headTile);
  const int64_t target = int64_t(kBlocksPerSm) * smCount();
  int64_t keys = maxBlocksPerSeq * blockSize;
  if (attention.slidingWindow > 0 && attention.slidingWindow < keys)
    keys = attention.slidingWindow;
  int64_t splits = (target + units - 1) / units;
  splits = std::min<int64_t>(splits,
                             (keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  splits = std::min<int64_t>(splits, kMaxSplits);
  const int64_t perSplit =
      numSeqs * attention.numHeads * (attention.headDim + 2) * sizeof(float);
  splits = std::min<int64_t>(splits, int64_t(workspaceBytes) / perSplit);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

cudaError_t
launchSplitKVDecode(const float *q, KVCachePool pool, CacheDims dims,
                    AttentionDims attention, const int32_t *blockTables,
                    int64_t maxBlocksPerSeq, const int32_t *contextLens,
                    const int32_t *queryStartLoc, int64_t numSeqs, float *out,
                    SplitKVWorkspace workspace, cudaStream_t stream) {
  if (numSeqs <= 0)
    return cudaSuccess;
  if (!splitKVDecodeSupports(attention, dims) || numSeqs > 65535 ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  const Launch l{q,
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

} // namespace infer::cuda
