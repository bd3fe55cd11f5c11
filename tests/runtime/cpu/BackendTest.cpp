//===- BackendTest.cpp - CPU backend and loader error paths ---------------===//

#include "runtime/cpu/CpuBackend.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

class LlamaGqa : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(kModel + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kModel;
    StatusOr<Artifact> a = buildLlamaArtifact(kModel);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    StatusOr<ParamTable> p = loadParams(artifact_, 0, kModel);
    ASSERT_TRUE(p.isOk()) << p.status().message();
    params_ = std::move(p).value();
  }

  StatusOr<std::unique_ptr<Backend>> create(const plan::Plan &plan,
                                            int64_t blocks = 8) {
    cpu::CpuBackendOptions options;
    options.numBlocks = blocks;
    options.numThreads = 2;
    return cpu::createCpuBackend(plan, 0, params_, options);
  }

  /// One sequence of `tokens` in blocks 0.. of a fresh pool.
  Batch prefill(const std::vector<int32_t> &tokens) {
    Batch b;
    b.tokenIds = tokens;
    b.queryStartLoc = {0, static_cast<int32_t>(tokens.size())};
    b.contextLens = {static_cast<int32_t>(tokens.size())};
    b.maxBlocksPerSeq = 4;
    b.blockTables = {0, 1, 2, 3};
    for (size_t i = 0; i < tokens.size(); ++i) {
      b.positions.push_back(static_cast<int32_t>(i));
      b.slotMapping.push_back(static_cast<int64_t>(i));
    }
    b.logitsIndices = {static_cast<int32_t>(tokens.size() - 1)};
    return b;
  }

  void expectCreateFails(const plan::Plan &plan, const std::string &needle) {
    StatusOr<std::unique_ptr<Backend>> b = create(plan);
    ASSERT_FALSE(b.isOk());
    EXPECT_NE(b.status().message().find(needle), std::string::npos)
        << b.status().message();
  }

  plan::Step &findStep(plan::Plan &plan, const std::string &op) {
    for (plan::Step &s : plan.ranks[0].steps)
      if (s.op == op)
        return s;
    return plan.ranks[0].steps.front();
  }

  Artifact artifact_;
  ParamTable params_;
};

/// The residual adds moved into the GEMMs (linear_residual) compute the same
/// fp32 logits, bit for bit: in fp32 the one rounding of x w^T + r is the
/// add's.
TEST_F(LlamaGqa, LinearResidualStepsEqualSeparateAdds) {
  StatusOr<std::unique_ptr<Backend>> separate = create(artifact_.plan);
  ASSERT_TRUE(separate.isOk()) << separate.status().message();
  plan::Plan fusedPlan = artifact_.plan;
  const int fused = fuseResidualSteps(fusedPlan.ranks[0]);
  // o_proj and down_proj of each of the three layers.
  EXPECT_EQ(fused, 6);
  ASSERT_TRUE(plan::verifyPlan(fusedPlan).isOk())
      << plan::verifyPlan(fusedPlan).message();
  StatusOr<std::unique_ptr<Backend>> withResidual = create(fusedPlan);
  ASSERT_TRUE(withResidual.isOk()) << withResidual.status().message();
  const Batch batch = prefill({1, 5, 9, 200, 33, 7, 81, 2, 45, 11});
  StatusOr<Logits> want = (*separate)->forward(batch);
  StatusOr<Logits> got = (*withResidual)->forward(batch);
  ASSERT_TRUE(want.isOk() && got.isOk());
  EXPECT_EQ(got->data, want->data);

  // Split again (as the GPU fixture test splits a compiled plan's): the
  // same six, and the same bits.
  plan::Plan splitPlan = fusedPlan;
  EXPECT_EQ(unfuseResidualSteps(splitPlan.ranks[0]), 6);
  ASSERT_TRUE(plan::verifyPlan(splitPlan).isOk())
      << plan::verifyPlan(splitPlan).message();
  for (const plan::Step &step : splitPlan.ranks[0].steps)
    EXPECT_NE(step.op, "linear_residual");
  StatusOr<std::unique_ptr<Backend>> split = create(splitPlan);
  ASSERT_TRUE(split.isOk()) << split.status().message();
  StatusOr<Logits> again = (*split)->forward(batch);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->data, want->data);
}

