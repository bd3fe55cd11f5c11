//===- CollectiveSteps.cpp - all_reduce and all_gather over NCCL ----------===//
//
// Enqueued on the backend's stream in the values' dtype (bf16 activations
// are summed and gathered as bf16), so a decode graph captures them with
// the kernels around them.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/cuda/backend/CudaBackendImpl.h"

namespace infer::cuda {

Status CudaBackend::runAllReduce(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  return communicator_->allReduceSum(x.data, y.data, x.size(), x.dtype)
      .withContext("cuda backend: " + s.where);
}

/// Gathers rank-major blocks straight into the result for dim 0; for dim 1
/// into a scratch range, then each rank's block becomes a column block:
///
///   scratch [rank 0: rows x c][rank 1: rows x c]
///   y       row i = [rank 0 row i | rank 1 row i]
Status CudaBackend::runAllGather(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  const int64_t n = communicator_->size();
  auto withWhere = [&](const Status &status) {
    return status.withContext("cuda backend: " + s.where);
  };
  if (s.step.gatherDim == 0) {
    INFER_RETURN_IF_ERROR(allocate(y, x.rows * n, x.cols, x.dtype));
    return withWhere(
        communicator_->allGather(x.data, x.size(), y.data, x.dtype));
  }
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols * n, x.dtype));
  const size_t elementBytes = plan::dtypeSize(x.dtype);
  void *scratch = nullptr;
  INFER_RETURN_IF_ERROR(allocateBytes(x.size() * n * elementBytes, &scratch));
  INFER_RETURN_IF_ERROR(
      withWhere(communicator_->allGather(x.data, x.size(), scratch, x.dtype)));
  const size_t rowBytes = x.cols * elementBytes;
  for (int64_t r = 0; r < n; ++r)
    INFER_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        static_cast<char *>(y.data) + r * rowBytes, rowBytes * n,
        static_cast<const char *>(scratch) + r * x.size() * elementBytes,
        rowBytes, rowBytes, x.rows, cudaMemcpyDeviceToDevice, stream_));
  freeBytes(scratch);
  return Status::ok();
}

} // namespace infer::cuda
