//===- PrefillAttention.cuh - mma.sync prefill attention -------*- CUDA -*-===//
//
// FlashAttention-2 over the paged pool for the queries of sequences with
// two or more new tokens (prefill and chunked-prefill rows of a batch); the
// decode rows stay with pagedAttentionKernel (Attention.cu). A bf16 pool's
// tiles are copied with cp.async; an fp8 pool's pass through registers,
// 8 codes per thread and chunk decoded (E4M3: times the head vector's scale)
// and rounded to bf16 on their way into shared memory. Streaming plans
// (AttentionDims::keyRotaryDim > 0) stage keys through registers for every
// pool: key j is decoded to fp32, rotated at j (ropeKeyElement, the fp32
// kernel's arithmetic), then rounded to bf16; values keep their path.
// Soft-capped plans (AttentionDims::logitSoftcap > 0) cap the scaled scores
// in fp32 (fastSoftcapScore) before the masks; like the rotation, a template
// flag that costs nothing where it is off.
//
// One thread block of 4 warps per (tile of 64 rows, kv head). The rows of a
// sequence are its (query, head of the kv head's group) pairs, query-major:
//
//   row f of the sequence = query f / group, head kvHead * group + f % group
//
// so the heads sharing a kv head read each K/V tile once (GQA/MQA), and a
// tile of a sequence with few new tokens still fills the MMA rows. Warp w
// owns rows 16w .. 16w+15. Each step moves 64 keys through shared memory
// (cp.async, rows XOR-swizzled in 16-byte chunks so ldmatrix is conflict
// free; two stages, the next tile's K and V in flight during this tile's
// math, its block-table entries read one tile earlier still) and computes
//
//   S = Q K^T        mma.sync m16n8k16 bf16, Q fragments kept in registers
//   online softmax   fp32, base 2, running max and sum per row
//   O += P V         P re-packed from the S accumulators as bf16 A fragments
//
// Tiles of the flat batch: sequence s owns the grid indices
//   [qsl[s] * group / 64 + s, qsl[s + 1] * group / 64 + s + 1)
// (at least ceil(new_tokens * group / 64) of them), so a block finds its
// sequence by binary search on the device and the launch needs no host copy
// of the batch: it can be captured in a CUDA graph. The grid is 1-d with the
// kv head fastest and runs the longest (last, causal) tiles first.
//
// The kernels and launchers are templates of the q/out element type (fp32
// or bf16); PrefillAttention.cu instantiates the bf16 ones,
// PrefillAttentionF32.cu the fp32 ones.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTION_CUH
#define INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTION_CUH

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/KVCache.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace infer::cuda::fa2 {

constexpr int kRows = 64;
constexpr int kKeys = 64;
constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared; bytes = 0 fills zeros and reads nothing.
__device__ __forceinline__ void copyAsync16(uint32_t dst, const void *src,
                                            int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}

__device__ __forceinline__ void copyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

/// Waits until at most `pending` of this thread's copy groups are in flight.
template <int pending> __device__ __forceinline__ void copyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4],
                                                uint32_t addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

/// c += a * b, m16n8k16, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Element offset of 16-byte chunk `chunk` of tile row `row`.
template <int D> __device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) * 8);
}

/// 8 fp32 values as 8 bf16 in 16 bytes.
__device__ __forceinline__ uint4 packBf16x8(const float (&x)[8]) {
  return make_uint4(packBf16(x[0], x[1]), packBf16(x[2], x[3]),
                    packBf16(x[4], x[5]), packBf16(x[6], x[7]));
}

/// 8 fp8 codes (E4M3: times `scale`) as 8 bf16 in 16 bytes.
template <KVCacheDtype T>
__device__ __forceinline__ uint4 decodeToBf16x8(uint2 codes, float scale) {
  float x[8];
  decodeFp8x8<T>(codes, scale, x);
  return packBf16x8(x);
}

