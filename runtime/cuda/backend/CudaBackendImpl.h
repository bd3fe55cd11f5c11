//===- CudaBackendImpl.h - The CUDA backend's class, for its parts -*- C++
//-*-===//
//
// Private to runtime/cuda. The backend is a folder of parts, one job each:
//
//   CudaBackend.cpp      init, step preparation, the factory and reports
//   DeviceParams.cpp     parameters on the device, as their plan dtype
//   Activations.cpp      activation memory: one arena, ranges per value
//   BatchInputs.cpp      the batch contract on the device; decode batches
//                        padded to a graph bucket
//   Graphs.cpp           forward(): eager runs and CUDA graph capture/replay
//   DeviceSampler.cpp    sampling inside the graph
//   Launches.cpp         launchSample() / collectSample(): sampled forward
//                        calls in flight, forwardSample(), device idle time
//   Profiler.cpp         per-step CUDA-event timings
//   KVPool.cpp           the paged KV pool and block copies
//   ModelSteps.cpp       embedding, norms, linear, logits, bias_add
//   AttentionSteps.cpp   rope, cache writes, paged attention
//   ElementwiseSteps.cpp silu, gelu, add, mul, silu_mul, cast, split,
//                        gather_rows, fused
//   CollectiveSteps.cpp  all_reduce, all_gather (NCCL)
//
// Every value lives on the device as its plan dtype says: activations bf16
// (f32 and f16 where the plan has them; the GEMMs and attention take bf16),
// the logits f32, params bf16 or fp8 codes with row scales, the KV pool the
// layout's dtype. Nothing is converted between steps.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_BACKEND_CUDABACKENDIMPL_H
#define INFER_RUNTIME_CUDA_BACKEND_CUDABACKENDIMPL_H

#include "runtime/cuda/Arena.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/DeviceBuffer.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/ParamUpload.h"
#include "runtime/cuda/QuantizingKernels.h"
#include "runtime/cuda/SamplingKernels.h"
#include "runtime/cuda/backend/PinnedStaging.h"
#include "runtime/plan/StepAttrs.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace infer::cuda {

class NcclCommunicator;

/// A value on the device: elements of `dtype` (activations, params), or an
/// fp8 GEMM weight (E4M3 codes and an fp32 scale per row).
struct Tensor {
  void *data = nullptr;
  plan::DType dtype = plan::DType::kBF16;
  const uint8_t *fp8 = nullptr;
  const float *rowScales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Elements from one row to the next: 0 for contiguous rows (cols). Only
  /// a split's column views (PreparedStep::viewSplit) have another.
  int64_t ld = 0;
  /// Activations are arena ranges freed after their last use (not views,
  /// whose split input owns the memory).
  bool owned = false;

  template <typename T> T *as() const { return static_cast<T *>(data); }
  int64_t size() const { return rows * cols; }
  int64_t stride() const { return ld ? ld : cols; }
  bool computed() const { return data != nullptr || fp8 != nullptr; }
};

/// Calls f(T{}) with the C++ element type of a float dtype.
template <typename F> Status withFloatType(plan::DType dtype, F &&f) {
  switch (dtype) {
  case plan::DType::kF32:
    return f(float{});
  case plan::DType::kBF16:
    return f(__nv_bfloat16{});
  case plan::DType::kF16:
    return f(__half{});
  default:
    return unimplemented(std::string("a value of dtype ") +
                         std::string(plan::dtypeName(dtype)));
  }
}

/// The plan dtype of a C++ element type.
template <typename T> constexpr plan::DType dtypeOf();
template <> constexpr plan::DType dtypeOf<float>() { return plan::DType::kF32; }
template <> constexpr plan::DType dtypeOf<__nv_bfloat16>() {
  return plan::DType::kBF16;
}
template <> constexpr plan::DType dtypeOf<__half>() {
  return plan::DType::kF16;
}

/// Calls f(p) with `w`'s elements as `const T *` or, for an f32 param of a
/// narrower activation (a norm weight or bias kept in fp32), `const float
/// *`: the kernels take either.
template <typename T, typename F> Status withParamOf(const Tensor &w, F &&f) {
  if (w.dtype == dtypeOf<T>())
    return f(w.as<const T>());
  if (w.dtype == plan::DType::kF32)
    return f(w.as<const float>());
  return unimplemented(
      "a " + std::string(plan::dtypeName(w.dtype)) + " weight of " +
      std::string(plan::dtypeName(dtypeOf<T>())) + " activations");
}

