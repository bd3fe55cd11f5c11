//===- CpuBackend.cpp - The fp32 reference backend ------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/FusedBody.h"

#include <algorithm>
#include <cstring>

namespace infer::cpu {

namespace {

using plan::Step;
using plan::Value;
using plan::ValueKind;

using OpKind = plan::StepOp;

/// The batch-contract inputs a plan may bind by name.
enum class InputKind {
  kTokenIds,
  kPositions,
  kQueryStartLoc,
  kContextLens,
  kBlockTables,
  kSlotMapping,
  kLogitsIndices,
};

std::optional<InputKind> parseInputName(const std::string &name) {
  static const std::pair<const char *, InputKind> kInputs[] = {
      {"token_ids", InputKind::kTokenIds},
      {"positions", InputKind::kPositions},
      {"query_start_loc", InputKind::kQueryStartLoc},
      {"context_lens", InputKind::kContextLens},
      {"block_tables", InputKind::kBlockTables},
      {"slot_mapping", InputKind::kSlotMapping},
      {"logits_indices", InputKind::kLogitsIndices},
  };
  for (const auto &[n, kind] : kInputs)
    if (name == n)
      return kind;
  return std::nullopt;
}

/// A step with its attributes checked and decoded once, at creation.
struct PreparedStep {
  OpKind op;
  std::vector<int> operands;
  int result = -1;
  std::vector<int> results;
  double epsilon = 0.0;
  /// split: columns of each result.
  std::vector<int64_t> sizes;
  plan::FusedBody fused;
  RopeConfig rope;
  std::vector<float> ropeInvFreq;
  AttentionParams attention;
  int64_t layer = 0;
  /// Embedding: the table's first vocabulary id and the full vocabulary
  /// (vocabulary-parallel; vocabSize 0 means the table is all of it).
  int64_t vocabOffset = 0;
  int64_t vocabSize = 0;
  /// All-gather: the dimension concatenated.
  int64_t gatherDim = 0;
  /// Activations whose last use is this step (freed after it).
  std::vector<int> release;
};

/// A dense fp32 matrix: owned, borrowed (parameters), or placed in the
/// workspace (activations the memory plan gave an offset). An FP8 weight
/// has codes and row scales instead of data (HostTensor::isFp8).
struct Matrix {
  const float *data = nullptr;
  const uint8_t *fp8Codes = nullptr;
  const float *rowScales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> storage;
  /// Workspace slot of `capacity` floats the result is computed into.
  float *placement = nullptr;
  int64_t capacity = 0;

  int64_t size() const { return rows * cols; }
  float *allocate(int64_t r, int64_t c) {
    rows = r;
    cols = c;
    if (placement && r * c <= capacity) {
      std::fill_n(placement, r * c, 0.0f);
      data = placement;
      return placement;
    }
    storage.assign(static_cast<size_t>(r * c), 0.0f);
    data = storage.data();
    return storage.data();
  }
};

class CpuBackend final : public Backend {
public:
  CpuBackend(const plan::KVCacheLayout &layout, int64_t numBlocks,
             int numThreads, Communicator *communicator)
      : pool_(numThreads), numBlocks_(numBlocks), communicator_(communicator) {
    geometry_.numLayers = layout.numLayers;
    geometry_.numKVHeads = layout.numKVHeads;
    geometry_.headDim = layout.headDim;
    geometry_.blockSize = layout.blockSize;
    const auto elements =
        static_cast<size_t>(numBlocks * geometry_.blockElements());
    if (layout.dtype == plan::DType::kF32) {
      cache_.assign(elements, 0.0f);
      kv_.values = cache_.data();
    } else {
      codes_.assign(elements, 0);
      scalesPerBlock_ = layout.blockScales();
      scales_.assign(static_cast<size_t>(numBlocks * scalesPerBlock_), 0.0f);
      kv_.codes = codes_.data();
      kv_.scales = scales_.data();
      kv_.format = layout.dtype == plan::DType::kF8E4M3 ? Fp8Format::kE4M3
                                                        : Fp8Format::kE5M2;
    }
  }

  std::string_view name() const override { return "cpu"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &batch) override;
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    // Only the pool's own arrays are non-empty: fp32 values, or fp8 codes
    // (and E4M3 scales).
    auto copyBlock = [](auto &pool, int64_t perBlock, int32_t from,
                        int32_t to) {
      if (!pool.empty())
        std::copy_n(pool.begin() + from * perBlock, perBlock,
                    pool.begin() + to * perBlock);
    };
    const int64_t n = geometry_.blockElements();
    for (const auto &[from, to] : copies) {
      if (from < 0 || from >= numBlocks_ || to < 0 || to >= numBlocks_)
        return invalidArgument("cpu backend: block copy " +
                               std::to_string(from) + " -> " +
                               std::to_string(to) + " outside the pool");
      copyBlock(cache_, n, from, to);
      copyBlock(codes_, n, from, to);
      copyBlock(scales_, scalesPerBlock_, from, to);
    }
    return Status::ok();
  }

