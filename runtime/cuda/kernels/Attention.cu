//===- Attention.cu - KV-cache writes and paged attention ------*- CUDA -*-===//
//
// The pool is bf16 or fp8 (KVCachePool) in the layout of plan::KVCacheLayout
// ("block_layer_kv_slot_head_dim"), addressed as KVCache.cuh says:
//
//   pool[block][layer][k|v][slot in block][kv_head][head_dim]
//   token at position p of a sequence: block = table[p / bs], slot p % bs
//
// kv_cache_write: one warp per (token, kv head) converts the head vector
// (E4M3: the warp's amax gives the scale). rope_kv_cache_write rotates each
// key as Rope.cu does in the same pass, so the rotated keys never land in
// fp32 memory and an fp8 pool quantizes the rotated values.
//
// paged attention, the fp32 kernel: one thread block of 16 warps per (query
// token, head), for the rows the split-KV decode kernel (DecodeAttention.cuh)
// and the tensor-core prefill kernels (PrefillAttentionSm90.cuh on Hopper,
// PrefillAttention.cuh elsewhere) do not take.
// Warp w visits the keys w, w+16, ...; each lane holds head_dim/32 dimensions
// of q, of the running output and of every key/value it reads, and keeps
// an online softmax (running max and sum); the warps merge at the end.
// Rows::kAll serves every row of a batch; Rows::kDecode only the decode
// rows, one block per (sequence, head), exiting unless the sequence has
// exactly one new token; Rows::kNotDecode the others, one block per (token,
// head), exiting where the sequence has one new token. Streaming plans
// (AttentionDims::keyRotaryDim): key j of a sequence is cached unrotated
// and rotated at j, its index in the cache, as it is read (ropeKeyElement,
// which the split-KV and tensor-core kernels use too). Soft-capped plans
// (AttentionDims::logitSoftcap, Gemma 2) map each scaled score s to
// cap * tanh(s / cap) before the online softmax (softcapScore); both
// options are template flags, free where they are off. q and out are fp32
// or bf16 (launchPagedAttention's two entries; the kernel is a template of
// their element type).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/KVCache.cuh"

#include <cuda_bf16.h>

#include <type_traits>

namespace infer::cuda {

namespace {

constexpr int kWarps = 16;
constexpr int kPerLane = kMaxHeadDim / 32;

/// The rows pagedAttentionKernel computes: every row (grid over tokens),
/// the decode rows (grid over sequences) or the others (grid over tokens).
enum class Rows : int8_t { kAll, kDecode, kNotDecode };

/// One warp per (token, kv head): lane l holds elements l, l + 32, ... of
/// the key (rotated as ropeKernel in Rope.cu does, head_dim = the cache's,
/// when `rotate`) and of the value, and stores them; an E4M3 pool stores
/// the codes of x / (amax / 448) and the scale, as cpu::KVPool::storeHead.
template <KVCacheDtype T, bool rotate>
__global__ void kvCacheWriteKernel(KVCachePool pool, CacheDims dims, int layer,
                                   const float *k, const float *v,
                                   const int64_t *slots,
                                   const int32_t *positions, int rotaryDim,
                                   const float *invFreq, int64_t vectors,
                                   int64_t kLd, int64_t vLd) {
  using Storage = typename KVElement<T>::Storage;
  Storage *data = static_cast<Storage *>(pool.data);
  const int lane = threadIdx.x % 32;
  const int d = dims.headDim, half = rotaryDim / 2;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
       w < vectors; w += warps) {
    const int64_t token = w / dims.numKVHeads;
    const int head = static_cast<int>(w % dims.numKVHeads);
    const int64_t slot = slots[token];
    if (slot < 0)
      continue;
    for (int kv = 0; kv < 2; ++kv) {
      const float *row =
          kv == 0 ? k + token * kLd + head * d : v + token * vLd + head * d;
      float x[kPerLane];
      float amax = 0.0f;
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int e = lane + 32 * r;
        x[r] = 0.0f;
        if (e >= d)
          continue;
        x[r] = row[e];
        if (rotate && kv == 0 && e < rotaryDim) {
          const int f = e < half ? e : e - half;
          const float angle = static_cast<float>(positions[token]) * invFreq[f];
          const float c = static_cast<float>(cos(static_cast<double>(angle)));
          const float s = static_cast<float>(sin(static_cast<double>(angle)));
          const float x1 = row[f], x2 = row[f + half];
          x[r] = e < half ? x1 * c - x2 * s : x2 * c + x1 * s;
        }
        amax = fmaxf(amax, fabsf(x[r]));
      }
      storeHeadVector<T>(data, pool.scales,
                         kvSlotOffset(dims, slot, layer, kv) +
                             int64_t(head) * d,
                         d, x, amax, lane);
    }
  }
}

