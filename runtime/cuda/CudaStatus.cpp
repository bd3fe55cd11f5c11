//===- CudaStatus.cpp - CUDA and cuBLASLt errors as Status ----------------===//

#include "runtime/cuda/CudaStatus.h"

#include <string>

namespace infer::cuda {

static std::string where(const char *expr, const char *file, int line) {
  return std::string(expr) + " at " + file + ":" + std::to_string(line);
}

Status cudaStatus(cudaError_t error, const char *expr, const char *file,
                  int line) {
  if (error == cudaSuccess)
    return Status::ok();
  StatusCode code = error == cudaErrorMemoryAllocation
                        ? StatusCode::kResourceExhausted
                        : StatusCode::kInternal;
  return Status(code, "CUDA error " + std::string(cudaGetErrorName(error)) +
                          " (" + cudaGetErrorString(error) + ") in " +
                          where(expr, file, line));
}

Status cudaStatus(cublasStatus_t status, const char *expr, const char *file,
                  int line) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  StatusCode code = status == CUBLAS_STATUS_ALLOC_FAILED
                        ? StatusCode::kResourceExhausted
                        : StatusCode::kInternal;
  return Status(code, "cuBLASLt error " +
                          std::string(cublasLtGetStatusName(status)) + " (" +
                          cublasLtGetStatusString(status) + ") in " +
                          where(expr, file, line));
}

} // namespace infer::cuda