  /// Copies the rank's values and steps (the caller's plan may go away).
  Status prepare(const plan::RankPlan &plan, ParamTable params);

private:
  Status prepareStep(const Step &step, const std::string &where,
                     PreparedStep &out) const;
  Status runStep(const PreparedStep &step, const Batch &batch,
                 std::vector<Matrix> &values);
  Status runFused(const PreparedStep &step, std::vector<Matrix> &values);
  Status prepareWorkspace(const plan::RankPlan &rank);
  StatusOr<const int32_t *> intInput(int id, const Batch &batch,
                                     int64_t &length) const;

  Status allGather(const PreparedStep &step, const Matrix &x, Matrix &y);

  ThreadPool pool_;
  CacheGeometry geometry_;
  int64_t numBlocks_;
  /// The rank's collectives; null for a one-rank plan.
  Communicator *communicator_;
  /// The KV pool: fp32 values, or fp8 codes and (E4M3) scales; kv_ points
  /// at whichever this plan's layout uses.
  std::vector<float> cache_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  int64_t scalesPerBlock_ = 0;
  KVPool kv_;
  ParamTable params_;
  plan::RankPlan rank_;
  std::vector<const Value *> valueById_;
  std::vector<std::optional<InputKind>> inputOf_;
  std::vector<PreparedStep> steps_;
  /// Per value: workspace offset and width in floats per token row, or -1.
  std::vector<int64_t> workspaceOffset_;
  std::vector<int64_t> workspaceWidth_;
  int64_t workspaceFloatsPerRow_ = 0;
  int output_ = -1;
  int64_t vocab_ = 0;
};

Status CpuBackend::prepare(const plan::RankPlan &plan, ParamTable params) {
  rank_ = plan;
  const plan::RankPlan &rank = rank_;
  params_ = std::move(params);
  valueById_.assign(rank.values.size(), nullptr);
  inputOf_.assign(rank.values.size(), std::nullopt);
  for (const Value &v : rank.values) {
    valueById_[v.id] = &v;
    if (v.kind == ValueKind::kInput) {
      inputOf_[v.id] = parseInputName(v.name);
      if (!inputOf_[v.id])
        return invalidArgument("cpu backend: unknown input '" + v.name + "'");
    } else if (v.kind == ValueKind::kParam) {
      auto it = params_.find(v.id);
      if (it == params_.end() || !it->second)
        return invalidArgument("cpu backend: no data for param '" + v.name +
                               "'");
      std::vector<int64_t> shape;
      for (const plan::Dim &d : v.shape)
        shape.push_back(d.size);
      if (it->second->shape != shape)
        return invalidArgument("cpu backend: param '" + v.name +
                               "' data has a different shape than the plan");
      if (shape.empty() || shape.size() > 2)
        return invalidArgument("cpu backend: param '" + v.name +
                               "' must be 1-D or 2-D");
      const bool fp8 = it->second->isFp8();
      if (fp8 != (v.dtype == plan::DType::kF8E4M3) ||
          (fp8 &&
           (it->second->rowScales.size() != size_t(shape[0]) ||
            it->second->fp8Codes.size() != size_t(shape[0] * shape.back()))))
        return invalidArgument(
            "cpu backend: param '" + v.name + "' of dtype " +
            std::string(plan::dtypeName(v.dtype)) + " was loaded " +
            (fp8 ? "as fp8 codes and row scales that do not match it"
                 : "without fp8 codes (quantize_fp8_e4m3)"));
    }
  }
  if (rank.outputs.size() != 1)
    return unimplemented("cpu backend: plans with " +
                         std::to_string(rank.outputs.size()) +
                         " outputs (expected the logits only)");
  output_ = rank.outputs[0];
  INFER_RETURN_IF_ERROR(prepareWorkspace(rank));

  std::vector<int> lastUse(rank.values.size(), -1);
  for (size_t i = 0; i < rank.steps.size(); ++i) {
    PreparedStep prepared;
    INFER_RETURN_IF_ERROR(prepareStep(rank.steps[i],
                                      "step " + std::to_string(i) + " ('" +
                                          rank.steps[i].op + "')",
                                      prepared));
    for (int id : prepared.operands)
      lastUse[id] = static_cast<int>(i);
    steps_.push_back(std::move(prepared));
  }
  for (size_t id = 0; id < lastUse.size(); ++id)
    if (lastUse[id] >= 0 && valueById_[id]->kind == ValueKind::kActivation &&
        static_cast<int>(id) != output_)
      steps_[lastUse[id]].release.push_back(static_cast<int>(id));
  return Status::ok();
}

Status CpuBackend::prepareStep(const Step &step, const std::string &where,
                               PreparedStep &out) const {
  std::optional<OpKind> op = plan::parseStepOp(step.op);
  if (!op)
    return unimplemented("cpu backend: " + where + ": unknown op");
  out.op = *op;
  out.operands = step.operands;
  out.result = step.results.empty() ? -1 : step.results[0];
  out.results = step.results;
  auto kindOf = [&](int id) { return valueById_[id]->kind; };
  auto expectKind = [&](size_t index, ValueKind kind) -> Status {
    if (index >= step.operands.size() || kindOf(step.operands[index]) != kind)
      return invalidArgument("cpu backend: " + where + ": operand " +
                             std::to_string(index) + " must be a " +
                             std::string(plan::valueKindName(kind)));
    return Status::ok();
  };
  auto expectFloat = [&](size_t index) -> Status {
    ValueKind k = kindOf(step.operands[index]);
    if (k != ValueKind::kActivation && k != ValueKind::kParam)
      return invalidArgument("cpu backend: " + where + ": operand " +
                             std::to_string(index) +
                             " must be an activation or a param");
    const bool projectionWeight =
        index == 1 && (out.op == OpKind::kLinear || out.op == OpKind::kLogits);
    if (valueById_[step.operands[index]]->dtype == plan::DType::kF8E4M3 &&
        !projectionWeight)
      return invalidArgument("cpu backend: " + where + ": operand " +
                             std::to_string(index) +
                             " is fp8; only linear and logits weights may be");
    return Status::ok();
  };
  auto withWhere = [&](const Status &s) {
    return s.withContext("cpu backend: " + where);
  };
  for (size_t i = 0; i < step.operands.size(); ++i) {
    bool intOperand = (out.op == OpKind::kEmbedding && i == 1) ||
                      (out.op == OpKind::kRope && i == 1) ||
                      (out.op == OpKind::kKVCacheWrite && i == 3) ||
                      (out.op == OpKind::kRopeKVCacheWrite && i >= 3) ||
                      (out.op == OpKind::kPagedAttention && i >= 2) ||
                      (out.op == OpKind::kGatherRows && i == 1);
    bool cacheOperand = ((out.op == OpKind::kKVCacheWrite ||
                          out.op == OpKind::kRopeKVCacheWrite) &&
                         i == 0) ||
                        (out.op == OpKind::kPagedAttention && i == 1);
    if (intOperand)
      INFER_RETURN_IF_ERROR(expectKind(i, ValueKind::kInput));
    else if (cacheOperand)
      INFER_RETURN_IF_ERROR(expectKind(i, ValueKind::kKVCache));
    else
      INFER_RETURN_IF_ERROR(expectFloat(i));
  }

  // Optional attributes are read with defaults below; one that is present
  // with the wrong type is an error rather than silently the default.
  for (const char *name :
       {"rotary_dim", "original_max_position_embeddings", "sliding_window"})
    if (step.attrs.count(name))
      if (StatusOr<int64_t> v = step.getInt(name); !v.isOk())
        return withWhere(v.status());
  for (const char *name : {"factor", "low_freq_factor", "high_freq_factor"})
    if (step.attrs.count(name))
      if (StatusOr<double> v = step.getFloat(name); !v.isOk())
        return withWhere(v.status());
  if (step.attrs.count("scaling"))
    if (StatusOr<std::string> v = step.getString("scaling"); !v.isOk())
      return withWhere(v.status());

  auto prepareRope = [&]() -> Status {
    StatusOr<RopeConfig> c = ropeConfigOf(step);
    if (!c.isOk())
      return withWhere(c.status());
    out.rope = *c;
    out.ropeInvFreq = ropeInverseFrequencies(out.rope);
    return Status::ok();
  };

  switch (out.op) {
  case OpKind::kEmbedding: {
    out.vocabOffset = step.getInt("vocab_offset", 0);
    out.vocabSize = step.getInt("vocab_size", 0);
    for (const char *name : {"vocab_offset", "vocab_size"})
      if (step.attrs.count(name))
        if (StatusOr<int64_t> v = step.getInt(name); !v.isOk())
          return withWhere(v.status());
    const Value &table = *valueById_[step.operands[0]];
    int64_t rows = table.shape.empty() ? 0 : table.shape[0].size;
    if (out.vocabSize != 0 &&
        (out.vocabOffset < 0 || out.vocabOffset + rows > out.vocabSize))
      return invalidArgument(
          "cpu backend: " + where + ": vocab_offset " +
          std::to_string(out.vocabOffset) + " + " + std::to_string(rows) +
          " table rows exceed vocab_size " + std::to_string(out.vocabSize));
    break;
  }
  case OpKind::kAllReduce:
  case OpKind::kAllGather: {
    if (!communicator_)
      return invalidArgument("cpu backend: " + where +
                             ": a collective in a plan run without a "
                             "communicator");
    if (out.op == OpKind::kAllReduce)
      break;
    StatusOr<int64_t> dim = step.getGatherDim();
    if (!dim.isOk())
      return withWhere(dim.status());
    out.gatherDim = *dim;
    break;
  }
  case OpKind::kRmsNorm:
  case OpKind::kAddRmsNorm: {
    StatusOr<double> eps = step.getFloat("epsilon");
    if (!eps.isOk())
      return withWhere(eps.status());
    out.epsilon = *eps;
    break;
  }
  case OpKind::kRope:
    INFER_RETURN_IF_ERROR(prepareRope());
    break;
  case OpKind::kSplit: {
    StatusOr<std::vector<int64_t>> sizes = step.getSplitSizes();
    if (!sizes.isOk())
      return withWhere(sizes.status());
    out.sizes = std::move(*sizes);
    break;
  }
  case OpKind::kFused: {
    StatusOr<plan::FusedBody> body = plan::getFusedBody(step);
    if (!body.isOk())
      return withWhere(body.status());
    out.fused = std::move(*body);
    break;
  }
  case OpKind::kRopeKVCacheWrite:
    INFER_RETURN_IF_ERROR(prepareRope());
    [[fallthrough]];
  case OpKind::kKVCacheWrite:
  case OpKind::kPagedAttention: {
    StatusOr<int64_t> layer = step.getInt("layer");
    if (!layer.isOk())
      return withWhere(layer.status());
    if (*layer < 0 || *layer >= geometry_.numLayers)
      return invalidArgument("cpu backend: " + where + ": layer " +
                             std::to_string(*layer) + " outside the cache's " +
                             std::to_string(geometry_.numLayers) + " layers");
    out.layer = *layer;
    if (out.op != OpKind::kPagedAttention)
      break;
    AttentionParams &a = out.attention;
    a.layer = *layer;
    for (auto [name, field] :
         {std::pair<const char *, int64_t *>{"num_heads", &a.numHeads},
          {"num_kv_heads", &a.numKVHeads},
          {"head_dim", &a.headDim}}) {
      StatusOr<int64_t> v = step.getInt(name);
      if (!v.isOk())
        return withWhere(v.status());
      *field = *v;
    }
    StatusOr<double> scale = step.getFloat("scale");
    if (!scale.isOk())
      return withWhere(scale.status());
    a.scale = *scale;
    a.slidingWindow = step.getInt("sliding_window", 0);
    if (a.numKVHeads != geometry_.numKVHeads || a.headDim != geometry_.headDim)
      return invalidArgument("cpu backend: " + where +
                             ": num_kv_heads/head_dim differ from the cache's");
    if (a.numHeads <= 0 || a.numHeads % a.numKVHeads != 0)
      return invalidArgument("cpu backend: " + where +
                             ": num_heads must be a multiple of num_kv_heads");
    if (a.slidingWindow < 0)
      return invalidArgument("cpu backend: " + where +
                             ": sliding_window must be >= 0");
    // Streaming: the rope attributes rotate the cached keys at their index.
    StatusOr<std::optional<RopeConfig>> keyRope = keyRopeConfigOf(step);
    if (!keyRope.isOk())
      return withWhere(keyRope.status());
    if (!*keyRope)
      break;
    a.keyRope = **keyRope;
    a.keyRopeInvFreq = ropeInverseFrequencies(a.keyRope);
    break;
  }
  default:
    break;
  }
  return Status::ok();
}

/// Checks the memory plan against the values: every placed f32 activation
/// ([rows, static columns...], rows <= T) fits in the workspace. This backend
/// computes in fp32, so activations of other dtypes keep their own memory.
Status CpuBackend::prepareWorkspace(const plan::RankPlan &rank) {
  const int64_t bytesPerRow = rank.workspaceBytesPerRow;
  workspaceOffset_.assign(rank.values.size(), -1);
  workspaceWidth_.assign(rank.values.size(), 0);
  if (bytesPerRow % sizeof(float) != 0)
    return invalidArgument("cpu backend: workspace_bytes_per_row " +
                           std::to_string(bytesPerRow) +
                           " is not a whole number of floats");
  workspaceFloatsPerRow_ = bytesPerRow / sizeof(float);
  for (const Value &v : rank.values) {
    if (v.workspaceOffset < 0 || v.dtype != plan::DType::kF32)
      continue;
    int64_t width = 1;
    for (size_t d = 1; d < v.shape.size(); ++d)
      width *= v.shape[d].isDynamic() ? -1 : v.shape[d].size;
    if (v.kind != ValueKind::kActivation || v.shape.empty() || width < 0 ||
        v.workspaceOffset % sizeof(float) != 0 ||
        v.workspaceOffset + width * static_cast<int64_t>(sizeof(float)) >
            bytesPerRow)
      return invalidArgument("cpu backend: value " + std::to_string(v.id) +
                             " ('" + v.name +
                             "') does not fit its workspace offset");
    workspaceOffset_[v.id] = v.workspaceOffset / sizeof(float);
    workspaceWidth_[v.id] = width;
  }
  return Status::ok();
}

StatusOr<const int32_t *> CpuBackend::intInput(int id, const Batch &batch,
                                               int64_t &length) const {
  switch (*inputOf_[id]) {
  case InputKind::kTokenIds:
    length = batch.numTokens();
    return batch.tokenIds.data();
  case InputKind::kPositions:
    length = static_cast<int64_t>(batch.positions.size());
    return batch.positions.data();
  case InputKind::kQueryStartLoc:
    length = static_cast<int64_t>(batch.queryStartLoc.size());
    return batch.queryStartLoc.data();
  case InputKind::kContextLens:
    length = batch.numSeqs();
    return batch.contextLens.data();
  case InputKind::kBlockTables:
    length = static_cast<int64_t>(batch.blockTables.size());
    return batch.blockTables.data();
  case InputKind::kLogitsIndices:
    length = static_cast<int64_t>(batch.logitsIndices.size());
    return batch.logitsIndices.data();
  case InputKind::kSlotMapping:
    break;
  }
  return invalidArgument("cpu backend: input '" + valueById_[id]->name +
                         "' is not an i32 operand");
}

Status CpuBackend::runStep(const PreparedStep &s, const Batch &batch,
                           std::vector<Matrix> &values) {
  auto in = [&](size_t i) -> const Matrix & { return values[s.operands[i]]; };
  auto mismatch = [&](const std::string &what) {
    return invalidArgument("cpu backend: " + what);
  };
  Matrix *result = s.result >= 0 ? &values[s.result] : nullptr;
  switch (s.op) {
  case OpKind::kEmbedding: {
    const Matrix &table = in(0);
    int64_t t;
    INFER_ASSIGN_OR_RETURN(const int32_t *ids,
                           intInput(s.operands[1], batch, t));
    const int64_t vocab = s.vocabSize > 0 ? s.vocabSize : table.rows;
    float *y = result->allocate(t, table.cols);
    for (int64_t i = 0; i < t; ++i) {
      if (ids[i] < 0 || ids[i] >= vocab)
        return outOfRange("token id " + std::to_string(ids[i]) +
                          " outside the vocabulary of " +
                          std::to_string(vocab));
      // Vocabulary-parallel: another rank's slice holds the row; this
      // rank's contribution to the all-reduce is zero.
      const int64_t row = ids[i] - s.vocabOffset;
      if (row < 0 || row >= table.rows)
        continue;
      std::memcpy(y + i * table.cols, table.data + row * table.cols,
                  table.cols * sizeof(float));
    }
    return Status::ok();
  }
  case OpKind::kRmsNorm: {
    const Matrix &x = in(0), &w = in(1);
    if (w.size() != x.cols)
      return mismatch("rms_norm weight size differs from the hidden size");
    float *y = result->allocate(x.rows, x.cols);
    rmsNorm(x.data, w.data, y, x.rows, x.cols, s.epsilon);
    return Status::ok();
  }
  case OpKind::kLinear:
  case OpKind::kLogits: {
    const Matrix &x = in(0), &w = in(1);
    if (w.cols != x.cols)
      return mismatch("linear weight [" + std::to_string(w.rows) + "," +
                      std::to_string(w.cols) + "] does not match input width " +
                      std::to_string(x.cols));
    const float *bias = nullptr;
    if (s.operands.size() == 3) {
      if (in(2).size() != w.rows)
        return mismatch("linear bias size differs from the output width");
      bias = in(2).data;
    }
    float *y = result->allocate(x.rows, w.rows);
    if (w.fp8Codes)
      linearFp8(x.data, x.rows, x.cols, w.fp8Codes, w.rowScales, w.rows, bias,
                y, pool_);
    else
      linear(x.data, x.rows, x.cols, w.data, w.rows, bias, y, pool_);
    return Status::ok();
  }
  case OpKind::kRope: {
    const Matrix &x = in(0);
    int64_t t;
    INFER_ASSIGN_OR_RETURN(const int32_t *positions,
                           intInput(s.operands[1], batch, t));
    if (t != x.rows || x.cols % s.rope.headDim != 0)
      return mismatch("rope input does not match positions or head_dim");
    float *y = result->allocate(x.rows, x.cols);
    std::memcpy(y, x.data, x.size() * sizeof(float));
    applyRope(y, x.rows, x.cols / s.rope.headDim, positions, s.rope,
              s.ropeInvFreq);
    return Status::ok();
  }
  case OpKind::kKVCacheWrite: {
    const Matrix &k = in(1), &v = in(2);
    if (inputOf_[s.operands[3]] != InputKind::kSlotMapping)
      return mismatch("kv_cache_write needs slot_mapping as operand 3");
    if (k.cols != geometry_.slotElements() || v.cols != k.cols ||
        k.rows != batch.numTokens() || v.rows != k.rows)
      return mismatch("kv_cache_write keys/values do not match the cache");
    kvCacheWrite(kv_, geometry_, s.layer, k.data, v.data,
                 batch.slotMapping.data(), k.rows);
    return Status::ok();
  }
  case OpKind::kPagedAttention: {
    const Matrix &q = in(0);
    const AttentionParams &a = s.attention;
    if (inputOf_[s.operands[2]] != InputKind::kBlockTables ||
        inputOf_[s.operands[3]] != InputKind::kContextLens ||
        inputOf_[s.operands[4]] != InputKind::kQueryStartLoc)
      return mismatch("paged_attention needs block_tables, context_lens and "
                      "query_start_loc as operands 2-4");
    if (q.cols != a.numHeads * a.headDim || q.rows != batch.numTokens())
      return mismatch(
          "paged_attention query does not match num_heads*head_dim");
    float *y = result->allocate(q.rows, q.cols);
    pagedAttention(q.data, kv_, geometry_, a, batch.blockTables.data(),
                   batch.maxBlocksPerSeq, batch.contextLens.data(),
                   batch.queryStartLoc.data(), batch.numSeqs(), y, pool_);
    return Status::ok();
  }
  case OpKind::kSilu:
  case OpKind::kGeluTanh: {
    const Matrix &x = in(0);
    float *y = result->allocate(x.rows, x.cols);
    if (s.op == OpKind::kSilu)
      silu(x.data, y, x.size());
    else
      geluTanh(x.data, y, x.size());
    return Status::ok();
  }
  case OpKind::kAdd:
  case OpKind::kMul: {
    const Matrix &a = in(0), &b = in(1);
    if (a.rows != b.rows || a.cols != b.cols)
      return mismatch(std::string(s.op == OpKind::kAdd ? "add" : "mul") +
                      " operands have different shapes");
    float *y = result->allocate(a.rows, a.cols);
    const int64_t n = a.size();
    if (s.op == OpKind::kAdd)
      for (int64_t i = 0; i < n; ++i)
        y[i] = a.data[i] + b.data[i];
    else
      for (int64_t i = 0; i < n; ++i)
        y[i] = a.data[i] * b.data[i];
    return Status::ok();
  }
  case OpKind::kSplit: {
    const Matrix &x = in(0);
    int64_t total = 0;
    for (int64_t size : s.sizes)
      total += size;
    if (total != x.cols)
      return mismatch("split sizes do not add up to the input width");
    int64_t column = 0;
    for (size_t r = 0; r < s.results.size(); ++r) {
      const int64_t width = s.sizes[r];
      float *y = values[s.results[r]].allocate(x.rows, width);
      for (int64_t i = 0; i < x.rows; ++i)
        std::memcpy(y + i * width, x.data + i * x.cols + column,
                    width * sizeof(float));
      column += width;
    }
    return Status::ok();
  }
  case OpKind::kAddRmsNorm: {
    const Matrix &a = in(0), &b = in(1), &w = in(2);
    if (a.rows != b.rows || a.cols != b.cols || w.size() != a.cols)
      return mismatch("add_rms_norm operands or weight do not match");
    float *sum = values[s.results[0]].allocate(a.rows, a.cols);
    float *y = values[s.results[1]].allocate(a.rows, a.cols);
    addRmsNorm(a.data, b.data, w.data, sum, y, a.rows, a.cols, s.epsilon);
    return Status::ok();
  }
  case OpKind::kSiluMul: {
    const Matrix &gate = in(0), &up = in(1);
    if (gate.rows != up.rows || gate.cols != up.cols)
      return mismatch("silu_mul operands have different shapes");
    float *y = result->allocate(gate.rows, gate.cols);
    siluMul(gate.data, up.data, y, gate.size());
    return Status::ok();
  }
  case OpKind::kRopeKVCacheWrite: {
    const Matrix &k = in(1), &v = in(2);
    if (inputOf_[s.operands[3]] != InputKind::kSlotMapping ||
        inputOf_[s.operands[4]] != InputKind::kPositions)
      return mismatch("rope_kv_cache_write needs slot_mapping and positions "
                      "as operands 3 and 4");
    if (k.cols != geometry_.slotElements() || v.cols != k.cols ||
        k.rows != batch.numTokens() || v.rows != k.rows ||
        s.rope.headDim != geometry_.headDim ||
        static_cast<int64_t>(batch.positions.size()) != k.rows)
      return mismatch("rope_kv_cache_write keys/values do not match the cache");
    ropeKVCacheWrite(kv_, geometry_, s.layer, k.data, v.data,
                     batch.slotMapping.data(), batch.positions.data(), k.rows,
                     s.rope, s.ropeInvFreq);
    return Status::ok();
  }
  case OpKind::kFused:
    return runFused(s, values);
  case OpKind::kAllReduce: {
    const Matrix &x = in(0);
    float *y = result->allocate(x.rows, x.cols);
    std::memcpy(y, x.data, x.size() * sizeof(float));
    return communicator_->allReduceSum(y, x.size());
  }
  case OpKind::kAllGather:
    return allGather(s, in(0), *result);
  case OpKind::kBiasAdd: {
    const Matrix &x = in(0), &bias = in(1);
    if (bias.size() != x.cols)
      return mismatch("bias_add bias size differs from the input width");
    float *y = result->allocate(x.rows, x.cols);
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < x.cols; ++j)
        y[i * x.cols + j] = x.data[i * x.cols + j] + bias.data[j];
    return Status::ok();
  }
  case OpKind::kGatherRows: {
    const Matrix &x = in(0);
    int64_t count;
    INFER_ASSIGN_OR_RETURN(const int32_t *indices,
                           intInput(s.operands[1], batch, count));
    float *y = result->allocate(count, x.cols);
    for (int64_t i = 0; i < count; ++i) {
      if (indices[i] < 0 || indices[i] >= x.rows)
        return outOfRange("gather_rows index " + std::to_string(indices[i]) +
                          " outside " + std::to_string(x.rows) + " rows");
      std::memcpy(y + i * x.cols, x.data + indices[i] * x.cols,
                  x.cols * sizeof(float));
    }
    return Status::ok();
  }
  }
  return internalError("cpu backend: unhandled op");
}

