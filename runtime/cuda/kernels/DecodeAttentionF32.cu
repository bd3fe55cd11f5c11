//===- DecodeAttentionF32.cu - Split-KV paged decode, fp32 -----*- CUDA -*-===//
//
// The fp32 q/out entry of the split-KV decode attention, for the backend's
// fp32 activations until they are bf16 end to end.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/DecodeAttention.cuh"

namespace infer::cuda {

cudaError_t
launchSplitKVDecode(const float *q, KVCachePool pool, CacheDims dims,
                    AttentionDims attention, const int32_t *blockTables,
                    int64_t maxBlocksPerSeq, const int32_t *contextLens,
                    const int32_t *queryStartLoc, int64_t numSeqs, float *out,
                    SplitKVWorkspace workspace, cudaStream_t stream) {
  return decode::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                        contextLens, queryStartLoc, numSeqs, out, workspace,
                        stream);
}

} // namespace infer::cuda
