//===- Attention.cu - KV-cache writes and paged attention ----------------===//
//
// The pool is bf16 in the layout of plan::KVCacheLayout
// ("block_layer_kv_slot_head_dim"):
//
//   pool[block][layer][k|v][slot in block][kv_head][head_dim]
//   token at position p of a sequence: block = table[p / bs], slot p % bs
//
// rope_kv_cache_write rotates each key as Rope.cu does and stores it in the
// same pass, so the rotated keys never land in fp32 memory.
//
// paged attention: one thread block of 16 warps per (query token, head).
// Warp w visits the keys w, w+16, ...; each lane holds head_dim/32 dimensions
// of q, of the running output and of every key/value it reads, and keeps
// an online softmax (running max and sum); the warps merge at the end.
// It serves every row of a batch, or, when launchPrefillAttention
// (PrefillAttention.cu) takes the rows of sequences with two or more new
// tokens, only the decode rows: one block per (sequence, head), exiting
// unless the sequence has exactly one new token.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>

namespace infer::cuda {

namespace {

constexpr int kWarps = 16;
constexpr int kPerLane = kMaxHeadDim / 32;

__device__ int64_t slotOffset(CacheDims d, int64_t slot, int layer, int kv) {
  const int64_t slotElements = int64_t(d.numKVHeads) * d.headDim;
  const int64_t block = slot / d.blockSize, inBlock = slot % d.blockSize;
  return ((block * d.numLayers + layer) * 2 + kv) * d.blockSize * slotElements +
         inBlock * slotElements;
}

__global__ void kvCacheWriteKernel(__nv_bfloat16 *pool, CacheDims dims,
                                   int layer, const float *k, const float *v,
                                   const int64_t *slots, int64_t n) {
  const int64_t width = int64_t(dims.numKVHeads) * dims.headDim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = i / width, e = i % width;
    const int64_t slot = slots[token];
    if (slot < 0)
      continue;
    pool[slotOffset(dims, slot, layer, 0) + e] = __float2bfloat16_rn(k[i]);
    pool[slotOffset(dims, slot, layer, 1) + e] = __float2bfloat16_rn(v[i]);
  }
}

/// kvCacheWriteKernel of rope(k) and v; the rotation is ropeKernel's
/// (runtime/cuda/kernels/Rope.cu), head_dim = the cache's.
__global__ void ropeKVCacheWriteKernel(__nv_bfloat16 *pool, CacheDims dims,
                                       int layer, const float *k,
                                       const float *v, const int64_t *slots,
                                       const int32_t *positions, int rotaryDim,
                                       const float *invFreq, int64_t n) {
  const int64_t width = int64_t(dims.numKVHeads) * dims.headDim;
  const int half = rotaryDim / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = i / width, e = i % width;
    const int64_t slot = slots[token];
    if (slot < 0)
      continue;
    const int d = static_cast<int>(e % dims.headDim);
    float key = k[i];
    if (d < rotaryDim) {
      const int f = d < half ? d : d - half;
      const float angle = static_cast<float>(positions[token]) * invFreq[f];
      const float c = static_cast<float>(cos(static_cast<double>(angle)));
      const float s = static_cast<float>(sin(static_cast<double>(angle)));
      const int64_t base = i - d;
      const float x1 = k[base + f], x2 = k[base + f + half];
      key = d < half ? x1 * c - x2 * s : x2 * c + x1 * s;
    }
    pool[slotOffset(dims, slot, layer, 0) + e] = __float2bfloat16_rn(key);
    pool[slotOffset(dims, slot, layer, 1) + e] = __float2bfloat16_rn(v[i]);
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    pagedAttentionKernel(const float *q, const __nv_bfloat16 *pool,
                         CacheDims dims, AttentionDims a,
                         const int32_t *blockTables, int64_t maxBlocksPerSeq,
                         const int32_t *contextLens,
                         const int32_t *queryStartLoc, int64_t numSeqs,
                         bool decodeRowsOnly, float *out) {
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = a.headDim;

  int64_t token, seq;
  if (decodeRowsOnly) {
    seq = blockIdx.x;
    token = queryStartLoc[seq];
    if (queryStartLoc[seq + 1] - token != 1)
      return;
  } else {
    // The sequence of this token: the last s with query_start_loc[s] <= token.
    token = blockIdx.x;
    int64_t lo = 0, hi = numSeqs - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (queryStartLoc[mid] <= token)
        lo = mid;
      else
        hi = mid - 1;
    }
    seq = lo;
  }
  const int64_t newTokens = queryStartLoc[seq + 1] - queryStartLoc[seq];
  const int64_t position =
      contextLens[seq] - newTokens + (token - queryStartLoc[seq]);
  const int64_t first =
      a.slidingWindow > 0 && position - a.slidingWindow + 1 > 0
          ? position - a.slidingWindow + 1
          : 0;
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;
  const int kvHead = head / (a.numHeads / a.numKVHeads);

  float qv[kPerLane], acc[kPerLane];
  const float *qh = q + (token * a.numHeads + head) * d;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int e = lane + 32 * r;
    qv[r] = e < d ? qh[e] : 0.0f;
    acc[r] = 0.0f;
  }
  float runningMax = -INFINITY, runningSum = 0.0f;
  for (int64_t j = first + warp; j <= position; j += kWarps) {
    const int64_t slot = int64_t(table[j / dims.blockSize]) * dims.blockSize +
                         j % dims.blockSize;
    const __nv_bfloat16 *kj =
        pool + slotOffset(dims, slot, a.layer, 0) + int64_t(kvHead) * d;
    const __nv_bfloat16 *vj =
        pool + slotOffset(dims, slot, a.layer, 1) + int64_t(kvHead) * d;
    float dot = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int e = lane + 32 * r;
      if (e < d)
        dot += qv[r] * __bfloat162float(kj[e]);
    }
    for (int offset = 16; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * a.scale;
    const float newMax = fmaxf(runningMax, score);
    const float correction = expf(runningMax - newMax);
    const float p = expf(score - newMax);
    runningSum = runningSum * correction + p;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int e = lane + 32 * r;
      const float value = e < d ? __bfloat162float(vj[e]) : 0.0f;
      acc[r] = acc[r] * correction + p * value;
    }
    runningMax = newMax;
  }

  __shared__ float warpMax[kWarps], warpSum[kWarps];
  __shared__ float warpAcc[kWarps][kMaxHeadDim];
  if (lane == 0) {
    warpMax[warp] = runningMax;
    warpSum[warp] = runningSum;
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r)
    warpAcc[warp][lane + 32 * r] = acc[r];
  __syncthreads();
  float globalMax = -INFINITY;
  for (int w = 0; w < kWarps; ++w)
    globalMax = fmaxf(globalMax, warpMax[w]);
  float weights[kWarps], total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weights[w] = warpSum[w] > 0.0f ? expf(warpMax[w] - globalMax) : 0.0f;
    total += warpSum[w] * weights[w];
  }
  float *o = out + (token * a.numHeads + head) * d;
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      sum += warpAcc[w][e] * weights[w];
    o[e] = sum / total;
  }
}

} // namespace