template <KVCacheDtype T, bool rotate>
cudaError_t launchWrite(KVCachePool pool, CacheDims dims, int layer,
                        const float *k, const float *v, const int64_t *slots,
                        const int32_t *positions, int64_t t, int rotaryDim,
                        const float *invFreq, cudaStream_t stream, int64_t kLd,
                        int64_t vLd) {
  const int64_t vectors = t * dims.numKVHeads;
  constexpr int kThreads = 256, kWarpsPerBlock = kThreads / 32;
  const int64_t blocks = (vectors + kWarpsPerBlock - 1) / kWarpsPerBlock;
  kvCacheWriteKernel<T, rotate>
      <<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0,
         stream>>>(pool, dims, layer, k, v, slots, positions, rotaryDim,
                   invFreq, vectors, kLd, vLd);
  return cudaGetLastError();
}

template <bool rotate>
cudaError_t dispatchWrite(KVCachePool pool, CacheDims dims, int layer,
                          const float *k, const float *v, const int64_t *slots,
                          const int32_t *positions, int64_t t, int rotaryDim,
                          const float *invFreq, cudaStream_t stream,
                          int64_t kLd, int64_t vLd) {
  if (t <= 0 || dims.numKVHeads <= 0)
    return cudaSuccess;
  const int64_t width = int64_t(dims.numKVHeads) * dims.headDim;
  kLd = kLd ? kLd : width;
  vLd = vLd ? vLd : width;
  if (kLd < width || vLd < width)
    return cudaErrorInvalidValue;
  if (dims.headDim > kMaxHeadDim ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchWrite<KVCacheDtype::kBf16, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd);
  case KVCacheDtype::kF8E5M2:
    return launchWrite<KVCacheDtype::kF8E5M2, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd);
  case KVCacheDtype::kF8E4M3:
    return launchWrite<KVCacheDtype::kF8E4M3, rotate>(
        pool, dims, layer, k, v, slots, positions, t, rotaryDim, invFreq,
        stream, kLd, vLd);
  }
  return cudaErrorInvalidValue;
}