/// Interprets the register program a chunk of elements at a time: every
/// register is a chunk-sized array, and each instruction is one loop over
/// it, computing exactly what the unfused step of the same op computes.
Status CpuBackend::runFused(const PreparedStep &s,
                            std::vector<Matrix> &values) {
  const plan::FusedBody &body = s.fused;
  const Matrix &first = values[s.operands[0]];
  for (int id : s.operands)
    if (values[id].rows != first.rows || values[id].cols != first.cols)
      return invalidArgument("cpu backend: fused operands have different "
                             "shapes");
  std::vector<float *> outputs;
  for (int id : s.results)
    outputs.push_back(values[id].allocate(first.rows, first.cols));

  constexpr int64_t kChunk = 256;
  const int64_t n = first.size();
  std::vector<float> scratch(body.instructions.size() * kChunk);
  std::vector<const float *> regs(body.numRegisters());
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    for (int i = 0; i < body.numInputs; ++i)
      regs[i] = values[s.operands[i]].data + begin;
    for (size_t i = 0; i < body.instructions.size(); ++i) {
      const plan::FusedInstruction &instr = body.instructions[i];
      float *y = scratch.data() + i * kChunk;
      const float *a = regs[instr.args[0]];
      const float *b = instr.args.size() > 1 ? regs[instr.args[1]] : nullptr;
      switch (instr.op) {
      case plan::ElementwiseOp::kAdd:
        for (int64_t j = 0; j < count; ++j)
          y[j] = a[j] + b[j];
        break;
      case plan::ElementwiseOp::kMul:
        for (int64_t j = 0; j < count; ++j)
          y[j] = a[j] * b[j];
        break;
      case plan::ElementwiseOp::kSilu:
        silu(a, y, count);
        break;
      case plan::ElementwiseOp::kGeluTanh:
        geluTanh(a, y, count);
        break;
      case plan::ElementwiseOp::kSiluMul:
        siluMul(a, b, y, count);
        break;
      }
      regs[body.numInputs + i] = y;
    }
    for (size_t r = 0; r < outputs.size(); ++r)
      std::memcpy(outputs[r] + begin, regs[body.yields[r]],
                  count * sizeof(float));
  }
  return Status::ok();
}

