//===- PlanTest.cpp - plan.json / manifest.json round trips and rejection -===//

#include "runtime/plan/Plan.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>

namespace infer::plan {
namespace {

using nlohmann::json;

/// embedding -> rope -> rms_norm -> logits, a small valid plan whose steps
/// carry integer, float and string attributes.
Plan tinyPlan() {
  Plan plan;
  plan.kvCache.numLayers = 1;
  plan.kvCache.numKVHeads = 1;
  plan.kvCache.headDim = 4;
  RankPlan rank;
  auto value = [&](ValueKind kind, std::string name, DType dtype,
                   std::vector<Dim> shape) {
    Value v;
    v.id = static_cast<int>(rank.values.size());
    v.kind = kind;
    v.name = std::move(name);
    v.dtype = dtype;
    v.shape = std::move(shape);
    if (kind == ValueKind::kParam) {
      v.sourceFile = "model.safetensors";
      v.sourceTensor = v.name;
    }
    rank.values.push_back(v);
  };
  value(ValueKind::kInput, "token_ids", DType::kI32, {Dim::dynamic("T")});
  value(ValueKind::kParam, "embed", DType::kBF16,
        {Dim::fixed(8), Dim::fixed(4)});
  value(ValueKind::kActivation, "%h", DType::kBF16,
        {Dim::dynamic("T"), Dim::fixed(4)});
  value(ValueKind::kActivation, "%logits", DType::kF32,
        {Dim::dynamic("S"), Dim::fixed(8)});
  value(ValueKind::kInput, "positions", DType::kI32, {Dim::dynamic("T")});
  value(ValueKind::kActivation, "%r", DType::kBF16,
        {Dim::dynamic("T"), Dim::fixed(4)});
  value(ValueKind::kParam, "norm", DType::kF32, {Dim::fixed(4)});
  value(ValueKind::kActivation, "%n", DType::kBF16,
        {Dim::dynamic("T"), Dim::fixed(4)});
  rank.values[1].transforms.push_back(WeightTransform{
      "slice",
      {{"dim", int64_t(0)}, {"begin", int64_t(8)}, {"size", int64_t(8)}}});
  rank.steps.push_back(Step{"embedding", {1, 0}, {2}, {}});
  rank.steps.push_back(Step{"rope",
                            {2, 4},
                            {5},
                            {{"head_dim", int64_t(4)},
                             {"theta", 1e4},
                             {"scaling", std::string("linear")},
                             {"factor", 2.0}}});
  rank.steps.push_back(Step{"rms_norm", {5, 6}, {7}, {{"epsilon", 1e-30}}});
  rank.steps.push_back(Step{"logits", {7, 1}, {3}, {}});
  rank.outputs = {3};
  plan.ranks.push_back(rank);
  return plan;
}

/// A manifest with a valid KV-cache layout.
Manifest validManifest() {
  Manifest m;
  m.kvCache.numLayers = 2;
  m.kvCache.numKVHeads = 1;
  m.kvCache.headDim = 8;
  return m;
}

TEST(PlanJson, TinyPlanRoundTrips) {
  Plan plan = tinyPlan();
  StatusOr<Plan> parsed = parsePlanJson(planToJson(plan));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(*parsed, plan);
}

TEST(PlanJson, LlamaPlanRoundTripsThroughFiles) {
  const std::string model = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!std::filesystem::exists(model + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << model;
  StatusOr<Artifact> artifact = testing::buildLlamaArtifact(model);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE(writePlanFile(artifact->plan, dir + "/plan.json").isOk());
  ASSERT_TRUE(
      writeManifestFile(artifact->manifest, dir + "/manifest.json").isOk());
  StatusOr<Plan> plan = readPlanFile(dir + "/plan.json");
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_EQ(*plan, artifact->plan);
  StatusOr<Manifest> manifest = readManifestFile(dir + "/manifest.json");
  ASSERT_TRUE(manifest.isOk()) << manifest.status().message();
  EXPECT_EQ(*manifest, artifact->manifest);
}

TEST(ManifestJson, RoundTripsOptionalFields) {
  Manifest m = validManifest();
  m.inferVersion = "0.1";
  m.model.architecture = "LlamaForCausalLM";
  m.model.vocabSize = 10;
  m.model.bosTokenId = 1;
  m.model.eosTokenIds = {2, 7};
  m.compileOptions = {{"target", "cpu"}, {"block_size", "16"}};
  m.targets = {"cpu"};
  m.weightsDir = "/models/x";
  m.weightFiles = {{"model.safetensors", 1234, fingerprint("{}")}};
  m.tokenizerFile = "tokenizer.json";
  StatusOr<Manifest> parsed = parseManifestJson(manifestToJson(m));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(*parsed, m);
  EXPECT_FALSE(parsed->model.padTokenId.has_value());
}

TEST(ManifestJson, RoundTripsGeneratedKernels) {
  Manifest m = validManifest();
  m.kernels.source = "kernels/fused.cu";
  m.kernels.cubins = {{"sm_90a", "kernels/fused.sm_90a.cubin"}};
  m.kernels.ptx = "kernels/fused.ptx";
  m.kernels.ptxArch = "compute_90";
  StatusOr<Manifest> parsed = parseManifestJson(manifestToJson(m));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(parsed->kernels, m.kernels);
  // A manifest without kernels (--target cpu) reads as empty.
  EXPECT_TRUE(
      parseManifestJson(manifestToJson(validManifest()))->kernels.empty());

  json j = json::parse(manifestToJson(m));
  j["kernels"].erase("ptx_arch");
  StatusOr<Manifest> bad = parseManifestJson(j.dump());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("kernels.ptx_arch"), std::string::npos)
      << bad.status().message();
}

TEST(ManifestJson, RejectsUnknownVersionAndBadJson) {
  json j = json::parse(manifestToJson(Manifest()));
  j["format_version"] = 99;
  StatusOr<Manifest> bad = parseManifestJson(j.dump());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("format_version 99"),
            std::string::npos);
  EXPECT_FALSE(parseManifestJson("{not json").isOk());
  j = json::parse(manifestToJson(Manifest()));
  j["kv_cache"]["dtype"] = "f8";
  EXPECT_FALSE(parseManifestJson(j.dump()).isOk());
}

TEST(Fingerprint, IsFnv1a64) {
  EXPECT_EQ(fingerprint(""), "cbf29ce484222325");
  EXPECT_EQ(fingerprint("a"), "af63dc4c8601ec8c");
}

TEST(StepAttrs, TypedAccessNamesTheAttribute) {
  Step s{"rope",
         {},
         {},
         {{"theta", int64_t(10000)}, {"scaling", std::string("llama3")}}};
  EXPECT_EQ(*s.getFloat("theta"), 10000.0);
  EXPECT_EQ(*s.getString("scaling"), "llama3");
  StatusOr<int64_t> missing = s.getInt("head_dim");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("head_dim"), std::string::npos);
  EXPECT_FALSE(s.getInt("scaling").isOk());
  EXPECT_EQ(s.getInt("head_dim", 64), 64);
}

