//===- BackendTest.cpp - CPU backend, loader and generator error paths ----===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/engine/BlockAllocator.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

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
    config_ = generationConfigOf(artifact_);
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
  GenerationConfig config_;
};

TEST_F(LlamaGqa, RejectsPlansItCannotRun) {
  plan::Plan plan = artifact_.plan;
  plan.ranks[0].values[0].name = "tokens";
  expectCreateFails(plan, "unknown input 'tokens'");

  plan = artifact_.plan;
  findStep(plan, "rope").attrs["scaling"] = std::string("yarn");
  expectCreateFails(plan, "unknown scaling 'yarn'");

  plan = artifact_.plan;
  findStep(plan, "paged_attention").attrs["num_kv_heads"] = int64_t(4);
  expectCreateFails(plan, "differ from the cache");

  plan = artifact_.plan;
  findStep(plan, "rms_norm").attrs.erase("epsilon");
  expectCreateFails(plan, "'epsilon' is missing");

  plan = artifact_.plan;
  findStep(plan, "paged_attention").attrs["sliding_window"] = 4.5;
  expectCreateFails(plan, "'sliding_window' is not an integer");

  plan = artifact_.plan;
  plan.kvCache.dtype = plan::DType::kF16;
  expectCreateFails(plan, "only f32");

  plan = artifact_.plan;
  for (plan::Value &v : plan.ranks[0].values)
    if (v.kind == plan::ValueKind::kParam) {
      v.shape[0].size += 1;
      break;
    }
  expectCreateFails(plan, "different shape");
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

TEST_F(LlamaGqa, GenerationErrorsAreStatuses) {
  StatusOr<std::unique_ptr<Backend>> b = create(artifact_.plan, 1);
  ASSERT_TRUE(b.isOk());
  GenerationRequest r;
  r.promptTokenIds.assign(17, 5);
  StatusOr<std::vector<GenerationResult>> out = generate(**b, config_, {r});
  ASSERT_FALSE(out.isOk());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);

  GenerationConfig shortConfig = config_;
  shortConfig.maxPositionEmbeddings = 8;
  r.promptTokenIds.assign(9, 5);
  out = generate(**b, shortConfig, {r});
  ASSERT_FALSE(out.isOk());
  EXPECT_NE(out.status().message().find("max_position_embeddings"),
            std::string::npos);

  r.promptTokenIds.clear();
  EXPECT_FALSE(generate(**b, config_, {r}).isOk());
}

TEST_F(LlamaGqa, StopsAtEosUnlessIgnored) {
  GenerationRequest r;
  r.promptTokenIds = {175};
  r.sampling.maxNewTokens = 24;
  // The fixture's first greedy token is 391: call it EOS.
  GenerationConfig eosConfig = config_;
  eosConfig.eosTokenIds = {391};
  StatusOr<std::unique_ptr<Backend>> b = create(artifact_.plan, 8);
  ASSERT_TRUE(b.isOk());
  auto out = generate(**b, eosConfig, {r});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ((*out)[0].outputTokenIds, std::vector<int32_t>{391});
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kStop);

  r.sampling.ignoreEos = true;
  out = generate(**b, eosConfig, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ((*out)[0].outputTokenIds.size(), 24u);
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kLength);
  for (int32_t t : (*out)[0].outputTokenIds)
    EXPECT_NE(t, 391);

  GenerationConfig shortConfig = config_;
  shortConfig.maxPositionEmbeddings = 4;
  r.sampling.ignoreEos = false;
  out = generate(**b, shortConfig, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ((*out)[0].outputTokenIds.size(), 3u)
      << "stops at the last position";

  r.sampling.maxNewTokens = 0;
  out = generate(**b, config_, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_TRUE((*out)[0].outputTokenIds.empty());
}

TEST_F(LlamaGqa, SeededSamplingIsReproducibleAndBatchIndependent) {
  GenerationRequest a, c;
  a.promptTokenIds = {196, 25, 502, 67};
  a.sampling.maxNewTokens = 20;
  a.sampling.temperature = 1.5;
  a.sampling.seed = 7;
  c = a;
  c.promptTokenIds = {1, 2, 3};
  c.sampling.seed = 8;
  StatusOr<std::unique_ptr<Backend>> b = create(artifact_.plan, 16);
  ASSERT_TRUE(b.isOk());
  auto alone = generate(**b, config_, {a});
  auto batched = generate(**b, config_, {c, a});
  auto again = generate(**b, config_, {a});
  ASSERT_TRUE(alone.isOk() && batched.isOk() && again.isOk());
  EXPECT_EQ((*alone)[0].outputTokenIds, (*batched)[1].outputTokenIds);
  EXPECT_EQ((*alone)[0].outputTokenIds, (*again)[0].outputTokenIds);
  a.sampling.seed = 9;
  auto other = generate(**b, config_, {a});
  ASSERT_TRUE(other.isOk());
  EXPECT_NE((*alone)[0].outputTokenIds, (*other)[0].outputTokenIds);
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

TEST(BlockAllocator, ReusesFreedBlocks) {
  BlockAllocator a(3);
  EXPECT_EQ(*a.allocate(), 0);
  EXPECT_EQ(*a.allocate(), 1);
  a.release({0});
  EXPECT_EQ(*a.allocate(), 0);
  EXPECT_EQ(*a.allocate(), 2);
  EXPECT_FALSE(a.allocate().has_value());
  EXPECT_EQ(a.numFree(), 0);
}

} // namespace
} // namespace infer::testing
