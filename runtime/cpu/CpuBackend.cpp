//===- CpuBackend.cpp - The reference backend: preparation and forward ----===//

#include "runtime/cpu/CpuBackendImpl.h"
#include "runtime/support/Half.h"

#include <algorithm>
#include <cstring>

namespace infer::cpu {

using plan::DType;
using plan::StepOp;
using plan::Value;
using plan::ValueKind;

float *Matrix::allocate(int64_t r, int64_t c) {
  rows = r;
  cols = c;
  computed = true;
  if (placement && r * c <= capacity) {
    std::fill_n(placement, r * c, 0.0f);
    data = placement;
    return placement;
  }
  storage.assign(static_cast<size_t>(r * c), 0.0f);
  data = storage.data();
  return storage.data();
}

CpuBackend::CpuBackend(const plan::KVCacheLayout &layout, int64_t numBlocks,
                       int numThreads, Communicator *communicator)
    : pool_(numThreads), numBlocks_(numBlocks), communicator_(communicator) {
  geometry_.numLayers = layout.numLayers;
  geometry_.numKVHeads = layout.numKVHeads;
  geometry_.headDim = layout.headDim;
  geometry_.blockSize = layout.blockSize;
  const auto elements =
      static_cast<size_t>(numBlocks * geometry_.blockElements());
  if (layout.dtype == DType::kF8E5M2 || layout.dtype == DType::kF8E4M3) {
    codes_.assign(elements, 0);
    scalesPerBlock_ = layout.blockScales();
    scales_.assign(static_cast<size_t>(numBlocks * scalesPerBlock_), 0.0f);
    kv_.codes = codes_.data();
    kv_.scales = scales_.data();
    kv_.format =
        layout.dtype == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  } else {
    cache_.assign(elements, 0.0f);
    kv_.values = cache_.data();
    kv_.valueType = layout.dtype;
  }
}

Status
CpuBackend::copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) {
  // Only the pool's own arrays are non-empty: values, or fp8 codes (and
  // E4M3 scales).
  auto copyBlock = [](auto &pool, int64_t perBlock, int32_t from, int32_t to) {
    if (!pool.empty())
      std::copy_n(pool.begin() + from * perBlock, perBlock,
                  pool.begin() + to * perBlock);
  };
  const int64_t n = geometry_.blockElements();
  for (const auto &[from, to] : copies) {
    if (from < 0 || from >= numBlocks_ || to < 0 || to >= numBlocks_)
      return invalidArgument("cpu backend: block copy " + std::to_string(from) +
                             " -> " + std::to_string(to) + " outside the pool");
    copyBlock(cache_, n, from, to);
    copyBlock(codes_, n, from, to);
    copyBlock(scales_, scalesPerBlock_, from, to);
  }
  return Status::ok();
}

/// Binds each param value to its data: f32 elements in place, bf16 and f16
/// widened to fp32 once (exactly), fp8 codes and row scales in place (in
/// place also inside a packed artifact's mapped file).
Status CpuBackend::prepareParams(const ParamTable &params) {
  params_.assign(rank_.values.size(), Matrix());
  std::map<const HostTensor *, size_t> widened;
  for (const Value &v : rank_.values) {
    if (v.kind != ValueKind::kParam)
      continue;
    auto it = params.find(v.id);
    if (it == params.end() || !it->second)
      return invalidArgument("cpu backend: no data for param '" + v.name + "'");
    const HostTensor &host = *it->second;
    std::vector<int64_t> shape;
    for (const plan::Dim &d : v.shape)
      shape.push_back(d.size);
    if (host.shape != shape)
      return invalidArgument("cpu backend: param '" + v.name +
                             "' data has a different shape than the plan");
    if (host.dtype != v.dtype || !host.consistent())
      return invalidArgument(
          "cpu backend: param '" + v.name + "' of dtype " +
          std::string(plan::dtypeName(v.dtype)) + " was loaded as " +
          std::string(plan::dtypeName(host.dtype)) +
          (host.consistent() ? "" : " with the wrong number of elements"));
    paramData_[v.id] = it->second;
    Matrix &m = params_[v.id];
    m.computed = true;
    m.rows = shape.size() == 2 ? shape[0] : 1;
    m.cols = shape.back();
    switch (host.dtype) {
    case DType::kF8E4M3:
      m.fp8Codes = host.fp8Data();
      m.rowScales = host.rowScaleData();
      break;
    case DType::kBF16:
    case DType::kF16: {
      auto [at, inserted] = widened.emplace(&host, paramFloats_.size());
      if (inserted)
        paramFloats_.push_back(host.toFloat());
      m.data = paramFloats_[at->second].data();
      break;
    }
    default:
      m.data = host.f32Data();
      break;
    }
  }
  return Status::ok();
}

