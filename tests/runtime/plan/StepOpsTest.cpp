//===- StepOpsTest.cpp - The step-op registry, decodeStep, verifyPlan -----===//

#include "runtime/plan/StepOps.h"
#include "runtime/plan/StepAttrs.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

namespace infer::plan {
namespace {

TEST(StepOps, RegistryHasOneLinePerOp) {
  const std::vector<StepOpInfo> &registry = stepOpRegistry();
  ASSERT_EQ(static_cast<int>(registry.size()), kNumStepOps);
  std::set<std::string_view> names;
  for (int i = 0; i < kNumStepOps; ++i) {
    const StepOpInfo &info = registry[i];
    EXPECT_EQ(static_cast<int>(info.op), i) << info.name;
    EXPECT_TRUE(names.insert(info.name).second) << "duplicate " << info.name;
    EXPECT_EQ(parseStepOp(info.name), info.op);
    EXPECT_EQ(stepOpName(info.op), info.name);
    EXPECT_FALSE(info.operands.empty()) << info.name;
    // Optional and variadic operands come last.
    for (size_t k = 0; k + 1 < info.operands.size(); ++k)
      EXPECT_TRUE(info.operands[k] != OperandRole::kOptionalTensor &&
                  info.operands[k] != OperandRole::kOptionalQueryStartLoc &&
                  info.operands[k] != OperandRole::kTensors)
          << info.name;
    std::set<std::string_view> attrs;
    for (const AttrSpec &spec : info.attrs)
      EXPECT_TRUE(attrs.insert(spec.name).second)
          << info.name << "." << spec.name;
  }
  EXPECT_FALSE(parseStepOp("softmax"));
  EXPECT_TRUE(isDirectStep("linear"));
  EXPECT_TRUE(isDirectStep("cast"));
  EXPECT_FALSE(isDirectStep("kv_cache_write")) << "lowered with the cache";
  EXPECT_FALSE(isDirectStep("fused"));
  EXPECT_FALSE(isDirectStep("softmax"));
}

TEST(StepOps, RolesNameTheirInputs) {
  const StepOpInfo &attention = stepOpInfo(StepOp::kPagedAttention);
  ASSERT_EQ(attention.operands.size(), 5u);
  EXPECT_EQ(inputNameOf(attention.operands[2]), "block_tables");
  EXPECT_EQ(inputNameOf(attention.operands[3]), "context_lens");
  EXPECT_EQ(inputNameOf(attention.operands[4]), "query_start_loc");
  EXPECT_EQ(inputNameOf(OperandRole::kTensor), "");
  const AttrSpec *theta = stepOpInfo(StepOp::kRope).attr("theta");
  ASSERT_NE(theta, nullptr);
  EXPECT_TRUE(theta->required);
  EXPECT_EQ(theta->type, AttrType::kFloat);
  EXPECT_FALSE(stepOpInfo(StepOp::kPagedAttention).attr("theta")->required);
}

/// The error of decodeStep on `step`, or "" if it decodes.
std::string decodeError(const Step &step) {
  StatusOr<DecodedStep> d = decodeStep(step);
  return d.isOk() ? "" : d.status().message();
}

TEST(DecodeStep, ChecksCountsAndAttributes) {
  Step norm{"rms_norm", {0, 1}, {2}, {{"epsilon", 1e-6}}};
  StatusOr<DecodedStep> d = decodeStep(norm);
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_EQ(d->op, StepOp::kRmsNorm);
  EXPECT_EQ(d->epsilon, 1e-6);

  Step bad = norm;
  bad.attrs["epsilon"] = -1e-6;
  EXPECT_NE(decodeError(bad).find("'epsilon' must be > 0"), std::string::npos);
  bad = norm;
  bad.attrs.erase("epsilon");
  EXPECT_NE(decodeError(bad).find("'epsilon' is missing"), std::string::npos);
  bad = norm;
  bad.attrs["epsilon"] = std::string("small");
  EXPECT_NE(decodeError(bad).find("'epsilon' must be a number"),
            std::string::npos);
  bad = norm;
  bad.attrs["rotary_dim"] = int64_t(4);
  EXPECT_NE(decodeError(bad).find("'rotary_dim' is not one of rms_norm's"),
            std::string::npos);
  bad = norm;
  bad.operands.push_back(3);
  EXPECT_NE(decodeError(bad).find("expected 2 operands, got 3"),
            std::string::npos);
  bad = norm;
  bad.results.push_back(3);
  EXPECT_NE(decodeError(bad).find("expected 1 results, got 2"),
            std::string::npos);
  bad = norm;
  bad.op = "softmax";
  EXPECT_NE(decodeError(bad).find("unknown op 'softmax'"), std::string::npos);

  // Linear takes an optional bias; fused one or more operands.
  EXPECT_EQ(decodeError(Step{"linear", {0, 1}, {2}, {}}), "");
  EXPECT_EQ(decodeError(Step{"linear", {0, 1, 3}, {2}, {}}), "");
  EXPECT_NE(decodeError(Step{"linear", {0}, {2}, {}}).find("2 or 3 operands"),
            std::string::npos);
  EXPECT_NE(decodeError(Step{"fused", {}, {2}, {}}).find("at least 1"),
            std::string::npos);
}

TEST(DecodeStep, DecodesEachOpsAttributes) {
  StatusOr<DecodedStep> embedding = decodeStep(
      Step{"embedding",
           {0, 1},
           {2},
           {{"vocab_offset", int64_t(64)}, {"vocab_size", int64_t(128)}}});
  ASSERT_TRUE(embedding.isOk());
  EXPECT_EQ(embedding->vocabOffset, 64);
  EXPECT_EQ(embedding->vocabSize, 128);
  EXPECT_NE(decodeError(
                Step{"embedding", {0, 1}, {2}, {{"vocab_offset", int64_t(-1)}}})
                .find("'vocab_offset' must be >= 0"),
            std::string::npos);

  StatusOr<DecodedStep> split = decodeStep(
      Step{"split", {0}, {1, 2}, {{"sizes", std::vector<int64_t>{3, 5}}}});
  ASSERT_TRUE(split.isOk());
  EXPECT_EQ(split->splitSizes, (std::vector<int64_t>{3, 5}));

  Step attention{"paged_attention",
                 {0, 1, 2, 3, 4},
                 {5},
                 {{"layer", int64_t(1)},
                  {"num_heads", int64_t(8)},
                  {"num_kv_heads", int64_t(2)},
                  {"head_dim", int64_t(16)},
                  {"scale", 0.25}}};
  StatusOr<DecodedStep> a = decodeStep(attention);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->layer, 1);
  EXPECT_EQ(a->attention.numHeads, 8);
  EXPECT_FALSE(a->attention.keyRope);
  attention.attrs["num_kv_heads"] = int64_t(3);
  EXPECT_NE(decodeError(attention).find("not a multiple of num_kv_heads"),
            std::string::npos);
  attention.attrs["num_kv_heads"] = int64_t(0);
  EXPECT_NE(decodeError(attention).find("'num_kv_heads' must be > 0"),
            std::string::npos);

