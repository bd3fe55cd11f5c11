//===- DecodeAttention.cu - Split-KV paged decode, bf16 --------*- CUDA -*-===//
//
// The bf16 entry of the split-KV decode attention (DecodeAttention.cuh) and
// the split and workspace sizes every entry shares.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/DecodeAttention.cuh"

#include <algorithm>

namespace infer::cuda {

namespace {

int smCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess)
    return 1;
  return sms;
}

} // namespace

bool splitKVDecodeSupports(const AttentionDims &attention,
                           const CacheDims &dims) {
  return (attention.headDim == 64 || attention.headDim == 128 ||
          attention.headDim == 256) &&
         specializedScoreOptions(attention) &&
         attention.headDim == dims.headDim &&
         attention.numKVHeads == dims.numKVHeads && attention.numKVHeads > 0 &&
         attention.numHeads % attention.numKVHeads == 0 &&
         attention.numKVHeads * ((attention.numHeads / attention.numKVHeads +
                                  decode::kMaxHeadTile - 1) /
                                 decode::kMaxHeadTile) <=
             65535;
}

size_t splitKVWorkspaceBytes(int headDim) {
  // Splits > 1 only while blocks (units = sequences * kv heads * head
  // tiles) < the target, so sequences * heads * splits < 2 * target *
  // kMaxHeadTile partial results.
  const int64_t target = int64_t(decode::kBlocksPerSm) * smCount();
  return size_t(2 * target * decode::kMaxHeadTile) * (headDim + 2) *
         sizeof(float);
}

int splitKVSplits(const AttentionDims &attention, int blockSize,
                  int64_t maxBlocksPerSeq, int64_t numSeqs,
                  size_t workspaceBytes) {
  if (numSeqs <= 0 || attention.numKVHeads <= 0)
    return 1;
  const int group = attention.numHeads / attention.numKVHeads;
  const int headTile = decode::headTileOf(group);
  const int64_t units =
      numSeqs * attention.numKVHeads * ((group + headTile - 1) / headTile);
  // One wave: as many blocks as the SMs hold at once (splits rounded
  // down, so a short batch's splits never spill into a second wave).
  const int64_t target = int64_t(decode::blocksPerSmOf(headTile)) * smCount();
  int64_t keys = maxBlocksPerSeq * blockSize;
  if (attention.slidingWindow > 0 && attention.slidingWindow < keys)
    keys = attention.slidingWindow;
  int64_t splits = std::max<int64_t>(target / units, 1);
  splits = std::min<int64_t>(splits, (keys + decode::kMinKeysPerSplit - 1) /
                                         decode::kMinKeysPerSplit);
  splits = std::min<int64_t>(splits, decode::kMaxSplits);
  const int64_t perSplit =
      numSeqs * attention.numHeads * (attention.headDim + 2) * sizeof(float);
  splits = std::min<int64_t>(splits, int64_t(workspaceBytes) / perSplit);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

cudaError_t launchSplitKVDecode(const __nv_bfloat16 *q, KVCachePool pool,
                                CacheDims dims, AttentionDims attention,
                                const int32_t *blockTables,
                                int64_t maxBlocksPerSeq,
                                const int32_t *contextLens,
                                const int32_t *queryStartLoc, int64_t numSeqs,
                                __nv_bfloat16 *out, SplitKVWorkspace workspace,
                                cudaStream_t stream) {
  return decode::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                        contextLens, queryStartLoc, numSeqs, out, workspace,
                        stream);
}

} // namespace infer::cuda
