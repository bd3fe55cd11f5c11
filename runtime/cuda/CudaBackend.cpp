//===- CudaBackend.cpp - The CUDA backend ---------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Arena.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/cuda/SamplingKernels.h"
#include "runtime/plan/FusedBody.h"
#include "runtime/plan/StepAttrs.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <tuple>

namespace infer::cuda {

namespace {

using plan::Step;
using plan::Value;
using plan::ValueKind;

using OpKind = plan::StepOp;

static_assert(static_cast<int>(FusedOp::kSiluMul) ==
                      static_cast<int>(plan::ElementwiseOp::kSiluMul) &&
                  static_cast<int>(FusedOp::kGeluTanh) ==
                      static_cast<int>(plan::ElementwiseOp::kGeluTanh) &&
                  static_cast<int>(FusedOp::kSilu) ==
                      static_cast<int>(plan::ElementwiseOp::kSilu) &&
                  static_cast<int>(FusedOp::kMul) ==
                      static_cast<int>(plan::ElementwiseOp::kMul),
              "FusedOp mirrors plan::ElementwiseOp");

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

std::optional<InputKind> parseInputName(const std::string &name) {
  static const char *const kNames[] = {
      "token_ids",    "positions",    "query_start_loc", "context_lens",
      "block_tables", "slot_mapping", "logits_indices"};
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i)
    if (name == kNames[i])
      return static_cast<InputKind>(i);
  return std::nullopt;
}

/// A value on the device: an fp32 matrix (activations, vector params) or a
/// bf16 one (GEMM weights, embedding tables), or both for a param used
/// both ways; or an fp8 GEMM weight: E4M3 codes and an fp32 scale per row.
struct Tensor {
  float *f32 = nullptr;
  __nv_bfloat16 *bf16 = nullptr;
  uint8_t *fp8 = nullptr;
  float *rowScales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Elements from one row to the next: 0 for contiguous rows (cols). Only
  /// a split's column views (PreparedStep::viewSplit) have another.
  int64_t ld = 0;
  /// Activations are stream-ordered allocations freed after their last use
  /// (not views, whose split input owns the memory).
  bool owned = false;

  int64_t size() const { return rows * cols; }
  int64_t stride() const { return ld ? ld : cols; }
};

/// One captured forward call and the pinned buffer its logits land in (none
/// when the graph samples: the tokens land in the backend's).
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  float *hostLogits = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Rows of the matrix each gather_rows step indexes (step -> rows).
  std::vector<std::pair<size_t, int64_t>> gatherRows;
};

/// A step with its attributes checked and decoded once, at creation.
struct PreparedStep {
  OpKind op;
  std::string where;
  std::vector<int> operands;
  int result = -1;
  /// Every result (split, add_rms_norm and fused have several).
  std::vector<int> results;
  /// split: the columns of each result.
  std::vector<int64_t> sizes;
  /// split: the results are column views of the input, no copy (every
  /// reader of every result takes rows with a stride: markViewSplits).
  bool viewSplit = false;
  /// fused: the body, with the tensors filled in per run.
  FusedProgram fused;
  /// fused: the artifact's generated kernel of the body, or null (the
  /// interpreter runs `fused`).
  cudaKernel_t generated = nullptr;
  float epsilon = 0.0f;
  int ropeHeadDim = 0;
  int ropeRotaryDim = 0;
  float *ropeInvFreq = nullptr;
  AttentionDims attention;
  int layer = 0;
  /// embedding: the table's first vocabulary id and the full vocabulary
  /// (vocabulary-parallel; vocabSize 0 means the table is all of it).
  int64_t vocabOffset = 0;
  int64_t vocabSize = 0;
  /// all_gather: the dimension concatenated.
  int64_t gatherDim = 0;
  std::vector<int> release;
};

/// Whether operand `i` of `op` may be a column view (rows `ld` apart): the
/// kernels of these operands take a row stride.
bool takesRowStride(OpKind op, size_t i) {
  switch (op) {
  case OpKind::kRope:
    return i == 0;
  case OpKind::kKVCacheWrite:
  case OpKind::kRopeKVCacheWrite:
    return i == 1 || i == 2;
  case OpKind::kSiluMul:
    return i == 0 || i == 1;
  default:
    return false;
  }
}

/// Marks the splits whose results are read only through takesRowStride
/// operands (q/k/v into rope and the cache write, gate/up into silu_mul):
/// they run as column views of their input, so no split copies the fused
/// projection's output. The input then lives until its views' last use.
void markViewSplits(std::vector<PreparedStep> &steps,
                    const plan::RankPlan &rank, int output,
                    std::vector<int> &lastUse) {
  std::vector<bool> strided(rank.values.size(), true);
  for (const PreparedStep &step : steps)
    for (size_t i = 0; i < step.operands.size(); ++i)
      if (!takesRowStride(step.op, i))
        strided[step.operands[i]] = false;
  for (PreparedStep &step : steps) {
    if (step.op != OpKind::kSplit ||
        rank.values[step.operands[0]].kind != ValueKind::kActivation)
      continue;
    const bool views =
        std::all_of(step.results.begin(), step.results.end(),
                    [&](int r) { return r != output && strided[r]; });
    if (!views)
      continue;
    step.viewSplit = true;
    for (int r : step.results)
      lastUse[step.operands[0]] =
          std::max(lastUse[step.operands[0]], lastUse[r]);
  }
}

class CudaBackend final : public Backend {
public:
  CudaBackend(int device, const plan::KVCacheLayout &layout) : device_(device) {
    dims_.numLayers = static_cast<int>(layout.numLayers);
    dims_.numKVHeads = static_cast<int>(layout.numKVHeads);
    dims_.headDim = static_cast<int>(layout.headDim);
    dims_.blockSize = static_cast<int>(layout.blockSize);
    if (layout.dtype == plan::DType::kF8E5M2)
      kvDtype_ = KVCacheDtype::kF8E5M2;
    else if (layout.dtype == plan::DType::kF8E4M3)
      kvDtype_ = KVCacheDtype::kF8E4M3;
  }
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &batch) override;
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override;
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