/// Chunk `chunk` of key j (element offset kSrc, in its head vector's chunk
/// `chunk`) as staged through registers: decoded to fp32, rotated at j when
/// kRotate (ropeKeyElement), rounded to bf16.
template <int D, KVCacheDtype T, bool kRotate>
__device__ __forceinline__ uint4 stagedKey(const KVCachePool &pool,
                                           const AttentionDims &a, int64_t kSrc,
                                           int chunk, int64_t j) {
  float scale = 1.0f;
  if constexpr (KVElement<T>::kScaled)
    scale = pool.scales[kSrc / D];
  float x[8];
  loadKV8<T>(pool.data, kSrc, scale, x);
  if constexpr (kRotate) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e] = ropeKeyElement<T>(pool.data, kSrc - chunk * 8, scale, a,
                               chunk * 8 + e, x[e], j);
  }
  return packBf16x8(x);
}

template <int D, KVCacheDtype T, bool kRotate, bool kSoftcap, typename TQ>
__global__ void __launch_bounds__(kThreads)
    prefillAttentionKernel(const TQ *q, KVCachePool pool, CacheDims dims,
                           AttentionDims a, const int32_t *blockTables,
                           int64_t maxBlocksPerSeq, const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           TQ *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kChunks = D / 8; // 16-byte chunks of a key row
  constexpr int kSteps = D / 16; // k-steps of Q K^T
  constexpr int kRowStep = kThreads / kChunks;
  constexpr int kRowsPerThread = kKeys / kRowStep;
  constexpr int kTileElements = kKeys * D;
  // [stage][k|v][key][head_dim], prefillSharedBytes<D>() bytes.
  extern __shared__ __align__(128) __nv_bfloat16 tiles[];

  const int group = a.numHeads / a.numKVHeads;
  const int kvHead = blockIdx.x % a.numKVHeads;
  const int64_t tile =
      int64_t(gridDim.x / a.numKVHeads) - 1 - blockIdx.x / a.numKVHeads;
  int64_t lo = 0, hi = numSeqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (int64_t(queryStartLoc[mid]) * group / kRows + mid <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t seq = lo;
  const int64_t seqStart = queryStartLoc[seq];
  const int64_t newTokens = queryStartLoc[seq + 1] - seqStart;
  if (newTokens < 2)
    return;
  const int64_t flatBegin =
      (tile - (seqStart * group / kRows + seq)) * int64_t(kRows);
  const int64_t flatCount = newTokens * group;
  if (flatBegin >= flatCount)
    return;
  const int64_t flatLast =
      (flatBegin + kRows < flatCount ? flatBegin + kRows : flatCount) - 1;
  const int64_t firstPos = contextLens[seq] - newTokens;
  const int64_t posLo = firstPos + flatBegin / group;
  const int64_t posHi = firstPos + flatLast / group;
  const int window = a.slidingWindow;
  const int64_t keyBegin =
      window > 0 && posLo - window + 1 > 0 ? posLo - window + 1 : 0;
  const int64_t keyEnd = posHi + 1;
  const int32_t *table = blockTables + seq * maxBlocksPerSeq;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int quad = lane % 4;

  // Thread tid copies chunk tid % kChunks of the rows tid / kChunks + i *
  // kRowStep of each tile; blockOf[i] holds those rows' block-table entries
  // for the next tile to load. Rows at or past keyEnd are zeros (their
  // scores are masked, their P is 0).
  const int chunk = tid % kChunks;
  int32_t blockOf[kRowsPerThread];
  auto fetchTable = [&](int64_t keyStart) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      // Positions fit in int32 (context_lens do): 32-bit division.
      const int j = static_cast<int>(keyStart) + tid / kChunks + i * kRowStep;
      blockOf[i] = j < keyEnd ? table[j / dims.blockSize] : 0;
    }
  };
  const int64_t slotElements = int64_t(dims.numKVHeads) * D;
  auto loadTiles = [&](int stage, int64_t keyStart) {
    __nv_bfloat16 *kDst = tiles + stage * 2 * kTileElements;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = tid / kChunks + i * kRowStep;
      const int j = static_cast<int>(keyStart) + r;
      int64_t kSrc = 0;
      const int64_t vDelta = dims.blockSize * slotElements;
      if (j < keyEnd) {
        const int64_t slot =
            int64_t(blockOf[i]) * dims.blockSize + j % dims.blockSize;
        kSrc = kvSlotOffset(dims, slot, a.layer, 0) + int64_t(kvHead) * D +
               chunk * 8;
      }
      const int offset = swizzled<D>(r, chunk);
      if constexpr (T == KVCacheDtype::kBf16) {
        const auto *values = static_cast<const __nv_bfloat16 *>(pool.data);
        const int bytes = j < keyEnd ? 16 : 0;
        if constexpr (kRotate) {
          // Rotated keys pass through registers (fp32), as fp8 ones do.
          *reinterpret_cast<uint4 *>(kDst + offset) =
              j < keyEnd ? stagedKey<D, T, true>(pool, a, kSrc, chunk, j)
                         : make_uint4(0, 0, 0, 0);
        } else {
          copyAsync16(sharedAddress(kDst + offset), values + kSrc, bytes);
        }
        copyAsync16(sharedAddress(kDst + kTileElements + offset),
                    values + kSrc + vDelta, bytes);
      } else {
        // fp8 passes through registers: 8 codes in, 8 bf16 out (keys
        // rotated in fp32 first when kRotate).
        uint4 kBf16 = make_uint4(0, 0, 0, 0), vBf16 = kBf16;
        if (j < keyEnd) {
          const auto *codes = static_cast<const uint8_t *>(pool.data);
          const uint2 vCodes =
              *reinterpret_cast<const uint2 *>(codes + kSrc + vDelta);
          float vScale = 1.0f;
          if constexpr (KVElement<T>::kScaled)
            vScale = pool.scales[(kSrc + vDelta) / D];
          kBf16 = stagedKey<D, T, kRotate>(pool, a, kSrc, chunk, j);
          vBf16 = decodeToBf16x8<T>(vCodes, vScale);
        }
        *reinterpret_cast<uint4 *>(kDst + offset) = kBf16;
        *reinterpret_cast<uint4 *>(kDst + kTileElements + offset) = vBf16;
      }
    }
    copyAsyncCommit();
  };
  fetchTable(keyBegin);
  loadTiles(0, keyBegin);
  if (keyBegin + kKeys < keyEnd)
    fetchTable(keyBegin + kKeys);

  // This thread's two rows (lane / 4 and lane / 4 + 8 of the warp's 16).
  int64_t pos[2];
  const TQ *qRow[2];
  bool valid[2];
  TQ *outRow[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t flat = flatBegin + warp * 16 + lane / 4 + 8 * i;
    valid[i] = flat <= flatLast;
    const int64_t query = flat / group;
    pos[i] = firstPos + query;
    const int64_t head = int64_t(kvHead) * group + flat % group;
    const int64_t offset = ((seqStart + query) * a.numHeads + head) * D;
    qRow[i] = q + offset;
    outRow[i] = out + offset;
  }
  uint32_t qFrag[kSteps][4];