TEST(StepAttrs, GatherDimIsZeroOrOne) {
  for (int64_t dim : {0, 1})
    EXPECT_EQ(*Step({"all_gather", {}, {}, {{"dim", dim}}}).getGatherDim(),
              dim);
  StatusOr<int64_t> two =
      Step({"all_gather", {}, {}, {{"dim", int64_t(2)}}}).getGatherDim();
  ASSERT_FALSE(two.isOk());
  EXPECT_NE(two.status().message().find("must be 0 or 1, got 2"),
            std::string::npos);
  EXPECT_FALSE(Step({"all_gather", {}, {}, {}}).getGatherDim().isOk());
}

/// Each case edits the JSON of the tiny plan and names a word the error
/// must contain.
struct InvalidCase {
  const char *name;
  std::function<void(json &)> edit;
  const char *expected;
};

class InvalidPlan : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidPlan, IsRejectedWithAClearMessage) {
  json j = json::parse(planToJson(tinyPlan()));
  GetParam().edit(j);
  StatusOr<Plan> parsed = parsePlanJson(j.dump());
  ASSERT_FALSE(parsed.isOk()) << "accepted: " << j.dump();
  EXPECT_NE(parsed.status().message().find(GetParam().expected),
            std::string::npos)
      << parsed.status().message();
}

