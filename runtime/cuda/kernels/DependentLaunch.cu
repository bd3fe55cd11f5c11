//===- DependentLaunch.cu - Programmatic dependent launches ---------------===//

#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/support/Env.h"

#include <atomic>

namespace infer::cuda {

namespace {
/// setDependentLaunches' mode (< 0: the default).
std::atomic<int> modeOverride{-1};

bool deviceHasThem() {
  static const bool has = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                  device) == cudaSuccess &&
           major >= 9;
  }();
  return has;
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