private:
  /// (tokens, sequences, padded max blocks per sequence, logits rows,
  /// whether it samples).
  using GraphKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;
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
  KVCachePool kvPool() const {
    return kvDtype_ == KVCacheDtype::kBf16
               ? KVCachePool(static_cast<__nv_bfloat16 *>(pool_))
               : KVCachePool(static_cast<uint8_t *>(pool_), poolScales_,
                             kvDtype_);
  }
  Status uploadParams(const ParamTable &params);
  /// Loads the kernels the fused steps name, if an image fits the device;
  /// otherwise they run the interpreter and fusedReport_ says why.
  void loadGeneratedKernels(const KernelImages &images);
  Status prepareStep(const Step &step, const std::string &where,
                     PreparedStep &out);
  Status uploadInputs(const Batch &batch);
  Status runStep(size_t index, const Batch &batch);
  /// Runs every step on the stream; the plan output stays on the device.
  Status runSteps(const Batch &batch);
  /// Checks token ids against the embedding tables (data, not shapes).
  Status checkTokenIds(const Batch &batch) const;
  Status capture(const Batch &batch, CapturedGraph &graph);
  /// Copies the rows' parameters to the device (pinned staging, on the
  /// stream), growing the sampling buffers if needed.
  Status uploadSampling(const SamplingBatch &sampling);
  /// Enqueues the sampling kernel on the plan output and the copy of the
  /// tokens to hostTokens_.
  Status enqueueSampling(const Tensor &logits);
  Status destroyGraphs();
  Status allocate(Tensor &t, int64_t rows, int64_t cols);
  /// A range of the activation buffer; when none is left, a
  /// ResourceExhausted error and arenaFull_ (forward grows it and retries).
  Status allocateBytes(size_t bytes, void **out);
  void freeBytes(void *p);
  Status growArena(size_t atLeast);
  StatusOr<Logits> forwardOnce(const Batch &batch);
  Status releaseActivations();
  Status linear(int xId, const Tensor &x, const Tensor &w, const Tensor *bias,
                Tensor &y, const std::string &where);
  Status allGather(const PreparedStep &s, const Tensor &x, Tensor &y);
  Status release(int id);
  /// The device copy and host length of an integer input.
  const void *input(int id, int64_t *length, const Batch &batch) const;

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
  int64_t numBlocks_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  /// The KV pool (KVCachePool): bf16 values or fp8 codes, and E4M3 scales.
  KVCacheDtype kvDtype_ = KVCacheDtype::kBf16;
  void *pool_ = nullptr;
  float *poolScales_ = nullptr;
  /// Partial results of split-KV decode attention, sized at init for any
  /// batch (splitKVWorkspaceBytes).
  SplitKVWorkspace splitKV_;
  std::vector<void *> deviceAllocations_;

  plan::RankPlan rank_;
  std::vector<std::optional<InputKind>> inputOf_;
  std::vector<Tensor> params_;
  std::vector<Tensor> values_;
  /// bf16 copies of activations read by GEMMs, made once per value.
  std::vector<__nv_bfloat16 *> bf16Of_;
  char *arenaBuffer_ = nullptr;
  Arena arena_;
  bool arenaFull_ = false;
  std::vector<PreparedStep> steps_;
  int output_ = -1;

  std::vector<char> staging_;
  char *inputs_ = nullptr;
  size_t inputsCapacity_ = 0;
  size_t inputOffset_[static_cast<int>(InputKind::kCount)] = {};
  /// block_tables rows as uploaded: padded to a power of two so that
  /// decode steps of a growing sequence share a graph.
  int64_t paddedBlocksPerSeq_ = 0;

  int64_t maxGraphTokens_ = 0;
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
  /// Adds the last run's event intervals to profile_ (after a sync).
  Status collectStepProfile();
  std::map<GraphKey, CapturedGraph> graphs_;
  /// Shapes that ran eagerly once (tensor-parallel ranks only).
  std::set<GraphKey> warmShapes_;
  /// gather_rows steps' input rows in the last run (step -> rows).
  std::vector<std::pair<size_t, int64_t>> gatherRows_;

  /// Set during forwardSample: the run samples instead of copying logits.
  const SamplingBatch *sampling_ = nullptr;
  /// Rows the sampling buffers hold (captured graphs point into them).
  int64_t samplingCapacity_ = 0;
  DeviceRowSampling *hostSampling_ = nullptr;
  DeviceRowSampling *deviceSampling_ = nullptr;
  int32_t *deviceTokens_ = nullptr;
  int32_t *hostTokens_ = nullptr;
};

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_)
    cudaStreamSynchronize(stream_);
  for (cudaEvent_t event : profileEvents_)
    cudaEventDestroy(event);
  for (auto &[key, graph] : graphs_) {
    cudaGraphExecDestroy(graph.exec);
    cudaFreeHost(graph.hostLogits);
  }
  if (arenaBuffer_)
    cudaFree(arenaBuffer_);
  for (void *p : deviceAllocations_)
    cudaFree(p);
  if (inputs_)
    cudaFree(inputs_);
  cudaFreeHost(hostSampling_);
  cudaFreeHost(hostTokens_);
  cudaFree(deviceSampling_);
  cudaFree(deviceTokens_);
  if (pool_)
    cudaFree(pool_);
  if (poolScales_)
    cudaFree(poolScales_);
  if (splitKV_.data)
    cudaFree(splitKV_.data);
  gemm_.reset();
  if (stream_)
    cudaStreamDestroy(stream_);
}

template <typename T>
static Status upload(const std::vector<T> &host, T **device,
                     std::vector<void *> &allocations) {
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(device, host.size() * sizeof(T)));
  allocations.push_back(*device);
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpy(
      *device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Status::ok();
}

Status CudaBackend::uploadParams(const ParamTable &params) {
  // Which params the kernels read as bf16 (GEMM weights, embedding tables)
  // and which as fp32 (everything else).
  std::set<int> asBf16, asF32;
  for (const Step &step : rank_.steps) {
    std::optional<OpKind> op = plan::parseStepOp(step.op);
    for (size_t i = 0; i < step.operands.size(); ++i) {
      const int id = step.operands[i];
      if (rank_.values[id].kind != ValueKind::kParam)
        continue;
      const bool bf16 =
          op &&
          (((*op == OpKind::kLinear || *op == OpKind::kLogits) && i == 1) ||
           (*op == OpKind::kEmbedding && i == 0));
      (bf16 ? asBf16 : asF32).insert(id);
    }
  }
  std::map<const HostTensor *, Tensor> uploaded;
  params_.assign(rank_.values.size(), Tensor());
  for (const Value &v : rank_.values) {
    if (v.kind != ValueKind::kParam)
      continue;
    auto it = params.find(v.id);
    if (it == params.end() || !it->second)
      return invalidArgument("cuda backend: no data for param '" + v.name +
                             "'");
    const HostTensor &host = *it->second;
    std::vector<int64_t> shape;
    for (const plan::Dim &d : v.shape)
      shape.push_back(d.size);
    if (host.shape != shape)
      return invalidArgument("cuda backend: param '" + v.name +
                             "' data has a different shape than the plan");
    if (shape.empty() || shape.size() > 2)
      return invalidArgument("cuda backend: param '" + v.name +
                             "' must be 1-D or 2-D");
    Tensor &t = uploaded[&host];
    t.rows = shape.size() == 2 ? shape[0] : 1;
    t.cols = shape.back();
    if (host.isFp8() != (v.dtype == plan::DType::kF8E4M3))
      return invalidArgument("cuda backend: param '" + v.name + "' of dtype " +
                             std::string(plan::dtypeName(v.dtype)) +
                             (host.isFp8() ? " was loaded as fp8 codes"
                                           : " was loaded without fp8 codes "
                                             "(quantize_fp8_e4m3)"));
    if (host.isFp8()) {
      // Only GEMMs read fp8 weights (Gemm::linear decodes them).
      if (asF32.count(v.id) || !asBf16.count(v.id) ||
          host.rowScales.size() != static_cast<size_t>(t.rows) ||
          host.fp8Codes.size() != static_cast<size_t>(t.size()))
        return invalidArgument(
            "cuda backend: fp8 param '" + v.name +
            "' must be a linear or logits weight with one scale per row");
      bool embedding = false;
      for (const Step &step : rank_.steps)
        embedding =
            embedding || (step.op == "embedding" && !step.operands.empty() &&
                          step.operands[0] == v.id);
      if (embedding)
        return unimplemented("cuda backend: fp8 embedding table '" + v.name +
                             "'");
      if (!t.fp8) {
        INFER_RETURN_IF_ERROR(
            upload(host.fp8Codes, &t.fp8, deviceAllocations_));
        INFER_RETURN_IF_ERROR(
            upload(host.rowScales, &t.rowScales, deviceAllocations_));
      }
      params_[v.id] = t;
      continue;
    }
    if (asBf16.count(v.id) && !t.bf16) {
      if (host.dtype == plan::DType::kBF16) {
        INFER_RETURN_IF_ERROR(upload(host.bits16,
                                     reinterpret_cast<uint16_t **>(&t.bf16),
                                     deviceAllocations_));
      } else {
        const std::vector<float> values = host.toFloat();
        std::vector<__nv_bfloat16> converted(values.size());
        for (size_t i = 0; i < converted.size(); ++i)
          converted[i] = __float2bfloat16_rn(values[i]);
        INFER_RETURN_IF_ERROR(upload(converted, &t.bf16, deviceAllocations_));
      }
    }
    if (asF32.count(v.id) && !t.f32)
      INFER_RETURN_IF_ERROR(upload(host.toFloat(), &t.f32, deviceAllocations_));
    params_[v.id] = t;
  }
  return Status::ok();
}

