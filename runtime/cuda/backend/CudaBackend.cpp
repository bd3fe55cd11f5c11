//===- CudaBackend.cpp - The CUDA backend: init, steps, factory -----------===//

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/cuda/QuantizingKernels.h"
#include "runtime/cuda/backend/CudaBackendImpl.h"
#include "runtime/support/Env.h"

#include <algorithm>

namespace infer::cuda {

using plan::DType;
using plan::StepOp;
using plan::Value;
using plan::ValueKind;

static_assert(static_cast<int>(FusedOp::kGelu) ==
                      static_cast<int>(plan::ElementwiseOp::kGelu) &&
                  static_cast<int>(FusedOp::kSiluMul) ==
                      static_cast<int>(plan::ElementwiseOp::kSiluMul) &&
                  static_cast<int>(FusedOp::kGeluTanh) ==
                      static_cast<int>(plan::ElementwiseOp::kGeluTanh) &&
                  static_cast<int>(FusedOp::kSilu) ==
                      static_cast<int>(plan::ElementwiseOp::kSilu) &&
                  static_cast<int>(FusedOp::kMul) ==
                      static_cast<int>(plan::ElementwiseOp::kMul),
              "FusedOp mirrors plan::ElementwiseOp");

namespace {

std::optional<InputKind> parseInputName(const std::string &name) {
  static const char *const kNames[] = {
      "token_ids",    "positions",    "query_start_loc", "context_lens",
      "block_tables", "slot_mapping", "logits_indices"};
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i)
    if (name == kNames[i])
      return static_cast<InputKind>(i);
  return std::nullopt;
}

/// Whether operand `i` of `op` may be a column view (rows `ld` apart): the
/// kernels of these operands take a row stride.
bool takesRowStride(StepOp op, size_t i) {
  switch (op) {
  case StepOp::kRope:
    return i == 0;
  case StepOp::kKVCacheWrite:
  case StepOp::kRopeKVCacheWrite:
    return i == 1 || i == 2;
  case StepOp::kRopeQKVCacheWrite:
    return i == 1 || i == 2 || i == 3;
  case StepOp::kSiluMul:
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
  for (const PreparedStep &s : steps)
    for (size_t i = 0; i < s.step.operands.size(); ++i)
      if (!takesRowStride(s.step.op, i))
        strided[s.step.operands[i]] = false;
  for (PreparedStep &s : steps) {
    if (s.step.op != StepOp::kSplit ||
        rank.values[s.step.operands[0]].kind != ValueKind::kActivation)
      continue;
    const bool views =
        std::all_of(s.step.results.begin(), s.step.results.end(),
                    [&](int r) { return r != output && strided[r]; });
    if (!views)
      continue;
    s.viewSplit = true;
    int &inputLastUse = lastUse[s.step.operands[0]];
    for (int r : s.step.results)
      inputLastUse = std::max(inputLastUse, lastUse[r]);
  }
}

ElementType elementTypeOf(DType dtype) {
  return dtype == DType::kBF16  ? ElementType::kBf16
         : dtype == DType::kF16 ? ElementType::kF16
                                : ElementType::kF32;
}

} // namespace

int64_t decodeGraphBucket(int64_t rows) {
  if (rows <= 4) {
    int64_t bucket = 1;
    while (bucket < rows)
      bucket *= 2;
    return bucket;
  }
  int64_t power = 1;
  while (power * 2 <= rows)
    power *= 2;
  const int64_t step = std::max<int64_t>(8, power / 8);
  return (rows + step - 1) / step * step;
}

CudaBackend::CudaBackend(int device, const plan::KVCacheLayout &layout)
    : device_(device) {
  dims_.numLayers = static_cast<int>(layout.numLayers);
  dims_.numKVHeads = static_cast<int>(layout.numKVHeads);
  dims_.headDim = static_cast<int>(layout.headDim);
  dims_.blockSize = static_cast<int>(layout.blockSize);
  if (layout.dtype == DType::kF8E5M2)
    kvDtype_ = KVCacheDtype::kF8E5M2;
  else if (layout.dtype == DType::kF8E4M3)
    kvDtype_ = KVCacheDtype::kF8E4M3;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_)
    cudaStreamSynchronize(stream_);
  for (cudaEvent_t event : profileEvents_)
    cudaEventDestroy(event);
  for (auto &[key, graph] : graphs_)
    cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
  gemm_.reset();
  steps_.clear();
  if (stream_)
    cudaStreamDestroy(stream_);
}

