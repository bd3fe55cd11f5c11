//===- DeviceArray.h - Device buffers for the CUDA tests --------*- C++ -*-===//

#ifndef INFER_TESTS_RUNTIME_CUDA_DEVICEARRAY_H
#define INFER_TESTS_RUNTIME_CUDA_DEVICEARRAY_H

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace infer::testing {

/// A device copy of a host vector, freed when it goes away.
template <typename T> class DeviceArray {
public:
  explicit DeviceArray(const std::vector<T> &host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, size_) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  /// `size` elements filled with NaN bytes, so unwritten outputs show.
  static DeviceArray poisoned(size_t size) {
    DeviceArray a(std::vector<T>{});
    a.size_ = size;
    cudaFree(a.data_);
    EXPECT_EQ(cudaMalloc(&a.data_, std::max<size_t>(1, size) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemset(a.data_, 0xff, size * sizeof(T)), cudaSuccess);
    return a;
  }
  DeviceArray(DeviceArray &&o) : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
  }
  DeviceArray(const DeviceArray &) = delete;
  ~DeviceArray() {
    if (data_)
      cudaFree(data_);
  }

  T *get() const { return data_; }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

private:
  T *data_ = nullptr;
  size_t size_ = 0;
};

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_CUDA_DEVICEARRAY_H
