//===- CurrentDeviceTest.cpp - The launchers' per-device answers ---------===//
//
// kernels/CurrentDevice.h: a PerDeviceFlag asks each device once and keeps
// that device's answer (never another device's), and currentDeviceSms and
// currentDeviceOrdinal describe the device that is current. With one GPU
// the flag's part checks the asking once; with several, that answers that
// differ between devices stay apart.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/CudaBackend.h"

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace infer::testing {
namespace {

/// Restores the device that was current when it was made.
class CurrentDeviceGuard {
public:
  CurrentDeviceGuard() { cudaGetDevice(&device_); }
  ~CurrentDeviceGuard() { cudaSetDevice(device_); }

private:
  int device_ = 0;
};

int deviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

TEST(CurrentDeviceTest, FlagsAskEachDeviceOnceAndKeepItsAnswer) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << why;
  const CurrentDeviceGuard guard;
  const int count = deviceCount();
  ASSERT_GT(count, 0);
  cuda::PerDeviceFlag flag;
  std::vector<int> asked(count, 0);
  for (int round = 0; round < 3; ++round)
    for (int d = 0; d < count; ++d) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      const bool answer = flag.get([&] {
        ++asked[d];
        return d % 2 == 0;
      });
      EXPECT_EQ(answer, d % 2 == 0) << "device " << d << ", round " << round;
    }
  for (int d = 0; d < count; ++d)
    EXPECT_EQ(asked[d], 1) << "device " << d;
}

TEST(CurrentDeviceTest, SmsAndOrdinalAreTheCurrentDevices) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << why;
  const CurrentDeviceGuard guard;
  for (int d = 0; d < deviceCount(); ++d) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, d), cudaSuccess);
    EXPECT_EQ(cuda::currentDeviceOrdinal(), d);
    EXPECT_EQ(cuda::currentDeviceSms(-1), prop.multiProcessorCount)
        << "device " << d;
  }
}

} // namespace
} // namespace infer::testing