Status CudaBackend::init(const plan::RankPlan &plan, const ParamTable &params,
                         const CudaBackendOptions &options) {
  rank_ = plan;
  maxGraphTokens_ = options.maxGraphTokens;
  profileSteps_ = options.profileSteps;
  communicator_ = options.communicator;
  copyLogits_ = options.copyLogits;
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  INFER_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (communicator_)
    communicator_->setStream(stream_);
  INFER_RETURN_IF_ERROR(growArena(64 << 20));

  inputOf_.assign(rank_.values.size(), std::nullopt);
  for (const Value &v : rank_.values) {
    if (v.id < 0 || v.id >= static_cast<int>(rank_.values.size()) ||
        rank_.values[v.id].id != v.id)
      return invalidArgument("cuda backend: value ids must be 0..n-1");
    if (v.kind == ValueKind::kInput) {
      inputOf_[v.id] = parseInputName(v.name);
      if (!inputOf_[v.id])
        return invalidArgument("cuda backend: unknown input '" + v.name + "'");
    }
  }
  if (rank_.outputs.size() != 1)
    return unimplemented("cuda backend: plans with " +
                         std::to_string(rank_.outputs.size()) +
                         " outputs (expected the logits only)");
  output_ = rank_.outputs[0];
  loadGeneratedKernels(options.kernels);

  std::vector<int> lastUse(rank_.values.size(), -1);
  for (size_t i = 0; i < rank_.steps.size(); ++i) {
    PreparedStep prepared;
    INFER_RETURN_IF_ERROR(prepareStep(rank_.steps[i],
                                      "step " + std::to_string(i) + " ('" +
                                          rank_.steps[i].op + "')",
                                      prepared));
    for (int id : prepared.operands)
      lastUse[id] = static_cast<int>(i);
    steps_.push_back(std::move(prepared));
  }
  markViewSplits(steps_, rank_, output_, lastUse);
  for (size_t id = 0; id < lastUse.size(); ++id)
    if (lastUse[id] >= 0 && rank_.values[id].kind == ValueKind::kActivation &&
        static_cast<int>(id) != output_)
      steps_[lastUse[id]].release.push_back(static_cast<int>(id));

  INFER_RETURN_IF_ERROR(uploadParams(params));
  // fp8 weights at large T quantize the activations into a 64 MiB scratch
  // (or decode weight rows there, where fp8 cuBLASLt does not apply).
  const bool fp8Weights =
      std::any_of(params_.begin(), params_.end(),
                  [](const Tensor &t) { return t.fp8 != nullptr; });
  INFER_ASSIGN_OR_RETURN(gemm_,
                         Gemm::create(32 << 20, fp8Weights ? 64 << 20 : 0));

  // Before the pool, which may take the rest of the memory.
  splitKV_.bytes = splitKVWorkspaceBytes(dims_.headDim);
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&splitKV_.data, splitKV_.bytes));
  const size_t dataBytes = blockDataBytes(), scaleBytes = blockScaleBytes();
  const size_t blockBytes = dataBytes + scaleBytes;
  numBlocks_ = options.numBlocks;
  if (numBlocks_ == 0) {
    size_t freeBytes = 0, totalBytes = 0;
    INFER_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&freeBytes, &totalBytes));
    numBlocks_ =
        static_cast<int64_t>(freeBytes * options.kvCacheMemoryFraction) /
        static_cast<int64_t>(blockBytes);
  }
  if (numBlocks_ <= 0)
    return resourceExhausted("cuda backend: no device memory left for the "
                             "KV-cache pool");
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&pool_, numBlocks_ * dataBytes));
  INFER_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(pool_, 0, numBlocks_ * dataBytes, stream_));
  if (scaleBytes > 0) {
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&poolScales_, numBlocks_ * scaleBytes));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(poolScales_, 0, numBlocks_ * scaleBytes, stream_));
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  values_.assign(rank_.values.size(), Tensor());
  bf16Of_.assign(rank_.values.size(), nullptr);
  return Status::ok();
}

Status CudaBackend::prepareStep(const Step &step, const std::string &where,
                                PreparedStep &out) {
  StatusOr<plan::DecodedStep> decoded = plan::decodeStep(step);
  if (!decoded.isOk())
    return decoded.status().withContext("cuda backend: " + where);
  const plan::DecodedStep &d = *decoded;
  if ((d.op == OpKind::kAllReduce || d.op == OpKind::kAllGather) &&
      !communicator_)
    return invalidArgument("cuda backend: " + where +
                           ": a collective in a plan run without a "
                           "communicator (tensor-parallel plans run through "
                           "createCudaTensorParallelBackend)");
  if (d.op == OpKind::kCast)
    return unimplemented("cuda backend: " + where +
                         ": cast between activation dtypes");
  out.op = d.op;
  out.where = where;
  out.operands = d.operands;
  out.result = d.results.empty() ? -1 : d.results[0];
  out.results = d.results;
  out.vocabOffset = d.vocabOffset;
  out.vocabSize = d.vocabSize;
  out.gatherDim = d.gatherDim;
  out.epsilon = static_cast<float>(d.epsilon);
  out.sizes = d.splitSizes;
  out.layer = static_cast<int>(d.layer);

  switch (out.op) {
  case OpKind::kRope:
  case OpKind::kRopeKVCacheWrite:
    out.ropeHeadDim = static_cast<int>(d.rope.headDim);
    out.ropeRotaryDim = static_cast<int>(d.rope.rotaryDim);
    INFER_RETURN_IF_ERROR(upload(plan::ropeInverseFrequencies(d.rope),
                                 &out.ropeInvFreq, deviceAllocations_));
    break;
  case OpKind::kFused: {
    const plan::FusedBody &body = d.fused;
    ++numFusedSteps_;
    if (generated_ && !d.kernel.empty()) {
      out.generated = generated_->kernel(d.kernel);
      if (!out.generated)
        return internalError("cuda backend: " + where + ": kernel '" +
                             d.kernel + "' was not loaded");
      ++numGeneratedSteps_;
      break;
    }
    if (body.numInputs > kMaxFusedInputs ||
        static_cast<int>(body.instructions.size()) > kMaxFusedInstructions ||
        static_cast<int>(body.yields.size()) > kMaxFusedOutputs)
      return unimplemented("cuda backend: " + where + ": a body of more than " +
                           std::to_string(kMaxFusedInputs) + " inputs, " +
                           std::to_string(kMaxFusedInstructions) +
                           " instructions or " +
                           std::to_string(kMaxFusedOutputs) + " results");
    FusedProgram &p = out.fused;
    p.numInputs = body.numInputs;
    p.numInstructions = static_cast<int>(body.instructions.size());
    p.numOutputs = static_cast<int>(body.yields.size());
    for (int i = 0; i < p.numInstructions; ++i) {
      const plan::FusedInstruction &instr = body.instructions[i];
      p.op[i] = static_cast<FusedOp>(static_cast<int>(instr.op));
      p.arg0[i] = static_cast<int8_t>(instr.args[0]);
      p.arg1[i] = static_cast<int8_t>(instr.args.size() > 1 ? instr.args[1]
                                                            : instr.args[0]);
    }
    for (int r = 0; r < p.numOutputs; ++r)
      p.yields[r] = static_cast<int8_t>(body.yields[r]);
    break;
  }
  case OpKind::kPagedAttention: {
    const plan::AttentionAttrs &attrs = d.attention;
    AttentionDims &a = out.attention;
    a.layer = static_cast<int>(attrs.layer);
    a.numHeads = static_cast<int>(attrs.numHeads);
    a.numKVHeads = static_cast<int>(attrs.numKVHeads);
    a.headDim = static_cast<int>(attrs.headDim);
    a.scale = static_cast<float>(attrs.scale);
    a.slidingWindow = static_cast<int>(attrs.slidingWindow);
    if (a.headDim > kMaxHeadDim)
      return unimplemented("cuda backend: " + where + ": head_dim " +
                           std::to_string(a.headDim) + " > " +
                           std::to_string(kMaxHeadDim));
    // Streaming: the rope attributes rotate the cached keys at their index.
    if (!attrs.keyRope)
      break;
    INFER_RETURN_IF_ERROR(upload(plan::ropeInverseFrequencies(*attrs.keyRope),
                                 &out.ropeInvFreq, deviceAllocations_));
    a.keyRotaryDim = static_cast<int>(attrs.keyRope->rotaryDim);
    a.keyRopeInvFreq = out.ropeInvFreq;
    break;
  }
  default:
    break;
  }
  return Status::ok();
}

