//===- MpiWorld.h - The processes of one mpirun / srun launch ---*- C++ -*-===//
//
// Multi-process tensor parallelism: the user's launcher (mpirun, srun) starts
// one process per rank, possibly on several hosts, and MPI names them:
//
//   host a: rank 0 (local 0, GPU 0)   rank 1 (local 1, GPU 1)
//   host b: rank 2 (local 0, GPU 0)   rank 3 (local 1, GPU 1)
//
// MpiWorld owns MPI for the process (init, finalize, abort) and the few
// point-to-point calls the rest of the runtime makes. Every wait is a poll
// with a deadline, never a blocking MPI call: a rank that died or hangs makes
// its peers return an error that names it within the deadline instead of
// waiting forever (MPI itself cannot tell a slow peer from a dead one).
// Errors are returned, not fatal (MPI_ERRORS_RETURN): a process that cannot
// go on calls abort(), which ends every rank of the launch.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_DISTRIBUTED_MPIWORLD_H
#define INFER_RUNTIME_DISTRIBUTED_MPIWORLD_H

#include "runtime/support/Status.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace infer::distributed {

/// Whether the environment says a launcher started this process as one rank
/// of several (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or SLURM_NTASKS with
/// SLURM_STEP_ID), so MPI should be initialized. A plain `infer ...` does not
/// touch MPI.
bool launchedAsRanks();

/// Seconds a rank waits for its peers inside a step (a collective, a batch
/// sent or received): INFER_MPI_TIMEOUT, default 300.
std::chrono::milliseconds stepTimeout();
/// Seconds ranks wait for each other to join a group (load weights, make a
/// communicator): INFER_MPI_JOIN_TIMEOUT, default 1800.
std::chrono::milliseconds joinTimeout();

/// Message tags; collectives use their own communicator (collectiveComm).
enum class Tag : int {
  /// Rank 0 to the others: what to do next (make a backend, run a step).
  kCommand = 1,
  /// Each rank to rank 0: how its part of joining a group went.
  kJoinReport = 2,
  /// Rank 0 to the others: whether every rank joined.
  kJoinVerdict = 3,
  /// Rank 0 to the others: bytes a group needs, e.g. an NCCL unique id.
  kBytes = 4,
};

class MpiWorld {
public:
  /// Initializes MPI (once per process) and returns the process's world.
  static StatusOr<MpiWorld *> init();
  /// The world init() made, or null.
  static MpiWorld *active();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This rank's index among the ranks on its host (the GPU it takes).
  int localRank() const { return localRank_; }
  /// Ranks on this rank's host.
  int localSize() const { return localSize_; }
  const std::string &hostName() const { return hostName_; }
  /// "rank 1 (host b)", for messages.
  std::string describeRank(int rank) const;

  /// Sends `bytes` to `peer` and waits until they have left (deadline).
  Status send(int peer, Tag tag, const std::string &bytes,
              std::chrono::milliseconds timeout, const std::string &what);
  /// Sends `bytes` from rank 0 to every other rank (deadline).
  Status sendToAll(Tag tag, const std::string &bytes,
                   std::chrono::milliseconds timeout, const std::string &what);
  /// Receives a message from `peer`; a zero timeout waits as long as it
  /// takes (a follower waiting for rank 0's next step while it idles).
  StatusOr<std::string> receive(int peer, Tag tag,
                                std::chrono::milliseconds timeout,
                                const std::string &what);

  /// The communicator collectives run on (a duplicate of the world, so their
  /// messages never match a command's).
  MPI_Comm collectiveComm() const { return collectiveComm_; }

  /// Marks the world unusable: a step failed part way, so ranks may be left
  /// inside a collective and only abort() ends the launch cleanly.
  void markBroken() { broken_ = true; }
  bool broken() const { return broken_; }

  /// Ends every rank of the launch with `code` (MPI_Abort); does not return.
  [[noreturn]] void abort(int code);
  /// Finalizes MPI; every rank must call it (no pending messages).
  void finalize();

private:
  MpiWorld() = default;

  int rank_ = 0;
  int size_ = 1;
  int localRank_ = 0;
  int localSize_ = 1;
  std::string hostName_;
  MPI_Comm worldComm_ = MPI_COMM_NULL;
  MPI_Comm collectiveComm_ = MPI_COMM_NULL;
  bool broken_ = false;
};

/// Waits for every request of `requests` (`peers[i]` is the rank request i
/// talks to) until `timeout`; on expiry cancels nothing
/// and returns an error naming the ranks that had not answered `what`. The
/// polling yields the core, so oversubscribed ranks make progress.
Status waitAll(const MpiWorld &world, std::vector<MPI_Request> &requests,
               const std::vector<int> &peers, std::chrono::milliseconds timeout,
               const std::string &what);

} // namespace infer::distributed

#endif // INFER_RUNTIME_DISTRIBUTED_MPIWORLD_H