#pragma unroll
  for (int k = 0; k < kSteps; ++k)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const TQ *src = qRow[i] + k * 16 + half * 8 + quad * 2;
        if constexpr (std::is_same_v<TQ, __nv_bfloat16>) {
          qFrag[k][half * 2 + i] =
              valid[i] ? *reinterpret_cast<const uint32_t *>(src) : 0u;
        } else {
          float2 v = make_float2(0.0f, 0.0f);
          if (valid[i])
            v = *reinterpret_cast<const float2 *>(src);
          qFrag[k][half * 2 + i] = packBf16(v.x, v.y);
        }
      }

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.0f;
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  const float scaleLog2 = a.scale * 1.4426950408889634f;
  // The cap in base-2 units, as the scores x = scaleLog2 * q.k are held.
  const float capLog2 = a.logitSoftcap * 1.4426950408889634f;
  const float inverseCapLog2 = kSoftcap ? 1.0f / capLog2 : 0.0f;

  // ldmatrix lane roles: matrix lane / 8, its row lane % 8.
  const int ldMatrix = lane / 8, ldRow = lane % 8;
  int stage = 0;
  for (int64_t keyStart = keyBegin; keyStart < keyEnd;
       keyStart += kKeys, stage ^= 1) {
    if (keyStart + kKeys < keyEnd) {
      // The other stage was last read before the previous step's barrier.
      loadTiles(stage ^ 1, keyStart + kKeys);
      if (keyStart + 2 * kKeys < keyEnd)
        fetchTable(keyStart + 2 * kKeys);
      copyAsyncWait<1>();
    } else {
      copyAsyncWait<0>();
    }
    __syncthreads();
    const uint32_t kBase = sharedAddress(tiles + stage * 2 * kTileElements);
    const uint32_t vBase = kBase + 2 * kTileElements;

    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < kSteps; ++k)
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        const int row = np * 16 + ldRow + (ldMatrix / 2) * 8;
        ldmatrixX4(b, kBase + 2 * swizzled<D>(row, k * 2 + ldMatrix % 2));
        mma(s[2 * np], qFrag[k], b[0], b[1]);
        mma(s[2 * np + 1], qFrag[k], b[2], b[3]);
      }

    // Causal and window masks, needed only where the tile crosses them.
    const bool mask = keyStart + kKeys - 1 > posLo ||
                      (window > 0 && keyStart <= posHi - window);
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * scaleLog2;
        if constexpr (kSoftcap)
          x = fastSoftcapScore(x, capLog2, inverseCapLog2);
        if (mask) {
          const int64_t key = keyStart + n * 8 + quad * 2 + (e & 1);
          const int64_t p = pos[e / 2];
          if (key > p || (window > 0 && key <= p - window))
            x = -INFINITY;
        }
        s[n][e] = x;
      }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float m = rowMax[i];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
        m = fmaxf(m, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      // A row with no visible key yet keeps max -inf; exponents use 0.
      const float base = m == -INFINITY ? 0.0f : m;
      const float correction = fastExp2(rowMax[i] - base);
      rowMax[i] = m;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][2 * i] = fastExp2(s[n][2 * i] - base);
        s[n][2 * i + 1] = fastExp2(s[n][2 * i + 1] - base);
        sum += s[n][2 * i] + s[n][2 * i + 1];
      }
      rowSum[i] = rowSum[i] * correction + sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][2 * i] *= correction;
        acc[n][2 * i + 1] *= correction;
      }
    }

