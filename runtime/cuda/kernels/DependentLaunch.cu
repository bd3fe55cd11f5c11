//===- DependentLaunch.cu - Programmatic dependent launches ---------------===//

#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/support/Env.h"

#include <atomic>

namespace infer::cuda {

namespace {
/// setDependentLaunches' mode (< 0: the default).
std::atomic<int> modeOverride{-1};

bool deviceHasThem() {
  static PerDeviceFlag has;
  return has.get([] {
    int major = 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                  currentDeviceOrdinal()) == cudaSuccess &&
           major >= 9;
  });
}
} // namespace

bool dependentLaunchesOn() {
  static const bool byDefault = envSwitchOn("INFER_PDL");
  const int mode = modeOverride.load(std::memory_order_relaxed);
  return (mode < 0 ? byDefault : mode > 0) && deviceHasThem();
}

void setDependentLaunches(int mode) {
  modeOverride.store(mode, std::memory_order_relaxed);
}

} // namespace infer::cuda
