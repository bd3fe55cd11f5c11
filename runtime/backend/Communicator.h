//===- Communicator.h - Collectives between TP ranks ------------*- C++ -*-===//
//
// What a rank's backend calls to complete the collectives of a
// tensor-parallel plan (`all_reduce`, `all_gather` steps). Every rank of a
// group makes the same calls in the same order with the same sizes, as NCCL
// requires. Buffers live where the rank's backend computes, and that decides
// when a call is done:
//   cpu::ThreadGroup       host memory; ranks are threads of one process; the
//                          result is there when the call returns.
//   cuda::NcclCommunicator device memory of the rank's GPU; the call enqueues
//                          the collective on the rank's stream and returns.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_BACKEND_COMMUNICATOR_H
#define INFER_RUNTIME_BACKEND_COMMUNICATOR_H

#include "runtime/support/Status.h"

#include <cstdint>

namespace infer {

class Communicator {
public:
  virtual ~Communicator() = default;
  /// This rank, in [0, size()).
  virtual int rank() const = 0;
  /// Ranks in the group.
  virtual int size() const = 0;
  /// Replaces `data[0, count)` by its elementwise sum over the ranks. Every
  /// rank gets bitwise the same result.
  virtual Status allReduceSum(float *data, int64_t count) = 0;
  /// Writes every rank's `send[0, count)` to `recv`, rank-major:
  ///
  ///   recv = [ rank 0's count floats | rank 1's | ... | rank size-1's ]
  virtual Status allGather(const float *send, int64_t count, float *recv) = 0;
};

} // namespace infer

#endif // INFER_RUNTIME_BACKEND_COMMUNICATOR_H