/// The memory plan places f32 activations ([rows, columns], rows <= T) at
/// byte offsets per token row. This backend computes every value in fp32,
/// so activations of other dtypes, planned at their own element size, keep
/// their own memory.
Status CpuBackend::prepareWorkspace() {
  const int64_t bytesPerRow = rank_.workspaceBytesPerRow;
  workspaceOffset_.assign(rank_.values.size(), -1);
  workspaceWidth_.assign(rank_.values.size(), 0);
  workspaceFloatsPerRow_ = bytesPerRow / static_cast<int64_t>(sizeof(float));
  for (const Value &v : rank_.values) {
    if (v.workspaceOffset < 0 || v.dtype != DType::kF32)
      continue;
    if (v.workspaceOffset % sizeof(float) != 0)
      return invalidArgument("cpu backend: value " + std::to_string(v.id) +
                             " ('" + v.name +
                             "') is placed at an offset that is not a whole "
                             "number of floats");
    workspaceOffset_[v.id] = v.workspaceOffset / sizeof(float);
    workspaceWidth_[v.id] = v.shape[1].size;
  }
  return Status::ok();
}

Status CpuBackend::prepare(const plan::RankPlan &plan,
                           const ParamTable &params) {
  rank_ = plan;
  if (rank_.outputs.size() != 1)
    return unimplemented("cpu backend: plans with " +
                         std::to_string(rank_.outputs.size()) +
                         " outputs (expected the logits only)");
  output_ = rank_.outputs[0];
  INFER_RETURN_IF_ERROR(prepareParams(params));
  INFER_RETURN_IF_ERROR(prepareWorkspace());

  std::vector<int> lastUse(rank_.values.size(), -1);
  for (size_t i = 0; i < rank_.steps.size(); ++i) {
    PreparedStep prepared;
    prepared.where =
        "step " + std::to_string(i) + " ('" + rank_.steps[i].op + "')";
    StatusOr<plan::DecodedStep> decoded = plan::decodeStep(rank_.steps[i]);
    if (!decoded.isOk())
      return decoded.status().withContext("cpu backend: " + prepared.where);
    prepared.step = std::move(*decoded);
    const plan::DecodedStep &d = prepared.step;
    if ((d.op == StepOp::kAllReduce || d.op == StepOp::kAllGather) &&
        !communicator_)
      return invalidArgument("cpu backend: " + prepared.where +
                             ": a collective in a plan run without a "
                             "communicator");
    if (d.op == StepOp::kRope || d.op == StepOp::kRopeKVCacheWrite ||
        d.op == StepOp::kRopeQKVCacheWrite)
      prepared.ropeInvFreq = plan::ropeInverseFrequencies(d.rope);
    if (d.op == StepOp::kEmbedding) {
      const float scale = static_cast<float>(d.embeddingScale);
      const DType dtype = rank_.values[d.results[0]].dtype;
      prepared.embeddingScale = dtype == DType::kBF16  ? roundToBf16(scale)
                                : dtype == DType::kF16 ? roundToF16(scale)
                                                       : scale;
    }
    if (d.op == StepOp::kPagedAttention) {
      const plan::AttentionAttrs &a = d.attention;
      AttentionParams &p = prepared.attention;
      p.layer = a.layer;
      p.numHeads = a.numHeads;
      p.numKVHeads = a.numKVHeads;
      p.headDim = a.headDim;
      p.scale = a.scale;
      p.slidingWindow = a.slidingWindow;
      p.logitSoftcap = a.logitSoftcap;
      if (a.keyRope) {
        p.keyRope = *a.keyRope;
        p.keyRopeInvFreq = plan::ropeInverseFrequencies(p.keyRope);
      }
    }
    for (int id : d.operands)
      lastUse[id] = static_cast<int>(i);
    steps_.push_back(std::move(prepared));
  }
  for (size_t id = 0; id < lastUse.size(); ++id)
    if (lastUse[id] >= 0 && rank_.values[id].kind == ValueKind::kActivation &&
        static_cast<int>(id) != output_)
      steps_[lastUse[id]].release.push_back(static_cast<int>(id));
  return Status::ok();
}

