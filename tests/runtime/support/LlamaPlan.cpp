//===- LlamaPlan.cpp - Hand-built plans for llama-style test models -------===//

#include "tests/runtime/support/LlamaPlan.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/safetensors/Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <variant>

namespace infer::testing {

using nlohmann::json;
using plan::Dim;
using plan::DType;
using plan::Step;
using plan::Value;
using plan::ValueKind;

namespace {

/// Appends values and steps to a rank.
class RankBuilder {
public:
  explicit RankBuilder(plan::RankPlan &rank) : rank_(rank) {}

  int input(const std::string &name, DType dtype, std::vector<Dim> shape) {
    return add(ValueKind::kInput, name, dtype, std::move(shape));
  }
  int param(const std::string &tensor, const safetensors::TensorInfo &info,
            const std::string &file) {
    if (auto it = params_.find(tensor); it != params_.end())
      return it->second;
    std::vector<Dim> shape;
    for (int64_t d : info.shape)
      shape.push_back(Dim::fixed(d));
    DType dtype = info.dtype == safetensors::DType::kBF16  ? DType::kBF16
                  : info.dtype == safetensors::DType::kF16 ? DType::kF16
                                                           : DType::kF32;
    int id = add(ValueKind::kParam, tensor, dtype, shape);
    rank_.values[id].sourceFile = file;
    rank_.values[id].sourceTensor = tensor;
    params_[tensor] = id;
    return id;
  }
  int kvCache() {
    return add(ValueKind::kKVCache, "kv_cache", DType::kF32, {});
  }

  int step(const std::string &op, std::vector<int> operands, int64_t width,
           plan::AttrMap attrs = {}) {
    int result = add(ValueKind::kActivation, "%" + std::to_string(next_++),
                     DType::kF32, {Dim::dynamic("T"), Dim::fixed(width)});
    rank_.steps.push_back(
        Step{op, std::move(operands), {result}, std::move(attrs)});
    return result;
  }
  void effect(const std::string &op, std::vector<int> operands,
              plan::AttrMap attrs) {
    rank_.steps.push_back(Step{op, std::move(operands), {}, std::move(attrs)});
  }

private:
  int add(ValueKind kind, const std::string &name, DType dtype,
          std::vector<Dim> shape) {
    Value v;
    v.id = static_cast<int>(rank_.values.size());
    v.kind = kind;
    v.name = name;
    v.dtype = dtype;
    v.shape = std::move(shape);
    rank_.values.push_back(std::move(v));
    return rank_.values.back().id;
  }

