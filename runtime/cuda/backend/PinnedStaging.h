//===- PinnedStaging.h - Host memory that copies read later -----*- C++ -*-===//
//
// Private to runtime/cuda. A cudaMemcpyAsync from pinned memory returns
// before the device has read it, so the host must not refill that memory
// until the copy has run. PinnedStaging keeps two buffers used in turn, each
// with an event recorded after the copies that read it: a forward call packs
// its inputs into one while the device may still be copying from the other
// (launchSample: the host prepares step N+1 while the device runs step N).
//
//   call k     acquire -> buffer 0 (waits for call k-2's copies: done)
//              cudaMemcpyAsync(device, buffer 0); markRead
//   call k+1   acquire -> buffer 1 (call k's copy may still be queued)
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_BACKEND_PINNEDSTAGING_H
#define INFER_RUNTIME_CUDA_BACKEND_PINNEDSTAGING_H

#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/DeviceBuffer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace infer::cuda {

/// An owned CUDA event, created on first use.
class CudaEvent {
public:
  CudaEvent() = default;
  CudaEvent(const CudaEvent &) = delete;
  CudaEvent &operator=(const CudaEvent &) = delete;
  CudaEvent(CudaEvent &&other) noexcept
      : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent &operator=(CudaEvent &&other) noexcept {
    if (this != &other) {
      reset();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  ~CudaEvent() { reset(); }

  cudaEvent_t get() const { return event_; }
  void reset() {
    if (event_)
      cudaEventDestroy(event_);
    event_ = nullptr;
  }
  /// Records the event on `stream`, creating it with `flags` the first time
  /// (cudaEventDefault to time it, cudaEventDisableTiming to only wait).
  Status record(cudaStream_t stream, unsigned flags) {
    if (!event_)
      INFER_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event_, flags));
    INFER_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream));
    return Status::ok();
  }

private:
  cudaEvent_t event_ = nullptr;
};

/// Two pinned buffers filled in turn, each refilled only after the copies
/// that read it last have run.
class PinnedStaging {
public:
  /// The next buffer, with room for `bytes`, once no copy reads it any more
  /// (waiting for the copies of two acquires ago, normally long done).
  StatusOr<char *> acquire(size_t bytes) {
    current_ = (current_ + 1) % kBuffers;
    if (cudaEvent_t read = read_[current_].get())
      INFER_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(read));
    PinnedBuffer &buffer = buffers_[current_];
    if (buffer.bytes() < bytes)
      INFER_RETURN_IF_ERROR(
          buffer.allocate(std::max({bytes, 2 * buffer.bytes(), kMinBytes})));
    return buffer.as<char>();
  }
  /// Marks the last acquired buffer as read by the copies enqueued on
  /// `stream` so far.
  Status markRead(cudaStream_t stream) {
    return read_[current_].record(stream, cudaEventDisableTiming);
  }

private:
  static constexpr int kBuffers = 2;
  static constexpr size_t kMinBytes = 4096;
  PinnedBuffer buffers_[kBuffers];
  CudaEvent read_[kBuffers];
  int current_ = 0;
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_BACKEND_PINNEDSTAGING_H
