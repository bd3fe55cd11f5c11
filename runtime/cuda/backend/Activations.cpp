//===- Activations.cpp - Activation memory of the CUDA backend ------------===//
//
// Every activation of a forward call is a range of one device buffer, the
// arena (Arena.h), handed out and freed on the host in step order: no CUDA
// call, so a captured graph holds kernels only and its replays see the same
// addresses. A forward call that runs out of room grows the arena (which
// drops the graphs that point into it) and runs again.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>

namespace infer::cuda {

Status CudaBackend::allocate(Tensor &t, int64_t rows, int64_t cols,
                             plan::DType dtype) {
  t = Tensor();
  t.rows = rows;
  t.cols = cols;
  t.dtype = dtype;
  t.owned = true;
  // A zero-row result still gets an address: it counts as computed.
  return allocateBytes(
      std::max<size_t>(1, rows * cols * plan::dtypeSize(dtype)), &t.data);
}

Status CudaBackend::allocateBytes(size_t bytes, void **out) {
  std::optional<size_t> offset = arena_.allocate(bytes);
  if (!offset) {
    arenaFull_ = true;
    return resourceExhausted("cuda backend: activation buffer full");
  }
  *out = arenaBuffer_.as<char>() + *offset;
  return Status::ok();
}

void *CudaBackend::allocateBytesIfFree(size_t bytes) {
  std::optional<size_t> offset = arena_.allocate(bytes);
  return offset ? arenaBuffer_.as<char>() + *offset : nullptr;
}

void CudaBackend::freeBytes(void *p) {
  arena_.free(
      static_cast<size_t>(static_cast<char *>(p) - arenaBuffer_.as<char>()));
}

Status CudaBackend::growArena(size_t atLeast) {
  // Captured graphs point into the old buffer.
  INFER_RETURN_IF_ERROR(destroyGraphs());
  if (arenaBuffer_)
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  const size_t bytes = std::max(atLeast, 2 * arena_.capacity());
  arenaBuffer_.reset();
  INFER_RETURN_IF_ERROR(arenaBuffer_.allocate(bytes));
  arena_.reset(bytes);
  return Status::ok();
}

Status CudaBackend::release(int id) {
  if (values_[id].owned)
    freeBytes(values_[id].data);
  values_[id] = Tensor();
  return Status::ok();
}

Status CudaBackend::releaseActivations() {
  for (Tensor &t : values_)
    t = Tensor();
  arena_.reset(arena_.capacity());
  return Status::ok();
}

} // namespace infer::cuda
