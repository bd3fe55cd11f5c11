//===- CacheWriteKernels.h - KV-cache writes of bf16 / f16 rows -*- C++ -*-===//
//
// Launchers of kernels/CacheWrite.cu: kv_cache_write, rope_kv_cache_write and
// rope_qkv_cache_write (with the rotated queries) of key and value rows in the
// activation type T (__nv_bfloat16 or __half) into the paged pool (KVCachePool
// in runtime/cuda/Kernels.h: bf16 values, E5M2 codes, or E4M3 codes with one
// fp32 scale per head vector), byte for byte what cpu::kvCacheWrite /
// cpu::ropeKVCacheWrite store for the same values (rotated keys: up to the fp32
// rounding of the rotation). Each returns the launch's cudaError_t, allocates
// nothing and synchronises nothing, so it can be captured in a CUDA graph.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_CACHEWRITEKERNELS_H
#define INFER_RUNTIME_CUDA_CACHEWRITEKERNELS_H

#include "runtime/cuda/Kernels.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace infer::cuda {

/// Writes k and v rows [t, kvh*d] of `layer` to their slots; slot -1 skips.
/// One warp per (token, kv head) reads the head vector as fp32 and stores
/// it as the pool's type: a bf16 pool the value rounded to bf16 (the value
/// itself for bf16 rows), an E5M2 pool its code, an E4M3 pool the code of
/// value / scale with scale = amax / 448 over the head vector (0 and codes
/// 0 for a zero vector). Row r of k starts at k + r * kLd, of v at
/// v + r * vLd (0: kvh * d, contiguous). head_dim <= kMaxHeadDim.
///
/// With `fresh` (FreshKV of rows = t, runtime/cuda/Kernels.h; data 16-byte
/// aligned) and an fp8 pool, the launch also writes FreshKV's rows of the
/// call's tokens, [0, t) of each plane (those of slot -1 tokens stay
/// unwritten), where its rows are in whole 16-byte packs, and says whether
/// it did in *freshWritten. The same holds for the two launchers below.
template <typename T>
cudaError_t launchKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                               const T *k, const T *v, const int64_t *slots,
                               int64_t t, cudaStream_t stream, int64_t kLd = 0,
                               int64_t vLd = 0, FreshKV fresh = {},
                               bool *freshWritten = nullptr);

/// rope_kv_cache_write: the keys rotated as launchRope rotates them
/// (head_dim = dims.headDim, rotaryDim <= head_dim, positions[t]), in fp32,
/// and stored with v as launchKVCacheWrite stores them: the rotated keys
/// are rounded or quantized once, never stored as T. longFrom and dynamic
/// as for launchRope (longrope's second table, dynamic NTK).
template <typename T>
cudaError_t launchRopeKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                                   const T *k, const T *v, const int64_t *slots,
                                   const int32_t *positions, int64_t t,
                                   int rotaryDim, const float *invFreq,
                                   cudaStream_t stream, int64_t kLd = 0,
                                   int64_t vLd = 0, int longFrom = 0,
                                   DynamicRope dynamic = {}, FreshKV fresh = {},
                                   bool *freshWritten = nullptr);

/// rope_qkv_cache_write in one launch: q [t, qHeads * head_dim] rotated into
/// qOut (contiguous) as launchRope rotates it, and k and v written as
/// launchRopeKVCacheWrite writes them, with one rope (rotaryDim, invFreq,
/// longFrom, dynamic) whose factors each token takes once; the same bytes as
/// those two launches. Row r of q starts at q + r * qLd (0: contiguous). A
/// token whose slot is -1 has its queries rotated and nothing cached.
/// `fresh` and `freshWritten` as for launchKVCacheWrite.
template <typename T>
cudaError_t launchRopeQKVCacheWrite(
    const T *q, T *qOut, int64_t qHeads, KVCachePool pool, CacheDims dims,
    int layer, const T *k, const T *v, const int64_t *slots,
    const int32_t *positions, int64_t t, int rotaryDim, const float *invFreq,
    cudaStream_t stream, int64_t qLd = 0, int64_t kLd = 0, int64_t vLd = 0,
    int longFrom = 0, DynamicRope dynamic = {}, FreshKV fresh = {},
    bool *freshWritten = nullptr);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_CACHEWRITEKERNELS_H
