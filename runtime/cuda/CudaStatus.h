//===- CudaStatus.h - CUDA and cuBLASLt errors as Status --------*- C++ -*-===//
//
// The one macro family that turns a CUDA runtime or cuBLASLt status into a
// Status naming the failed call, its file and line:
//
//   INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmul(...));
//   INFER_CUDA_RETURN_IF_ERROR(launchSilu(...)); // launchers return
//   cudaError_t
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_CUDASTATUS_H
#define INFER_RUNTIME_CUDA_CUDASTATUS_H

#include "runtime/support/Status.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace infer::cuda {

Status cudaStatus(cudaError_t error, const char *expr, const char *file,
                  int line);
Status cudaStatus(cublasStatus_t status, const char *expr, const char *file,
                  int line);

} // namespace infer::cuda

/// Returns a Status with the call, file and line from the enclosing function
/// when `expr` (a cudaError_t or cublasStatus_t) is not success.
#define INFER_CUDA_RETURN_IF_ERROR(expr)                                       \
  INFER_RETURN_IF_ERROR(                                                       \
      ::infer::cuda::cudaStatus((expr), #expr, __FILE__, __LINE__))

#endif // INFER_RUNTIME_CUDA_CUDASTATUS_H
