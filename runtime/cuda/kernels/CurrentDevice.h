//===- CurrentDevice.h - The launchers' questions of a device --*- C++ -*-===//
//
// The launchers' questions about the device they launch on: its SM count
// (asked at every launch: cudaDeviceGetAttribute is cheap) and yes/no
// properties that cost more to find (whether it runs sm_90a code, whether it
// takes programmatic dependent launches), found once per device and kept.
// One process may drive devices of several kinds (tensor-parallel ranks run
// on one host thread each), so an answer kept for the process would be its
// first device's for all of them.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_CURRENTDEVICE_H
#define INFER_RUNTIME_CUDA_KERNELS_CURRENTDEVICE_H

#include <atomic>
#include <cstdint>

namespace infer::cuda {

/// The current device's multiprocessors, or `fallback` where CUDA cannot
/// tell.
int currentDeviceSms(int fallback);

/// The current device's ordinal, or -1 where CUDA cannot tell.
int currentDeviceOrdinal();

/// A yes/no about the current device, found by `ask` on a device's first
/// get and kept for it (devices past kDevices are asked every time).
class PerDeviceFlag {
public:
  template <typename Ask> bool get(Ask ask) {
    const int device = currentDeviceOrdinal();
    if (device < 0)
      return false;
    if (device >= kDevices)
      return ask();
    int8_t known = known_[device].load(std::memory_order_relaxed);
    if (known == 0) {
      known = ask() ? 2 : 1;
      known_[device].store(known, std::memory_order_relaxed);
    }
    return known == 2;
  }

private:
  static constexpr int kDevices = 64;
  std::atomic<int8_t> known_[kDevices] = {}; // 0 unknown, 1 no, 2 yes
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_CURRENTDEVICE_H