#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k) {
      const uint32_t p[4] = {packBf16(s[2 * k][0], s[2 * k][1]),
                             packBf16(s[2 * k][2], s[2 * k][3]),
                             packBf16(s[2 * k + 1][0], s[2 * k + 1][1]),
                             packBf16(s[2 * k + 1][2], s[2 * k + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        const int row = k * 16 + ldRow + (ldMatrix % 2) * 8;
        ldmatrixX4Trans(b, vBase + 2 * swizzled<D>(row, dp * 2 + ldMatrix / 2));
        mma(acc[2 * dp], p, b[0], b[1]);
        mma(acc[2 * dp + 1], p, b[2], b[3]);
      }
    }
    // Every warp is done with this stage before the next step refills it.
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = rowSum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (!valid[i])
      continue;
    const float inv = 1.0f / sum;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float x0 = acc[n][2 * i] * inv, x1 = acc[n][2 * i + 1] * inv;
      if constexpr (std::is_same_v<TQ, __nv_bfloat16>)
        *reinterpret_cast<uint32_t *>(outRow[i] + n * 8 + quad * 2) =
            packBf16(x0, x1);
      else
        *reinterpret_cast<float2 *>(outRow[i] + n * 8 + quad * 2) =
            make_float2(x0, x1);
    }
  }
#else
  __trap();
#endif
}

template <int D> constexpr int prefillSharedBytes() {
  return 2 * 2 * kKeys * D * int(sizeof(__nv_bfloat16));
}