  plan::RankPlan &rank_;
  std::map<std::string, int> params_;
  int next_ = 0;
};

template <typename T> T valueOr(const json &j, const char *key, T fallback) {
  if (!j.contains(key) || j[key].is_null())
    return fallback;
  return j[key].get<T>();
}

} // namespace

StatusOr<Artifact> buildLlamaArtifact(const std::string &modelDir,
                                      int64_t blockSize, plan::DType dtype) {
  std::ifstream in(modelDir + "/config.json");
  if (!in)
    return notFound("no config.json in " + modelDir);
  json config = json::parse(in, nullptr, false);
  if (config.is_discarded())
    return invalidArgument("bad config.json in " + modelDir);

  const int64_t hidden = config["hidden_size"];
  const int64_t heads = config["num_attention_heads"];
  const int64_t kvHeads =
      valueOr<int64_t>(config, "num_key_value_heads", heads);
  const int64_t headDim = valueOr<int64_t>(config, "head_dim", hidden / heads);
  const int64_t layers = config["num_hidden_layers"];
  const int64_t intermediate = config["intermediate_size"];
  const int64_t vocab = config["vocab_size"];
  const double eps = valueOr<double>(config, "rms_norm_eps", 1e-6);
  const bool tied = valueOr<bool>(config, "tie_word_embeddings", false);

  json rope = config.contains("rope_parameters") ? config["rope_parameters"]
                                                 : json::object();
  if (config.contains("rope_scaling") && config["rope_scaling"].is_object())
    rope.update(config["rope_scaling"]);
  plan::AttrMap ropeAttrs{
      {"head_dim", headDim},
      {"rotary_dim", headDim},
      {"theta", valueOr<double>(rope, "rope_theta",
                                valueOr<double>(config, "rope_theta", 1e4))},
      {"scaling", valueOr<std::string>(rope, "rope_type", "default")},
      {"factor", valueOr<double>(rope, "factor", 1.0)},
      {"low_freq_factor", valueOr<double>(rope, "low_freq_factor", 1.0)},
      {"high_freq_factor", valueOr<double>(rope, "high_freq_factor", 4.0)},
      {"original_max_position_embeddings",
       valueOr<int64_t>(rope, "original_max_position_embeddings", 0)}};

  std::vector<int64_t> windows(layers, 0);
  const int64_t window = valueOr<int64_t>(config, "sliding_window", 0);
  if (config.contains("layer_types")) {
    for (int64_t l = 0; l < layers; ++l)
      if (config["layer_types"][l] == "sliding_attention")
        windows[l] = window;
  } else {
    std::fill(windows.begin(), windows.end(), window);
  }

  INFER_ASSIGN_OR_RETURN(auto tensorFiles,
                         safetensors::listModelTensors(modelDir));
  std::map<std::string, safetensors::Header> headers;
  for (const auto &[name, file] : tensorFiles)
    if (!headers.count(file)) {
      INFER_ASSIGN_OR_RETURN(headers[file],
                             safetensors::readHeader(modelDir + "/" + file));
    }
  auto has = [&](const std::string &t) { return tensorFiles.count(t) > 0; };

  Artifact artifact;
  artifact.dir = modelDir;
  plan::Plan &plan = artifact.plan;
  plan.kvCache.numLayers = layers;
  plan.kvCache.numKVHeads = kvHeads;
  plan.kvCache.headDim = headDim;
  plan.kvCache.blockSize = blockSize;
  plan.ranks.emplace_back();
  RankBuilder b(plan.ranks[0]);
  auto param = [&](const std::string &t) -> StatusOr<int> {
    auto it = tensorFiles.find(t);
    if (it == tensorFiles.end())
      return notFound("tensor " + t + " not in " + modelDir);
    return b.param(t, *headers[it->second].find(t), it->second);
  };

  const int tokenIds = b.input("token_ids", DType::kI32, {Dim::dynamic("T")});
  const int positions = b.input("positions", DType::kI32, {Dim::dynamic("T")});
  const int queryStart =
      b.input("query_start_loc", DType::kI32, {Dim::dynamic("B+1")});
  const int contextLens =
      b.input("context_lens", DType::kI32, {Dim::dynamic("B")});
  const int blockTables = b.input("block_tables", DType::kI32,
                                  {Dim::dynamic("B"), Dim::dynamic("M")});
  const int slots = b.input("slot_mapping", DType::kI64, {Dim::dynamic("T")});
  const int logitsIndices =
      b.input("logits_indices", DType::kI32, {Dim::dynamic("S")});
  const int cache = b.kvCache();

  INFER_ASSIGN_OR_RETURN(int embed, param("model.embed_tokens.weight"));
  int h = b.step("embedding", {embed, tokenIds}, hidden);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    INFER_ASSIGN_OR_RETURN(int ln1, param(p + "input_layernorm.weight"));
    int x = b.step("rms_norm", {h, ln1}, hidden, {{"epsilon", eps}});
    int proj[3];
    const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    const int64_t widths[3] = {heads * headDim, kvHeads * headDim,
                               kvHeads * headDim};
    for (int i = 0; i < 3; ++i) {
      const std::string w = p + "self_attn." + names[i];
      INFER_ASSIGN_OR_RETURN(int weight, param(w + ".weight"));
      std::vector<int> operands{x, weight};
      if (has(w + ".bias")) {
        INFER_ASSIGN_OR_RETURN(int bias, param(w + ".bias"));
        operands.push_back(bias);
      }
      proj[i] = b.step("linear", operands, widths[i]);
    }
    int q = b.step("rope", {proj[0], positions}, widths[0], ropeAttrs);
    int k = b.step("rope", {proj[1], positions}, widths[1], ropeAttrs);
    b.effect("kv_cache_write", {cache, k, proj[2], slots}, {{"layer", l}});
    int attn =
        b.step("paged_attention",
               {q, cache, blockTables, contextLens, queryStart}, widths[0],
               {{"layer", l},
                {"num_heads", heads},
                {"num_kv_heads", kvHeads},
                {"head_dim", headDim},
                {"scale", 1.0 / std::sqrt(static_cast<double>(headDim))},
                {"sliding_window", windows[l]}});
    INFER_ASSIGN_OR_RETURN(int wo, param(p + "self_attn.o_proj.weight"));
    h = b.step("add", {h, b.step("linear", {attn, wo}, hidden)}, hidden);
    INFER_ASSIGN_OR_RETURN(int ln2,
                           param(p + "post_attention_layernorm.weight"));
    int x2 = b.step("rms_norm", {h, ln2}, hidden, {{"epsilon", eps}});
    INFER_ASSIGN_OR_RETURN(int wg, param(p + "mlp.gate_proj.weight"));
    INFER_ASSIGN_OR_RETURN(int wu, param(p + "mlp.up_proj.weight"));
    INFER_ASSIGN_OR_RETURN(int wd, param(p + "mlp.down_proj.weight"));
    int gate = b.step("silu", {b.step("linear", {x2, wg}, intermediate)},
                      intermediate);
    int up = b.step("linear", {x2, wu}, intermediate);
    int mlp =
        b.step("linear", {b.step("mul", {gate, up}, intermediate), wd}, hidden);
    h = b.step("add", {h, mlp}, hidden);
  }
  INFER_ASSIGN_OR_RETURN(int norm, param("model.norm.weight"));
  int hn = b.step("rms_norm", {h, norm}, hidden, {{"epsilon", eps}});
  int rows = b.step("gather_rows", {hn, logitsIndices}, hidden);
  INFER_ASSIGN_OR_RETURN(int head, param(tied || !has("lm_head.weight")
                                             ? "model.embed_tokens.weight"
                                             : "lm_head.weight"));
  int logits = b.step("logits", {rows, head}, vocab);
  plan.ranks[0].values[logits].shape = {Dim::dynamic("S"), Dim::fixed(vocab)};
  plan.ranks[0].outputs = {logits};
  if (dtype != DType::kF32)
    plan = withActivationType(std::move(plan), dtype);