Status CudaBackend::init(const plan::RankPlan &plan, const ParamTable &params,
                         const CudaBackendOptions &options) {
  rank_ = plan;
  maxGraphTokens_ = options.maxGraphTokens;
  profileSteps_ = options.profileSteps;
  communicator_ = options.communicator;
  copyLogits_ = options.copyLogits;
  warmUpGraphs_ = communicator_ || envSwitchOn("INFER_CUDA_GRAPH_WARMUP");
  fuseFp8Quantize_ =
      options.fuseFp8Quantize && envSwitchOn("INFER_FUSE_FP8_QUANTIZE");
  unstoredFp8Rows_ = envSwitchOn("INFER_FP8_UNSTORED_ROWS");
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  INFER_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (communicator_)
    communicator_->setStream(stream_);
  INFER_RETURN_IF_ERROR(growArena(64 << 20));

  inputOf_.assign(rank_.values.size(), std::nullopt);
  for (const Value &v : rank_.values)
    if (v.kind == ValueKind::kInput)
      inputOf_[v.id] = parseInputName(v.name);
  if (rank_.outputs.size() != 1)
    return unimplemented("cuda backend: plans with " +
                         std::to_string(rank_.outputs.size()) +
                         " outputs (expected the logits only)");
  output_ = rank_.outputs[0];
  if (rank_.values[output_].dtype != DType::kF32)
    return unimplemented(
        "cuda backend: an output of dtype " +
        std::string(plan::dtypeName(rank_.values[output_].dtype)) +
        " (expected f32 logits)");
  loadGeneratedKernels(options.kernels);

  std::vector<int> lastUse(rank_.values.size(), -1);
  steps_.resize(rank_.steps.size());
  for (size_t i = 0; i < rank_.steps.size(); ++i) {
    INFER_RETURN_IF_ERROR(prepareStep(rank_.steps[i],
                                      "step " + std::to_string(i) + " ('" +
                                          rank_.steps[i].op + "')",
                                      steps_[i]));
    for (int id : steps_[i].step.operands)
      lastUse[id] = static_cast<int>(i);
  }
  markViewSplits(steps_, rank_, output_, lastUse);
  markFp8QuantizeFusions();
  markFreshKV();
  for (size_t id = 0; id < lastUse.size(); ++id)
    if (lastUse[id] >= 0 && rank_.values[id].kind == ValueKind::kActivation &&
        static_cast<int>(id) != output_)
      steps_[lastUse[id]].release.push_back(static_cast<int>(id));

  INFER_RETURN_IF_ERROR(uploadParams(params, options.uploadProgress));
  findTokenVocab();
  // fp8 weights at large T quantize the activations into a 64 MiB scratch
  // (or decode weight rows there, where fp8 cuBLASLt does not apply).
  const bool fp8Weights =
      std::any_of(params_.begin(), params_.end(),
                  [](const Tensor &t) { return t.fp8 != nullptr; });
  INFER_ASSIGN_OR_RETURN(gemm_,
                         Gemm::create(32 << 20, fp8Weights ? 64 << 20 : 0));

  // Before the pool, which may take the rest of the memory.
  INFER_RETURN_IF_ERROR(
      splitKVBuffer_.allocate(splitKVWorkspaceBytes(dims_.headDim)));
  splitKV_.data = splitKVBuffer_.as<float>();
  splitKV_.bytes = splitKVBuffer_.bytes();
  INFER_RETURN_IF_ERROR(allocateKVPool(options));
  values_.assign(rank_.values.size(), Tensor());
  return Status::ok();
}

