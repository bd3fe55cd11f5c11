//===- CpuBackend.h - The fp32 reference backend ----------------*- C++ -*-===//
//
// Interprets one rank of a plan step by step in fp32 on the host. It is the
// reference every other backend is checked against, and what CI runs.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CPU_CPUBACKEND_H
#define INFER_RUNTIME_CPU_CPUBACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/Communicator.h"
#include "runtime/plan/Plan.h"

#include <memory>

namespace infer::cpu {

struct CpuBackendOptions {
  /// Blocks in the KV-cache pool (each holds every layer of block_size
  /// tokens, plan::KVCacheLayout::blockElements() floats, or as many fp8
  /// codes and blockScales() floats).
  int64_t numBlocks = 0;
  /// Worker threads including the caller; 0 = the hardware's.
  int numThreads = 0;
  /// The rank's collectives, needed by a plan of more than one rank.
  Communicator *communicator = nullptr;
};

/// Checks the plan's rank against what this backend implements (ops,
/// attributes, parameter shapes, an f32, f8e5m2 or f8e4m3 cache) and
/// allocates the pool. `params` holds every param value of the rank,
/// converted to fp32, or as fp8 codes and row scales (f8e4m3 params).
StatusOr<std::unique_ptr<Backend>>
createCpuBackend(const plan::Plan &plan, int rank, ParamTable params,
                 const CpuBackendOptions &options);

/// Every rank of a tensor-parallel plan in this process: rank r runs on its
/// own thread with its own KV pool (its key/value heads), `paramsPerRank[r]`,
/// and a thread-group communicator; forward() runs all ranks on the batch and
/// returns rank 0's logits. `options.numThreads` is split among the ranks;
/// `options.communicator` is ignored.
StatusOr<std::unique_ptr<Backend>>
createCpuTensorParallelBackend(const plan::Plan &plan,
                               std::vector<ParamTable> paramsPerRank,
                               const CpuBackendOptions &options);

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_CPUBACKEND_H