Status CudaBackend::uploadInputs(const Batch &batch) {
  auto bytesOf = [](const auto &v) { return v.size() * sizeof(v[0]); };
  paddedBlocksPerSeq_ = 1;
  while (paddedBlocksPerSeq_ < batch.maxBlocksPerSeq)
    paddedBlocksPerSeq_ *= 2;
  std::vector<int32_t> tables(batch.numSeqs() * paddedBlocksPerSeq_, -1);
  for (int64_t s = 0; s < batch.numSeqs(); ++s)
    std::copy_n(batch.blockTables.begin() + s * batch.maxBlocksPerSeq,
                batch.maxBlocksPerSeq,
                tables.begin() + s * paddedBlocksPerSeq_);
  const std::pair<const void *, size_t> arrays[] = {
      {batch.tokenIds.data(), bytesOf(batch.tokenIds)},
      {batch.positions.data(), bytesOf(batch.positions)},
      {batch.queryStartLoc.data(), bytesOf(batch.queryStartLoc)},
      {batch.contextLens.data(), bytesOf(batch.contextLens)},
      {tables.data(), bytesOf(tables)},
      {batch.slotMapping.data(), bytesOf(batch.slotMapping)},
      {batch.logitsIndices.data(), bytesOf(batch.logitsIndices)},
  };
  size_t total = 0;
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i) {
    inputOffset_[i] = total;
    total += (arrays[i].second + 15) / 16 * 16;
  }
  staging_.resize(total);
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i)
    if (arrays[i].second)
      std::memcpy(staging_.data() + inputOffset_[i], arrays[i].first,
                  arrays[i].second);
  if (total > inputsCapacity_) {
    // Captured graphs read the old buffer.
    INFER_RETURN_IF_ERROR(destroyGraphs());
    if (inputs_)
      INFER_CUDA_RETURN_IF_ERROR(cudaFree(inputs_));
    inputs_ = nullptr;
    INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&inputs_, total * 2));
    inputsCapacity_ = total * 2;
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_, staging_.data(), total,
                                             cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

const void *CudaBackend::input(int id, int64_t *length,
                               const Batch &batch) const {
  const InputKind kind = *inputOf_[id];
  switch (kind) {
  case InputKind::kTokenIds:
    *length = batch.numTokens();
    break;
  case InputKind::kPositions:
    *length = static_cast<int64_t>(batch.positions.size());
    break;
  case InputKind::kQueryStartLoc:
    *length = static_cast<int64_t>(batch.queryStartLoc.size());
    break;
  case InputKind::kContextLens:
    *length = batch.numSeqs();
    break;
  case InputKind::kBlockTables:
    *length = batch.numSeqs() * paddedBlocksPerSeq_;
    break;
  case InputKind::kSlotMapping:
    *length = static_cast<int64_t>(batch.slotMapping.size());
    break;
  case InputKind::kLogitsIndices:
  case InputKind::kCount:
    *length = static_cast<int64_t>(batch.logitsIndices.size());
    break;
  }
  return inputs_ + inputOffset_[static_cast<int>(kind)];
}

/// The host copy of an i32 input, for range checks before a gather.
static const int32_t *hostInput(InputKind kind, const Batch &batch) {
  switch (kind) {
  case InputKind::kTokenIds:
    return batch.tokenIds.data();
  case InputKind::kPositions:
    return batch.positions.data();
  case InputKind::kQueryStartLoc:
    return batch.queryStartLoc.data();
  case InputKind::kContextLens:
    return batch.contextLens.data();
  case InputKind::kBlockTables:
    return batch.blockTables.data();
  default:
    return batch.logitsIndices.data();
  }
}

Status CudaBackend::allocate(Tensor &t, int64_t rows, int64_t cols) {
  t.rows = rows;
  t.cols = cols;
  t.owned = true;
  return allocateBytes(rows * cols * sizeof(float),
                       reinterpret_cast<void **>(&t.f32));
}

Status CudaBackend::allocateBytes(size_t bytes, void **out) {
  std::optional<size_t> offset = arena_.allocate(bytes);
  if (!offset) {
    arenaFull_ = true;
    return resourceExhausted("cuda backend: activation buffer full");
  }
  *out = arenaBuffer_ + *offset;
  return Status::ok();
}

void CudaBackend::freeBytes(void *p) {
  arena_.free(static_cast<size_t>(static_cast<char *>(p) - arenaBuffer_));
}

Status CudaBackend::growArena(size_t atLeast) {
  // Captured graphs point into the old buffer.
  INFER_RETURN_IF_ERROR(destroyGraphs());
  if (arenaBuffer_) {
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    INFER_CUDA_RETURN_IF_ERROR(cudaFree(arenaBuffer_));
    arenaBuffer_ = nullptr;
  }
  const size_t bytes = std::max(atLeast, 2 * arena_.capacity());
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&arenaBuffer_, bytes));
  arena_.reset(bytes);
  return Status::ok();
}

Status CudaBackend::release(int id) {
  if (values_[id].owned)
    freeBytes(values_[id].f32);
  values_[id] = Tensor();
  if (bf16Of_[id]) {
    freeBytes(bf16Of_[id]);
    bf16Of_[id] = nullptr;
  }
  return Status::ok();
}

Status CudaBackend::releaseActivations() {
  for (Tensor &t : values_)
    t = Tensor();
  std::fill(bf16Of_.begin(), bf16Of_.end(), nullptr);
  arena_.reset(arena_.capacity());
  return Status::ok();
}

Status CudaBackend::linear(int xId, const Tensor &x, const Tensor &w,
                           const Tensor *bias, Tensor &y,
                           const std::string &where) {
  if (!x.f32 || !x.owned || !(w.bf16 || w.fp8))
    return unimplemented("cuda backend: " + where +
                         ": the input must be an activation and the weight "
                         "a param");
  if (w.cols != x.cols)
    return invalidArgument(
        "cuda backend: " + where + ": weight [" + std::to_string(w.rows) + "," +
        std::to_string(w.cols) + "] does not match input width " +
        std::to_string(x.cols));
  if (bias && bias->size() != w.rows)
    return invalidArgument("cuda backend: " + where +
                           ": bias size differs from the output width");
  const GemmWeight weight{w.bf16, w.fp8, w.rowScales};
  // Small T reads the fp32 x (skinny kernels); cuBLASLt a bf16 copy, which
  // q/k/v and gate/up share: convert it once.
  __nv_bfloat16 *&xb = bf16Of_[xId];
  if (Gemm::needsBf16Input(x.rows, w.rows, w.cols, weight) && !xb) {
    INFER_RETURN_IF_ERROR(allocateBytes(x.size() * sizeof(__nv_bfloat16),
                                        reinterpret_cast<void **>(&xb)));
    INFER_CUDA_RETURN_IF_ERROR(launchToBf16(x.f32, xb, x.size(), stream_));
  }
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, w.rows));
  return gemm_
      ->linear(x.f32, xb, weight, bias ? bias->f32 : nullptr, y.f32, x.rows,
               w.rows, w.cols, stream_)
      .withContext("cuda backend: " + where);
}