/// Element e of the key at element offset `offset`, rotated at `position`
/// when `rotate` (AttentionDims::keyRotaryDim; ropeKeyElement).
template <KVCacheDtype T, bool rotate>
__device__ __forceinline__ float keyAt(const KVCachePool &pool,
                                       const AttentionDims &a, int64_t offset,
                                       float scale, int e, int64_t position) {
  const float x = loadKV<T>(pool.data, offset + e, scale);
  if (!rotate)
    return x;
  return ropeKeyElement<T>(pool.data, offset, scale, a, e, x, position);
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

template <KVCacheDtype T, bool rotate, bool softcap, typename TQ>
__global__ void __launch_bounds__(kWarps * 32)
    pagedAttentionKernel(const TQ *q, KVCachePool pool, CacheDims dims,
                         AttentionDims a, const int32_t *blockTables,
                         int64_t maxBlocksPerSeq, const int32_t *contextLens,
                         const int32_t *queryStartLoc, int64_t numSeqs,
                         Rows rows, TQ *out) {
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = a.headDim;

  int64_t token, seq;
  if (rows == Rows::kDecode) {
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
  if (rows == Rows::kNotDecode && newTokens == 1)
    return;
  const int64_t position =
      contextLens[seq] - newTokens + (token - queryStartLoc[seq]);
  const int64_t first =
      a.slidingWindow > 0 && position - a.slidingWindow + 1 > 0
          ? position - a.slidingWindow + 1
          : 0;
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;
  const int kvHead = head / (a.numHeads / a.numKVHeads);

  float qv[kPerLane], acc[kPerLane];
  const TQ *qh = q + (token * a.numHeads + head) * d;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int e = lane + 32 * r;
    qv[r] = e < d ? toFloat(qh[e]) : 0.0f;
    acc[r] = 0.0f;
  }
  const float cap = a.logitSoftcap, inverseCap = softcap ? 1.0f / cap : 0.0f;
  float runningMax = -INFINITY, runningSum = 0.0f;
  for (int64_t j = first + warp; j <= position; j += kWarps) {
    const int64_t slot = int64_t(table[j / dims.blockSize]) * dims.blockSize +
                         j % dims.blockSize;
    const int64_t kj =
        kvSlotOffset(dims, slot, a.layer, 0) + int64_t(kvHead) * d;
    const int64_t vj =
        kvSlotOffset(dims, slot, a.layer, 1) + int64_t(kvHead) * d;
    const float kScale = KVElement<T>::kScaled ? pool.scales[kj / d] : 1.0f;
    const float vScale = KVElement<T>::kScaled ? pool.scales[vj / d] : 1.0f;
    float dot = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int e = lane + 32 * r;
      if (e < d)
        dot += qv[r] * keyAt<T, rotate>(pool, a, kj, kScale, e, j);
    }
    for (int offset = 16; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    float score = dot * a.scale;
    if constexpr (softcap)
      score = softcapScore(score, cap, inverseCap);
    const float newMax = fmaxf(runningMax, score);
    const float correction = expf(runningMax - newMax);
    const float p = expf(score - newMax);
    runningSum = runningSum * correction + p;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int e = lane + 32 * r;
      const float value = e < d ? loadKV<T>(pool.data, vj + e, vScale) : 0.0f;
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
  TQ *o = out + (token * a.numHeads + head) * d;
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      sum += warpAcc[w][e] * weights[w];
    o[e] = fromFloat<TQ>(sum / total);
  }
}

template <KVCacheDtype T, bool rotate, typename TQ>
void launchWithSoftcap(dim3 grid, const TQ *q, KVCachePool pool, CacheDims dims,
                       AttentionDims attention, const int32_t *blockTables,
                       int64_t maxBlocksPerSeq, const int32_t *contextLens,
                       const int32_t *queryStartLoc, int64_t numSeqs, Rows rows,
                       TQ *out, cudaStream_t stream) {
  auto *kernel = attention.logitSoftcap > 0
                     ? pagedAttentionKernel<T, rotate, true, TQ>
                     : pagedAttentionKernel<T, rotate, false, TQ>;
  kernel<<<grid, kWarps * 32, 0, stream>>>(
      q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
      queryStartLoc, numSeqs, rows, out);
}

template <KVCacheDtype T, typename TQ>
void launchAttentionKernel(dim3 grid, const TQ *q, KVCachePool pool,
                           CacheDims dims, AttentionDims attention,
                           const int32_t *blockTables, int64_t maxBlocksPerSeq,
                           const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           Rows rows, TQ *out, cudaStream_t stream) {
  if (attention.keyRotaryDim > 0)
    launchWithSoftcap<T, true>(grid, q, pool, dims, attention, blockTables,
                               maxBlocksPerSeq, contextLens, queryStartLoc,
                               numSeqs, rows, out, stream);
  else
    launchWithSoftcap<T, false>(grid, q, pool, dims, attention, blockTables,
                                maxBlocksPerSeq, contextLens, queryStartLoc,
                                numSeqs, rows, out, stream);
}

/// launchPagedAttention for q and out of type TQ: the routing of its rows.
template <typename TQ>
cudaError_t pagedAttention(const TQ *q, KVCachePool pool, CacheDims dims,
                           AttentionDims attention, const int32_t *blockTables,
                           int64_t maxBlocksPerSeq, const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           int64_t t, TQ *out, cudaStream_t stream,
                           SplitKVWorkspace workspace, FreshKV fresh = {}) {
  if (t <= 0)
    return cudaSuccess;
  if (attention.headDim > kMaxHeadDim || attention.numHeads > 65535 ||
      (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales))
    return cudaErrorInvalidValue;
  if (!validKeyRope(attention) || !validSoftcap(attention) ||
      (attention.keyRotaryDim > 0 && attention.slidingWindow > 0))
    return cudaErrorInvalidValue;
  // Every sequence has a new token, so a batch of as many tokens as
  // sequences is all decode rows, and only a larger one has prefill rows.
  const bool prefillRows = t > numSeqs;
  const bool sm90 = prefillRows && prefillAttentionSm90Enabled() &&
                    prefillAttentionSm90Supports(attention, dims, pool.dtype);
  const bool tensorCores =
      sm90 || (prefillRows && prefillAttentionSupports(attention) &&
               attention.headDim == dims.headDim &&
               attention.numKVHeads == dims.numKVHeads);
  const bool splitKV = splitKVDecodeSupports(attention, dims);
  if (tensorCores) {
    const cudaError_t status =
        sm90 ? launchPrefillAttentionSm90(q, pool, dims, attention, blockTables,
                                          maxBlocksPerSeq, contextLens,
                                          queryStartLoc, numSeqs, t, out,
                                          stream, workspace, fresh)
             : launchPrefillAttention(q, pool, dims, attention, blockTables,
                                      maxBlocksPerSeq, contextLens,
                                      queryStartLoc, numSeqs, t, out, stream);
    if (status != cudaSuccess)
      return status;
  }
  // A lone sequence with two or more new tokens has no decode rows, so the
  // decode kernel (and its split combine) is not launched for it: a
  // prompt's prefill launched two kernels a layer whose blocks found
  // nothing to do. Known from (t, numSeqs) alone, as a CUDA graph's key is.
  const bool decodeRows = !(numSeqs == 1 && t > 1);
  if (splitKV && decodeRows) {
    const cudaError_t status = launchSplitKVDecode(
        q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
        queryStartLoc, numSeqs, out, workspace, stream);
    if (status != cudaSuccess)
      return status;
  }
  // The fp32 kernel takes what the others left: the prefill rows without
  // tensor cores, the decode rows without split-KV.
  if (splitKV && (tensorCores || !prefillRows))
    return cudaSuccess;
  Rows rows;
  if (splitKV)
    rows = Rows::kNotDecode;
  else if (tensorCores)
    rows = Rows::kDecode;
  else
    rows = Rows::kAll;
  dim3 grid(static_cast<unsigned>(rows == Rows::kDecode ? numSeqs : t),
            static_cast<unsigned>(attention.numHeads));
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    launchAttentionKernel<KVCacheDtype::kBf16>(
        grid, q, pool, dims, attention, blockTables, maxBlocksPerSeq,
        contextLens, queryStartLoc, numSeqs, rows, out, stream);
    break;
  case KVCacheDtype::kF8E5M2:
    launchAttentionKernel<KVCacheDtype::kF8E5M2>(
        grid, q, pool, dims, attention, blockTables, maxBlocksPerSeq,
        contextLens, queryStartLoc, numSeqs, rows, out, stream);
    break;
  case KVCacheDtype::kF8E4M3:
    launchAttentionKernel<KVCacheDtype::kF8E4M3>(
        grid, q, pool, dims, attention, blockTables, maxBlocksPerSeq,
        contextLens, queryStartLoc, numSeqs, rows, out, stream);
    break;
  }
  return cudaGetLastError();
}

} // namespace

