//===- SpecEngineTest.cpp - Speculative decoding through the Engine -------===//
//
// The Engine with a Speculator (draft model or n-gram) on tiny-pycode:
// greedy outputs equal the golden (non-speculative) ones on every prompt,
// while the engine schedules k + 1 tokens per request and rolls back the
// rejected drafts' slots; seeded speculative sampling gives each request the
// same tokens whatever else is in the batch.
//
//===----------------------------------------------------------------------===//

#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/Speculator.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

namespace infer::spec {
namespace {

using infer::testing::PromptRequest;

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

class SpecEngineTest : public ::testing::Test {
protected:
  void SetUp() override {
    const std::vector<infer::testing::GreedyCase> cases =
        infer::testing::loadTinyPycodeGreedy(INFER_FIXTURES_DIR,
                                             "tiny-pycode-target");
    if (cases.empty() ||
        !std::filesystem::exists(kModels + "tiny-pycode-draft"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    for (const infer::testing::GreedyCase &c : cases) {
      PromptRequest r;
      r.promptTokenIds = c.inputIds;
      r.sampling.maxNewTokens = 48;
      r.sampling.ignoreEos = true;
      requests_.push_back(r);
      golden_.push_back(c.greedy);
    }
    auto target =
        infer::testing::buildLlamaArtifact(kModels + "tiny-pycode-target");
    ASSERT_TRUE(target.isOk()) << target.status().message();
    target_ = std::move(target).value();
    auto draft =
        infer::testing::buildLlamaArtifact(kModels + "tiny-pycode-draft");
    ASSERT_TRUE(draft.isOk()) << draft.status().message();
    draft_ = std::move(draft).value();
    config_ = engineConfigFor(target_);
    config_.numSpeculativeTokens = 4;
  }

  /// Runs the golden requests through an engine with `drafter`.
  SpecStats runAndCompare(std::unique_ptr<spec::Proposer> drafter) {
    const int64_t blocks = infer::testing::blocksForAll(requests_, config_) + 8;
    auto backend = infer::testing::createTestBackend(target_, blocks);
    EXPECT_TRUE(backend.isOk()) << backend.status().message();
    if (!backend.isOk())
      return {};
    Engine engine(**backend, config_);
    auto speculator =
        std::make_unique<Speculator>(std::move(drafter), config_.eosTokenIds);
    Speculator *spec = speculator.get();
    engine.setProposer(std::move(speculator));
    auto outputs = infer::testing::runToCompletion(engine, requests_);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    EXPECT_TRUE(spec->status().isOk()) << spec->status().message();
    if (!outputs.isOk())
      return {};
    for (size_t i = 0; i < golden_.size(); ++i) {
      EXPECT_EQ((*outputs)[i].outputTokenIds, golden_[i]) << "prompt " << i;
      EXPECT_GT(spec->stats((*outputs)[i].id).numSteps, 0);
    }
    return spec->stats();
  }

  std::vector<PromptRequest> requests_;
  std::vector<std::vector<int32_t>> golden_;
  Artifact target_, draft_;
  EngineConfig config_;
};

TEST_F(SpecEngineTest, DraftModelGreedyEqualsGolden) {
  auto backend = infer::testing::createTestBackend(
      draft_, infer::testing::blocksForAll(requests_, config_) + 8);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();
  const SpecStats stats = runAndCompare(std::make_unique<DraftModelProposer>(
      std::move(backend).value(), draft_.plan.kvCache.blockSize));
  std::cout << "[ engine   ] draft k=4: acceptance " << stats.acceptanceRate()
            << " (" << stats.numAccepted << "/" << stats.numJudged
            << " judged, " << stats.numProposed << " proposed)\n";
  EXPECT_GT(stats.acceptanceRate(), 0.5);
  EXPECT_LT(stats.acceptanceRate(), 0.9);
}

TEST_F(SpecEngineTest, NgramGreedyEqualsGolden) {
  const SpecStats stats = runAndCompare(std::make_unique<NgramProposer>(1, 3));
  std::cout << "[ engine   ] ngram k=4: acceptance " << stats.acceptanceRate()
            << " (" << stats.numAccepted << "/" << stats.numJudged
            << " judged)\n";
  EXPECT_GT(stats.numAccepted, 0);
}

TEST_F(SpecEngineTest, SeededSpeculativeSamplingIsTheSameInAnyBatch) {
  for (PromptRequest &r : requests_) {
    r.sampling.maxNewTokens = 24;
    r.sampling.temperature = 0.8;
    r.sampling.topK = 50;
    r.sampling.seed = 77;
  }
  auto run = [&](const std::vector<PromptRequest> &requests) {
    const int64_t blocks = infer::testing::blocksForAll(requests, config_) + 8;
    auto target = infer::testing::createTestBackend(target_, blocks);
    auto draft = infer::testing::createTestBackend(draft_, blocks);
    EXPECT_TRUE(target.isOk() && draft.isOk());
    Engine engine(**target, config_);
    engine.setProposer(std::make_unique<Speculator>(
        std::make_unique<DraftModelProposer>(std::move(draft).value(),
                                             draft_.plan.kvCache.blockSize),
        config_.eosTokenIds));
    auto outputs = infer::testing::runToCompletion(engine, requests);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    std::vector<std::vector<int32_t>> tokens;
    for (const RequestOutput &o : *outputs)
      tokens.push_back(o.outputTokenIds);
    return tokens;
  };
  const std::vector<std::vector<int32_t>> together = run(requests_);
  ASSERT_EQ(together.size(), requests_.size());
  for (size_t i : {size_t{1}, size_t{3}})
    EXPECT_EQ(run({requests_[i]}).front(), together[i]) << "prompt " << i;
  std::vector<PromptRequest> reversed(requests_.rbegin(), requests_.rend());
  const std::vector<std::vector<int32_t>> other = run(reversed);
  for (size_t i = 0; i < requests_.size(); ++i)
    EXPECT_EQ(other[requests_.size() - 1 - i], together[i]) << "prompt " << i;
}

} // namespace
} // namespace infer::spec
