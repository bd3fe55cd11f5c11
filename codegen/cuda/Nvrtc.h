//===- Nvrtc.h - Compiles generated CUDA C++ with NVRTC ---------*- C++ -*-===//
//
// The compiler side of the generated kernels: NVRTC turns the translation
// unit of codegen/cuda/CudaEmitter.h into a cubin for one real architecture
// (sm_90a) and PTX for a virtual one (compute_90) that the driver
// JIT-compiles on other GPUs. No GPU is needed. Built without NVRTC (no CUDA
// toolkit), every call is an Unimplemented error that says so.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_CODEGEN_CUDA_NVRTC_H
#define INFER_CODEGEN_CUDA_NVRTC_H

#include "runtime/support/Status.h"

#include <string>

namespace infer::compiler {

struct CudaBinaries {
  std::string cubin;
  std::string ptx;
};

/// Whether infer was built with NVRTC; "NVRTC 13.0" or why not.
bool nvrtcAvailable(std::string *version = nullptr);

/// Compiles `source` (named `name` in diagnostics) to a cubin for `arch`
/// ("sm_90a") and PTX for `ptxArch` ("compute_90"), fp32 math without
/// fast-math. A compile error is an InvalidArgument whose message holds the
/// NVRTC log.
StatusOr<CudaBinaries> compileCuda(const std::string &source,
                                   const std::string &name,
                                   const std::string &arch,
                                   const std::string &ptxArch);

} // namespace infer::compiler

#endif // INFER_CODEGEN_CUDA_NVRTC_H
