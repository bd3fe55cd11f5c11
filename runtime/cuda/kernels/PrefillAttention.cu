//===- PrefillAttention.cu - mma.sync prefill attention, bf16 ------------===//
//
// The bf16 entry of the mma.sync prefill attention (PrefillAttention.cuh)
// and its routing check.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/PrefillAttention.cuh"

namespace infer::cuda {

bool prefillAttentionSupports(const AttentionDims &attention) {
  if ((attention.headDim != 64 && attention.headDim != 128) ||
      !specializedScoreOptions(attention))
    return false;
  if (attention.numKVHeads <= 0 || attention.numKVHeads > 65535 ||
      attention.numHeads % attention.numKVHeads != 0)
    return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess)
    return false;
  return major >= 8;
}

cudaError_t
launchPrefillAttention(const __nv_bfloat16 *q, KVCachePool pool, CacheDims dims,
                       AttentionDims attention, const int32_t *blockTables,
                       int64_t maxBlocksPerSeq, const int32_t *contextLens,
                       const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                       __nv_bfloat16 *out, cudaStream_t stream) {
  return fa2::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                     contextLens, queryStartLoc, numSeqs, t, out, stream);
}

} // namespace infer::cuda
