//===- ThreadCommunicator.h - Collectives between threads -------*- C++ -*-===//
//
// Tensor parallelism inside one process: each rank runs on its own thread and
// the ranks of a ThreadGroup exchange data through shared memory. A
// collective is two barriers:
//
//   publish own buffer ── barrier ── read every rank's buffer ── barrier
//                         (all published)                  (all done reading)
//
// so a rank never overwrites a buffer another rank is still reading. Ranks
// read the buffers in rank order, so every rank computes bitwise the same
// sum. A rank that fails calls abort(): the others' collectives return an
// error instead of waiting forever; reset() readies the group again once
// every rank has returned. Every rank also publishes its element count, and
// a collective whose ranks disagree on it fails on every rank (a malformed
// plan) instead of reading past the smaller buffers.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CPU_THREADCOMMUNICATOR_H
#define INFER_RUNTIME_CPU_THREADCOMMUNICATOR_H

#include "runtime/backend/Communicator.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace infer::cpu {

/// The shared state of `size` ranks; communicator(r) is rank r's handle,
/// used by one thread at a time.
class ThreadGroup {
public:
  explicit ThreadGroup(int size);
  ThreadGroup(const ThreadGroup &) = delete;
  ThreadGroup &operator=(const ThreadGroup &) = delete;

  int size() const { return size_; }
  Communicator &communicator(int rank) { return *communicators_[rank]; }

  /// Fails every pending and future collective of the group.
  void abort();
  /// Makes an aborted group usable again; only once no rank is inside a
  /// collective.
  void reset();

private:
  class RankCommunicator;

  /// Waits until all ranks arrive; an error once the group is aborted.
  Status barrier();
  Status allReduceSum(int rank, float *data, int64_t count);
  Status allGather(int rank, const float *send, int64_t count, float *recv);
  /// After the publishing barrier: an error (the same on every rank) unless
  /// all ranks published the same count.
  Status checkCounts(const char *collective) const;

  const int size_;
  std::vector<std::unique_ptr<Communicator>> communicators_;
  /// What each rank published for the collective in progress.
  std::vector<const float *> buffers_;
  std::vector<int64_t> counts_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_THREADCOMMUNICATOR_H