TEST_F(LlamaGqa, RejectsPlansItCannotRun) {
  plan::Plan plan = artifact_.plan;
  plan.ranks[0].values[0].name = "tokens";
  expectCreateFails(plan, "value 0 ('tokens') is not a batch-contract input");

  plan = artifact_.plan;
  findStep(plan, "rope").attrs["scaling"] = std::string("ntk");
  expectCreateFails(plan, "unknown scaling 'ntk'");

  // A dynamic rope reads each sequence's length from query_start_loc.
  plan = artifact_.plan;
  findStep(plan, "rope").attrs["scaling"] = std::string("dynamic");
  findStep(plan, "rope").attrs["factor"] = 2.0;
  findStep(plan, "rope").attrs["original_max_position_embeddings"] =
      int64_t(16);
  expectCreateFails(plan, "a dynamic rope needs the query_start_loc operand");

  plan = artifact_.plan;
  findStep(plan, "paged_attention").attrs["num_kv_heads"] = int64_t(4);
  expectCreateFails(plan, "num_kv_heads / head_dim differ from the KV cache's");

  plan = artifact_.plan;
  findStep(plan, "rms_norm").attrs.erase("epsilon");
  expectCreateFails(plan, "'epsilon' is missing");

  plan = artifact_.plan;
  findStep(plan, "paged_attention").attrs["sliding_window"] = 4.5;
  expectCreateFails(plan, "'sliding_window' must be an integer");

  plan = artifact_.plan;
  plan.kvCache.dtype = plan::DType::kI32;
  expectCreateFails(plan, "the KV cache's dtype must be a float type");

  plan = artifact_.plan;
  for (plan::Value &v : plan.ranks[0].values)
    if (v.kind == plan::ValueKind::kParam) {
      v.shape[0].size += 1;
      break;
    }
  expectCreateFails(plan, "different shape");
}

TEST_F(LlamaGqa, RopeQKVCacheWriteIsBitIdenticalToTheUnfusedSteps) {
  // The CPU runs rope_qkv_cache_write as rope(q) and rope_kv_cache_write:
  // the same logits, bit for bit, in fp32 and bf16, over a prefill and a
  // decode step that reads the cached keys back.
  for (plan::DType dtype : {plan::DType::kF32, plan::DType::kBF16}) {
    StatusOr<Artifact> artifact = buildLlamaArtifact(kModel, 16, dtype);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    StatusOr<ParamTable> params = loadParams(*artifact, 0, kModel);
    ASSERT_TRUE(params.isOk()) << params.status().message();
    params_ = std::move(params).value();
    const plan::Plan unfused = withFusedRopes(artifact->plan, false);
    const plan::Plan fused = withFusedRopes(artifact->plan, true);
    int64_t fusedSteps = 0;
    for (const plan::Step &s : fused.ranks[0].steps)
      fusedSteps += s.op == "rope_qkv_cache_write";
    EXPECT_EQ(fusedSteps, artifact_.plan.kvCache.numLayers);
    StatusOr<std::unique_ptr<Backend>> a = create(unfused), b = create(fused);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    ASSERT_TRUE(b.isOk()) << b.status().message();
    const std::vector<Batch> batches = {prefill({7, 3, 11, 5, 2, 9, 4}), [&] {
                                          Batch d;
                                          d.tokenIds = {8};
                                          d.positions = {7};
                                          d.slotMapping = {7};
                                          d.queryStartLoc = {0, 1};
                                          d.contextLens = {8};
                                          d.maxBlocksPerSeq = 4;
                                          d.blockTables = {0, 1, 2, 3};
                                          d.logitsIndices = {0};
                                          return d;
                                        }()};
    for (const Batch &batch : batches) {
      StatusOr<Logits> x = (*a)->forward(batch), y = (*b)->forward(batch);
      ASSERT_TRUE(x.isOk()) << x.status().message();
      ASSERT_TRUE(y.isOk()) << y.status().message();
      ASSERT_EQ(x->data.size(), y->data.size());
      EXPECT_EQ(std::memcmp(x->data.data(), y->data.data(),
                            x->data.size() * sizeof(float)),
                0)
          << plan::dtypeName(dtype) << ", " << batch.tokenIds.size()
          << " tokens";
    }
  }
}