/// Gathers rank-major blocks straight into the result for dim 0; for dim 1
/// into a scratch buffer, then each rank's block becomes a column block:
///
///   scratch [rank 0: rows x c][rank 1: rows x c]
///   y       row i = [rank 0 row i | rank 1 row i]
Status CudaBackend::allGather(const PreparedStep &s, const Tensor &x,
                              Tensor &y) {
  const int64_t n = communicator_->size();
  auto withWhere = [&](const Status &status) {
    return status.withContext("cuda backend: " + s.where);
  };
  if (s.gatherDim == 0) {
    INFER_RETURN_IF_ERROR(allocate(y, x.rows * n, x.cols));
    return withWhere(communicator_->allGather(x.f32, x.size(), y.f32));
  }
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols * n));
  float *scratch = nullptr;
  INFER_RETURN_IF_ERROR(allocateBytes(x.size() * n * sizeof(float),
                                      reinterpret_cast<void **>(&scratch)));
  INFER_RETURN_IF_ERROR(
      withWhere(communicator_->allGather(x.f32, x.size(), scratch)));
  const size_t rowBytes = x.cols * sizeof(float);
  for (int64_t r = 0; r < n; ++r)
    INFER_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        y.f32 + r * x.cols, rowBytes * n, scratch + r * x.size(), rowBytes,
        rowBytes, x.rows, cudaMemcpyDeviceToDevice, stream_));
  freeBytes(scratch);
  return Status::ok();
}

Status CudaBackend::checkTokenIds(const Batch &batch) const {
  for (const PreparedStep &s : steps_) {
    if (s.op != OpKind::kEmbedding)
      continue;
    const int64_t vocab =
        s.vocabSize ? s.vocabSize : params_[s.operands[0]].rows;
    int64_t n;
    input(s.operands[1], &n, batch);
    const int32_t *ids = hostInput(*inputOf_[s.operands[1]], batch);
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= vocab)
        return outOfRange("token id " + std::to_string(ids[i]) +
                          " outside the vocabulary of " +
                          std::to_string(vocab));
  }
  return Status::ok();
}

