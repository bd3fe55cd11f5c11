//===- Sampling.cu - Greedy and top-k/top-p sampling per logits row -------===//
//
// One block of kThreads per row; every phase re-reads the row (it stays in
// L2 for one block's working set) and recomputes weights from logits rather
// than storing them:
//
//   argmax ──▶ greedy: done
//          └─▶ top-k threshold: radix select of the k-th largest weight,
//              4 passes of 8 bits, counts per bin
//          ──▶ top-p threshold: radix select over the same bits, but the
//              bins hold fixed-point mass, ascending until it passes
//              (1 - p) * total
//          ──▶ inverse CDF: per-thread contiguous chunks, a block scan of
//              the chunk masses, one thread walks its chunk to the target
//
// Weights are >= 0, so their fp32 bit patterns order like their values.
// A row with a NaN or +infinite logit (masked or not) has no token to
// choose: it gets kNonFiniteLogitsToken, as the host's sampleRow gives, and
// the engine fails that request.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/SamplingKernels.h"
#include "runtime/cuda/kernels/DependentLaunch.cuh"

#include "runtime/backend/FiniteLogits.h"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace infer::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
/// Masses are weights (<= 1) times 2^40: a vocabulary of 2^23 sums below
/// 2^63.
constexpr double kFixedOne = 1099511627776.0;

using Mass = unsigned long long;

/// The row's weights under its parameters; the max logit is known.
struct RowWeights {
  const float *logits;
  const DeviceRowSampling &p;
  float maxLogit;

  __device__ bool masked(int64_t i) const {
    for (int j = 0; j < p.numMaskedIds; ++j)
      if (p.maskedIds[j] == i)
        return true;
    return false;
  }
  __device__ float logit(int64_t i) const {
    return masked(i) ? -INFINITY : logits[i];
  }
  /// 0 for excluded tokens (masked, -inf, NaN, below min_p).
  __device__ float weight(int64_t i) const {
    const float l = logit(i);
    if (l == -INFINITY)
      return 0.0f;
    const float w = expf((l - maxLogit) / p.temperature);
    return w > 0.0f && w >= p.minP ? w : 0.0f;
  }
  __device__ Mass mass(float w) const {
    return static_cast<Mass>(static_cast<double>(w) * kFixedOne);
  }
};

/// (value, id) with the larger value, the lower id on ties.
__device__ void better(float &v, int64_t &i, float ov, int64_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

/// The bits of the k-th largest weight of the row (ties counted).
__device__ uint32_t selectKth(const RowWeights &row, int64_t vocab, int64_t k) {
  __shared__ unsigned hist[256];
  __shared__ uint32_t sPrefix;
  __shared__ int64_t sRemaining;
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads)
      hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint32_t key = __float_as_uint(row.weight(i));
      if ((key & mask) == prefix)
        atomicAdd(&hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;
      int b = 255;
      for (; b > 0 && above + hist[b] < remaining; --b)
        above += hist[b];
      sPrefix = prefix | (uint32_t(b) << shift);
      sRemaining = remaining - above;
    }
    __syncthreads();
    prefix = sPrefix;
    remaining = sRemaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  return prefix;
}

