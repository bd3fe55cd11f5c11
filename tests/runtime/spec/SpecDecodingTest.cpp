//===- SpecDecodingTest.cpp - Speculative decoding on tiny-pycode ---------===//
//
// tiny-pycode-draft proposes for tiny-pycode-target (the pair agrees on ~74%
// of greedy tokens): greedy speculative output equals non-speculative output
// (and Hugging Face's) on every golden prompt, for the draft model and the
// n-gram proposer; seeded sampling gives the same tokens whatever the batch.
//
//===----------------------------------------------------------------------===//

#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/SpeculativeGenerator.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace infer::spec {
namespace {

using infer::testing::buildLlamaArtifact;
using infer::testing::createTestBackend;

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

struct Golden {
  std::vector<int32_t> inputIds;
  std::vector<int32_t> greedy;
};

std::vector<Golden> goldenCases() {
  std::ifstream in(std::string(INFER_FIXTURES_DIR) +
                   "/golden/tiny-pycode.json");
  std::vector<Golden> cases;
  if (!in)
    return cases;
  nlohmann::json all = nlohmann::json::parse(in);
  for (const auto &c : all["tiny-pycode-target"])
    cases.push_back({c["input_ids"].get<std::vector<int32_t>>(),
                     c["greedy_fp32"].get<std::vector<int32_t>>()});
  return cases;
}

ModelConfig modelConfigOf(const Artifact &artifact) {
  ModelConfig config;
  config.blockSize = artifact.plan.kvCache.blockSize;
  config.maxPositionEmbeddings = artifact.manifest.model.maxPositionEmbeddings;
  for (int64_t id : artifact.manifest.model.eosTokenIds)
    config.eosTokenIds.push_back(static_cast<int32_t>(id));
  return config;
}

class SpecDecodingTest : public ::testing::Test {
protected:
  void SetUp() override {
    golden_ = goldenCases();
    if (golden_.empty() ||
        !std::filesystem::exists(kModels + "tiny-pycode-draft"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    auto target = buildLlamaArtifact(kModels + "tiny-pycode-target");
    ASSERT_TRUE(target.isOk()) << target.status().message();
    target_ = std::move(target).value();
    auto draft = buildLlamaArtifact(kModels + "tiny-pycode-draft");
    ASSERT_TRUE(draft.isOk()) << draft.status().message();
    draft_ = std::move(draft).value();
    config_ = modelConfigOf(target_);
  }

  std::vector<SpecRequest> goldenRequests(const SamplingParams &sampling) {
    std::vector<SpecRequest> requests;
    for (const Golden &g : golden_)
      requests.push_back({g.inputIds, sampling});
    return requests;
  }

  /// Runs `requests` on a fresh target backend.
  std::vector<SpeculativeOutput> run(const std::vector<SpecRequest> &requests,
                                     Proposer *proposer,
                                     const SpeculativeOptions &options) {
    auto backend = createTestBackend(
        target_, blocksNeeded(requests, config_, options.numSpeculativeTokens));
    EXPECT_TRUE(backend.isOk()) << backend.status().message();
    if (!backend.isOk())
      return {};
    auto outputs =
        generateSpeculative(**backend, config_, requests, proposer, options);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    return outputs.isOk() ? std::move(outputs).value()
                          : std::vector<SpeculativeOutput>();
  }

  std::unique_ptr<DraftModelProposer>
  draftProposer(const std::vector<SpecRequest> &requests, int64_t k) {
    auto backend =
        createTestBackend(draft_, blocksNeeded(requests, config_, k));
    EXPECT_TRUE(backend.isOk()) << backend.status().message();
    return std::make_unique<DraftModelProposer>(std::move(backend).value(),
                                                draft_.plan.kvCache.blockSize);
  }

  static SamplingParams greedy48() {
    SamplingParams s;
    s.maxNewTokens = 48;
    s.ignoreEos = true;
    return s;
  }

  std::vector<Golden> golden_;
  Artifact target_, draft_;
  ModelConfig config_;
};

TEST_F(SpecDecodingTest, DraftModelGreedyEqualsNonSpeculative) {
  const std::vector<SpecRequest> requests = goldenRequests(greedy48());
  const std::vector<SpeculativeOutput> reference =
      run(requests, nullptr, SpeculativeOptions());
  ASSERT_EQ(reference.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i)
    EXPECT_EQ(reference[i].outputTokenIds, golden_[i].greedy)
        << "golden prompt " << i;

  for (int64_t k : {1, 3, 5}) {
    SpeculativeOptions options;
    options.numSpeculativeTokens = k;
    auto proposer = draftProposer(requests, k);
    const std::vector<SpeculativeOutput> spec =
        run(requests, proposer.get(), options);
    ASSERT_EQ(spec.size(), reference.size());
    for (size_t i = 0; i < spec.size(); ++i)
      EXPECT_EQ(spec[i].outputTokenIds, reference[i].outputTokenIds)
          << "k " << k << ", golden prompt " << i;
    const SpecStats stats = totalStats(spec);
    std::cout << "[ spec     ] draft k=" << k << ": acceptance "
              << stats.acceptanceRate() << " (" << stats.numAccepted << "/"
              << stats.numJudged << " judged, " << stats.numProposed
              << " proposed), " << stats.numSteps << " target steps for "
              << stats.numEmitted << " tokens\n";
    EXPECT_GT(stats.acceptanceRate(), 0.5);
    EXPECT_LT(stats.acceptanceRate(), 0.9);
    EXPECT_LT(stats.numSteps, stats.numEmitted);
    for (const SpeculativeOutput &o : spec)
      EXPECT_GT(o.stats.numJudged, 0);
  }
}

TEST_F(SpecDecodingTest, AdaptiveDraftGreedyEqualsNonSpeculative) {
  const std::vector<SpecRequest> requests = goldenRequests(greedy48());
  SpeculativeOptions options;
  options.numSpeculativeTokens = 6;
  options.adaptive = AdaptiveOptions();
  options.adaptive->maxK = 6;
  auto proposer = draftProposer(requests, 6);
  const std::vector<SpeculativeOutput> spec =
      run(requests, proposer.get(), options);
  ASSERT_EQ(spec.size(), golden_.size());
  for (size_t i = 0; i < spec.size(); ++i)
    EXPECT_EQ(spec[i].outputTokenIds, golden_[i].greedy) << "prompt " << i;
  const SpecStats stats = totalStats(spec);
  std::cout << "[ spec     ] adaptive draft: acceptance "
            << stats.acceptanceRate() << ", "
            << static_cast<double>(stats.numProposed) / stats.numSteps
            << " drafts per sequence step\n";
  EXPECT_GT(stats.acceptanceRate(), 0.5);
  EXPECT_LT(stats.acceptanceRate(), 0.9);
}

TEST_F(SpecDecodingTest, NgramGreedyEqualsNonSpeculative) {
  const std::vector<SpecRequest> requests = goldenRequests(greedy48());
  SpeculativeOptions options;
  options.numSpeculativeTokens = 4;
  NgramProposer proposer(1, 3);
  const std::vector<SpeculativeOutput> spec = run(requests, &proposer, options);
  ASSERT_EQ(spec.size(), golden_.size());
  for (size_t i = 0; i < spec.size(); ++i)
    EXPECT_EQ(spec[i].outputTokenIds, golden_[i].greedy) << "prompt " << i;
  const SpecStats stats = totalStats(spec);
  std::cout << "[ spec     ] ngram k=4: acceptance " << stats.acceptanceRate()
            << " (" << stats.numAccepted << "/" << stats.numJudged
            << " judged, " << stats.numProposed << " proposed)\n";
  EXPECT_GT(stats.numProposed, 0);
  EXPECT_GT(stats.numAccepted, 0);
}

TEST_F(SpecDecodingTest, SeededSamplingIsTheSameInAnyBatch) {
  SamplingParams sampling;
  sampling.maxNewTokens = 24;
  sampling.temperature = 0.8;
  sampling.topP = 0.95;
  sampling.seed = 1234;
  const std::vector<SpecRequest> all = goldenRequests(sampling);
  for (bool speculate : {false, true}) {
    SpeculativeOptions options;
    options.numSpeculativeTokens = speculate ? 3 : 0;
    auto proposer = draftProposer(all, 3);
    Proposer *p = speculate ? proposer.get() : nullptr;
    const std::vector<SpeculativeOutput> together = run(all, p, options);
    ASSERT_EQ(together.size(), all.size());
    // Alone, and in a batch of a different composition (reversed, with an
    // extra request in front).
    for (size_t i : {size_t{0}, size_t{4}}) {
      auto aloneProposer = draftProposer({all[i]}, 3);
      const std::vector<SpeculativeOutput> alone =
          run({all[i]}, speculate ? aloneProposer.get() : nullptr, options);
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_EQ(alone[0].outputTokenIds, together[i].outputTokenIds)
          << "speculate " << speculate << ", prompt " << i;
    }
    std::vector<SpecRequest> shuffled(all.rbegin(), all.rend());
    shuffled.insert(shuffled.begin(), all[2]);
    shuffled.front().sampling.seed = 99;
    auto shuffledProposer = draftProposer(shuffled, 3);
    const std::vector<SpeculativeOutput> other =
        run(shuffled, speculate ? shuffledProposer.get() : nullptr, options);
    ASSERT_EQ(other.size(), all.size() + 1);
    for (size_t i = 0; i < all.size(); ++i)
      EXPECT_EQ(other[all.size() - i].outputTokenIds,
                together[i].outputTokenIds)
          << "speculate " << speculate << ", prompt " << i;
  }
}

TEST_F(SpecDecodingTest, StopsAndLogprobsUnderSpeculation) {
  // A stop token id and max tokens cut inside a step's accepted tokens; the
  // reference is the non-speculative run.
  SamplingParams sampling = greedy48();
  sampling.maxNewTokens = 20;
  sampling.stopTokenIds = {golden_[0].greedy[7]};
  sampling.logprobs = 2;
  const std::vector<SpecRequest> requests = goldenRequests(sampling);
  const std::vector<SpeculativeOutput> reference =
      run(requests, nullptr, SpeculativeOptions());
  SpeculativeOptions options;
  options.numSpeculativeTokens = 4;
  auto proposer = draftProposer(requests, 4);
  const std::vector<SpeculativeOutput> spec =
      run(requests, proposer.get(), options);
  ASSERT_EQ(spec.size(), reference.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(spec[i].outputTokenIds, reference[i].outputTokenIds);
    EXPECT_EQ(spec[i].finishReason, reference[i].finishReason);
    EXPECT_LE(spec[i].outputTokenIds.size(), 20u);
    ASSERT_EQ(spec[i].logprobs.size(), spec[i].outputTokenIds.size());
    for (size_t j = 0; j < spec[i].logprobs.size(); ++j) {
      EXPECT_NEAR(spec[i].logprobs[j].logprob, reference[i].logprobs[j].logprob,
                  1e-4);
      EXPECT_EQ(spec[i].logprobs[j].top.size(), 2u);
    }
  }
  EXPECT_EQ(spec[0].finishReason, StopReason::kStopToken);
  EXPECT_EQ(spec[0].outputTokenIds.size(),
            static_cast<size_t>(std::find(golden_[0].greedy.begin(),
                                          golden_[0].greedy.end(),
                                          sampling.stopTokenIds[0]) -
                                golden_[0].greedy.begin() + 1));
}

} // namespace
} // namespace infer::spec