TEST_F(LlamaGqa, RejectsBadBatchesWithoutTouchingMemory) {
  StatusOr<std::unique_ptr<Backend>> b = create(artifact_.plan, 2);
  ASSERT_TRUE(b.isOk()) << b.status().message();
  Backend &backend = **b;
  ASSERT_TRUE(backend.forward(prefill({1, 2, 3})).isOk());

  Batch bad = prefill({1, 2, 3});
  bad.blockTables[0] = 7;
  EXPECT_FALSE(backend.forward(bad).isOk()) << "block outside the pool";
  bad = prefill({1, 2, 3});
  bad.slotMapping[1] = 32;
  EXPECT_FALSE(backend.forward(bad).isOk()) << "slot outside the pool";
  bad = prefill({1, 2, 3});
  bad.contextLens[0] = 2;
  EXPECT_FALSE(backend.forward(bad).isOk()) << "context shorter than new";
  bad = prefill({1, 2, 3});
  bad.logitsIndices[0] = 3;
  EXPECT_FALSE(backend.forward(bad).isOk()) << "logits index";
  bad = prefill({1, 2, 3});
  bad.queryStartLoc = {0, 2};
  EXPECT_FALSE(backend.forward(bad).isOk()) << "query_start_loc";
  // Two sequences, the first with no new token.
  bad = prefill({1, 2, 3});
  bad.queryStartLoc = {0, 0, 3};
  bad.contextLens = {2, 3};
  bad.blockTables.insert(bad.blockTables.end(), bad.blockTables.begin(),
                         bad.blockTables.end());
  StatusOr<Logits> empty = backend.forward(bad);
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("no new tokens"), std::string::npos)
      << empty.status().message();
  StatusOr<Logits> oov = backend.forward(prefill({1, 512, 3}));
  ASSERT_FALSE(oov.isOk());
  EXPECT_NE(oov.status().message().find("token id 512"), std::string::npos);
}

TEST_F(LlamaGqa, LoaderChecksWeightFiles) {
  Artifact a = artifact_;
  a.manifest.weightFiles[0].headerFingerprint = "0000000000000000";
  StatusOr<ParamTable> p = loadParams(a, 0, kModel);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("different header"), std::string::npos);

  a = artifact_;
  a.manifest.weightFiles[0].size += 1;
  EXPECT_FALSE(loadParams(a, 0, kModel).isOk());

  a = artifact_;
  p = loadParams(a, 0, "/nonexistent");
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("--weights"), std::string::npos);

  a = artifact_;
  for (plan::Value &v : a.plan.ranks[0].values)
    if (v.kind == plan::ValueKind::kParam) {
      v.transforms.push_back({"fp8_quantize", {}});
      break;
    }
  p = loadParams(a, 0, kModel);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(
      p.status().message().find("unknown weight transform 'fp8_quantize'"),
      std::string::npos);
}

TEST_F(LlamaGqa, TiedAndSharedParamsAreLoadedOnce) {
  const std::string tied =
      std::string(INFER_FIXTURES_DIR) + "/rand/llama-mha-tied";
  StatusOr<Artifact> a = buildLlamaArtifact(tied);
  ASSERT_TRUE(a.isOk());
  // Make the logits read the embedding through a second value.
  plan::RankPlan &rank = a->plan.ranks[0];
  plan::Value copy = rank.values[rank.steps.front().operands[0]];
  copy.id = static_cast<int>(rank.values.size());
  rank.values.push_back(copy);
  rank.steps.back().operands[1] = copy.id;
  StatusOr<ParamTable> p = loadParams(*a, 0, tied);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p->at(copy.id).get(), p->at(rank.steps.front().operands[0]).get());
}

TEST(Sampler, GreedyTakesTheLowestIdOnTiesAndMasksEos) {
  std::vector<float> logits = {0.5f, 2.0f, 2.0f, 1.0f};
  SamplingParams greedy;
  Sampler s(greedy, {1});
  EXPECT_EQ(s.sample(logits.data(), 4), 1);
  greedy.ignoreEos = true;
  Sampler masked(greedy, {1});
  EXPECT_EQ(masked.sample(logits.data(), 4), 2);
}

TEST(Sampler, TemperatureFollowsTheSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 123;
  Sampler s(p, {});
  int ones = 0;
  for (int i = 0; i < 4000; ++i)
    ones += s.sample(logits.data(), 2);
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

} // namespace
} // namespace infer::testing
