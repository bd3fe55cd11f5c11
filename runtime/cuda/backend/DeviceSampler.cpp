//===- DeviceSampler.cpp - Sampling inside the forward call ---------------===//
//
// A sampled forward call (launchSample, forwardSample) uploads one
// DeviceRowSampling per logits row (pinned staging, on the stream) and
// appends the sampling kernel to the forward call, captured in its graph
// like any step. The copy of the tokens to the host is enqueued after the
// graph (Launches.cpp), into the launch's own pinned buffer, so one graph
// serves launches in flight together. Padded decode rows sample greedily
// and their tokens are dropped.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>
#include <climits>

namespace infer::cuda {

Status CudaBackend::uploadSampling(const SamplingBatch &sampling,
                                   int64_t rows) {
  if (rows > samplingCapacity_) {
    // Captured graphs and the calls in flight read the old buffers.
    INFER_RETURN_IF_ERROR(destroyGraphs());
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    const int64_t capacity = std::max<int64_t>(64, 2 * rows);
    INFER_RETURN_IF_ERROR(
        deviceSampling_.allocate(capacity * sizeof(DeviceRowSampling)));
    // The last launch's tokens move along: the next launch may feed them.
    DeviceBuffer tokens;
    INFER_RETURN_IF_ERROR(tokens.allocate(capacity * sizeof(int32_t)));
    if (deviceTokens_)
      INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          tokens.get(), deviceTokens_.get(), deviceTokens_.bytes(),
          cudaMemcpyDeviceToDevice, stream_));
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    deviceTokens_ = std::move(tokens);
    samplingCapacity_ = capacity;
  }
  static_assert(kMaxSampleMaskedIds == RowSampling::kMaxMaskedIds,
                "the kernel holds every masked id of a row");
  INFER_ASSIGN_OR_RETURN(char *staging, samplingStaging_.acquire(
                                            rows * sizeof(DeviceRowSampling)));
  auto *host = reinterpret_cast<DeviceRowSampling *>(staging);
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
  return samplingStaging_.markRead(stream_);
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
  return Status::ok();
}

} // namespace infer::cuda
