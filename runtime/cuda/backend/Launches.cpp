//===- Launches.cpp - Sampled forward calls in flight ---------------------===//
//
// launchSample() enqueues a whole sampled forward call on the stream (the
// inputs' copy, the feed of sampled tokens, the graph or the eager steps,
// the sampling kernel, the copy of the tokens into the launch's pinned
// buffer) and returns without waiting; collectSample() waits for the oldest
// launch's end event and returns its tokens. forwardSample() is a launch
// collected at once. Every host buffer a launch's copies read or write is
// its own until it is collected (the staging is double-buffered, the token
// buffers are per slot), so the host packs launch k+1 while the device runs
// launch k:
//
//   host    launch k   collect k-1   [pack k+1] launch k+1   collect k
//   device  ..k-1..][start k ......... k ........ end k][start k+1 ...
//                   ^ idle = start k - end k-1 (0 when k was queued in time)
//
// The idle time between one launch's end and the next one's start (CUDA
// events with timing) is summed at collect: deviceIdleSeconds().
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>

namespace infer::cuda {

Status CudaBackend::checkSampledRows(const Batch &batch) const {
  if (batch.sampledTokens.empty())
    return Status::ok();
  if (feedableRows_ < 0)
    return invalidArgument(
        "cuda backend: sampled tokens without an earlier launch to take "
        "them from (the last sampled call was not launchSample, or failed)");
  for (const Batch::SampledToken &s : batch.sampledTokens)
    if (s.row >= feedableRows_)
      return outOfRange(
          "cuda backend: sampled token " + std::to_string(s.tokenIndex) +
          " reads row " + std::to_string(s.row) + " of the " +
          std::to_string(feedableRows_) + " the earlier launch sampled");
  return Status::ok();
}

Status CudaBackend::launchSample(const Batch &batch,
                                 const SamplingBatch &sampling) {
  const int64_t inFlight = numLaunched_ - numCollected_;
  if (inFlight >= kMaxLaunchesInFlight)
    return invalidArgument("cuda backend: " + std::to_string(inFlight) +
                           " launches are not collected yet (at most " +
                           std::to_string(kMaxLaunchesInFlight) +
                           " in flight)");
  INFER_RETURN_IF_ERROR(checkBatch(batch));
  INFER_RETURN_IF_ERROR(checkSampledRows(batch));
  INFER_RETURN_IF_ERROR(
      sampling.validate(static_cast<int64_t>(batch.logitsIndices.size())));
  Status launched = enqueueLaunch(batch, sampling);
  if (!launched.isOk()) {
    // Part of it may be queued, its sampling kernel too: the tokens on the
    // device are no launch's any more.
    feedableRows_ = -1;
    otherWorkSinceLaunch_ = true;
    return launched;
  }
  ++numLaunched_;
  return Status::ok();
}

Status CudaBackend::enqueueLaunch(const Batch &batch,
                                  const SamplingBatch &sampling) {
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  SampleLaunch &launch = launches_[numLaunched_ % launches_.size()];
  const auto rows = static_cast<int64_t>(batch.logitsIndices.size());
  const size_t tokenBytes = std::max<int64_t>(rows, 1) * sizeof(int32_t);
  if (launch.tokens.bytes() < tokenBytes) {
    // A failed launch in this slot may still have a copy queued into it.
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    INFER_RETURN_IF_ERROR(launch.tokens.allocate(
        std::max<size_t>(tokenBytes, 64 * sizeof(int32_t))));
  }
  INFER_RETURN_IF_ERROR(launch.start.record(stream_, cudaEventDefault));
  INFER_RETURN_IF_ERROR(forwardBatch(batch, &sampling).status());
  if (rows > 0)
    INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        launch.tokens.get(), deviceTokens_.get(), rows * sizeof(int32_t),
        cudaMemcpyDeviceToHost, stream_));
  INFER_RETURN_IF_ERROR(launch.end.record(stream_, cudaEventDefault));
  launch.rows = rows;
  launch.followsLaunch = numLaunched_ > 0 && !otherWorkSinceLaunch_;
  otherWorkSinceLaunch_ = false;
  feedableRows_ = rows;
  return Status::ok();
}

StatusOr<std::vector<int32_t>> CudaBackend::collectSample() {
  if (numCollected_ == numLaunched_)
    return invalidArgument("cuda backend: no launch to collect");
  const int64_t n = numCollected_++;
  const SampleLaunch &launch = launches_[n % launches_.size()];
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  INFER_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(launch.end.get()));
  if (launch.followsLaunch) {
    // Launch n - 1 is collected; its slot is reused only by launch n + 2,
    // which waits for this collect.
    const SampleLaunch &previous = launches_[(n - 1) % launches_.size()];
    float ms = 0;
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, previous.end.get(), launch.start.get()));
    idleSeconds_ += std::max(ms, 0.0f) / 1e3;
  }
  const int32_t *tokens = launch.tokens.as<int32_t>();
  return std::vector<int32_t>(tokens, tokens + launch.rows);
}

StatusOr<std::vector<int32_t>>
CudaBackend::forwardSample(const Batch &batch, const SamplingBatch &sampling) {
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  if (numLaunched_ != numCollected_)
    return invalidArgument("cuda backend: forwardSample while " +
                           std::to_string(numLaunched_ - numCollected_) +
                           " launches are not collected (collect them first)");
  INFER_RETURN_IF_ERROR(launchSample(batch, sampling));
  StatusOr<std::vector<int32_t>> tokens = collectSample();
  // The next launch's sampled tokens name rows of the launch before it,
  // whose tokens this call replaced on the device.
  feedableRows_ = -1;
  return tokens;
}

} // namespace infer::cuda
