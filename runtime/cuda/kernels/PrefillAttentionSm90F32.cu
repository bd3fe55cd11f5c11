//===- PrefillAttentionSm90F32.cu - Hopper prefill attention, fp32 -------===//
//
// The fp32 q/out entry of the Hopper prefill attention, for the backend's
// fp32 activations until they are bf16 end to end.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/PrefillAttentionSm90.cuh"

namespace infer::cuda {

cudaError_t launchPrefillAttentionSm90(
    const float *q, KVCachePool pool, CacheDims dims, AttentionDims attention,
    const int32_t *blockTables, int64_t maxBlocksPerSeq,
    const int32_t *contextLens, const int32_t *queryStartLoc, int64_t numSeqs,
    int64_t t, float *out, cudaStream_t stream, SplitKVWorkspace workspace,
    FreshKV fresh) {
  return sm90::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                      contextLens, queryStartLoc, numSeqs, t, out, stream,
                      workspace, fresh);
}

} // namespace infer::cuda
