//===- DeviceBuffer.h - Owning device and pinned host allocations -*- C++
//-*-===//
//
// Memory the CUDA backend allocates once and keeps (parameters, the KV pool,
// workspaces, staging) is owned by these move-only buffers, freed when they
// go: no raw cudaFree paths to keep in step with every early return.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_DEVICEBUFFER_H
#define INFER_RUNTIME_CUDA_DEVICEBUFFER_H

#include "runtime/cuda/CudaStatus.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace infer::cuda {

/// `bytes` of device memory from cudaMalloc (Free: cudaFree) or pinned host
/// memory from cudaMallocHost (Free: cudaFreeHost).
template <cudaError_t (*Free)(void *)> class OwnedBuffer {
public:
  OwnedBuffer() = default;
  OwnedBuffer(const OwnedBuffer &) = delete;
  OwnedBuffer &operator=(const OwnedBuffer &) = delete;
  OwnedBuffer(OwnedBuffer &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  OwnedBuffer &operator=(OwnedBuffer &&other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~OwnedBuffer() { reset(); }

  void *get() const { return data_; }
  template <typename T> T *as() const { return static_cast<T *>(data_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset() {
    if (data_)
      Free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  /// Replaces the buffer by a new one of `bytes` (none for 0).
  Status allocate(size_t bytes);

private:
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

inline cudaError_t freeDevice(void *p) { return cudaFree(p); }
inline cudaError_t freePinned(void *p) { return cudaFreeHost(p); }

using DeviceBuffer = OwnedBuffer<freeDevice>;
using PinnedBuffer = OwnedBuffer<freePinned>;

template <> inline Status DeviceBuffer::allocate(size_t bytes) {
  reset();
  if (bytes)
    INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return Status::ok();
}

template <> inline Status PinnedBuffer::allocate(size_t bytes) {
  reset();
  if (bytes)
    INFER_CUDA_RETURN_IF_ERROR(cudaMallocHost(&data_, bytes));
  bytes_ = bytes;
  return Status::ok();
}

/// A device copy of `count` host elements in a new buffer.
template <typename T>
Status uploadToDevice(const T *host, size_t count, DeviceBuffer &out) {
  INFER_RETURN_IF_ERROR(out.allocate(count * sizeof(T)));
  if (count)
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out.get(), host, count * sizeof(T), cudaMemcpyHostToDevice));
  return Status::ok();
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_DEVICEBUFFER_H