/// The batch-contract inputs, in the order they are packed for upload.
enum class InputKind {
  kTokenIds,
  kPositions,
  kQueryStartLoc,
  kContextLens,
  kBlockTables,
  kSlotMapping,
  kLogitsIndices,
  kCount,
};

/// One captured forward call and the pinned buffer its logits land in (none
/// when the graph samples: the tokens land in the backend's).
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  PinnedBuffer hostLogits;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Rows of the matrix each gather_rows step indexes (step -> rows).
  std::vector<std::pair<size_t, int64_t>> gatherRows;
};

/// A step decoded once (plan::decodeStep) with what this backend adds.
struct PreparedStep {
  plan::DecodedStep step;
  std::string where;
  /// split: the results are column views of the input, no copy (every
  /// reader of every result takes rows with a stride: markViewSplits).
  bool viewSplit = false;
  /// fused: the body, with the tensors filled in per run.
  FusedProgram fused;
  /// fused: the artifact's generated kernel of the body, or null (the
  /// interpreter runs `fused`).
  cudaKernel_t generated = nullptr;
  /// rope, rope_kv_cache_write, rope_qkv_cache_write, and a streaming
  /// paged_attention's key rope:
  /// the inverse frequencies on the device.
  DeviceBuffer ropeInvFreq;
  AttentionDims attention;
  std::vector<int> release;
  /// rms_norm and silu_mul: the output is x of the next step, an fp8
  /// linear or linear_residual and its only reader (markFp8QuantizeFusions),
  /// so this step may quantize it for that GEMM.
  bool quantizesForNext = false;
  /// A cache write (kv_cache_write, rope_kv_cache_write,
  /// rope_qkv_cache_write) whose layer's paged_attention reads FreshKV
  /// (markFreshKV): in calls with prompt rows it also writes the decoded
  /// keys and values of the call's tokens into an arena range for that step
  /// (freshKV_), which frees it.
  bool writesFreshKV = false;
  bool readsFreshKV = false;
  /// A FreshKV writer's: query heads per kv head of the attention reading
  /// it.
  int freshKVGroup = 0;
};

class CudaBackend final : public Backend {
public:
  CudaBackend(int device, const plan::KVCacheLayout &layout);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &batch) override;
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override;
  Status launchSample(const Batch &batch,
                      const SamplingBatch &sampling) override;
  StatusOr<std::vector<int32_t>> collectSample() override;
  double deviceIdleSeconds() const override { return idleSeconds_; }
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override;

  Status init(const plan::RankPlan &plan, const ParamTable &params,
              const CudaBackendOptions &options);
  std::string fusedKernelsReport() const;
  std::string stepProfileReport() const;
  void resetStepProfile() {
    profile_.clear();
    profiledForwards_ = 0;
  }
  Fp8QuantizeFusion fp8QuantizeFusion() const;
  Status setFp8QuantizeFusion(bool on);