  StatusOr<DecodedStep> gather =
      decodeStep(Step{"all_gather", {0}, {1}, {{"dim", int64_t(2)}}});
  ASSERT_FALSE(gather.isOk());
  EXPECT_NE(gather.status().message().find("dim must be 0 or 1"),
            std::string::npos);
}

TEST(DecodeStep, KeyRopeOfAStreamingStep) {
  Step step{"paged_attention",
            {},
            {},
            {{"head_dim", int64_t(64)},
             {"theta", 500000.0},
             {"sliding_window", int64_t(0)}}};
  StatusOr<std::optional<RopeConfig>> none = decodeKeyRope(step);
  ASSERT_TRUE(none.isOk()) << none.status().message();
  EXPECT_FALSE(none->has_value());

  step.attrs["key_rotary_dim"] = int64_t(32);
  StatusOr<std::optional<RopeConfig>> keyRope = decodeKeyRope(step);
  ASSERT_TRUE(keyRope.isOk()) << keyRope.status().message();
  ASSERT_TRUE(keyRope->has_value());
  EXPECT_EQ((*keyRope)->headDim, 64);
  EXPECT_EQ((*keyRope)->rotaryDim, 32);
  EXPECT_EQ((*keyRope)->theta, 500000.0);

  step.attrs["key_rotary_dim"] = int64_t(33);
  EXPECT_FALSE(decodeKeyRope(step).isOk()) << "odd key_rotary_dim";
  step.attrs["key_rotary_dim"] = int64_t(32);
  step.attrs["sliding_window"] = int64_t(128);
  StatusOr<std::optional<RopeConfig>> windowed = decodeKeyRope(step);
  ASSERT_FALSE(windowed.isOk());
  EXPECT_NE(
      windowed.status().message().find("key_rotary_dim with a sliding_window"),
      std::string::npos);
}

/// The hand-built llama-gqa plan and each way of breaking it: the verifier
/// must reject every variant with the message given.
class VerifyPlan : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string model =
        std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
    if (!std::filesystem::exists(model + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << model;
    StatusOr<Artifact> artifact = testing::buildLlamaArtifact(model);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    plan_ = artifact->plan;
    ASSERT_TRUE(verifyPlan(plan_).isOk()) << verifyPlan(plan_).message();
  }

  Step &find(Plan &plan, const std::string &op) {
    for (Step &s : plan.ranks[0].steps)
      if (s.op == op)
        return s;
    ADD_FAILURE() << "no " << op;
    return plan.ranks[0].steps[0];
  }
  Value &valueNamed(Plan &plan, const std::string &name) {
    for (Value &v : plan.ranks[0].values)
      if (v.name == name)
        return v;
    ADD_FAILURE() << "no value " << name;
    return plan.ranks[0].values[0];
  }

  void expectRejected(const std::function<void(Plan &)> &mutate,
                      const std::string &needle) {
    Plan plan = plan_;
    mutate(plan);
    Status status = verifyPlan(plan);
    ASSERT_FALSE(status.isOk()) << "accepted; expected: " << needle;
    EXPECT_NE(status.message().find(needle), std::string::npos)
        << status.message();
  }

  Plan plan_;
};

TEST_F(VerifyPlan, RejectsWhatABackendCouldNotRun) {
  expectRejected([](Plan &p) { p.kvCache.numKVHeads = 0; },
                 "num_kv_heads and head_dim > 0");
  expectRejected([](Plan &p) { p.kvCache.blockSize = 0; }, "block_size <= 0");
  expectRejected([](Plan &p) { p.formatVersion = 9; }, "format_version 9");
  expectRejected(
      [&](Plan &p) { find(p, "paged_attention").attrs["layer"] = int64_t(7); },
      "layer 7 outside the KV cache's 3 layers");
  expectRejected(
      [&](Plan &p) { find(p, "kv_cache_write").attrs["layer"] = int64_t(-1); },
      "'layer' must be >= 0");
  expectRejected(
      [&](Plan &p) {
        find(p, "paged_attention").attrs["num_heads"] = int64_t(4);
      },
      "num_heads * head_dim = 64 wide");
  expectRejected([&](Plan &p) { find(p, "rms_norm").attrs["epsilon"] = -1.0; },
                 "'epsilon' must be > 0");
  expectRejected(
      [&](Plan &p) { find(p, "rms_norm").attrs["bogus"] = int64_t(1); },
      "attribute 'bogus' is not one of rms_norm's");
  expectRejected(
      [&](Plan &p) {
        find(p, "embedding").attrs["vocab_offset"] = int64_t(-5);
      },
      "'vocab_offset' must be >= 0");
  expectRejected(
      [&](Plan &p) {
        Step &e = find(p, "embedding");
        e.attrs["vocab_offset"] = int64_t(100);
        e.attrs["vocab_size"] = int64_t(512);
      },
      "table rows exceed vocab_size 512");
  // The rope's positions swapped for the token ids.
  expectRejected(
      [&](Plan &p) {
        Step &rope = find(p, "rope");
        rope.operands[1] = find(p, "embedding").operands[1];
      },
      "must be the input 'positions'");
  expectRejected(
      [&](Plan &p) { valueNamed(p, "model.norm.weight").shape[0].size = 64; },
      "the weight or result width differs from the input's");
  // The down projection ([128, 256]) reading the normed hidden state (128).
  expectRejected(
      [&](Plan &p) {
        Step *down = nullptr;
        for (Step &s : p.ranks[0].steps)
          if (s.op == "linear" &&
              p.ranks[0].values[s.operands[1]].shape[1].size == 256)
            down = &s;
        ASSERT_NE(down, nullptr);
        down->operands[0] = find(p, "rms_norm").results[0];
      },
      "does not match the input width 128");
  expectRejected(
      [&](Plan &p) {
        for (Value &v : p.ranks[0].values)
          if (v.id == p.ranks[0].outputs[0]) {
            p.ranks[0].workspaceBytesPerRow = 1 << 20;
            v.workspaceOffset = 0;
          }
      },
      "is placed in the workspace (outputs own their memory)");
  expectRejected(
      [&](Plan &p) {
        for (Value &v : p.ranks[0].values)
          if (v.kind == ValueKind::kActivation) {
            v.workspaceOffset = 64;
            p.ranks[0].workspaceBytesPerRow = 128;
            break;
          }
      },
      "does not fit the workspace");
  expectRejected(
      [&](Plan &p) {
        p.formatVersion = 1;
        for (Value &v : p.ranks[0].values)
          if (v.kind == ValueKind::kActivation) {
            v.dtype = DType::kBF16;
            break;
          }
      },
      "format version 1 has f32 activations only");
  expectRejected(
      [&](Plan &p) {
        for (Value &v : p.ranks[0].values)
          if (v.kind == ValueKind::kActivation) {
            v.dtype = DType::kI32;
            break;
          }
      },
      "activations are f32, f16 or bf16");
  expectRejected(
      [&](Plan &p) {
        find(p, "logits").operands[0] = find(p, "rope").operands[1];
      },
      "must be a float activation or param");
}

TEST_F(VerifyPlan, AcceptsBf16ActivationsAndCache) {
  Plan plan = plan_;
  plan.kvCache.dtype = DType::kBF16;
  for (Value &v : plan.ranks[0].values)
    if (v.kind == ValueKind::kActivation && v.id != plan.ranks[0].outputs[0])
      v.dtype = DType::kBF16;
  EXPECT_TRUE(verifyPlan(plan).isOk()) << verifyPlan(plan).message();
  // The logits stay f32.
  for (Value &v : plan.ranks[0].values)
    if (v.id == plan.ranks[0].outputs[0])
      v.dtype = DType::kBF16;
  Status status = verifyPlan(plan);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("logits are f32"), std::string::npos);
}

} // namespace
} // namespace infer::plan