/// The bits of the smallest kept weight v such that the mass of kept
/// weights <= v passes `budget`: weights below it are the ones top-p drops.
__device__ uint32_t selectTopP(const RowWeights &row, int64_t vocab,
                               float threshold, Mass budget) {
  __shared__ Mass hist[256];
  __shared__ uint32_t sPrefix;
  __shared__ Mass sBelow;
  uint32_t prefix = 0, mask = 0;
  Mass below = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads)
      hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float w = row.weight(i);
      const uint32_t key = __float_as_uint(w);
      if (w > 0.0f && w >= threshold && (key & mask) == prefix)
        atomicAdd(&hist[(key >> shift) & 255], row.mass(w));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      Mass cumulative = below;
      int b = 0;
      for (; b < 255 && cumulative + hist[b] <= budget; ++b)
        cumulative += hist[b];
      sPrefix = prefix | (uint32_t(b) << shift);
      sBelow = cumulative;
    }
    __syncthreads();
    prefix = sPrefix;
    below = sBelow;
    mask |= 255u << shift;
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads)
    sampleRowsKernel(const float *logits, int64_t vocab,
                     const DeviceRowSampling *params, int32_t *tokens) {
  waitForPriorGrids();
  allowDependentGrids();
  using Reduce = cub::BlockReduce<Mass, kThreads>;
  using Scan = cub::BlockScan<Mass, kThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ float warpValue[kWarps];
  __shared__ int64_t warpId[kWarps];
  __shared__ Mass sTotal;

  // The parameters in shared memory: every weight reads the masked ids.
  __shared__ DeviceRowSampling p;
  const int64_t r = blockIdx.x;
  if (threadIdx.x == 0)
    p = params[r];
  __syncthreads();
  RowWeights row{logits + r * vocab, p, 0.0f};

  // Argmax: each thread sees its ids in increasing order, so `>` keeps the
  // lowest of its ties; the reductions break ties by id.
  float best = -INFINITY;
  int64_t bestId = INT64_MAX;
  int nonFinite = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float raw = row.logits[i];
    nonFinite |= isnan(raw) || raw == INFINITY;
    const float l = row.logit(i);
    if (l > best) {
      best = l;
      bestId = i;
    }
  }
  if (__syncthreads_or(nonFinite)) {
    if (threadIdx.x == 0)
      tokens[r] = kNonFiniteLogitsToken;
    return;
  }
  for (int offset = 16; offset > 0; offset /= 2)
    better(best, bestId, __shfl_down_sync(0xffffffffu, best, offset),
           __shfl_down_sync(0xffffffffu, bestId, offset));
  if (threadIdx.x % 32 == 0) {
    warpValue[threadIdx.x / 32] = best;
    warpId[threadIdx.x / 32] = bestId;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    best = warpValue[threadIdx.x];
    bestId = warpId[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2)
      better(best, bestId, __shfl_down_sync(0xffffffffu, best, offset),
             __shfl_down_sync(0xffffffffu, bestId, offset));
    if (threadIdx.x == 0) {
      warpValue[0] = best;
      warpId[0] = bestId;
    }
  }
  __syncthreads();
  best = warpValue[0];
  bestId = warpId[0];
  if (bestId == INT64_MAX || p.temperature <= 0.0f) {
    if (threadIdx.x == 0)
      tokens[r] = bestId == INT64_MAX ? 0 : static_cast<int32_t>(bestId);
    return;
  }
  row.maxLogit = best;

  float threshold = 0.0f;
  if (p.topK > 0 && p.topK < vocab)
    threshold = __uint_as_float(selectKth(row, vocab, p.topK));
  if (p.topP < 1.0f) {
    Mass local = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float w = row.weight(i);
      if (w > 0.0f && w >= threshold)
        local += row.mass(w);
    }
    const Mass total = Reduce(temp.reduce).Sum(local);
    if (threadIdx.x == 0)
      sTotal = total;
    __syncthreads();
    const Mass budget = static_cast<Mass>((1.0 - static_cast<double>(p.topP)) *
                                          static_cast<double>(sTotal));
    threshold = fmaxf(
        threshold, __uint_as_float(selectTopP(row, vocab, threshold, budget)));
  }

  // Inverse CDF in id order over contiguous per-thread chunks.
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t begin = min(vocab, threadIdx.x * chunk);
  const int64_t end = min(vocab, begin + chunk);
  Mass local = 0;
  for (int64_t i = begin; i < end; ++i) {
    const float w = row.weight(i);
    if (w > 0.0f && w >= threshold)
      local += row.mass(w);
  }
  Mass before, total;
  Scan(temp.scan).ExclusiveSum(local, before, total);
  if (total == 0) {
    // No weight survived the filters: the maximum is the choice.
    if (threadIdx.x == 0)
      tokens[r] = static_cast<int32_t>(bestId);
    return;
  }
  Mass target = static_cast<Mass>(p.uniform * static_cast<double>(total));
  if (target >= total)
    target = total - 1;
  if (local > 0 && before <= target && target < before + local) {
    Mass cumulative = before;
    for (int64_t i = begin; i < end; ++i) {
      const float w = row.weight(i);
      if (w > 0.0f && w >= threshold)
        cumulative += row.mass(w);
      if (cumulative > target) {
        tokens[r] = static_cast<int32_t>(i);
        break;
      }
    }
  }
}

} // namespace

cudaError_t launchSampleRows(const float *logits, int64_t rows, int64_t vocab,
                             const DeviceRowSampling *params, int32_t *tokens,
                             cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  return launchDependent(sampleRowsKernel, static_cast<unsigned>(rows),
                         kThreads, 0, stream, logits, vocab, params, tokens);
}

namespace {

__global__ void feedSampledTokensKernel(int32_t *tokenIds,
                                        const DeviceSampledToken *pairs,
                                        int64_t count, const int32_t *sampled,
                                        int64_t vocab) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= count)
    return;
  const int32_t token = sampled[pairs[i].row];
  tokenIds[pairs[i].tokenIndex] = token >= 0 && token < vocab ? token : 0;
}

} // namespace

cudaError_t launchFeedSampledTokens(int32_t *tokenIds,
                                    const DeviceSampledToken *pairs,
                                    int64_t count, const int32_t *sampled,
                                    int64_t vocab, cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  constexpr int kFeedThreads = 256;
  const auto blocks =
      static_cast<unsigned>((count + kFeedThreads - 1) / kFeedThreads);
  feedSampledTokensKernel<<<blocks, kFeedThreads, 0, stream>>>(
      tokenIds, pairs, count, sampled, vocab);
  return cudaGetLastError();
}

} // namespace infer::cuda
