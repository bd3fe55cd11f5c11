//===- DecodeAttention.cu - Split-KV paged decode, bf16 --------*- CUDA -*-===//
//
// The bf16 entry of the decode attention, which sends big batches of short
// contexts to the tensor-core kernel (DecodeAttentionMma.cuh) and the rest
// to the split-KV one (DecodeAttention.cuh), and the split and workspace
// sizes every entry shares.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/kernels/DecodeAttention.cuh"
#include "runtime/cuda/kernels/DecodeAttentionMma.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace infer::cuda {

namespace {

int smCount() { return currentDeviceSms(1); }

/// Fewest warps (units times splits) per SM for the tensor-core decode on
/// its own choice: with fewer, its serial steps are bare latency.
constexpr int64_t kMmaMinWarpsPerSm = 2;
/// Fewest keys worth a split of the tensor-core decode (8 steps).
constexpr int64_t kMmaMinKeysPerSplit = 128;
/// Most splits of the tensor-core decode on its own choice: beyond, few
/// long sequences do better on the split-KV kernel's fewer, longer splits
/// (H100, 1 x 32768 tokens: 256 splits 90.9 us, split-KV 64.2 us; 1 x 8192:
/// 64 splits 21.8 us, split-KV 23.6 us).
constexpr int64_t kMmaMaxSplits = 64;

/// mmaDecodeSplits before the workspace's bound.
int64_t mmaSplitsOfWave(const AttentionDims &attention, int blockSize,
                        int64_t maxBlocksPerSeq, int64_t numSeqs) {
  const bool highRows = attention.numHeads / attention.numKVHeads > 8;
  const int64_t units = numSeqs * attention.numKVHeads;
  // One wave of warps, as splitKVSplits fills one of blocks (of the kernel
  // without prefetch: a bf16 launch that prefetches holds half as many at
  // once, and was measured faster with these splits, 32 x 2048 tokens: 8
  // splits 106.7 us against 109.5 without prefetch).
  const int64_t target = int64_t(decode_mma::blocksPerSmOf(highRows)) *
                         decode_mma::kWarps * smCount();
  int64_t keys = maxBlocksPerSeq * blockSize;
  if (attention.slidingWindow > 0 && attention.slidingWindow < keys)
    keys = attention.slidingWindow;
  int64_t splits = std::max<int64_t>(target / units, 1);
  splits = std::min<int64_t>(splits, (keys + kMmaMinKeysPerSplit - 1) /
                                         kMmaMinKeysPerSplit);
  return std::min<int64_t>(splits, decode::kMaxSplits);
}

DecodeKernel decodeKernelFromEnvironment() {
  const char *kernel = std::getenv("INFER_DECODE_KERNEL");
  if (kernel && std::strcmp(kernel, "split") == 0)
    return DecodeKernel::kSplitKV;
  if (kernel && std::strcmp(kernel, "mma") == 0)
    return DecodeKernel::kMma;
  return DecodeKernel::kAuto;
}

std::atomic<DecodeKernel> &decodeKernelOverride() {
  static std::atomic<DecodeKernel> kernel{decodeKernelFromEnvironment()};
  return kernel;
}

DecodePrefetch decodePrefetchFromEnvironment() {
  const char *prefetch = std::getenv("INFER_DECODE_PREFETCH");
  if (prefetch && std::strcmp(prefetch, "0") == 0)
    return DecodePrefetch::kNone;
  if (prefetch && std::strcmp(prefetch, "all") == 0)
    return DecodePrefetch::kAll;
  return DecodePrefetch::kBf16;
}

std::atomic<DecodePrefetch> &decodePrefetchSetting() {
  static std::atomic<DecodePrefetch> prefetch{decodePrefetchFromEnvironment()};
  return prefetch;
}

} // namespace

void setDecodePrefetch(DecodePrefetch prefetch) {
  decodePrefetchSetting().store(prefetch);
}

DecodePrefetch decodePrefetch() { return decodePrefetchSetting().load(); }