StatusOr<const int32_t *> CpuBackend::intInput(int id, const Batch &batch,
                                               int64_t &length) const {
  const std::string &input = rank_.values[id].name;
  auto bind = [&](const std::vector<int32_t> &v) {
    length = static_cast<int64_t>(v.size());
    return v.data();
  };
  if (input == "token_ids")
    return bind(batch.tokenIds);
  if (input == "positions")
    return bind(batch.positions);
  if (input == "query_start_loc")
    return bind(batch.queryStartLoc);
  if (input == "context_lens")
    return bind(batch.contextLens);
  if (input == "block_tables")
    return bind(batch.blockTables);
  if (input == "logits_indices")
    return bind(batch.logitsIndices);
  return invalidArgument("cpu backend: input '" + input +
                         "' is not an i32 operand");
}

/// Rounds a computed result to its value's dtype (f32 stays).
static void roundToDtype(Matrix &m, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    return;
  float *x = m.mutableData();
  const int64_t n = m.size();
  if (dtype == DType::kBF16)
    for (int64_t i = 0; i < n; ++i)
      x[i] = roundToBf16(x[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      x[i] = roundToF16(x[i]);
}

Status CpuBackend::runStep(const PreparedStep &s, const Batch &batch,
                           std::vector<Matrix> &values) {
  Status status;
  switch (s.step.op) {
#define INFER_STEP_OP(Name, ...)                                               \
  case StepOp::k##Name:                                                        \
    status = run##Name(s, batch, values);                                      \
    break;
#include "runtime/plan/StepOps.def"
  }
  INFER_RETURN_IF_ERROR(status.withContext("cpu backend: " + s.where));
  for (int id : s.step.results)
    roundToDtype(values[id], rank_.values[id].dtype);
  return Status::ok();
}

StatusOr<Logits> CpuBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(batch.validate(numBlocks_, geometry_.blockSize));
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  std::vector<Matrix> values = params_;
  // One workspace for the placed activations: offsets and widths are per
  // token row, so a batch of T tokens scales them by T.
  const int64_t t = batch.numTokens();
  std::vector<float> workspace(static_cast<size_t>(workspaceFloatsPerRow_ * t));
  for (size_t id = 0; id < values.size(); ++id) {
    if (workspaceOffset_[id] < 0)
      continue;
    values[id].placement = workspace.data() + workspaceOffset_[id] * t;
    values[id].capacity = workspaceWidth_[id] * t;
  }
  for (const PreparedStep &step : steps_) {
    INFER_RETURN_IF_ERROR(runStep(step, batch, values));
    for (int id : step.release)
      values[id] = Matrix();
  }
  Matrix &out = values[output_];
  if (!out.computed)
    return internalError("cpu backend: the plan output was not computed");
  Logits logits;
  logits.rows = out.rows;
  logits.vocab = out.cols;
  if (out.data == out.storage.data())
    logits.data = std::move(out.storage);
  else
    logits.data.assign(out.data, out.data + out.size());
  return logits;
}

StatusOr<std::unique_ptr<Backend>>
createCpuBackend(const plan::Plan &plan, int rank, ParamTable params,
                 const CpuBackendOptions &options) {
  INFER_RETURN_IF_ERROR(plan::verifyPlan(plan).withContext("cpu backend"));
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("cpu backend: rank " + std::to_string(rank) +
                           " not in the plan");
  if (options.numBlocks < 0)
    return invalidArgument("cpu backend: negative number of KV blocks");
  if (plan.numRanks > 1 &&
      (!options.communicator || options.communicator->size() != plan.numRanks ||
       options.communicator->rank() != rank))
    return invalidArgument("cpu backend: rank " + std::to_string(rank) +
                           " of a " + std::to_string(plan.numRanks) +
                           "-rank plan needs that rank's communicator");
  const int threads = options.numThreads > 0 ? options.numThreads
                                             : ThreadPool::defaultNumThreads();
  auto backend = std::make_unique<CpuBackend>(plan.kvCache, options.numBlocks,
                                              threads, options.communicator);
  INFER_RETURN_IF_ERROR(backend->prepare(plan.ranks[rank], params));
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace infer::cpu
