//===- CurrentDevice.cu - What the kernels ask of the current device ------===//

#include "runtime/cuda/kernels/CurrentDevice.h"

#include <cuda_runtime.h>

namespace infer::cuda {

int currentDeviceOrdinal() {
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess ? device : -1;
}

int currentDeviceSms(int fallback) {
  const int device = currentDeviceOrdinal();
  int sms = 0;
  if (device < 0 ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sms <= 0)
    return fallback;
  return sms;
}

} // namespace infer::cuda
