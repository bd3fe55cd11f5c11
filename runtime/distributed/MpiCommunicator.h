//===- MpiCommunicator.h - Collectives between processes, MPI ---*- C++ -*-===//
//
// The Communicator of a CPU rank whose peers are other processes (mpirun
// -np N, one rank each). Buffers are host memory; a collective is done when
// the call returns. Every rank sends its buffer to every other rank and sums
// what it received in rank order, as cpu::ThreadGroup does:
//
//   rank r:  Isend(data) ─▶ every peer      Irecv ◀─ every peer
//            wait (deadline) ─▶ sum = buf[0] + buf[1] + ... + buf[N-1]
//
// so every rank gets bitwise the same sum, and the same as the one-process
// thread-per-rank run. Point-to-point messages (not MPI_Allreduce) let a
// rank name the peer that never sent its part: a collective that a peer does
// not reach within stepTimeout() returns an error saying which rank.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_DISTRIBUTED_MPICOMMUNICATOR_H
#define INFER_RUNTIME_DISTRIBUTED_MPICOMMUNICATOR_H

#include "runtime/backend/Communicator.h"
#include "runtime/distributed/MpiWorld.h"

#include <vector>

namespace infer::distributed {

class MpiCommunicator final : public Communicator {
public:
  explicit MpiCommunicator(MpiWorld &world) : world_(world) {}

  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  Status allReduceSum(float *data, int64_t count) override;
  Status allGather(const float *send, int64_t count, float *recv) override;

private:
  /// Sends `send[0, count)` to every peer and receives each peer's into
  /// `recv + peer * count`.
  Status exchange(const float *send, int64_t count, float *recv,
                  const char *op);

  MpiWorld &world_;
  /// Collectives made so far, for messages.
  uint64_t calls_ = 0;
  std::vector<float> gathered_;
};

} // namespace infer::distributed

#endif // INFER_RUNTIME_DISTRIBUTED_MPICOMMUNICATOR_H