/// Gathers rank-major blocks, then interleaves them for dim 1:
///
///   recv  [rank 0: rows x c][rank 1: rows x c]   (dim 0: the result as is)
///   y     row i = [rank 0 row i | rank 1 row i]  (dim 1)
Status CpuBackend::allGather(const PreparedStep &step, const Matrix &x,
                             Matrix &y) {
  const int64_t n = communicator_->size();
  if (step.gatherDim == 0) {
    float *out = y.allocate(x.rows * n, x.cols);
    return communicator_->allGather(x.data, x.size(), out);
  }
  std::vector<float> recv(static_cast<size_t>(x.size() * n));
  INFER_RETURN_IF_ERROR(
      communicator_->allGather(x.data, x.size(), recv.data()));
  float *out = y.allocate(x.rows, x.cols * n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < x.rows; ++i)
      std::memcpy(out + i * x.cols * n + r * x.cols,
                  recv.data() + (r * x.rows + i) * x.cols,
                  x.cols * sizeof(float));
  return Status::ok();
}

StatusOr<Logits> CpuBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(batch.validate(numBlocks_, geometry_.blockSize));
  std::vector<Matrix> values(valueById_.size());
  for (const auto &[id, tensor] : params_) {
    if (id < 0 || id >= static_cast<int>(values.size()))
      continue;
    Matrix &m = values[id];
    if (tensor->isFp8()) {
      m.fp8Codes = tensor->fp8Codes.data();
      m.rowScales = tensor->rowScales.data();
    } else {
      m.data = tensor->data.data();
    }
    m.rows = tensor->shape.size() == 2 ? tensor->shape[0] : 1;
    m.cols = tensor->shape.back();
  }
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
  if (!out.data)
    return internalError("cpu backend: the plan output was not computed");
  Logits logits;
  logits.rows = out.rows;
  logits.vocab = out.cols;
  logits.data = std::move(out.storage);
  return logits;
}

} // namespace