Status CudaBackend::prepareStep(const plan::Step &step,
                                const std::string &where, PreparedStep &out) {
  StatusOr<plan::DecodedStep> decoded = plan::decodeStep(step);
  if (!decoded.isOk())
    return decoded.status().withContext("cuda backend: " + where);
  out.step = std::move(*decoded);
  out.where = where;
  const plan::DecodedStep &d = out.step;
  if ((d.op == StepOp::kAllReduce || d.op == StepOp::kAllGather) &&
      !communicator_)
    return invalidArgument("cuda backend: " + where +
                           ": a collective in a plan run without a "
                           "communicator (tensor-parallel plans run through "
                           "createCudaTensorParallelBackend)");
  // The GEMMs and attention read bf16 activations (what infer compile
  // --target cuda makes); other ops take f32, bf16 and f16.
  auto dtypeOf = [&](int id) { return rank_.values[id].dtype; };
  const bool gemm = d.op == StepOp::kLinear ||
                    d.op == StepOp::kLinearResidual ||
                    d.op == StepOp::kLinearSwiGlu;
  const bool bf16Input =
      gemm || d.op == StepOp::kLogits || d.op == StepOp::kPagedAttention;
  if (bf16Input && dtypeOf(d.operands[0]) != DType::kBF16)
    return unimplemented(
        "cuda backend: " + where + ": a " +
        std::string(plan::stepOpName(d.op)) + " of " +
        std::string(plan::dtypeName(dtypeOf(d.operands[0]))) +
        " activations (the CUDA backend's GEMMs and attention read bf16: "
        "compile with --dtype bfloat16)");
  if ((gemm || d.op == StepOp::kPagedAttention) &&
      dtypeOf(d.results[0]) != DType::kBF16)
    return unimplemented("cuda backend: " + where + ": a result of dtype " +
                         std::string(plan::dtypeName(dtypeOf(d.results[0]))) +
                         " (expected bf16)");
  // Ops that produce an activation of their input's dtype: the kernels
  // read and write one element type. (rope_qkv_cache_write's first operand
  // is the cache; the plan verifier checks its queries' dtype.)
  const bool newType = d.op == StepOp::kEmbedding || d.op == StepOp::kLogits ||
                       d.op == StepOp::kCast || d.op == StepOp::kFused ||
                       d.op == StepOp::kRopeQKVCacheWrite || d.results.empty();
  if (!newType) {
    const plan::DType in = dtypeOf(d.operands[0]);
    for (int r : d.results)
      if (dtypeOf(r) != in)
        return unimplemented("cuda backend: " + where + ": a " +
                             std::string(plan::dtypeName(dtypeOf(r))) +
                             " result of " + std::string(plan::dtypeName(in)) +
                             " operands (the plan needs a "
                             "cast)");
    const bool sameTypeOperands =
        d.op == StepOp::kAdd || d.op == StepOp::kMul ||
        d.op == StepOp::kSiluMul || d.op == StepOp::kAddRmsNorm;
    if (sameTypeOperands && dtypeOf(d.operands[1]) != in)
      return unimplemented("cuda backend: " + where +
                           ": operands of different dtypes");
    if (d.op == StepOp::kLinearResidual && dtypeOf(d.operands[2]) != in)
      return unimplemented("cuda backend: " + where +
                           ": a residual of another dtype than the input");
  }
  switch (d.op) {
  case StepOp::kRope:
  case StepOp::kRopeKVCacheWrite:
  case StepOp::kRopeQKVCacheWrite: {
    const std::vector<float> invFreq = plan::ropeInverseFrequencies(d.rope);
    INFER_RETURN_IF_ERROR(
        uploadToDevice(invFreq.data(), invFreq.size(), out.ropeInvFreq));
    if (d.op != StepOp::kRope && d.rope.headDim != dims_.headDim)
      return invalidArgument("cuda backend: " + where +
                             ": head_dim differs from the cache's");
    break;
  }
  case StepOp::kFused: {
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
    for (int i = 0; i < p.numInputs; ++i)
      p.inputTypes[i] = elementTypeOf(dtypeOf(d.operands[i]));
    for (int r = 0; r < p.numOutputs; ++r)
      p.outputTypes[r] = elementTypeOf(dtypeOf(d.results[r]));
    break;
  }
  case StepOp::kPagedAttention: {
    const plan::AttentionAttrs &attrs = d.attention;
    AttentionDims &a = out.attention;
    a.layer = static_cast<int>(attrs.layer);
    a.numHeads = static_cast<int>(attrs.numHeads);
    a.numKVHeads = static_cast<int>(attrs.numKVHeads);
    a.headDim = static_cast<int>(attrs.headDim);
    a.scale = static_cast<float>(attrs.scale);
    a.slidingWindow = static_cast<int>(attrs.slidingWindow);
    a.logitSoftcap = static_cast<float>(attrs.logitSoftcap);
    // The plan checks > 0 in double; fp32 must keep it positive and finite.
    if (!validSoftcap(a) || (attrs.logitSoftcap > 0) != (a.logitSoftcap > 0))
      return invalidArgument("cuda backend: " + where + ": logit_softcap " +
                             std::to_string(attrs.logitSoftcap) +
                             " is not a positive fp32 number");
    if (a.headDim > kMaxHeadDim)
      return unimplemented("cuda backend: " + where + ": head_dim " +
                           std::to_string(a.headDim) + " > " +
                           std::to_string(kMaxHeadDim));
    // Streaming: the rope attributes rotate the cached keys at their index.
    if (!attrs.keyRope)
      break;
    const std::vector<float> invFreq =
        plan::ropeInverseFrequencies(*attrs.keyRope);
    INFER_RETURN_IF_ERROR(
        uploadToDevice(invFreq.data(), invFreq.size(), out.ropeInvFreq));
    a.keyRotaryDim = static_cast<int>(attrs.keyRope->rotaryDim);
    a.keyRopeInvFreq = out.ropeInvFreq.as<float>();
    break;
  }
  default:
    break;
  }
  return Status::ok();
}