Status CudaBackend::runStep(size_t index, const Batch &batch) {
  const PreparedStep &s = steps_[index];
  auto in = [&](size_t i) -> const Tensor & {
    const int id = s.operands[i];
    return params_[id].f32 || params_[id].bf16 || params_[id].fp8 ? params_[id]
                                                                  : values_[id];
  };
  auto mismatch = [&](const std::string &what) {
    return invalidArgument("cuda backend: " + s.where + ": " + what);
  };
  auto needF32 = [&](size_t i) -> Status {
    if (!in(i).f32)
      return mismatch("operand " + std::to_string(i) + " was not computed");
    return Status::ok();
  };
  Tensor *result = s.result >= 0 ? &values_[s.result] : nullptr;
  switch (s.op) {
  case OpKind::kEmbedding: {
    const Tensor &table = in(0);
    int64_t t;
    const void *ids = input(s.operands[1], &t, batch);
    INFER_RETURN_IF_ERROR(allocate(*result, t, table.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchEmbedding(
        table.bf16, table.rows, table.cols, s.vocabOffset,
        static_cast<const int32_t *>(ids), t, result->f32, stream_));
    return Status::ok();
  }
  case OpKind::kAllReduce: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &x = in(0);
    INFER_RETURN_IF_ERROR(allocate(*result, x.rows, x.cols));
    return communicator_->allReduceSum(x.f32, result->f32, x.size())
        .withContext("cuda backend: " + s.where);
  }
  case OpKind::kAllGather:
    INFER_RETURN_IF_ERROR(needF32(0));
    return allGather(s, in(0), *result);
  case OpKind::kBiasAdd: {
    INFER_RETURN_IF_ERROR(needF32(0));
    INFER_RETURN_IF_ERROR(needF32(1));
    const Tensor &x = in(0), &bias = in(1);
    if (bias.size() != x.cols)
      return mismatch("bias size differs from the input width");
    INFER_RETURN_IF_ERROR(allocate(*result, x.rows, x.cols));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(result->f32, x.f32, x.size() * sizeof(float),
                        cudaMemcpyDeviceToDevice, stream_));
    INFER_CUDA_RETURN_IF_ERROR(
        launchAddBias(result->f32, bias.f32, x.rows, x.cols, stream_));
    return Status::ok();
  }
  case OpKind::kRmsNorm: {
    INFER_RETURN_IF_ERROR(needF32(0));
    INFER_RETURN_IF_ERROR(needF32(1));
    const Tensor &x = in(0), &w = in(1);
    if (w.size() != x.cols)
      return mismatch("weight size differs from the hidden size");
    INFER_RETURN_IF_ERROR(allocate(*result, x.rows, x.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchRmsNorm(x.f32, w.f32, result->f32, x.rows,
                                             x.cols, s.epsilon, stream_));
    return Status::ok();
  }
  case OpKind::kLinear:
  case OpKind::kLogits: {
    const Tensor *bias = nullptr;
    if (s.operands.size() == 3) {
      INFER_RETURN_IF_ERROR(needF32(2));
      bias = &in(2);
    }
    return linear(s.operands[0], in(0), in(1), bias, *result, s.where);
  }
  case OpKind::kRope: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &x = in(0);
    int64_t t;
    const void *positions = input(s.operands[1], &t, batch);
    if (t != x.rows || x.cols % s.ropeHeadDim != 0)
      return mismatch("input does not match positions or head_dim");
    INFER_RETURN_IF_ERROR(allocate(*result, x.rows, x.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchRope(
        x.f32, result->f32, x.rows, x.cols / s.ropeHeadDim, s.ropeHeadDim,
        s.ropeRotaryDim, static_cast<const int32_t *>(positions), s.ropeInvFreq,
        stream_, x.stride()));
    return Status::ok();
  }
  case OpKind::kKVCacheWrite: {
    INFER_RETURN_IF_ERROR(needF32(1));
    INFER_RETURN_IF_ERROR(needF32(2));
    const Tensor &k = in(1), &v = in(2);
    int64_t t;
    const void *slots = input(s.operands[3], &t, batch);
    if (k.cols != int64_t(dims_.numKVHeads) * dims_.headDim ||
        v.cols != k.cols || k.rows != t || v.rows != t)
      return mismatch("keys/values do not match the cache");
    INFER_CUDA_RETURN_IF_ERROR(
        launchKVCacheWrite(kvPool(), dims_, s.layer, k.f32, v.f32,
                           static_cast<const int64_t *>(slots), t, stream_,
                           k.stride(), v.stride()));
    return Status::ok();
  }
  case OpKind::kPagedAttention: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &q = in(0);
    const AttentionDims &a = s.attention;
    if (q.cols != int64_t(a.numHeads) * a.headDim ||
        q.rows != batch.numTokens())
      return mismatch("query does not match num_heads*head_dim");
    int64_t unused;
    INFER_RETURN_IF_ERROR(allocate(*result, q.rows, q.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchPagedAttention(
        q.f32, kvPool(), dims_, a,
        static_cast<const int32_t *>(input(s.operands[2], &unused, batch)),
        paddedBlocksPerSeq_,
        static_cast<const int32_t *>(input(s.operands[3], &unused, batch)),
        static_cast<const int32_t *>(input(s.operands[4], &unused, batch)),
        batch.numSeqs(), q.rows, result->f32, stream_, splitKV_));
    return Status::ok();
  }
  case OpKind::kSilu:
  case OpKind::kGeluTanh: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &x = in(0);
    INFER_RETURN_IF_ERROR(allocate(*result, x.rows, x.cols));
    if (s.op == OpKind::kSilu)
      INFER_CUDA_RETURN_IF_ERROR(
          launchSilu(x.f32, result->f32, x.size(), stream_));
    else
      INFER_CUDA_RETURN_IF_ERROR(
          launchGeluTanh(x.f32, result->f32, x.size(), stream_));
    return Status::ok();
  }
  case OpKind::kAdd:
  case OpKind::kMul: {
    INFER_RETURN_IF_ERROR(needF32(0));
    INFER_RETURN_IF_ERROR(needF32(1));
    const Tensor &a = in(0), &b = in(1);
    if (a.rows != b.rows || a.cols != b.cols)
      return mismatch("operands have different shapes");
    INFER_RETURN_IF_ERROR(allocate(*result, a.rows, a.cols));
    if (s.op == OpKind::kAdd)
      INFER_CUDA_RETURN_IF_ERROR(
          launchAdd(a.f32, b.f32, result->f32, a.size(), stream_));
    else
      INFER_CUDA_RETURN_IF_ERROR(
          launchMul(a.f32, b.f32, result->f32, a.size(), stream_));
    return Status::ok();
  }
  case OpKind::kGatherRows: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &x = in(0);
    int64_t count;
    const void *indices = input(s.operands[1], &count, batch);
    const int32_t *host = hostInput(*inputOf_[s.operands[1]], batch);
    gatherRows_.emplace_back(index, x.rows);
    for (int64_t i = 0; i < count; ++i)
      if (host[i] < 0 || host[i] >= x.rows)
        return outOfRange("gather_rows index " + std::to_string(host[i]) +
                          " outside " + std::to_string(x.rows) + " rows");
    INFER_RETURN_IF_ERROR(allocate(*result, count, x.cols));
    INFER_CUDA_RETURN_IF_ERROR(
        launchGatherRows(x.f32, x.cols, static_cast<const int32_t *>(indices),
                         count, result->f32, stream_));
    return Status::ok();
  }
  case OpKind::kSplit: {
    INFER_RETURN_IF_ERROR(needF32(0));
    const Tensor &x = in(0);
    int64_t total = 0;
    for (int64_t size : s.sizes)
      total += size;
    if (total != x.cols)
      return mismatch("split sizes do not add up to the input width");
    int64_t column = 0;
    for (size_t r = 0; r < s.results.size(); ++r) {
      Tensor &y = values_[s.results[r]];
      if (s.viewSplit) {
        y = Tensor();
        y.f32 = x.f32 + column;
        y.rows = x.rows;
        y.cols = s.sizes[r];
        y.ld = x.stride();
        column += s.sizes[r];
        continue;
      }
      INFER_RETURN_IF_ERROR(allocate(y, x.rows, s.sizes[r]));
      INFER_CUDA_RETURN_IF_ERROR(launchSplitColumns(
          x.f32, x.rows, x.cols, column, s.sizes[r], y.f32, stream_));
      column += s.sizes[r];
    }
    return Status::ok();
  }
  case OpKind::kAddRmsNorm: {
    for (size_t i = 0; i < 3; ++i)
      INFER_RETURN_IF_ERROR(needF32(i));
    const Tensor &a = in(0), &b = in(1), &w = in(2);
    if (a.rows != b.rows || a.cols != b.cols || w.size() != a.cols)
      return mismatch("add_rms_norm operands or weight do not match");
    Tensor &sum = values_[s.results[0]], &y = values_[s.results[1]];
    INFER_RETURN_IF_ERROR(allocate(sum, a.rows, a.cols));
    INFER_RETURN_IF_ERROR(allocate(y, a.rows, a.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchAddRmsNorm(a.f32, b.f32, w.f32, sum.f32,
                                                y.f32, a.rows, a.cols,
                                                s.epsilon, stream_));
    return Status::ok();
  }
  case OpKind::kSiluMul: {
    INFER_RETURN_IF_ERROR(needF32(0));
    INFER_RETURN_IF_ERROR(needF32(1));
    const Tensor &gate = in(0), &up = in(1);
    if (gate.rows != up.rows || gate.cols != up.cols)
      return mismatch("silu_mul operands have different shapes");
    INFER_RETURN_IF_ERROR(allocate(*result, gate.rows, gate.cols));
    INFER_CUDA_RETURN_IF_ERROR(launchSiluMul(gate.f32, gate.stride(), up.f32,
                                             up.stride(), result->f32,
                                             gate.rows, gate.cols, stream_));
    return Status::ok();
  }
  case OpKind::kRopeKVCacheWrite: {
    INFER_RETURN_IF_ERROR(needF32(1));
    INFER_RETURN_IF_ERROR(needF32(2));
    const Tensor &k = in(1), &v = in(2);
    int64_t t, numPositions;
    const void *slots = input(s.operands[3], &t, batch);
    const void *positions = input(s.operands[4], &numPositions, batch);
    if (k.cols != int64_t(dims_.numKVHeads) * dims_.headDim ||
        v.cols != k.cols || k.rows != t || v.rows != t || numPositions != t)
      return mismatch("rope_kv_cache_write keys/values do not match the "
                      "cache");
    INFER_CUDA_RETURN_IF_ERROR(launchRopeKVCacheWrite(
        kvPool(), dims_, s.layer, k.f32, v.f32,
        static_cast<const int64_t *>(slots),
        static_cast<const int32_t *>(positions), t, s.ropeRotaryDim,
        s.ropeInvFreq, stream_, k.stride(), v.stride()));
    return Status::ok();
  }
  case OpKind::kFused: {
    const Tensor &first = in(0);
    std::vector<const float *> inputs;
    for (size_t i = 0; i < s.operands.size(); ++i) {
      INFER_RETURN_IF_ERROR(needF32(i));
      if (in(i).rows != first.rows || in(i).cols != first.cols)
        return mismatch("fused operands have different shapes");
      inputs.push_back(in(i).f32);
    }
    std::vector<float *> outputs;
    for (size_t r = 0; r < s.results.size(); ++r) {
      Tensor &y = values_[s.results[r]];
      INFER_RETURN_IF_ERROR(allocate(y, first.rows, first.cols));
      outputs.push_back(y.f32);
    }
    if (s.generated) {
      INFER_CUDA_RETURN_IF_ERROR(launchGeneratedKernel(
          s.generated, inputs, outputs, first.size(), stream_));
      return Status::ok();
    }
    FusedProgram program = s.fused;
    std::copy(inputs.begin(), inputs.end(), program.inputs);
    std::copy(outputs.begin(), outputs.end(), program.outputs);
    INFER_CUDA_RETURN_IF_ERROR(launchFused(program, first.size(), stream_));
    return Status::ok();
  }
  }
  return internalError("cuda backend: unhandled op");
}

Status CudaBackend::runSteps(const Batch &batch) {
  gatherRows_.clear();
  if (profileSteps_ && profileEvents_.empty()) {
    profileEvents_.resize(steps_.size() + 1);
    for (cudaEvent_t &event : profileEvents_)
      INFER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  }
  if (profileSteps_)
    profileLabels_.assign(steps_.size(), "");
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (profileSteps_) {
      INFER_CUDA_RETURN_IF_ERROR(cudaEventRecord(profileEvents_[i], stream_));
      // GEMMs by weight shape and dtype (the routed path depends on both).
      const plan::Step &step = rank_.steps[i];
      std::string label = step.op;
      const PreparedStep &s = steps_[i];
      if ((s.op == OpKind::kLinear || s.op == OpKind::kLogits) &&
          s.operands.size() >= 2) {
        const Tensor &w = params_[s.operands[1]];
        label += " " + std::to_string(w.rows) + "x" + std::to_string(w.cols) +
                 (w.fp8 ? " fp8" : " bf16");
      }
      profileLabels_[i] = std::move(label);
    }
    INFER_RETURN_IF_ERROR(runStep(i, batch));
    for (int id : steps_[i].release)
      INFER_RETURN_IF_ERROR(release(id));
  }
  if (profileSteps_)
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(profileEvents_[steps_.size()], stream_));
  if (!values_[output_].f32)
    return internalError("cuda backend: the plan output was not computed");
  return Status::ok();
}

