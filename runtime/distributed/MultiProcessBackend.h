//===- MultiProcessBackend.h - TP with one process per rank -----*- C++ -*-===//
//
// A tensor-parallel plan run by the processes of one launch (MpiWorld): rank
// 0 runs the command the user typed (tokenizes, schedules, samples, serves)
// with a leader Backend; every other rank runs followRankZero(), which does
// what rank 0's backend asks and nothing else:
//
//   rank 0: driver ─ engine ─ leader.forward(batch) ─┬─ send batch ─▶ rank k
//                                                    └─ rank 0's own part
//   rank k: followRankZero ◀─ command ─ own part (same steps, same batch)
//                   ranks meet in the plan's collectives (MPI or NCCL)
//
// Any rank-0 driver works: it sees one Backend, as in the one-process
// thread-per-rank mode. The commands are: make a backend (the spec below),
// run a forward step, copy KV blocks, release the backend, shut down.
//
// Joining a group goes in two agreed stages, so that a rank that cannot load
// its weights or make its backend fails every rank with an error naming it:
//
//   every rank: load() ── agree ── create() ── agree (smallest KV pool)
//
// After a step is sent, any failure is fatal: peers may be waiting inside a
// collective, so the failing rank reports and the launch is aborted.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_DISTRIBUTED_MULTIPROCESSBACKEND_H
#define INFER_RUNTIME_DISTRIBUTED_MULTIPROCESSBACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/Communicator.h"
#include "runtime/distributed/MpiWorld.h"

#include <functional>
#include <memory>
#include <string>

namespace infer::distributed {

/// What every rank makes its part of the backend from; rank 0 sends it.
struct RankBackendSpec {
  /// An artifact directory every rank can read at this path.
  std::string artifactDir;
  /// `--weights DIR` (absolute), or empty: the artifact's packed weights or
  /// its manifest's checkpoint directory.
  std::string weightsDirOverride;
  /// Whether packed weight files are checked against their content hashes.
  bool verifyHash = true;
  /// Whether rank 0 shows the progress of loading.
  bool showProgress = false;
  /// "cpu" or "cuda".
  std::string backend;
  int64_t numBlocks = 0;
  int numThreads = 0;
  double kvCacheMemoryFraction = 0.9;
};

/// One rank's part: its backend and the communicator it holds a pointer to.
struct RankBackend {
  /// Declared first: destroyed after the backend that uses it.
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<Backend> backend;
  /// The plan's KV block size and token vocabulary, which rank 0 checks a
  /// batch against before sending it (so no rank rejects it half way).
  int64_t blockSize = 0;
  int64_t vocabSize = 0;
};

/// Makes one rank's part in two stages (between them every rank agrees).
class RankBackendBuilder {
public:
  virtual ~RankBackendBuilder() = default;
  /// Reads the artifact and this rank's parameters; no collective.
  virtual Status load(const RankBackendSpec &spec, MpiWorld &world) = 0;
  /// Makes the communicator (every rank at once) and the backend.
  virtual StatusOr<RankBackend> create(MpiWorld &world) = 0;
};
using RankBackendBuilderFactory =
    std::function<std::unique_ptr<RankBackendBuilder>()>;

/// On rank 0 of a world of more than one rank: asks every rank to make its
/// part of `spec`'s backend, makes rank 0's, and returns the leader. One
/// leader at a time.
StatusOr<std::unique_ptr<Backend>>
createLeaderBackend(MpiWorld &world, const RankBackendSpec &spec,
                    const RankBackendBuilderFactory &factory);

/// On every other rank: serves rank 0's commands until it shuts down; the
/// process's exit status (a fatal error aborts the launch instead).
int followRankZero(MpiWorld &world, const RankBackendBuilderFactory &factory);

/// On rank 0 once its command returned `exitCode`: releases the followers
/// and finalizes MPI, or aborts the launch when a step failed part way.
int finishRankZero(MpiWorld &world, int exitCode);

/// The token vocabulary a rank's embedding step indexes.
StatusOr<int64_t> tokenVocabulary(const plan::RankPlan &rank);

} // namespace infer::distributed

#endif // INFER_RUNTIME_DISTRIBUTED_MULTIPROCESSBACKEND_H