void CudaBackend::markFp8QuantizeFusions() {
  std::vector<int> readers(rank_.values.size(), 0);
  for (const PreparedStep &s : steps_)
    for (int id : s.step.operands)
      ++readers[id];
  // The very next step: no other GEMM uses the Gemm's scratch in between.
  for (size_t i = 0; i + 1 < steps_.size(); ++i) {
    PreparedStep &producer = steps_[i];
    const plan::DecodedStep &p = producer.step, &next = steps_[i + 1].step;
    const bool rowsOfY = (p.op == StepOp::kRmsNorm && p.normHeadDim <= 0) ||
                         p.op == StepOp::kSiluMul;
    if (!rowsOfY || p.results.size() != 1 ||
        !(next.op == StepOp::kLinear || next.op == StepOp::kLinearResidual))
      continue;
    const int x = p.results[0];
    if (x == output_ || rank_.values[x].dtype != DType::kBF16 ||
        readers[x] != 1 || next.operands[0] != x ||
        rank_.values[next.operands[1]].dtype != DType::kF8E4M3)
      continue;
    producer.quantizesForNext = true;
    ++numFp8QuantizeSteps_;
  }
}

StatusOr<std::optional<CudaBackend::Fp8ForNext>>
CudaBackend::fp8OperandForNext(const PreparedStep &s, int64_t rows,
                               int64_t cols) const {
  if (!fuseFp8Quantize_ || !s.quantizesForNext)
    return std::optional<Fp8ForNext>();
  const PreparedStep &next = (&s)[1];
  const Tensor &w = operand(next, 1);
  if (!w.fp8 || w.cols != cols)
    return std::optional<Fp8ForNext>();
  const bool residual = next.step.op == StepOp::kLinearResidual;
  const Tensor *bias = next.step.operands.size() == (residual ? 4u : 3u)
                           ? &operand(next, residual ? 3 : 2)
                           : nullptr;
  const GemmWeight weight{w.as<const __nv_bfloat16>(), w.fp8, w.rowScales};
  const std::optional<Gemm::Fp8Operand> q =
      gemm_->fp8Operand(rows, w.rows, cols, weight, sizeof(__nv_bfloat16),
                        bias != nullptr, residual);
  if (!q)
    return std::optional<Fp8ForNext>();
  Fp8ForNext out{*q, true};
  // The row's only reader is that GEMM (markFp8QuantizeFusions); where it
  // reads just the codes, the row need not reach memory.
  if (unstoredFp8Rows_ && cols <= kMaxUnstoredRowElements) {
    INFER_ASSIGN_OR_RETURN(const bool suffices,
                           gemm_->fp8OperandSuffices(
                               rows, w.rows, cols, weight,
                               bias ? bias->as<const __nv_bfloat16>() : nullptr,
                               residual));
    out.storeRow = !suffices;
  }
  return std::optional<Fp8ForNext>(out);
}

Fp8QuantizeFusion CudaBackend::fp8QuantizeFusion() const {
  return {fuseFp8Quantize_, numFp8QuantizeSteps_, numFp8QuantizeLaunches_,
          numFp8UnstoredLaunches_};
}

Status CudaBackend::setFp8QuantizeFusion(bool on) {
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  fuseFp8Quantize_ = on;
  return destroyGraphs();
}

const Tensor &CudaBackend::operand(const PreparedStep &s, size_t i) const {
  const int id = s.step.operands[i];
  return params_[id].computed() ? params_[id] : values_[id];
}