Status CudaBackend::capture(const Batch &batch, CapturedGraph &graph) {
  // The logits' size from the plan, for a pinned buffer allocated before
  // the capture (allocating host memory is not allowed inside it).
  int64_t size = 1;
  for (const plan::Dim &d : rank_.values[output_].shape)
    size *= !d.isDynamic()    ? d.size
            : d.symbol == "T" ? batch.numTokens()
            : d.symbol == "S" ? static_cast<int64_t>(batch.logitsIndices.size())
            : d.symbol == "B" ? batch.numSeqs()
                              : -1;
  if (size < 0)
    return unimplemented("cuda backend: graph of an output with shape "
                         "symbols other than T, S, B");
  if (!sampling_)
    INFER_CUDA_RETURN_IF_ERROR(cudaMallocHost(
        &graph.hostLogits, std::max<int64_t>(1, size) * sizeof(float)));
  Status status = cudaStatus(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture", __FILE__, __LINE__);
  if (!status.isOk()) {
    cudaFreeHost(graph.hostLogits);
    graph.hostLogits = nullptr;
    return status;
  }
  status = runSteps(batch);
  if (status.isOk()) {
    const Tensor &out = values_[output_];
    graph.rows = out.rows;
    graph.cols = out.cols;
    graph.gatherRows = gatherRows_;
    if (out.size() != size)
      status = internalError(
          "cuda backend: the logits have " + std::to_string(out.size()) +
          " elements, the plan's shape says " + std::to_string(size));
    else if (sampling_)
      status = enqueueSampling(out);
    else if (copyLogits_)
      status = cudaStatus(cudaMemcpyAsync(graph.hostLogits, out.f32,
                                          out.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_),
                          "cudaMemcpyAsync", __FILE__, __LINE__);
  }
  Status released = releaseActivations();
  cudaGraph_t captured = nullptr;
  Status ended = cudaStatus(cudaStreamEndCapture(stream_, &captured),
                            "cudaStreamEndCapture", __FILE__, __LINE__);
  if (status.isOk())
    status = released.isOk() ? ended : released;
  if (status.isOk())
    status = cudaStatus(cudaGraphInstantiate(&graph.exec, captured, 0),
                        "cudaGraphInstantiate", __FILE__, __LINE__);
  if (captured)
    cudaGraphDestroy(captured);
  if (!status.isOk() && graph.hostLogits) {
    cudaFreeHost(graph.hostLogits);
    graph.hostLogits = nullptr;
  }
  return status;
}

Status CudaBackend::destroyGraphs() {
  for (auto &[key, graph] : graphs_) {
    INFER_CUDA_RETURN_IF_ERROR(cudaGraphExecDestroy(graph.exec));
    INFER_CUDA_RETURN_IF_ERROR(cudaFreeHost(graph.hostLogits));
  }
  graphs_.clear();
  return Status::ok();
}

StatusOr<Logits> CudaBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(batch.validate(numBlocks_, dims_.blockSize));
  INFER_RETURN_IF_ERROR(checkTokenIds(batch));
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  for (;;) {
    arenaFull_ = false;
    StatusOr<Logits> logits = forwardOnce(batch);
    if (!arenaFull_)
      return logits;
    // Rerunning is harmless: the steps before the failure wrote the same
    // keys and values to the same slots.
    INFER_RETURN_IF_ERROR(growArena(2 * arena_.capacity()));
  }
}

StatusOr<Logits> CudaBackend::forwardOnce(const Batch &batch) {
  INFER_RETURN_IF_ERROR(uploadInputs(batch));
  Logits logits;

  constexpr size_t kMaxGraphs = 256;
  const GraphKey key{batch.numTokens(), batch.numSeqs(), paddedBlocksPerSeq_,
                     static_cast<int64_t>(batch.logitsIndices.size()),
                     sampling_ != nullptr};
  auto it = graphs_.find(key);
  // Profiled runs are eager: a graph's steps cannot be timed one by one.
  bool replay = !profileSteps_ && batch.numTokens() <= maxGraphTokens_ &&
                (it != graphs_.end() || graphs_.size() < kMaxGraphs);
  // NCCL connects peers lazily, with host allocations a capture forbids:
  // a shape's collectives run once eagerly before they are captured.
  if (replay && communicator_ && warmShapes_.insert(key).second)
    replay = false;
  if (replay) {
    if (it == graphs_.end()) {
      CapturedGraph graph;
      INFER_RETURN_IF_ERROR(capture(batch, graph));
      it = graphs_.emplace(key, graph).first;
    }
    const CapturedGraph &graph = it->second;
    // Shapes are the key's; the indices a gather reads are data.
    for (const auto &[step, rows] : graph.gatherRows) {
      const InputKind kind = *inputOf_[steps_[step].operands[1]];
      int64_t count;
      input(steps_[step].operands[1], &count, batch);
      const int32_t *indices = hostInput(kind, batch);
      for (int64_t i = 0; i < count; ++i)
        if (indices[i] < 0 || indices[i] >= rows)
          return outOfRange("gather_rows index " + std::to_string(indices[i]) +
                            " outside " + std::to_string(rows) + " rows");
    }
    INFER_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec, stream_));
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    logits.rows = graph.rows;
    logits.vocab = graph.cols;
    if (copyLogits_ && !sampling_)
      logits.data.assign(graph.hostLogits,
                         graph.hostLogits + graph.rows * graph.cols);
    return logits;
  }

  Status status = runSteps(batch);
  if (status.isOk()) {
    const Tensor &out = values_[output_];
    logits.rows = out.rows;
    logits.vocab = out.cols;
    if (sampling_) {
      status = enqueueSampling(out);
    } else if (copyLogits_) {
      logits.data.resize(out.size());
      status = cudaStatus(cudaMemcpyAsync(logits.data.data(), out.f32,
                                          out.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_),
                          "cudaMemcpyAsync", __FILE__, __LINE__);
    }
  }
  Status released = releaseActivations();
  Status synced = cudaStatus(cudaStreamSynchronize(stream_),
                             "cudaStreamSynchronize", __FILE__, __LINE__);
  INFER_RETURN_IF_ERROR(status);
  INFER_RETURN_IF_ERROR(released);
  INFER_RETURN_IF_ERROR(synced);
  if (profileSteps_)
    INFER_RETURN_IF_ERROR(collectStepProfile());
  return logits;
}