  plan::Manifest &m = artifact.manifest;
  m.inferVersion = "test";
  plan::ModelInfo &mi = m.model;
  mi.architecture = config["architectures"][0];
  mi.vocabSize = vocab;
  mi.hiddenSize = hidden;
  mi.numLayers = layers;
  mi.numHeads = heads;
  mi.numKVHeads = kvHeads;
  mi.headDim = headDim;
  mi.maxPositionEmbeddings = config["max_position_embeddings"];
  if (config.contains("bos_token_id") && config["bos_token_id"].is_number())
    mi.bosTokenId = config["bos_token_id"].get<int64_t>();
  if (config.contains("eos_token_id")) {
    const json &eos = config["eos_token_id"];
    if (eos.is_number())
      mi.eosTokenIds.push_back(eos.get<int64_t>());
    else if (eos.is_array())
      for (const json &e : eos)
        mi.eosTokenIds.push_back(e.get<int64_t>());
  }
  if (config.contains("pad_token_id") && config["pad_token_id"].is_number())
    mi.padTokenId = config["pad_token_id"].get<int64_t>();
  m.compileOptions = {{"target", "cpu"},
                      {"block_size", std::to_string(blockSize)}};
  m.targets = {"cpu"};
  m.kvCache = plan.kvCache;
  m.weightsDir = modelDir;
  for (const auto &[file, header] : headers) {
    std::ifstream f(modelDir + "/" + file, std::ios::binary | std::ios::ate);
    m.weightFiles.push_back(
        plan::WeightFile{file, static_cast<uint64_t>(f.tellg()),
                         plan::fingerprint(header.headerJson)});
  }
  std::ifstream tokenizer(modelDir + "/tokenizer.json");
  if (tokenizer)
    m.tokenizerFile = "tokenizer.json";
  if (std::filesystem::exists(modelDir + "/tokenizer_config.json"))
    m.tokenizerConfigFile = "tokenizer_config.json";
  return artifact;
}