json &values(json &j) { return j["ranks"][0]["values"]; }
json &steps(json &j) { return j["ranks"][0]["steps"]; }

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidPlan,
    ::testing::Values(
        InvalidCase{"UnknownVersion", [](json &j) { j["format_version"] = 3; },
                    "format_version 3"},
        InvalidCase{"MissingRanks", [](json &j) { j.erase("ranks"); },
                    "'ranks' is missing"},
        InvalidCase{"RankCount", [](json &j) { j["num_ranks"] = 2; },
                    "num_ranks is 2"},
        InvalidCase{"UnknownDType",
                    [](json &j) { values(j)[1]["dtype"] = "f4e2m1"; },
                    "unknown dtype 'f4e2m1'"},
        InvalidCase{"Fp8ParamWithoutQuantize",
                    [](json &j) { values(j)[1]["dtype"] = "f8e4m3"; },
                    "f8e4m3 needs a quantize_fp8_e4m3 transform"},
        InvalidCase{"QuantizeWithoutFp8",
                    [](json &j) {
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "quantize_fp8_e4m3"},
                           {"attrs", {{"granularity", "per-tensor"}}}});
                    },
                    "must be f8e4m3 for a param quantized"},
        InvalidCase{"QuantizeGranularity",
                    [](json &j) {
                      values(j)[1]["dtype"] = "f8e4m3";
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "quantize_fp8_e4m3"},
                           {"attrs", {{"granularity", "per-block"}}}});
                    },
                    "needs granularity \"per-tensor\" or \"per-channel\""},
        InvalidCase{"QuantizeNotLast",
                    [](json &j) {
                      values(j)[1]["dtype"] = "f8e4m3";
                      json quantize = {
                          {"kind", "quantize_fp8_e4m3"},
                          {"attrs", {{"granularity", "per-tensor"}}}};
                      json &transforms = values(j)[1]["transforms"];
                      transforms.insert(transforms.begin(), quantize);
                    },
                    "must be the last"},
        InvalidCase{"Fp8EmbeddingTable",
                    [](json &j) {
                      values(j)[1]["dtype"] = "f8e4m3";
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "quantize_fp8_e4m3"},
                           {"attrs", {{"granularity", "per-channel"}}}});
                    },
                    "fp8 only as a linear or logits weight"},
        InvalidCase{"SliceWithoutBegin",
                    [](json &j) {
                      values(j)[1]["transforms"][0]["attrs"].erase("begin");
                    },
                    "slice needs integer dim (a dimension of the param), "
                    "begin in [0, 2^40] and size in [1, 2^40]"},
        InvalidCase{
            "SliceOfMissingDim",
            [](json &j) { values(j)[1]["transforms"][0]["attrs"]["dim"] = 2; },
            "slice needs integer dim"},
        InvalidCase{"ConcatWithoutSource",
                    [](json &j) {
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "concat"}, {"attrs", {{"axis", 0}}}});
                    },
                    "concat needs an integer axis and non-empty source_file "
                    "and source_tensor"},
        InvalidCase{"ConcatPartialSlice",
                    [](json &j) {
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "concat"},
                           {"attrs",
                            {{"axis", 0},
                             {"source_file", "model.safetensors"},
                             {"source_tensor", "k"},
                             {"slice_dim", 0},
                             {"slice_size", 4}}}});
                    },
                    "concat needs integer slice_dim (a dimension of the "
                    "param), slice_begin in [0, 2^40] and slice_size in [1, "
                    "2^40], or none"},
        InvalidCase{"Fp8Activation",
                    [](json &j) { values(j)[2]["dtype"] = "f8e5m2"; },
                    "fp8 is only for params"},
        InvalidCase{"IntegerKVCache",
                    [](json &j) { j["kv_cache"]["dtype"] = "i32"; },
                    "must be a float type"},
        InvalidCase{"UnknownKind",
                    [](json &j) { values(j)[1]["kind"] = "constant"; }, "kind"},
        InvalidCase{"IdOutOfRange", [](json &j) { values(j)[3]["id"] = 9; },
                    "out of range"},
        InvalidCase{"DuplicateId", [](json &j) { values(j)[3]["id"] = 2; },
                    "defined twice"},
        InvalidCase{"OperandOutOfRange",
                    [](json &j) { steps(j)[0]["operands"][0] = 17; },
                    "operand id 17 out of range"},
        InvalidCase{"UseBeforeDefinition",
                    [](json &j) { std::swap(steps(j)[0], steps(j)[1]); },
                    "used before it is defined"},
        InvalidCase{"ResultDefinedTwice",
                    [](json &j) { steps(j)[1]["results"][0] = 2; },
                    "defined twice"},
        InvalidCase{"ResultIsParam",
                    [](json &j) { steps(j)[0]["results"][0] = 1; },
                    "not an activation"},
        InvalidCase{"UnknownOp", [](json &j) { steps(j)[0]["op"] = "softmax"; },
                    "unknown op"},
        InvalidCase{"WrongArity",
                    [](json &j) { steps(j)[0]["operands"].push_back(0); },
                    "expected 2 operands"},
        InvalidCase{"OutputNeverDefined", [](json &j) { steps(j).erase(3); },
                    "never defined"},
        InvalidCase{"ParamWithoutSource",
                    [](json &j) { values(j)[1]["source_tensor"] = ""; },
                    "without a source"},
        InvalidCase{"NegativeDim",
                    [](json &j) { values(j)[1]["shape"][0] = -3; },
                    "size >= 0"},
        InvalidCase{"BadAttr",
                    [](json &j) { steps(j)[1]["attrs"]["x"] = json::object(); },
                    "attrs.x"},
        InvalidCase{"NotJson", [](json &j) { j = "x"; }, "JSON object"},
        // Issues 17 and 18: plans that crashed a backend or read files
        // outside the weights directory.
        InvalidCase{"SliceExtentsOverflow",
                    [](json &j) {
                      values(j)[1]["transforms"][0]["attrs"]["begin"] =
                          INT64_MAX - 2;
                    },
                    "begin in [0, 2^40]"},
        InvalidCase{"ConcatSliceExtentsOverflow",
                    [](json &j) {
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "concat"},
                           {"attrs",
                            {{"axis", 0},
                             {"source_file", "model.safetensors"},
                             {"source_tensor", "k"},
                             {"slice_dim", 0},
                             {"slice_begin", 4},
                             {"slice_size", INT64_MAX}}}});
                    },
                    "slice_size in [1, 2^40]"},
        InvalidCase{"ParamSourceAbsolute",
                    [](json &j) {
                      values(j)[1]["source_file"] = "/other/x.safetensors";
                    },
                    "must name a file inside the weights directory"},
        InvalidCase{"ParamSourceParent",
                    [](json &j) {
                      values(j)[1]["source_file"] = "../other/x.safetensors";
                    },
                    "must name a file inside the weights directory"},
        InvalidCase{"ConcatSourceOutside",
                    [](json &j) {
                      values(j)[1]["transforms"].push_back(
                          {{"kind", "concat"},
                           {"attrs",
                            {{"axis", 0},
                             {"source_file", "/etc/passwd"},
                             {"source_tensor", "k"}}}});
                    },
                    "concat source_file '/etc/passwd' must name a file"},
        InvalidCase{"LogitsInTheWorkspace",
                    [](json &j) {
                      j["ranks"][0]["workspace_bytes_per_row"] = 1024;
                      values(j)[3]["workspace_offset"] = 0;
                    },
                    "outputs own their memory"},
        InvalidCase{"LogitsPastTheWorkspace",
                    [](json &j) {
                      j["ranks"][0]["workspace_bytes_per_row"] = 16;
                      values(j)[3]["workspace_offset"] = 0;
                    },
                    "does not fit the workspace"},
        InvalidCase{"WorkspaceTooLarge",
                    [](json &j) {
                      j["ranks"][0]["workspace_bytes_per_row"] = INT64_MAX;
                    },
                    "workspace_bytes_per_row"},
        InvalidCase{"HugeStaticRows",
                    [](json &j) { values(j)[2]["shape"][0] = INT64_MAX; },
                    "static rows"},
        InvalidCase{"ValueIdPastInt32",
                    [](json &j) { values(j)[3]["id"] = int64_t(1) << 32; },
                    "must be in [0, 2^31)"},
        InvalidCase{"OperandIdPastInt32",
                    [](json &j) {
                      steps(j)[0]["operands"][0] = (int64_t(1) << 32) + 1;
                    },
                    "must be an array of value ids"},
        InvalidCase{"NegativeEpsilon",
                    [](json &j) { steps(j)[2]["attrs"]["epsilon"] = -1e-6; },
                    "'epsilon' must be > 0"},
        // Found by infer-fuzz-cpu-plan: the CPU backend sized the result
        // [T, T] and the next step read its declared width past the end.
        InvalidCase{"WeightWithDynamicRows",
                    [](json &j) { steps(j)[3]["operands"][1] = 7; },
                    "with static N and K"},
        InvalidCase{"NegativeVocabOffset",
                    [](json &j) { steps(j)[0]["attrs"]["vocab_offset"] = -4; },
                    "vocab_offset"},
        InvalidCase{"NestedTooDeep",
                    [](json &j) {
                      json deep = json::array();
                      for (int i = 0; i < 200; ++i)
                        deep = json::array({deep});
                      j["extra"] = deep;
                    },
                    "deeper than 128 levels"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(PlanVerifier, RanksMustRunTheSameCollectives) {
  // A tp=2 plan whose ranks all_reduce values of different sizes: the
  // thread communicator used to read past the smaller buffer.
  Plan plan = tinyPlan();
  plan.numRanks = 2;
  plan.ranks.push_back(plan.ranks[0]);
  plan.ranks[1].rank = 1;
  for (int r = 0; r < 2; ++r) {
    RankPlan &rank = plan.ranks[r];
    // A copy: the push_back below may move the values.
    const Value operand = rank.values[r == 0 ? 7 : 3];
    Value reduced = operand;
    reduced.id = static_cast<int>(rank.values.size());
    reduced.name = "%reduced";
    rank.values.push_back(reduced);
    rank.steps.push_back(Step{"all_reduce", {operand.id}, {reduced.id}, {}});
  }
  Status status = verifyPlan(plan);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("collective 0 differs between ranks"),
            std::string::npos)
      << status.message();
}