private:
  /// (tokens, sequences, padded max blocks per sequence, logits rows,
  /// whether it samples).
  using GraphKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;

  // CudaBackend.cpp
  Status prepareStep(const plan::Step &step, const std::string &where,
                     PreparedStep &out);
  /// Loads the kernels the fused steps name, if an image fits the device;
  /// otherwise they run the interpreter and fusedReport_ says why.
  void loadGeneratedKernels(const KernelImages &images);
  Status runStep(size_t index, const Batch &batch);
  /// Runs every step on the stream; the plan output stays on the device.
  Status runSteps(const Batch &batch);
  const Tensor &operand(const PreparedStep &s, size_t i) const;
  Tensor &result(const PreparedStep &s, size_t i = 0) {
    return values_[s.step.results[i]];
  }
  Status mismatch(const PreparedStep &s, const std::string &what) const {
    return invalidArgument("cuda backend: " + s.where + ": " + what);
  }
  /// add and mul (ElementwiseSteps.cpp): two operands of one shape and
  /// dtype, one result of it, `launch(a, b, y, count)` on typed pointers.
  template <typename Launch>
  Status runSameShapePair(const PreparedStep &s, Launch launch);

  /// Sets PreparedStep::quantizesForNext (CudaBackendOptions::
  /// fuseFp8Quantize).
  void markFp8QuantizeFusions();
  /// Sets PreparedStep::writesFreshKV / readsFreshKV: an fp8 pool, the
  /// Hopper prefill for its attention, and a cache write of the layer
  /// before its paged_attention.
  void markFreshKV();
  /// The FreshKV a cache write step `s` of `t` tokens writes in this call,
  /// an arena range with the context rows the batch's chunked prompts take
  /// (freshContextRows, at most kMaxFreshContextRowsPerToken a token) where
  /// the arena has that much free, else without them; or none (null data:
  /// not paired, a decode-only call, or reads off).
  Status freshRowsFor(const PreparedStep &s, const Batch &batch, int64_t t,
                      FreshKV *fresh);
  /// Keeps `fresh` as freshKV_ for the layer's attention where the launch
  /// wrote it, else frees it.
  void keepFreshRows(const PreparedStep &s, const FreshKV &fresh, bool written);
  /// Where step `s` (quantizesForNext, output [rows, cols]) writes the
  /// codes and scales of the next step's GEMM: nullopt where the fusion is
  /// off or that GEMM does not take fp8 cuBLASLt in one chunk.
  struct Fp8ForNext {
    Gemm::Fp8Operand operand;
    /// Whether the producer stores its bf16 output too: not where the GEMM
    /// reads only the codes (Gemm::fp8OperandSuffices) and the row fits in
    /// shared memory (kMaxUnstoredRowElements), unless
    /// INFER_FP8_UNSTORED_ROWS=0.
    bool storeRow = true;
  };
  StatusOr<std::optional<Fp8ForNext>>
  fp8OperandForNext(const PreparedStep &s, int64_t rows, int64_t cols) const;

  // DeviceParams.cpp
  Status uploadParams(const ParamTable &params, const UploadProgress &progress);
  /// Streams the deferred params (unpacked artifacts) to the device:
  /// host tensor -> its device tensor.
  Status uploadDeferredParams(const ParamTable &params,
                              const UploadProgress &progress,
                              std::map<const HostTensor *, Tensor> &uploaded);
  /// Uploads the spans of the mapped files `params` view (packed weights):
  /// mapping -> (host start of the span, its device copy).
  Status uploadMappedParams(
      const ParamTable &params,
      std::map<const HostMapping *, std::pair<const char *, char *>> &spans);

  // KVPool.cpp
  int64_t blockElements() const {
    return int64_t(dims_.numLayers) * 2 * dims_.blockSize * dims_.numKVHeads *
           dims_.headDim;
  }
  /// Bytes of one block's elements (bf16 values or fp8 codes) and of its
  /// E4M3 scales (one fp32 per head vector; none for other dtypes).
  size_t blockDataBytes() const {
    return blockElements() * kvCacheElementBytes(kvDtype_);
  }
  size_t blockScaleBytes() const {
    return kvDtype_ == KVCacheDtype::kF8E4M3
               ? blockElements() / dims_.headDim * sizeof(float)
               : 0;
  }
  KVCachePool kvPool() const;
  Status allocateKVPool(const CudaBackendOptions &options);

  // Activations.cpp
  /// An arena range for a [rows, cols] activation of `dtype`; when none is
  /// left, a ResourceExhausted error and arenaFull_ (forward grows the arena
  /// and retries).
  Status allocate(Tensor &t, int64_t rows, int64_t cols, plan::DType dtype);
  Status allocateBytes(size_t bytes, void **out);
  /// An arena range where one is free now, else null: nothing grows the
  /// arena for it (optional memory such as FreshKV's context rows).
  void *allocateBytesIfFree(size_t bytes);
  void freeBytes(void *p);
  Status growArena(size_t atLeast);
  Status release(int id);
  Status releaseActivations();

  // BatchInputs.cpp
  /// The batch the graphs run: `batch`, or a decode batch padded with
  /// sequences of one token that write no cache and read the scratch block
  /// up to the next graph bucket (logits and tokens of the padding are
  /// dropped). Null when `batch` runs as it is.
  std::optional<Batch> padDecodeBatch(const Batch &batch) const;
  /// Packs the inputs into pinned staging and copies them to the device in
  /// one copy, then enqueues the feed of the batch's sampled tokens.
  Status uploadInputs(const Batch &batch);
  /// The device copy and length of an integer input.
  const void *input(int id, int64_t *length, const Batch &batch) const;
  /// Checks token ids against the embedding tables (data, not shapes).
  Status checkTokenIds(const Batch &batch) const;
  /// The vocabulary of an embedding step.
  int64_t embeddingVocab(const PreparedStep &s) const;
  /// Sets tokenVocab_ (after the params are on the device).
  void findTokenVocab();
  /// What every forward call checks before it enqueues anything: the batch
  /// contract and the token ids.
  Status checkBatch(const Batch &batch) const;

  // Graphs.cpp
  /// forward() and launchSample() (a checked batch): pads a decode batch to
  /// its graph bucket, runs it (growing the arena as needed) and drops the
  /// padding's logits rows. A sampled call returns once its work is
  /// enqueued, its tokens in deviceTokens_; forward() waits for its logits.
  StatusOr<Logits> forwardBatch(const Batch &batch,
                                const SamplingBatch *sampling);
  StatusOr<Logits> forwardOnce(const Batch &batch);
  Status capture(const Batch &batch, CapturedGraph &graph);
  Status destroyGraphs();

  // DeviceSampler.cpp
  /// Copies the rows' parameters to the device (pinned staging, on the
  /// stream), padded with greedy rows to `rows`, growing the buffers if
  /// needed (deviceTokens_ keeps the last call's tokens).
  Status uploadSampling(const SamplingBatch &sampling, int64_t rows);
  /// Enqueues the sampling kernel on the plan output (into deviceTokens_).
  Status enqueueSampling(const Tensor &logits);

  // Launches.cpp
  /// Enqueues a checked launch into its slot: the forward call, the copy of
  /// its tokens and its timing events.
  Status enqueueLaunch(const Batch &batch, const SamplingBatch &sampling);
  /// The rows of the previous launch that `batch`'s sampled tokens read.
  Status checkSampledRows(const Batch &batch) const;

  // Profiler.cpp
  Status recordStepStart(size_t index);
  /// Adds the last run's event intervals to profile_ (after a sync).
  Status collectStepProfile();

  // AttentionSteps.cpp
  /// A dynamic NTK rope's device view (its query_start_loc is operand
  /// `lengthsOperand`); none for the other scalings.
  DynamicRope dynamicRope(const PreparedStep &s, size_t lengthsOperand,
                          const Batch &batch) const;

  // The steps, one function per op of runtime/plan/StepOps.def.