bool mmaDecodeSupports(const AttentionDims &attention, const CacheDims &dims,
                       KVCacheDtype dtype, bool bf16Queries) {
  return bf16Queries && (attention.headDim == 64 || attention.headDim == 128) &&
         attention.headDim == dims.headDim && attention.keyRotaryDim == 0 &&
         validSoftcap(attention) && attention.numKVHeads > 0 &&
         attention.numKVHeads == dims.numKVHeads &&
         attention.numHeads % attention.numKVHeads == 0 &&
         attention.numHeads / attention.numKVHeads <= decode_mma::kMaxGroup;
}

DecodeKernel decodeKernelOf(const AttentionDims &attention,
                            const CacheDims &dims, KVCacheDtype dtype,
                            bool bf16Queries, int64_t maxBlocksPerSeq,
                            int64_t numSeqs) {
  if (numSeqs <= 0 || !mmaDecodeSupports(attention, dims, dtype, bf16Queries))
    return DecodeKernel::kSplitKV;
  const DecodeKernel forced = decodeKernelOverride().load();
  if (forced != DecodeKernel::kAuto)
    return forced;
  const int64_t splits =
      mmaSplitsOfWave(attention, dims.blockSize, maxBlocksPerSeq, numSeqs);
  const int64_t warps = numSeqs * attention.numKVHeads * splits;
  return splits <= kMmaMaxSplits && warps >= kMmaMinWarpsPerSm * smCount()
             ? DecodeKernel::kMma
             : DecodeKernel::kSplitKV;
}

void setDecodeKernel(DecodeKernel kernel) {
  decodeKernelOverride().store(kernel);
}

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

int mmaDecodeSplits(const AttentionDims &attention, int blockSize,
                    int64_t maxBlocksPerSeq, int64_t numSeqs,
                    size_t workspaceBytes) {
  if (numSeqs <= 0 || attention.numKVHeads <= 0)
    return 1;
  int64_t splits =
      mmaSplitsOfWave(attention, blockSize, maxBlocksPerSeq, numSeqs);
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
  if (numSeqs > 0 &&
      decodeKernelOf(attention, dims, pool.dtype, /*bf16Queries=*/true,
                     maxBlocksPerSeq, numSeqs) == DecodeKernel::kMma) {
    if (pool.dtype == KVCacheDtype::kF8E4M3 && !pool.scales)
      return cudaErrorInvalidValue;
    const decode::Launch<__nv_bfloat16> l{
        q,
        pool,
        dims,
        attention,
        blockTables,
        maxBlocksPerSeq,
        contextLens,
        queryStartLoc,
        numSeqs,
        mmaDecodeSplits(attention, dims.blockSize, maxBlocksPerSeq, numSeqs,
                        workspace.bytes),
        out,
        workspace,
        stream};
    return attention.headDim == 64 ? decode_mma::launch<64>(l)
                                   : decode_mma::launch<128>(l);
  }
  return decode::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                        contextLens, queryStartLoc, numSeqs, out, workspace,
                        stream);
}

namespace {
template <KVCacheDtype T>
__global__ void decodeOperandKernel(const uint8_t *codes, int64_t groups,
                                    __nv_bfloat16 *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += int64_t(gridDim.x) * blockDim.x)
    *reinterpret_cast<uint4 *>(out + 8 * i) = decode_mma::codesToBf16x8<T>(
        *reinterpret_cast<const uint2 *>(codes + 8 * i));
}
} // namespace

cudaError_t launchDecodeOperandBf16(const uint8_t *codes, int64_t count,
                                    KVCacheDtype dtype, __nv_bfloat16 *out,
                                    cudaStream_t stream) {
  if (count < 0 || count % 8 != 0 || dtype == KVCacheDtype::kBf16)
    return cudaErrorInvalidValue;
  const int64_t groups = count / 8;
  if (groups == 0)
    return cudaSuccess;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((groups + 255) / 256, 1024));
  if (dtype == KVCacheDtype::kF8E4M3)
    decodeOperandKernel<KVCacheDtype::kF8E4M3>
        <<<blocks, 256, 0, stream>>>(codes, groups, out);
  else
    decodeOperandKernel<KVCacheDtype::kF8E5M2>
        <<<blocks, 256, 0, stream>>>(codes, groups, out);
  return cudaGetLastError();
}

} // namespace infer::cuda