Status CudaBackend::uploadSampling(const SamplingBatch &sampling) {
  const int64_t rows = static_cast<int64_t>(sampling.rows.size());
  if (rows > samplingCapacity_) {
    // Captured graphs read the old buffers.
    INFER_RETURN_IF_ERROR(destroyGraphs());
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    INFER_CUDA_RETURN_IF_ERROR(cudaFreeHost(hostSampling_));
    INFER_CUDA_RETURN_IF_ERROR(cudaFreeHost(hostTokens_));
    INFER_CUDA_RETURN_IF_ERROR(cudaFree(deviceSampling_));
    INFER_CUDA_RETURN_IF_ERROR(cudaFree(deviceTokens_));
    hostSampling_ = deviceSampling_ = nullptr;
    hostTokens_ = deviceTokens_ = nullptr;
    samplingCapacity_ = 0;
    const int64_t capacity = std::max<int64_t>(64, 2 * rows);
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(&hostSampling_, capacity * sizeof(DeviceRowSampling)));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(&hostTokens_, capacity * sizeof(int32_t)));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&deviceSampling_, capacity * sizeof(DeviceRowSampling)));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&deviceTokens_, capacity * sizeof(int32_t)));
    samplingCapacity_ = capacity;
  }
  static_assert(kMaxSampleMaskedIds == RowSampling::kMaxMaskedIds,
                "the kernel holds every masked id of a row");
  for (int64_t r = 0; r < rows; ++r) {
    const RowSampling &in = sampling.rows[r];
    DeviceRowSampling &out = hostSampling_[r];
    out.uniform = in.uniform;
    out.temperature = static_cast<float>(in.temperature);
    out.topP = static_cast<float>(in.topP);
    out.minP = static_cast<float>(in.minP);
    out.topK = static_cast<int32_t>(std::min<int64_t>(in.topK, INT32_MAX));
    out.numMaskedIds = in.numMaskedIds;
    std::copy_n(in.maskedIds.begin(), kMaxSampleMaskedIds, out.maskedIds);
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(deviceSampling_, hostSampling_,
                                             rows * sizeof(DeviceRowSampling),
                                             cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status CudaBackend::enqueueSampling(const Tensor &logits) {
  if (logits.rows != static_cast<int64_t>(sampling_->rows.size()))
    return internalError(
        "cuda backend: " + std::to_string(logits.rows) + " logits rows for " +
        std::to_string(sampling_->rows.size()) + " sampled rows");
  INFER_CUDA_RETURN_IF_ERROR(launchSampleRows(logits.f32, logits.rows,
                                              logits.cols, deviceSampling_,
                                              deviceTokens_, stream_));
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(hostTokens_, deviceTokens_,
                                             logits.rows * sizeof(int32_t),
                                             cudaMemcpyDeviceToHost, stream_));
  return Status::ok();
}

StatusOr<std::vector<int32_t>>
CudaBackend::forwardSample(const Batch &batch, const SamplingBatch &sampling) {
  INFER_RETURN_IF_ERROR(
      sampling.validate(static_cast<int64_t>(batch.logitsIndices.size())));
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  INFER_RETURN_IF_ERROR(uploadSampling(sampling));
  sampling_ = &sampling;
  StatusOr<Logits> logits = forward(batch);
  sampling_ = nullptr;
  INFER_RETURN_IF_ERROR(logits.status());
  return std::vector<int32_t>(hostTokens_, hostTokens_ + sampling.rows.size());
}

Status CudaBackend::copyBlocks(
    const std::vector<std::pair<int32_t, int32_t>> &copies) {
  for (const auto &[from, to] : copies)
    if (from < 0 || from >= numBlocks_ || to < 0 || to >= numBlocks_)
      return invalidArgument("cuda backend: block copy " +
                             std::to_string(from) + " -> " +
                             std::to_string(to) + " outside the pool");
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // A block's codes and, for E4M3, its scales.
  const std::pair<void *, size_t> arrays[] = {{pool_, blockDataBytes()},
                                              {poolScales_, blockScaleBytes()}};
  for (const auto &[from, to] : copies)
    for (const auto &[base, bytes] : arrays)
      if (bytes > 0)
        INFER_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(static_cast<char *>(base) + to * bytes,
                            static_cast<const char *>(base) + from * bytes,
                            bytes, cudaMemcpyDeviceToDevice, stream_));
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::ok();
}

} // namespace

void CudaBackend::loadGeneratedKernels(const KernelImages &images) {
  std::vector<std::string> names;
  for (const Step &step : rank_.steps) {
    const std::string kernel =
        step.op == "fused" ? step.getString("kernel", "") : "";
    if (!kernel.empty() &&
        std::find(names.begin(), names.end(), kernel) == names.end())
      names.push_back(kernel);
  }
  if (names.empty()) {
    fusedReport_ = "the plan names no generated kernel";
    return;
  }
  if (images.empty()) {
    fusedReport_ = "the backend was given no kernel images";
    return;
  }
  std::string why;
  generated_ = GeneratedKernels::load(images, names, device_, &why);
  fusedReport_ = generated_ ? generated_->origin() : why;
}

std::string CudaBackend::fusedKernelsReport() const {
  return std::to_string(numGeneratedSteps_) + " of " +
         std::to_string(numFusedSteps_) +
         " fused steps run generated kernels (" + fusedReport_ + ")";
}

Status CudaBackend::collectStepProfile() {
  for (size_t i = 0; i < profileLabels_.size(); ++i) {
    float ms = 0;
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, profileEvents_[i], profileEvents_[i + 1]));
    StepTime &t = profile_[profileLabels_[i]];
    ++t.calls;
    t.ms += ms;
  }
  ++profiledForwards_;
  return Status::ok();
}

std::string CudaBackend::stepProfileReport() const {
  std::vector<std::pair<std::string, StepTime>> rows(profile_.begin(),
                                                     profile_.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ms > b.second.ms;
  });
  double total = 0;
  for (const auto &row : rows)
    total += row.second.ms;
  const double forwards = std::max<int64_t>(profiledForwards_, 1);
  std::string out = "| step (op, GEMM weight shape) | steps per call | ms per "
                    "call | % |\n|---|---|---|---|\n";
  char line[256];
  for (const auto &[label, t] : rows) {
    std::snprintf(line, sizeof(line), "| %s | %.0f | %.3f | %.1f%% |\n",
                  label.c_str(), t.calls / forwards, t.ms / forwards,
                  total > 0 ? 100.0 * t.ms / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "| all steps | | %.3f | over %lld forward calls |\n",
                total / forwards, static_cast<long long>(profiledForwards_));
  return out + line;
}

std::string stepProfileReport(const Backend &backend) {
  const auto *cuda = dynamic_cast<const CudaBackend *>(&backend);
  return cuda ? cuda->stepProfileReport() : "";
}

void resetStepProfile(Backend &backend) {
  if (auto *cuda = dynamic_cast<CudaBackend *>(&backend))
    cuda->resetStepProfile();
}

std::string fusedKernelsReport(const Backend &backend) {
  const auto *cuda = dynamic_cast<const CudaBackend *>(&backend);
  return cuda ? cuda->fusedKernelsReport() : "";
}

bool cudaDeviceAvailable(std::string *why) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    if (why)
      *why = error != cudaSuccess ? std::string("no usable CUDA device (") +
                                        cudaGetErrorString(error) + ")"
                                  : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

StatusOr<std::unique_ptr<Backend>>
createCudaBackend(const plan::Plan &plan, int rank, const ParamTable &params,
                  const CudaBackendOptions &options) {
  std::string why;
  if (!cudaDeviceAvailable(&why))
    return Status(StatusCode::kUnimplemented,
                  "cuda backend: " + why +
                      " on this machine (use --backend cpu)");
  INFER_RETURN_IF_ERROR(plan::verifyPlan(plan).withContext("cuda backend"));
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("cuda backend: rank " + std::to_string(rank) +
                           " not in the plan");
  if (options.numBlocks < 0)
    return invalidArgument("cuda backend: negative number of KV blocks");
  if (!(options.kvCacheMemoryFraction > 0 &&
        options.kvCacheMemoryFraction <= 1))
    return invalidArgument(
        "cuda backend: the KV-cache memory fraction must be in (0, 1]");
  if (plan.numRanks > 1 &&
      (!options.communicator || options.communicator->size() != plan.numRanks ||
       options.communicator->rank() != rank ||
       options.communicator->device() != options.device))
    return invalidArgument("cuda backend: rank " + std::to_string(rank) +
                           " of a " + std::to_string(plan.numRanks) +
                           "-rank plan needs that rank's NCCL communicator "
                           "on device " +
                           std::to_string(options.device));
  auto backend = std::make_unique<CudaBackend>(options.device, plan.kvCache);
  INFER_RETURN_IF_ERROR(backend->init(plan.ranks[rank], params, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace infer::cuda