#define INFER_STEP_OP(Name, ...)                                               \
  Status run##Name(const PreparedStep &s, const Batch &batch);
#include "runtime/plan/StepOps.def"

  int device_;
  NcclCommunicator *communicator_ = nullptr;
  bool copyLogits_ = true;
  /// The artifact's generated kernels, when an image fits the device.
  std::unique_ptr<GeneratedKernels> generated_;
  /// How the fused steps run (fusedKernelsReport).
  std::string fusedReport_;
  int numFusedSteps_ = 0;
  int numGeneratedSteps_ = 0;
  CacheDims dims_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  /// CudaBackendOptions::fuseFp8Quantize (and the environment).
  bool fuseFp8Quantize_ = true;
  bool unstoredFp8Rows_ = true;
  int numFp8QuantizeSteps_ = 0;
  int64_t numFp8QuantizeLaunches_ = 0;
  int64_t numFp8UnstoredLaunches_ = 0;
  /// The GEMM step whose x the step before it quantized into gemm_'s
  /// scratch in this run (it calls Gemm::linearQuantized), or null.
  const PreparedStep *fp8Quantized_ = nullptr;

  /// The KV pool (KVCachePool): bf16 values or fp8 codes, and E4M3 scales.
  /// It has numBlocks_ blocks for the engine and one more, the scratch
  /// block padded decode rows read (scratchBlock_).
  KVCacheDtype kvDtype_ = KVCacheDtype::kBf16;
  int64_t numBlocks_ = 0;
  int32_t scratchBlock_ = 0;
  DeviceBuffer pool_;
  DeviceBuffer poolScales_;
  /// Partial results of split-KV decode attention, sized at init for any
  /// batch (splitKVWorkspaceBytes).
  DeviceBuffer splitKVBuffer_;
  SplitKVWorkspace splitKV_;
  /// The FreshKV a rope_qkv_cache_write step wrote in this run for its
  /// layer's paged_attention (an arena range; null data: none).
  FreshKV freshKV_;
  int freshKVLayer_ = -1;

  plan::RankPlan rank_;
  std::vector<std::optional<InputKind>> inputOf_;
  /// Param value id -> its device tensor (empty for other values), and the
  /// buffers they point into.
  std::vector<Tensor> params_;
  std::vector<DeviceBuffer> paramBuffers_;
  std::vector<Tensor> values_;
  DeviceBuffer arenaBuffer_;
  Arena arena_;
  bool arenaFull_ = false;
  std::vector<PreparedStep> steps_;
  int output_ = -1;

  PinnedStaging inputStaging_;
  DeviceBuffer inputs_;
  size_t inputOffset_[static_cast<int>(InputKind::kCount)] = {};
  /// Where the sampled tokens' (token index, row) pairs are in inputs_.
  size_t sampledOffset_ = 0;
  /// The smallest embedding vocabulary: a fed token outside it becomes 0.
  int64_t tokenVocab_ = 0;
  /// block_tables rows as uploaded: padded to a power of two
  /// so that decode steps of growing sequences share a graph.
  int64_t paddedBlocksPerSeq_ = 0;

  int64_t maxGraphTokens_ = 0;
  std::map<GraphKey, CapturedGraph> graphs_;
  /// Shapes that ran eagerly once, before their capture (forwardOnce).
  std::set<GraphKey> warmShapes_;
  /// INFER_CUDA_GRAPH_WARMUP=0 captures a shape at its first call (and
  /// leaves its GEMMs untuned), for comparison; never with NCCL.
  bool warmUpGraphs_ = true;
  /// gather_rows steps' input rows in the last run (step -> rows).
  std::vector<std::pair<size_t, int64_t>> gatherRows_;

  /// Set during a sampled call: the run samples instead of copying logits.
  const SamplingBatch *sampling_ = nullptr;
  /// Rows the sampling buffers hold (captured graphs point into them).
  int64_t samplingCapacity_ = 0;
  PinnedStaging samplingStaging_;
  DeviceBuffer deviceSampling_;
  /// The sampling kernel's output. One buffer serves every launch: launch
  /// k+1's feed reads launch k's tokens before k+1's sampling rewrites
  /// them, in stream order.
  DeviceBuffer deviceTokens_;

  /// A sampled forward call from launchSample() to collectSample()
  /// (forwardSample() is one, collected at once).
  struct SampleLaunch {
    /// Where the copy enqueued after the forward puts the tokens.
    PinnedBuffer tokens;
    int64_t rows = 0;
    /// Recorded before the call's first copy and after its tokens' copy.
    CudaEvent start;
    CudaEvent end;
    /// Whether the previous launch's work came last on the stream before
    /// this one's: the time between them is the device's idle time.
    bool followsLaunch = false;
  };
  /// Launch n uses slot n % 3: with at most 2 uncollected, the launch
  /// before the oldest keeps its end event until the oldest is collected
  /// and its idle gap measured.
  std::array<SampleLaunch, kMaxLaunchesInFlight + 1> launches_;
  int64_t numLaunched_ = 0;
  int64_t numCollected_ = 0;
  /// Rows of the last launch, whose tokens deviceTokens_ holds for the next
  /// launch's sampled tokens; -1 when there are none (no launch yet, or
  /// forwardSample() or a failed launch sampled since).
  int64_t feedableRows_ = -1;
  /// Whether other work (forward(), a failed launch) ran on the stream
  /// since the last launch.
  bool otherWorkSinceLaunch_ = false;
  double idleSeconds_ = 0.0;

  /// CudaBackendOptions::profileSteps: an event before each step and one
  /// after the last, each step's label in the last run, and the time per
  /// label summed over forward calls.
  bool profileSteps_ = false;
  std::vector<cudaEvent_t> profileEvents_;
  std::vector<std::string> profileLabels_;
  struct StepTime {
    int64_t calls = 0;
    double ms = 0;
  };
  std::map<std::string, StepTime> profile_;
  int64_t profiledForwards_ = 0;
};

/// The graph bucket a decode batch of `rows` sequences is padded to: the
/// next power of two up to 4, then the next multiple of max(8, 2^k / 8)
/// where 2^k <= rows < 2^(k+1) (at most 1/8 padding, ~40 buckets to 1024).
int64_t decodeGraphBucket(int64_t rows);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_BACKEND_CUDABACKENDIMPL_H