template <int D, KVCacheDtype T, typename TQ>
cudaError_t launchOfShape(const TQ *q, KVCachePool pool, CacheDims dims,
                          AttentionDims attention, const int32_t *blockTables,
                          int64_t maxBlocksPerSeq, const int32_t *contextLens,
                          const int32_t *queryStartLoc, int64_t numSeqs,
                          int64_t t, TQ *out, cudaStream_t stream) {
  const int64_t group = attention.numHeads / attention.numKVHeads;
  const int64_t blocks = (t * group / kRows + numSeqs) * attention.numKVHeads;
  if (blocks > 0x7fffffff)
    return cudaErrorInvalidValue;
  // Above 48 KiB a kernel's dynamic shared memory needs this opt-in (per
  // device, so on every launch; it enqueues nothing and may be captured).
  constexpr int kShared = prefillSharedBytes<D>();
  // The score options (specializedScoreOptions): a key rope or a soft-cap
  // or neither.
  auto *kernel = attention.keyRotaryDim > 0
                     ? prefillAttentionKernel<D, T, true, false, TQ>
                 : attention.logitSoftcap > 0
                     ? prefillAttentionKernel<D, T, false, true, TQ>
                     : prefillAttentionKernel<D, T, false, false, TQ>;
  const cudaError_t status = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  if (status != cudaSuccess)
    return status;
  kernel<<<static_cast<unsigned>(blocks), kThreads, kShared, stream>>>(
      q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
      queryStartLoc, numSeqs, out);
  return cudaGetLastError();
}

template <int D, typename TQ>
cudaError_t launchOfDtype(const TQ *q, KVCachePool pool, CacheDims dims,
                          AttentionDims attention, const int32_t *blockTables,
                          int64_t maxBlocksPerSeq, const int32_t *contextLens,
                          const int32_t *queryStartLoc, int64_t numSeqs,
                          int64_t t, TQ *out, cudaStream_t stream) {
  switch (pool.dtype) {
  case KVCacheDtype::kBf16:
    return launchOfShape<D, KVCacheDtype::kBf16>(
        q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
        queryStartLoc, numSeqs, t, out, stream);
  case KVCacheDtype::kF8E5M2:
    return launchOfShape<D, KVCacheDtype::kF8E5M2>(
        q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
        queryStartLoc, numSeqs, t, out, stream);
  case KVCacheDtype::kF8E4M3:
    return launchOfShape<D, KVCacheDtype::kF8E4M3>(
        q, pool, dims, attention, blockTables, maxBlocksPerSeq, contextLens,
        queryStartLoc, numSeqs, t, out, stream);
  }
  return cudaErrorInvalidValue;
}

/// launchPrefillAttention (Kernels.h) for q and out of type TQ.
template <typename TQ>
cudaError_t launch(const TQ *q, KVCachePool pool, CacheDims dims,
                   AttentionDims attention, const int32_t *blockTables,
                   int64_t maxBlocksPerSeq, const int32_t *contextLens,
                   const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                   TQ *out, cudaStream_t stream) {
  if (t <= 0 || numSeqs <= 0)
    return cudaSuccess;
  if (!prefillAttentionSupports(attention) ||
      attention.headDim != dims.headDim ||
      attention.numKVHeads != dims.numKVHeads)
    return cudaErrorInvalidValue;
  if (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales)
    return cudaErrorInvalidValue;
  if (attention.headDim == 64)
    return launchOfDtype<64>(q, pool, dims, attention, blockTables,
                             maxBlocksPerSeq, contextLens, queryStartLoc,
                             numSeqs, t, out, stream);
  return launchOfDtype<128>(q, pool, dims, attention, blockTables,
                            maxBlocksPerSeq, contextLens, queryStartLoc,
                            numSeqs, t, out, stream);
}

} // namespace infer::cuda::fa2

#endif // INFER_RUNTIME_CUDA_KERNELS_PREFILLATTENTION_CUH
