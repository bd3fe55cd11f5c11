//===- MultiProcess.h - infer under mpirun / srun ---------------*- C++ -*-===//
//
// `mpirun -np N infer generate|bench|logits ARTIFACT ...` (or srun): every
// process is one rank of the artifact's tensor-parallel plan. Rank 0 runs
// the command as typed; the other ranks follow rank 0's backend
// (runtime/distributed/MultiProcessBackend.h) and print nothing. Without a
// launcher, or with one process, nothing changes: tensor-parallel artifacts
// run one thread per rank in one process.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TOOLS_INFER_MULTIPROCESS_H
#define INFER_TOOLS_INFER_MULTIPROCESS_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/engine/PackedWeights.h"

#include <functional>
#include <memory>
#include <string>

namespace infer::tool {

/// Runs `command` (the tool's main) as this process's part of the launch
/// and returns the exit status.
int runUnderLauncher(const std::function<int()> &command);

/// Whether this process is rank 0 of a launch of several processes, in
/// which case tensor-parallel artifacts run one rank per process.
bool inMultiProcessLaunch();

/// On rank 0 of such a launch: the backend of every rank of `artifact`,
/// one per process (the arguments of createBackend; every rank loads its
/// params as `weights` says, packed or from the checkpoint).
StatusOr<std::unique_ptr<Backend>>
createMultiProcessBackend(const Artifact &artifact, const std::string &name,
                          const WeightLoadOptions &weights, int64_t numBlocks,
                          int numThreads, double kvCacheMemoryFraction);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_MULTIPROCESS_H
