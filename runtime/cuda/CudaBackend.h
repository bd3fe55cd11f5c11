//===- CudaBackend.h - The CUDA backend -------------------------*- C++ -*-===//
//
// Runs one rank of a plan on one GPU, every value in its plan dtype: bf16
// activations (the GEMMs and attention read bf16; elementwise steps also
// take f32 and f16), bf16 or fp8 weights as the loader made them, the KV
// pool in the layout's dtype (bf16, fp8 E5M2, fp8 E4M3) and block layout,
// fp32 logits. cuBLASLt and the skinny GEMM kernels accumulate in fp32 and
// round each result once. Decode calls replay CUDA graphs captured per
// bucket of batch sizes (decode batches are padded to the bucket): no
// per-kernel launch cost on the host. The implementation is a folder of
// parts, runtime/cuda/backend/ (CudaBackendImpl.h lists them).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_CUDABACKEND_H
#define INFER_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/backend/Backend.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/plan/Plan.h"

#include <cstdint>
#include <functional>
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
  /// Forward calls of at most this many tokens (decode steps, padded to a
  /// bucket: decodeGraphBucket) run as CUDA graphs, captured once per
  /// (tokens, sequences, block-table bucket, logits rows); 0 runs every call
  /// eagerly.
  int64_t maxGraphTokens = 1024;
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
  /// Whether an rms_norm or silu_mul whose bf16 output is x of the very
  /// next step, an fp8-weight linear and its only reader, writes x's E4M3
  /// codes and scales for that GEMM itself when it takes fp8 cuBLASLt in
  /// one chunk (Gemm.h: the same codes, scales and product, one launch and
  /// two reads of x fewer). The environment's INFER_FUSE_FP8_QUANTIZE=0
  /// turns it off too.
  bool fuseFp8Quantize = true;
  /// Called from the loading thread(s) with the bytes of each deferred
  /// param (unpacked artifacts) as it goes to the device: a progress bar.
  std::function<void(uint64_t bytes)> uploadProgress;
};

/// How a backend made by createCudaBackend runs its `fused` steps, e.g. "3
/// of 3 fused steps run generated kernels (cubin sm_90a)"; when none do, the
/// parentheses say why. Empty for other backends.
std::string fusedKernelsReport(const Backend &backend);

/// CudaBackendOptions::fuseFp8Quantize at work: steps whose output is
/// prepared to carry its fp8 GEMM's quantization, and their launches that
/// did (a captured graph counts once, when it is captured); of those, the
/// launches that left their bf16 output unstored (the GEMM read only the
/// codes).
struct Fp8QuantizeFusion {
  bool enabled = false;
  int steps = 0;
  int64_t launches = 0;
  int64_t unstoredLaunches = 0;
};
/// Zeros for other backends (and tensor-parallel ones).
Fp8QuantizeFusion fp8QuantizeFusion(const Backend &backend);
/// Turns the fusion on or off for the next forward calls (after the work
/// in flight; the captured graphs are dropped and captured again), to
/// compare both on one backend: the same cuBLASLt algorithms.
Status setFp8QuantizeFusion(Backend &backend, bool on);

/// With CudaBackendOptions::profileSteps: a markdown table of the step time
/// per forward call by op, largest first, over the calls since the backend
/// was made or resetStepProfile; empty for other backends (and for
/// tensor-parallel ones).
std::string stepProfileReport(const Backend &backend);
void resetStepProfile(Backend &backend);

/// Whether a CUDA device can be used; `why` says why not.
bool cudaDeviceAvailable(std::string *why = nullptr);

/// The total memory of CUDA device `device` in bytes; 0 where there is no
/// usable device.
size_t cudaDeviceMemoryBytes(int device = 0);

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