TEST(PlanVerifier, WorkspaceOffsetCannotOverflow) {
  Plan plan = tinyPlan();
  plan.ranks[0].workspaceBytesPerRow = 64;
  plan.ranks[0].values[2].workspaceOffset = INT64_MAX - 4;
  Status status = verifyPlan(plan);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("does not fit the workspace"),
            std::string::npos)
      << status.message();
}

TEST(PlanVerifier, LiveWorkspaceValuesCannotOverlap) {
  // Found by infer-fuzz-cpu-plan: a split whose result overlapped its
  // operand in the workspace made the CPU backend memcpy between
  // overlapping ranges. %h (step 0 to 1) and %n (step 2 to 3) may share
  // bytes; %h and %r (step 1 to 2) may not.
  Plan plan = tinyPlan();
  RankPlan &rank = plan.ranks[0];
  rank.workspaceBytesPerRow = 64;
  rank.values[2].workspaceOffset = 0;
  rank.values[7].workspaceOffset = 0;
  EXPECT_TRUE(verifyPlan(plan).isOk()) << verifyPlan(plan).message();
  rank.values[5].workspaceOffset = 4;
  Status status = verifyPlan(plan);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("value 2 ('%h') and value 5 ('%r') overlap "
                                  "in the workspace while both are live "
                                  "(steps 1 to 1)"),
            std::string::npos)
      << status.message();
}

