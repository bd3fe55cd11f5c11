//===- PrefillAttentionSm90.cu - Hopper prefill attention, bf16 ----------===//
//
// The bf16 entry of the Hopper prefill attention (PrefillAttentionSm90.cuh),
// the tensor maps of the pool and the routing checks.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/kernels/PrefillAttentionSm90.cuh"
#include "runtime/support/Env.h"

#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace infer::cuda {

namespace sm90 {

PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                         cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

bool deviceRunsSm90a(const void *kernel) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess)
    return false;
  cudaFuncAttributes attributes;
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess)
    return false;
  return major == 9 && minor == 0 && attributes.binaryVersion == 90;
}

cudaError_t encodeRowsMap(CUtensorMap *map, const void *data, int64_t rows,
                          int64_t cols, int boxRows) {
  const cuuint64_t globalDim[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t globalStrides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(boxRows)};
  const cuuint32_t elementStrides[2] = {1, 1};
  const CUresult result = tensorMapEncoder()(
      map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(data),
      globalDim, globalStrides, box, elementStrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

namespace {

/// Whether this build holds sm_90a code of the kernels and the current
/// device runs it (compute capability 9.0).
bool kernelRuns() {
  static PerDeviceFlag runs;
  return runs.get([] {
    return deviceRunsSm90a(reinterpret_cast<const void *>(
        prefillAttentionSm90Kernel<128, KVCacheDtype::kBf16, false, false,
                                   __nv_bfloat16, false>));
  });
}

} // namespace

bool pingPongOn() {
  static const bool on = envSwitchOn("INFER_SM90_PINGPONG");
  return on;
}

bool tileMapOn() {
  static const bool on = envSwitchOn("INFER_SM90_TILE_MAP");
  return on;
}

namespace {
/// setPrefillAttentionSm90Ctas' value (< 0: the default).
std::atomic<int> ctasOverride{-1};
} // namespace

int persistentCtas() {
  const int override = ctasOverride.load(std::memory_order_relaxed);
  if (override >= 0)
    return override;
  static const int fromEnvironment = [] {
    const char *value = std::getenv("INFER_SM90_PERSISTENT");
    return value ? std::max(std::atoi(value), 0) : -1;
  }();
  if (fromEnvironment >= 0)
    return fromEnvironment;
  return currentDeviceSms(0);
}

namespace {
/// Head vectors in rows of planes as a 4-d tensor (head_dim, kv head, row,
/// plane) of `elementBytes`-byte elements (bf16 or fp8 codes), boxes of
/// (boxColumns, 1, boxRows, 1), swizzled or plain: the layout of the pool
/// (rows the slots of a block, planes (block, layer, k|v)) and of FreshKV
/// (rows its rows, planes k|v) alike.
cudaError_t encodeHeadRows(CUtensorMap *map, const void *data, int elementBytes,
                           const CacheDims &dims, cuuint64_t rows,
                           cuuint64_t planes, int boxColumns, int boxRows,
                           bool swizzle) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
  if (!encode)
    return cudaErrorNotSupported;
  const cuuint64_t e = elementBytes;
  const cuuint64_t globalDim[4] = {cuuint64_t(dims.headDim),
                                   cuuint64_t(dims.numKVHeads), rows, planes};
  const cuuint64_t globalStrides[3] = {
      e * dims.headDim, e * dims.headDim * dims.numKVHeads,
      e * dims.headDim * dims.numKVHeads * rows};
  const cuuint32_t box[4] = {cuuint32_t(boxColumns), 1, cuuint32_t(boxRows), 1};
  const cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  const CUresult result = encode(
      map,
      elementBytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                        : CU_TENSOR_MAP_DATA_TYPE_UINT8,
      4, const_cast<void *>(data), globalDim, globalStrides, box,
      elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
} // namespace

cudaError_t encodePoolMap(CUtensorMap *map, const void *pool,
                          const CacheDims &dims, int elementBytes,
                          int boxColumns, bool swizzle) {
  // The planes are as many as the pool has; the map needs a bound, not the
  // allocation's (boxes are only ever asked for inside it).
  return encodeHeadRows(map, pool, elementBytes, dims,
                        cuuint64_t(dims.blockSize), cuuint64_t(1) << 30,
                        boxColumns, std::min(dims.blockSize, kKeys), swizzle);
}

cudaError_t encodeFreshMap(CUtensorMap *map, const FreshKV &fresh,
                           const CacheDims &dims) {
  return encodeHeadRows(map, fresh.data, 2, dims, cuuint64_t(fresh.planeRows()),
                        2, 64, kKeys,
                        /*swizzle=*/true);
}

namespace {
/// setFreshKVReads' value (< 0: the default).
std::atomic<int> freshOverride{-1};
} // namespace

} // namespace sm90

int64_t freshContextRows(const int32_t *queryStartLoc,
                         const int32_t *contextLens, int64_t numSeqs,
                         int group) {
  int64_t rows = 0;
  for (int64_t s = 0; s < numSeqs; ++s) {
    int64_t length;
    if (sm90::takesContextRows(queryStartLoc, contextLens, s, group, length))
      rows += length;
  }
  return rows;
}

bool freshKVReadsOn() {
  const int override = sm90::freshOverride.load(std::memory_order_relaxed);
  if (override >= 0)
    return override != 0;
  static const bool on = envSwitchOn("INFER_SM90_FRESH_KV");
  return on;
}

bool freshContextRowsOn() {
  static const bool on = envSwitchOn("INFER_SM90_FRESH_CONTEXT");
  return on;
}

void setFreshKVReads(int mode) {
  sm90::freshOverride.store(mode < 0 ? -1 : mode, std::memory_order_relaxed);
}

bool prefillAttentionSm90Enabled() {
  static const bool enabled = [] {
    const char *kernel = std::getenv("INFER_ATTENTION_KERNEL");
    return !(kernel && std::strcmp(kernel, "fallback") == 0);
  }();
  return enabled;
}

void setPrefillAttentionSm90Ctas(int ctas) {
  sm90::ctasOverride.store(ctas < 0 ? -1 : ctas, std::memory_order_relaxed);
}

bool prefillAttentionSm90Supports(const AttentionDims &attention,
                                  const CacheDims &dims, KVCacheDtype dtype) {
  const int bs = dims.blockSize;
  const bool blockSizeFits =
      bs >= 8 &&
      (bs <= sm90::kKeys ? (bs & (bs - 1)) == 0 : bs % sm90::kKeys == 0);
  return (attention.headDim == 64 || attention.headDim == 128) &&
         attention.headDim == dims.headDim &&
         attention.numKVHeads == dims.numKVHeads && attention.numKVHeads > 0 &&
         attention.numHeads % attention.numKVHeads == 0 &&
         attention.scale > 0.0f && blockSizeFits &&
         specializedScoreOptions(attention) &&
         (attention.keyRotaryDim == 0 || dtype == KVCacheDtype::kBf16) &&
         sm90::kernelRuns();
}

cudaError_t
launchPrefillAttentionSm90(const __nv_bfloat16 *q, KVCachePool pool,
                           CacheDims dims, AttentionDims attention,
                           const int32_t *blockTables, int64_t maxBlocksPerSeq,
                           const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           int64_t t, __nv_bfloat16 *out, cudaStream_t stream,
                           SplitKVWorkspace workspace, FreshKV fresh) {
  return sm90::launch(q, pool, dims, attention, blockTables, maxBlocksPerSeq,
                      contextLens, queryStartLoc, numSeqs, t, out, stream,
                      workspace, fresh);
}

} // namespace infer::cuda