cudaError_t launchKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                               const float *k, const float *v,
                               const int64_t *slots, int64_t t,
                               cudaStream_t stream, int64_t kLd, int64_t vLd) {
  return dispatchWrite<false>(pool, dims, layer, k, v, slots, nullptr, t, 0,
                              nullptr, stream, kLd, vLd);
}

cudaError_t launchRopeKVCacheWrite(
    KVCachePool pool, CacheDims dims, int layer, const float *k, const float *v,
    const int64_t *slots, const int32_t *positions, int64_t t, int rotaryDim,
    const float *invFreq, cudaStream_t stream, int64_t kLd, int64_t vLd) {
  return dispatchWrite<true>(pool, dims, layer, k, v, slots, positions, t,
                             rotaryDim, invFreq, stream, kLd, vLd);
}

cudaError_t launchPagedAttention(
    const float *q, KVCachePool pool, CacheDims dims, AttentionDims attention,
    const int32_t *blockTables, int64_t maxBlocksPerSeq,
    const int32_t *contextLens, const int32_t *queryStartLoc, int64_t numSeqs,
    int64_t t, float *out, cudaStream_t stream, SplitKVWorkspace workspace) {
  return pagedAttention(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                        contextLens, queryStartLoc, numSeqs, t, out, stream,
                        workspace);
}

cudaError_t
launchPagedAttention(const __nv_bfloat16 *q, KVCachePool pool, CacheDims dims,
                     AttentionDims attention, const int32_t *blockTables,
                     int64_t maxBlocksPerSeq, const int32_t *contextLens,
                     const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                     __nv_bfloat16 *out, cudaStream_t stream,
                     SplitKVWorkspace workspace, FreshKV fresh) {
  return pagedAttention(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                        contextLens, queryStartLoc, numSeqs, t, out, stream,
                        workspace, fresh);
}

} // namespace infer::cuda