StatusOr<std::unique_ptr<Backend>>
createCpuBackend(const plan::Plan &plan, int rank, ParamTable params,
                 const CpuBackendOptions &options) {
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("cpu backend: rank " + std::to_string(rank) +
                           " not in the plan");
  const plan::KVCacheLayout &layout = plan.kvCache;
  if (layout.layout != "block_layer_kv_slot_head_dim")
    return unimplemented("cpu backend: KV-cache layout '" + layout.layout +
                         "'");
  if (layout.dtype != plan::DType::kF32 &&
      layout.dtype != plan::DType::kF8E5M2 &&
      layout.dtype != plan::DType::kF8E4M3)
    return unimplemented("cpu backend: KV cache of dtype " +
                         std::string(plan::dtypeName(layout.dtype)) +
                         " (only f32, f8e5m2 and f8e4m3)");
  if (options.numBlocks < 0)
    return invalidArgument("cpu backend: negative number of KV blocks");
  if (plan.numRanks > 1 &&
      (!options.communicator || options.communicator->size() != plan.numRanks ||
       options.communicator->rank() != rank))
    return invalidArgument("cpu backend: rank " + std::to_string(rank) +
                           " of a " + std::to_string(plan.numRanks) +
                           "-rank plan needs that rank's communicator");
  int threads = options.numThreads > 0 ? options.numThreads
                                       : ThreadPool::defaultNumThreads();
  auto backend = std::make_unique<CpuBackend>(layout, options.numBlocks,
                                              threads, options.communicator);
  INFER_RETURN_IF_ERROR(backend->prepare(plan.ranks[rank], std::move(params)));
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace infer::cpu
