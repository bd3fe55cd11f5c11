//===- KVPool.cpp - The paged KV pool on the device -----------------------===//
//
//   pool   [num_blocks + 1][num_layers][2][block_size][kv_heads][head_dim]
//   scales [num_blocks + 1][num_layers][2][block_size][kv_heads]   (E4M3)
//
// The engine gets blocks 0 .. num_blocks-1; the last is the scratch block
// that padded decode rows read (BatchInputs.cpp) and nothing writes.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <string>

namespace infer::cuda {

KVCachePool CudaBackend::kvPool() const {
  return kvDtype_ == KVCacheDtype::kBf16
             ? KVCachePool(pool_.as<__nv_bfloat16>())
             : KVCachePool(pool_.as<uint8_t>(), poolScales_.as<float>(),
                           kvDtype_);
}

Status CudaBackend::allocateKVPool(const CudaBackendOptions &options) {
  const size_t dataBytes = blockDataBytes(), scaleBytes = blockScaleBytes();
  const size_t blockBytes = dataBytes + scaleBytes;
  numBlocks_ = options.numBlocks;
  size_t freeBytes = 0, totalBytes = 0;
  INFER_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (numBlocks_ == 0) {
    numBlocks_ =
        static_cast<int64_t>(freeBytes * options.kvCacheMemoryFraction) /
            static_cast<int64_t>(blockBytes) -
        1;
  } else if (static_cast<double>(numBlocks_ + 1) * blockBytes > freeBytes) {
    // Said plainly instead of a failed cudaMalloc.
    auto gib = [](double bytes) {
      return std::to_string(bytes / (1024.0 * 1024 * 1024)).substr(0, 6);
    };
    return resourceExhausted(
        "cuda backend: a KV-cache pool of " + std::to_string(numBlocks_) +
        " blocks needs " +
        gib(static_cast<double>(numBlocks_ + 1) * blockBytes) +
        " GiB; the device has " + gib(static_cast<double>(freeBytes)) +
        " GiB free after the weights (give fewer blocks, or size the pool "
        "from memory: --gpu-memory-utilization)");
  }
  if (numBlocks_ <= 0)
    return resourceExhausted("cuda backend: no device memory left for the "
                             "KV-cache pool");
  scratchBlock_ = static_cast<int32_t>(numBlocks_);
  const int64_t allocated = numBlocks_ + 1;
  INFER_RETURN_IF_ERROR(pool_.allocate(allocated * dataBytes));
  INFER_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(pool_.get(), 0, allocated * dataBytes, stream_));
  if (scaleBytes > 0) {
    INFER_RETURN_IF_ERROR(poolScales_.allocate(allocated * scaleBytes));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(poolScales_.get(), 0, allocated * scaleBytes, stream_));
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::copyBlocks(
    const std::vector<std::pair<int32_t, int32_t>> &copies) {
  for (const auto &[from, to] : copies)
    if (from < 0 || from >= numBlocks_ || to < 0 || to >= numBlocks_)
      return invalidArgument("cuda backend: block copy " +
                             std::to_string(from) + " -> " +
                             std::to_string(to) + " outside the pool");
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // A block's codes and, for E4M3, its scales.
  const std::pair<void *, size_t> arrays[] = {
      {pool_.get(), blockDataBytes()}, {poolScales_.get(), blockScaleBytes()}};
  // Enqueued, not waited for: the copies follow the launches in flight in
  // stream order (whose writes into a source block they see) and precede
  // the next forward call's kernels (which read the destinations), so the
  // host need not stall an asynchronous step on them. The device is busy,
  // not idle, between the last launch and the next one.
  for (const auto &[from, to] : copies)
    for (const auto &[base, bytes] : arrays)
      if (bytes > 0)
        INFER_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(static_cast<char *>(base) + to * bytes,
                            static_cast<const char *>(base) + from * bytes,
                            bytes, cudaMemcpyDeviceToDevice, stream_));
  if (!copies.empty())
    otherWorkSinceLaunch_ = true;
  return Status::ok();
}

} // namespace infer::cuda