Status CudaBackend::runStep(size_t index, const Batch &batch) {
  const PreparedStep &s = steps_[index];
  for (size_t i = 0; i < s.step.operands.size(); ++i) {
    const int id = s.step.operands[i];
    if (rank_.values[id].kind == ValueKind::kActivation &&
        !values_[id].computed())
      return mismatch(s, "operand " + std::to_string(i) + " was not computed");
  }
  Status status;
  switch (s.step.op) {
#define INFER_STEP_OP(Name, ...)                                               \
  case StepOp::k##Name:                                                        \
    status = run##Name(s, batch);                                              \
    break;
#include "runtime/plan/StepOps.def"
  }
  if (!status.isOk() && status.message().rfind("cuda backend", 0) != 0)
    return status.withContext("cuda backend: " + s.where);
  return status;
}

void CudaBackend::markFreshKV() {
  if (kvDtype_ == KVCacheDtype::kBf16 || !prefillAttentionSm90Enabled())
    return;
  for (size_t i = 0; i < steps_.size(); ++i) {
    PreparedStep &writer = steps_[i];
    const StepOp writes = writer.step.op;
    if (writes != StepOp::kKVCacheWrite &&
        writes != StepOp::kRopeKVCacheWrite &&
        writes != StepOp::kRopeQKVCacheWrite)
      continue;
    // The layer's attention: the next paged_attention, with no other write
    // to the cache of that layer before it.
    for (size_t j = i + 1; j < steps_.size(); ++j) {
      PreparedStep &reader = steps_[j];
      const StepOp op = reader.step.op;
      if (op == StepOp::kKVCacheWrite || op == StepOp::kRopeKVCacheWrite ||
          op == StepOp::kRopeQKVCacheWrite)
        break;
      if (op != StepOp::kPagedAttention)
        continue;
      if (reader.attention.layer == writer.step.layer &&
          reader.attention.keyRotaryDim == 0 &&
          prefillAttentionSm90Supports(reader.attention, dims_, kvDtype_)) {
        writer.writesFreshKV = true;
        writer.freshKVGroup =
            reader.attention.numHeads / reader.attention.numKVHeads;
        reader.readsFreshKV = true;
      }
      break;
    }
  }
}

Status CudaBackend::runSteps(const Batch &batch) {
  gatherRows_.clear();
  fp8Quantized_ = nullptr;
  freshKV_ = FreshKV();
  freshKVLayer_ = -1;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (profileSteps_)
      INFER_RETURN_IF_ERROR(recordStepStart(i));
    INFER_RETURN_IF_ERROR(runStep(i, batch));
    for (int id : steps_[i].release)
      INFER_RETURN_IF_ERROR(release(id));
  }
  if (profileSteps_)
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(profileEvents_[steps_.size()], stream_));
  if (!values_[output_].computed())
    return internalError("cuda backend: the plan output was not computed");
  return Status::ok();
}

void CudaBackend::loadGeneratedKernels(const KernelImages &images) {
  std::vector<std::string> names;
  for (const plan::Step &step : rank_.steps) {
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

std::string stepProfileReport(const Backend &backend) {
  const auto *cuda = dynamic_cast<const CudaBackend *>(&backend);
  return cuda ? cuda->stepProfileReport() : "";
}

void resetStepProfile(Backend &backend) {
  if (auto *cuda = dynamic_cast<CudaBackend *>(&backend))
    cuda->resetStepProfile();
}

Fp8QuantizeFusion fp8QuantizeFusion(const Backend &backend) {
  const auto *cuda = dynamic_cast<const CudaBackend *>(&backend);
  return cuda ? cuda->fp8QuantizeFusion() : Fp8QuantizeFusion();
}

Status setFp8QuantizeFusion(Backend &backend, bool on) {
  auto *cuda = dynamic_cast<CudaBackend *>(&backend);
  if (!cuda)
    return invalidArgument("fp8 quantize fusion: not a one-GPU CUDA backend");
  return cuda->setFp8QuantizeFusion(on);
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

size_t cudaDeviceMemoryBytes(int device) {
  cudaDeviceProp properties{};
  if (!cudaDeviceAvailable() ||
      cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return properties.totalGlobalMem;
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
  if (plan.kvCache.dtype != DType::kBF16 &&
      plan.kvCache.dtype != DType::kF8E5M2 &&
      plan.kvCache.dtype != DType::kF8E4M3)
    return unimplemented("cuda backend: a KV cache of dtype " +
                         std::string(plan::dtypeName(plan.kvCache.dtype)) +
                         " (bf16, f8e5m2 and f8e4m3 run on the GPU: compile "
                         "with --target cuda or --dtype bfloat16)");
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
