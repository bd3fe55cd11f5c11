//===- CudaBackend.h - The CUDA backend -------------------------*- C++ -*-===//
//
// Runs one rank of a plan on one GPU. Weight matrices live on the device in
// bf16 (converted from the checkpoint at load), vectors (norm weights,
// biases) in fp32; activations are fp32, converted to bf16 only as GEMM
// operands (cuBLASLt, fp32 accumulation). The KV pool is bf16 in the plan's
// block layout. Logits come back to the host in fp32. Small calls (decode)
// replay a captured CUDA graph: no per-kernel launch cost on the host.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_CUDABACKEND_H
#define INFER_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/plan/Plan.h"

#include <memory>
#include <string>
#include <vector>

namespace infer::cuda {

class NcclCommunicator;

struct CudaBackendOptions {
  int device = 0;
  /// Blocks in the KV-cache pool; 0 sizes the pool from
  /// `kvCacheMemoryFraction` of the device memory free after the weights.
  int64_t numBlocks = 0;
  double kvCacheMemoryFraction = 0.9;
  /// Forward calls of at most this many tokens (decode steps) run as CUDA
  /// graphs, captured once per (tokens, sequences, block-table bucket,
  /// logits rows); 0 runs every call eagerly.
  int64_t maxGraphTokens = 64;
  /// The rank's collectives, needed by a plan of more than one rank; on
  /// `device`. The backend enqueues them on its stream.
  NcclCommunicator *communicator = nullptr;
  /// Whether forward() copies the logits to the host; ranks other than 0 of
  /// a tensor-parallel group return only the logits' shape.
  bool copyLogits = true;
  /// The artifact's generated kernels (readKernelImages(artifact dir,
  /// manifest.kernels)): `fused` steps that name one run it when an image
  /// fits the device, the others the interpreter kernel.
  KernelImages kernels;
  /// Times every step of every forward call with CUDA events, by op (GEMMs
  /// by weight shape and dtype): stepProfileReport. The calls then run
  /// eagerly (no graphs), with an event per step: for finding where time
  /// goes, not for timing the whole.
  bool profileSteps = false;
};

/// How a backend made by createCudaBackend runs its `fused` steps, e.g. "3
/// of 3 fused steps run generated kernels (cubin sm_90a)"; when none do, the
/// parentheses say why. Empty for other backends.
std::string fusedKernelsReport(const Backend &backend);

/// With CudaBackendOptions::profileSteps: a markdown table of the step time
/// per forward call by op, largest first, over the calls since the backend
/// was made or resetStepProfile; empty for other backends (and for
/// tensor-parallel ones).
std::string stepProfileReport(const Backend &backend);
void resetStepProfile(Backend &backend);

/// Whether a CUDA device can be used; `why` says why not.
bool cudaDeviceAvailable(std::string *why = nullptr);

/// Checks the plan's rank against what this backend implements (ops and
/// attributes; an op it does not know is an Unimplemented error), uploads
/// `params` and allocates the pool.
StatusOr<std::unique_ptr<Backend>>
createCudaBackend(const plan::Plan &plan, int rank, const ParamTable &params,
                  const CudaBackendOptions &options);

/// Every rank of a tensor-parallel plan in this process, rank r on device r
/// with its own KV pool (its key/value heads), `paramsPerRank[r]` and a NCCL
/// communicator, driven by its own host thread; forward() runs all ranks on
/// the batch and returns rank 0's logits. A plan of more ranks than devices
/// is an error. `options.device` and `options.communicator` are ignored.
StatusOr<std::unique_ptr<Backend>>
createCudaTensorParallelBackend(const plan::Plan &plan,
                                const std::vector<ParamTable> &paramsPerRank,
                                const CudaBackendOptions &options);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_CUDABACKEND_H
