//===- DeviceSampler.cpp - Sampling inside the forward call ---------------===//
//
// forwardSample() uploads one DeviceRowSampling per logits row (pinned
// staging, on the stream) and appends the sampling kernel and a copy of the
// tokens to the forward call, captured in its graph like any step: only the
// token ids come back to the host. Padded decode rows sample greedily and
// their tokens are dropped.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>
#include <climits>

namespace infer::cuda {

Status CudaBackend::uploadSampling(const SamplingBatch &sampling,
                                   int64_t rows) {
  if (rows > samplingCapacity_) {
    // Captured graphs read the old buffers.
    INFER_RETURN_IF_ERROR(destroyGraphs());
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    const int64_t capacity = std::max<int64_t>(64, 2 * rows);
    INFER_RETURN_IF_ERROR(
        hostSampling_.allocate(capacity * sizeof(DeviceRowSampling)));
    INFER_RETURN_IF_ERROR(
        deviceSampling_.allocate(capacity * sizeof(DeviceRowSampling)));
    INFER_RETURN_IF_ERROR(hostTokens_.allocate(capacity * sizeof(int32_t)));
    INFER_RETURN_IF_ERROR(deviceTokens_.allocate(capacity * sizeof(int32_t)));
    samplingCapacity_ = capacity;
  }
  static_assert(kMaxSampleMaskedIds == RowSampling::kMaxMaskedIds,
                "the kernel holds every masked id of a row");
  DeviceRowSampling *host = hostSampling_.as<DeviceRowSampling>();
  for (int64_t r = 0; r < rows; ++r) {
    DeviceRowSampling &out = host[r];
    out = DeviceRowSampling();
    if (r >= static_cast<int64_t>(sampling.rows.size()))
      continue; // padding: greedy, nothing masked
    const RowSampling &in = sampling.rows[r];
    out.uniform = in.uniform;
    out.temperature = static_cast<float>(in.temperature);
    out.topP = static_cast<float>(in.topP);
    out.minP = static_cast<float>(in.minP);
    out.topK = static_cast<int32_t>(std::min<int64_t>(in.topK, INT32_MAX));
    out.numMaskedIds = in.numMaskedIds;
    std::copy_n(in.maskedIds.begin(), kMaxSampleMaskedIds, out.maskedIds);
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(deviceSampling_.get(), host,
                                             rows * sizeof(DeviceRowSampling),
                                             cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status CudaBackend::enqueueSampling(const Tensor &logits) {
  if (logits.rows > samplingCapacity_)
    return internalError("cuda backend: " + std::to_string(logits.rows) +
                         " logits rows for " +
                         std::to_string(samplingCapacity_) + " sampling rows");
  INFER_CUDA_RETURN_IF_ERROR(
      launchSampleRows(logits.as<float>(), logits.rows, logits.cols,
                       deviceSampling_.as<DeviceRowSampling>(),
                       deviceTokens_.as<int32_t>(), stream_));
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      hostTokens_.get(), deviceTokens_.get(), logits.rows * sizeof(int32_t),
      cudaMemcpyDeviceToHost, stream_));
  return Status::ok();
}

StatusOr<std::vector<int32_t>>
CudaBackend::forwardSample(const Batch &batch, const SamplingBatch &sampling) {
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  INFER_RETURN_IF_ERROR(
      sampling.validate(static_cast<int64_t>(batch.logitsIndices.size())));
  INFER_RETURN_IF_ERROR(forwardBatch(batch, &sampling).status());
  const int32_t *tokens = hostTokens_.as<int32_t>();
  return std::vector<int32_t>(tokens, tokens + sampling.rows.size());
}

} // namespace infer::cuda