Status writeTestArtifact(const Artifact &artifact, const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return internalError("cannot create " + dir);
  INFER_RETURN_IF_ERROR(
      plan::writeManifestFile(artifact.manifest, dir + "/manifest.json"));
  INFER_RETURN_IF_ERROR(plan::writePlanFile(artifact.plan, dir + "/plan.json"));
  std::ofstream(dir + "/program.mlir") << "// hand-built test plan\n";
  for (const char *file :
       {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    const std::string from = artifact.dir + "/" + file;
    if (std::filesystem::exists(from))
      std::filesystem::copy_file(
          from, dir + "/" + file,
          std::filesystem::copy_options::overwrite_existing, ec);
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<Backend>>
createTestBackend(const Artifact &artifact, int64_t numBlocks, int numThreads) {
  INFER_ASSIGN_OR_RETURN(ParamTable params,
                         loadParams(artifact, 0, artifact.manifest.weightsDir));
  cpu::CpuBackendOptions options;
  options.numBlocks = numBlocks;
  options.numThreads = numThreads;
  return cpu::createCpuBackend(artifact.plan, 0, std::move(params), options);
}

plan::Plan withFusedRopes(plan::Plan plan, bool queries) {
  std::vector<plan::Step> &steps = plan.ranks[0].steps;
  auto producer = [&](int id) -> plan::Step * {
    for (plan::Step &s : steps)
      if (!s.results.empty() && s.results[0] == id)
        return &s;
    return nullptr;
  };
  std::vector<plan::Step> fused;
  for (const plan::Step &step : steps) {
    if (step.op == "rope")
      continue;
    if (step.op != "kv_cache_write") {
      fused.push_back(step);
      continue;
    }
    const int64_t layer = std::get<int64_t>(step.attrs.at("layer"));
    const plan::Step *kRope = producer(step.operands[1]);
    const plan::Step *qRope = nullptr;
    for (const plan::Step &s : steps)
      if (s.op == "paged_attention" &&
          std::get<int64_t>(s.attrs.at("layer")) == layer)
        qRope = producer(s.operands[0]);
    if (!kRope || !qRope || kRope->op != "rope" || qRope->op != "rope")
      return plan; // not buildLlamaArtifact's layer: unchanged
    plan::Step write = *kRope;
    write.attrs["layer"] = layer;
    const int positions = kRope->operands[1];
    if (queries) {
      write.op = "rope_qkv_cache_write";
      write.operands = {step.operands[0],   qRope->operands[0],
                        kRope->operands[0], step.operands[2],
                        step.operands[3],   positions};
      write.results = qRope->results;
    } else {
      fused.push_back(*qRope);
      write.op = "rope_kv_cache_write";
      write.operands = {step.operands[0], kRope->operands[0], step.operands[2],
                        step.operands[3], positions};
      write.results.clear();
    }
    fused.push_back(std::move(write));
  }
  steps = std::move(fused);
  return plan;
}

plan::Plan withActivationType(plan::Plan plan, plan::DType dtype) {
  auto isFloat = [](plan::DType d) {
    return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  };
  plan.formatVersion = plan::kPlanFormatVersion;
  if (isFloat(plan.kvCache.dtype))
    plan.kvCache.dtype = dtype;
  for (plan::RankPlan &rank : plan.ranks) {
    std::set<int> logits;
    for (const Step &s : rank.steps)
      if (s.op == "logits")
        logits.insert(s.results[0]);
    for (Value &v : rank.values) {
      const bool converts =
          (v.kind == ValueKind::kActivation && !logits.count(v.id)) ||
          v.kind == ValueKind::kParam || v.kind == ValueKind::kKVCache;
      if (converts && isFloat(v.dtype))
        v.dtype = dtype;
      // A bf16 activation takes half an f32's room: the workspace offsets
      // planned for f32 no longer hold, so the value keeps its own memory.
      if (v.kind == ValueKind::kActivation && dtype != DType::kF32)
        v.workspaceOffset = -1;
    }
  }
  return plan;
}

int fuseResidualSteps(plan::RankPlan &rank) {
  std::vector<int> uses(rank.values.size(), 0),
      producer(rank.values.size(), -1);
  for (size_t i = 0; i < rank.steps.size(); ++i) {
    for (int id : rank.steps[i].operands)
      ++uses[id];
    for (int id : rank.steps[i].results)
      producer[id] = static_cast<int>(i);
  }
  for (int id : rank.outputs)
    ++uses[id];
  std::vector<bool> erased(rank.steps.size(), false);
  int fused = 0;
  for (plan::Step &add : rank.steps) {
    if (add.op != "add")
      continue;
    for (int side : {1, 0}) {
      const int id = add.operands[side], p = producer[id];
      if (p < 0 || rank.steps[p].op != "linear" || uses[id] != 1)
        continue;
      const plan::Step &linear = rank.steps[p];
      plan::Step fusedStep{
          "linear_residual",
          {linear.operands[0], linear.operands[1], add.operands[1 - side]},
          add.results,
          {}};
      if (linear.operands.size() == 3)
        fusedStep.operands.push_back(linear.operands[2]);
      erased[p] = true;
      add = std::move(fusedStep);
      ++fused;
      break;
    }
  }
  std::vector<plan::Step> kept;
  for (size_t i = 0; i < rank.steps.size(); ++i)
    if (!erased[i])
      kept.push_back(std::move(rank.steps[i]));
  rank.steps = std::move(kept);
  return fused;
}

int addActivationLike(plan::RankPlan &rank, int like, int64_t cols) {
  plan::Value v = rank.values[like];
  v.id = static_cast<int>(rank.values.size());
  v.name += ".unfused" + std::to_string(v.id);
  if (cols >= 0)
    v.shape[1] = plan::Dim::fixed(cols);
  v.workspaceOffset = -1;
  rank.values.push_back(std::move(v));
  return static_cast<int>(rank.values.size()) - 1;
}

int unfuseResidualSteps(plan::RankPlan &rank) {
  std::vector<plan::Step> steps;
  int split = 0;
  for (plan::Step &step : rank.steps) {
    if (step.op != "linear_residual") {
      steps.push_back(std::move(step));
      continue;
    }
    const int product = addActivationLike(rank, step.results[0]);
    plan::Step linear{
        "linear", {step.operands[0], step.operands[1]}, {product}, {}};
    if (step.operands.size() == 4)
      linear.operands.push_back(step.operands[3]);
    steps.push_back(std::move(linear));
    steps.push_back(
        plan::Step{"add", {step.operands[2], product}, step.results, {}});
    ++split;
  }
  rank.steps = std::move(steps);
  return split;
}

double maxRelativeError(const float *actual, const float *expected, int64_t n) {
  double maxDiff = 0.0, maxRef = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    maxDiff = std::max(maxDiff,
                       std::fabs(static_cast<double>(actual[i]) - expected[i]));
    maxRef = std::max(maxRef, std::fabs(static_cast<double>(expected[i])));
  }
  return maxRef > 0 ? maxDiff / maxRef : maxDiff;
}

} // namespace infer::testing
