//===- WeightFixtures.cpp - Artifacts that exercise the weight loader -----===//

#include "tests/runtime/support/WeightFixtures.h"
#include "runtime/engine/PackedWeights.h"
#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/Half.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <filesystem>
#include <map>
#include <vector>

namespace infer::testing {

namespace fs = std::filesystem;

Status writeBf16Checkpoint(const std::string &from, const std::string &to) {
  std::error_code error;
  fs::create_directories(to, error);
  for (const auto &entry : fs::directory_iterator(from, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors" ||
        name == "expected_logits.safetensors") {
      fs::copy_file(entry.path(), to + "/" + name,
                    fs::copy_options::overwrite_existing, error);
      if (error)
        return invalidArgument("cannot copy " + entry.path().string() + ": " +
                               error.message());
      continue;
    }
    INFER_ASSIGN_OR_RETURN(std::unique_ptr<safetensors::File> file,
                           safetensors::File::open(entry.path().string()));
    std::vector<std::vector<uint16_t>> rounded;
    rounded.reserve(file->header().tensors.size());
    std::vector<safetensors::TensorToWrite> tensors;
    for (const safetensors::TensorInfo &info : file->header().tensors) {
      INFER_ASSIGN_OR_RETURN(std::string_view bytes,
                             file->tensorBytes(info.name));
      if (info.dtype != safetensors::DType::kF32) {
        tensors.push_back({info.name, info.dtype, info.shape, bytes});
        continue;
      }
      INFER_ASSIGN_OR_RETURN(std::vector<float> values,
                             file->readAsF32(info.name));
      std::vector<uint16_t> &bits = rounded.emplace_back(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        bits[i] = floatToBf16Bits(values[i]);
      tensors.push_back(
          {info.name, safetensors::DType::kBF16, info.shape,
           std::string_view(reinterpret_cast<const char *>(bits.data()),
                            bits.size() * 2)});
    }
    INFER_RETURN_IF_ERROR(safetensors::writeFile(to + "/" + name, tensors,
                                                 file->header().metadata));
  }
  if (error)
    return invalidArgument("cannot read " + from + ": " + error.message());
  return Status::ok();
}

void quantizeWeights(Artifact &artifact, const std::string &granularity) {
  for (plan::RankPlan &rank : artifact.plan.ranks) {
    std::vector<bool> isWeight(rank.values.size());
    for (const plan::Step &step : rank.steps)
      if (step.op == "linear" || step.op == "logits")
        isWeight[step.operands[1]] = true;
    for (plan::Value &v : rank.values)
      if (isWeight[v.id]) {
        v.dtype = plan::DType::kF8E4M3;
        v.transforms.push_back(
            {"quantize_fp8_e4m3", {{"granularity", granularity}}});
      }
  }
}

namespace {

plan::WeightTransform slice(int64_t dim, int64_t begin, int64_t size) {
  return {"slice", {{"dim", dim}, {"begin", begin}, {"size", size}}};
}

plan::WeightTransform concat(const plan::Value &v, const std::string &tensor,
                             int64_t begin = -1, int64_t size = 0) {
  plan::WeightTransform t{"concat",
                          {{"axis", int64_t(0)},
                           {"source_file", v.sourceFile},
                           {"source_tensor", tensor}}};
  if (begin >= 0) {
    t.attrs["slice_dim"] = int64_t(0);
    t.attrs["slice_begin"] = begin;
    t.attrs["slice_size"] = size;
  }
  return t;
}

} // namespace

void addTensorParallelShards(Artifact &artifact, plan::DType dtype,
                             const std::string &quantize) {
  plan::RankPlan &rank = artifact.plan.ranks[0];
  const plan::Value *first = nullptr;
  for (const plan::Value &v : rank.values)
    if (v.kind == plan::ValueKind::kParam && !first)
      first = &v;
  const std::string file = first->sourceFile;
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  struct Shard {
    std::string name, source;
    int64_t rows, cols;
    std::vector<plan::WeightTransform> transforms;
    std::vector<int64_t> parts;
  };
  plan::Value fileOnly;
  fileOnly.sourceFile = file;
  const std::vector<Shard> shards = {
      {"shard.layers.0.qkv",
       l0 + "self_attn.q_proj.weight",
       96,
       128,
       {slice(0, 64, 64),
        concat(fileOnly, l0 + "self_attn.k_proj.weight", 16, 16),
        concat(fileOnly, l0 + "self_attn.v_proj.weight", 16, 16)},
       {64, 16, 16}},
      {"shard.layers.0.gate_up",
       l0 + "mlp.gate_proj.weight",
       256,
       128,
       {slice(0, 128, 128),
        concat(fileOnly, l0 + "mlp.up_proj.weight", 128, 128)},
       {128, 128}},
      {"shard.layers.0.o",
       l0 + "self_attn.o_proj.weight",
       128,
       64,
       {slice(1, 64, 64)},
       {128}},
      {"shard.layers.0.down",
       l0 + "mlp.down_proj.weight",
       128,
       128,
       {slice(1, 128, 128)},
       {128}},
      {"shard.layers.1.qk_rows",
       l1 + "self_attn.q_proj.weight",
       96,
       128,
       {concat(fileOnly, l1 + "self_attn.k_proj.weight"), slice(0, 48, 96)},
       {80, 16}},
      {"shard.layers.1.kv_columns",
       l1 + "self_attn.k_proj.weight",
       64,
       64,
       {concat(fileOnly, l1 + "self_attn.v_proj.weight"), slice(1, 32, 64)},
       {32, 32}},
  };
  for (const Shard &shard : shards) {
    plan::Value v;
    v.id = static_cast<int>(rank.values.size());
    v.kind = plan::ValueKind::kParam;
    v.name = shard.name;
    v.dtype = dtype;
    v.shape = {plan::Dim::fixed(shard.rows), plan::Dim::fixed(shard.cols)};
    v.sourceFile = file;
    v.sourceTensor = shard.source;
    v.transforms = shard.transforms;
    if (!quantize.empty()) {
      v.dtype = plan::DType::kF8E4M3;
      plan::WeightTransform q{"quantize_fp8_e4m3", {{"granularity", quantize}}};
      // Merged shards keep a scale per part under per-tensor scaling.
      if (quantize == "per-tensor")
        q.attrs["parts"] = shard.parts;
      v.transforms.push_back(std::move(q));
    }
    rank.values.push_back(std::move(v));
  }
}

std::vector<LoaderCase> loaderCases() {
  using plan::DType;
  std::vector<LoaderCase> cases;
  for (bool tensorParallel : {false, true}) {
    const std::string prefix = tensorParallel ? "tp_" : "";
    cases.push_back({prefix + "f32", false, DType::kF32, "", tensorParallel});
    cases.push_back(
        {prefix + "bf16_cast", false, DType::kBF16, "", tensorParallel});
    cases.push_back({prefix + "bf16", true, DType::kBF16, "", tensorParallel});
    cases.push_back({prefix + "fp8_channel", false, DType::kF32, "per-channel",
                     tensorParallel});
    cases.push_back({prefix + "fp8_tensor_bf16", true, DType::kBF16,
                     "per-tensor", tensorParallel});
  }
  return cases;
}

StatusOr<Artifact> writeLoaderCase(const LoaderCase &c,
                                   const std::string &fixture,
                                   const std::string &dir) {
  std::error_code error;
  fs::remove_all(dir, error);
  fs::create_directories(dir, error);
  std::string model = fixture;
  if (c.bf16Checkpoint) {
    model = dir + "/model";
    INFER_RETURN_IF_ERROR(writeBf16Checkpoint(fixture, model));
  }
  INFER_ASSIGN_OR_RETURN(Artifact artifact,
                         buildLlamaArtifact(model, 16, c.dtype));
  if (!c.quantize.empty())
    quantizeWeights(artifact, c.quantize);
  if (c.tensorParallel)
    addTensorParallelShards(artifact, c.dtype, c.quantize);
  const std::string artifactDir = dir + "/artifact";
  INFER_RETURN_IF_ERROR(writeTestArtifact(artifact, artifactDir));
  INFER_RETURN_IF_ERROR(packArtifact(artifactDir, PackOptions{}));
  return loadArtifact(artifactDir);
}

void PrintTo(const LoaderCase &c, std::ostream *os) { *os << c.name; }

std::string paramBytes(const HostTensor &t) {
  const char *elements = t.isFp8() ? reinterpret_cast<const char *>(t.fp8Data())
                         : t.dtype == plan::DType::kF32
                             ? reinterpret_cast<const char *>(t.f32Data())
                             : reinterpret_cast<const char *>(t.bits16Data());
  std::string bytes(elements, static_cast<size_t>(t.elementBytes()));
  if (t.isFp8())
    bytes.append(reinterpret_cast<const char *>(t.rowScaleData()),
                 static_cast<size_t>(t.shape[0]) * sizeof(float));
  return bytes;
}

} // namespace infer::testing