cudaError_t launchKVCacheWrite(__nv_bfloat16 *pool, CacheDims dims, int layer,
                               const float *k, const float *v,
                               const int64_t *slots, int64_t t,
                               cudaStream_t stream) {
  const int64_t n = t * dims.numKVHeads * dims.headDim;
  if (n <= 0)
    return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  kvCacheWriteKernel<<<static_cast<unsigned>(blocks < 524280 ? blocks : 524280),
                       kThreads, 0, stream>>>(pool, dims, layer, k, v, slots,
                                              n);
  return cudaGetLastError();
}

cudaError_t launchRopeKVCacheWrite(__nv_bfloat16 *pool, CacheDims dims,
                                   int layer, const float *k, const float *v,
                                   const int64_t *slots,
                                   const int32_t *positions, int64_t t,
                                   int rotaryDim, const float *invFreq,
                                   cudaStream_t stream) {
  const int64_t n = t * dims.numKVHeads * dims.headDim;
  if (n <= 0)
    return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ropeKVCacheWriteKernel<<<static_cast<unsigned>(blocks < 524280 ? blocks
                                                                 : 524280),
                           kThreads, 0, stream>>>(
      pool, dims, layer, k, v, slots, positions, rotaryDim, invFreq, n);
  return cudaGetLastError();
}

cudaError_t launchPagedAttention(const float *q, const __nv_bfloat16 *pool,
                                 CacheDims dims, AttentionDims attention,
                                 const int32_t *blockTables,
                                 int64_t maxBlocksPerSeq,
                                 const int32_t *contextLens,
                                 const int32_t *queryStartLoc, int64_t numSeqs,
                                 int64_t t, float *out, cudaStream_t stream) {
  if (t <= 0)
    return cudaSuccess;
  if (attention.headDim > kMaxHeadDim || attention.numHeads > 65535)
    return cudaErrorInvalidValue;
  // A batch of more tokens than sequences has prefill rows: they go to the
  // tensor-core kernel where it supports the shape, the decode rows to one
  // block per (sequence, head). Both launches read the batch on the device.
  const bool prefillRows = t > numSeqs && prefillAttentionSupports(attention) &&
                           attention.headDim == dims.headDim &&
                           attention.numKVHeads == dims.numKVHeads;
  if (prefillRows) {
    const cudaError_t status = launchPrefillAttention(
        q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
        queryStartLoc, numSeqs, t, out, stream);
    if (status != cudaSuccess)
      return status;
  }
  dim3 grid(static_cast<unsigned>(prefillRows ? numSeqs : t),
            static_cast<unsigned>(attention.numHeads));
  pagedAttentionKernel<<<grid, kWarps * 32, 0, stream>>>(
      q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
      queryStartLoc, numSeqs, prefillRows, out);
  return cudaGetLastError();
}

} // namespace infer::cuda