TEST(ManifestJson, RejectsFilesOutsideTheArtifact) {
  const json base = json::parse(manifestToJson(validManifest()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"program_file", "/etc/hostname"},
      {"plan_file", "../other/plan.json"},
      {"tokenizer_file", "/dev/zero"},
      {"tokenizer_config_file", "a/../../b"},
      {"plan_file", "."}};
  for (const auto &[key, file] : cases) {
    json j = base;
    j[key] = file;
    StatusOr<Manifest> parsed = parseManifestJson(j.dump());
    ASSERT_FALSE(parsed.isOk()) << key << " = " << file;
    EXPECT_NE(parsed.status().message().find("must name a file inside"),
              std::string::npos)
        << parsed.status().message();
  }
  json j = base;
  j["weight_files"] = json::array({{{"name", "../../etc/passwd"},
                                    {"size", 1},
                                    {"header_fingerprint", ""}}});
  EXPECT_FALSE(parseManifestJson(j.dump()).isOk());
}

TEST(PlanJson, RejectsTruncatedText) {
  std::string text = planToJson(tinyPlan());
  StatusOr<Plan> parsed = parsePlanJson(text.substr(0, text.size() / 2));
  ASSERT_FALSE(parsed.isOk());
  EXPECT_NE(parsed.status().message().find("not valid JSON"),
            std::string::npos);
}

TEST(PlanFile, MissingFileIsNotFound) {
  StatusOr<Plan> parsed = readPlanFile("/nonexistent/plan.json");
  ASSERT_FALSE(parsed.isOk());
  EXPECT_EQ(parsed.status().code(), StatusCode::kNotFound);
}

} // namespace
} // namespace infer::plan
