//===- ParamUpload.h - Deferred params streamed to the device ---*- C++ -*-===//
//
// An unpacked artifact's params reach the CUDA backend deferred (ParamSource:
// views of the mapped checkpoint, no host copy). They are gathered, in plan
// order, into two pinned staging chunks and copied to the device while the
// next chunk is gathered (as packed files are: DeviceParams.cpp):
//
//   host threads: gather chunk 0 | gather chunk 1 | gather chunk 2 | ...
//   copy engine:                 | copy 0         | copy 1         | ...
//   compute:                            (fp8 params: amax, scales, codes)
//
// A param whose gathered bytes are final (slices and concatenations of a
// checkpoint already in the param's dtype: bf16 Llama) lands in its own
// buffer; one quantized to fp8 lands in a scratch buffer that the
// WeightKernels.h kernels quantize into its codes and row scales, on the
// same stream (no host round trip); one that needs a cast is gathered and
// rounded on the host (castHostTensor), bounded by that one param, then
// staged the same way. Host memory: the staging chunks, plus that one param
// when a cast is needed; never the model.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_PARAMUPLOAD_H
#define INFER_RUNTIME_CUDA_PARAMUPLOAD_H

#include "runtime/backend/ParamSource.h"
#include "runtime/cuda/DeviceBuffer.h"

#include <functional>
#include <string>
#include <vector>

namespace infer::cuda {

/// A deferred param to upload; `name` is for messages.
struct ParamToUpload {
  std::string name;
  const ParamSource *source = nullptr;
};

/// A param on the device, as the backend reads it (HostTensor's layout):
/// its elements in its dtype, and an fp8 param's fp32 row scales.
struct DeviceParam {
  DeviceBuffer elements;
  DeviceBuffer rowScales;
};

/// Called with the bytes of each param once it is on its way (progress).
using UploadProgress = std::function<void(uint64_t bytes)>;

/// Gathers, transforms and uploads `params` on the current device, in order;
/// returns when every copy and kernel is done. An error names the param.
StatusOr<std::vector<DeviceParam>>
uploadParamSources(const std::vector<ParamToUpload> &params,
                   const UploadProgress &progress = nullptr);

/// The param's host tensor with its fp8 quantization (if any) done on the
/// current device: gathered, uploaded, quantized and copied back; anything
/// else is gathered and cast on the host as the loader does. For packing
/// fp8 artifacts (`infer pack` on a GPU host): the bytes are the host
/// quantizer's.
StatusOr<HostTensor> materializeOnDevice(const std::string &name,
                                         const ParamSource &source);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_PARAMUPLOAD_H
