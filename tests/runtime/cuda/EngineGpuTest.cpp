//===- EngineGpuTest.cpp - The engine on the CUDA backend -----------------===//
//
// The serving paths on the GPU, on the trained tiny-pycode pair: continuous
// batching (all prompts in one engine, chunked prefill mixed with decodes,
// rows sampled on the device) and speculative decoding (draft model and
// n-gram, rejected drafts rolled back) must give HF's greedy tokens, the
// same as each prompt run alone. tiny-pycode's greedy tokens are far from
// ties (the fixtures test matches all 48 of every prompt on the GPU), so
// exact equality is the right check here.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/Speculator.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace infer::testing {
namespace {

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

class EngineGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "no CUDA device: " << why;
    std::ifstream in(std::string(INFER_FIXTURES_DIR) +
                     "/golden/tiny-pycode.json");
    if (!in || !std::filesystem::exists(kModels + "tiny-pycode-draft"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    nlohmann::json all = nlohmann::json::parse(in);
    for (const auto &c : all["tiny-pycode-target"]) {
      PromptRequest r;
      r.promptTokenIds = c["input_ids"].get<std::vector<int32_t>>();
      r.sampling.maxNewTokens = 48;
      r.sampling.ignoreEos = true;
      requests_.push_back(r);
      golden_.push_back(c["greedy_fp32"].get<std::vector<int32_t>>());
    }
    auto target = buildLlamaArtifact(kModels + "tiny-pycode-target");
    ASSERT_TRUE(target.isOk()) << target.status().message();
    target_ = std::move(target).value();
    auto draft = buildLlamaArtifact(kModels + "tiny-pycode-draft");
    ASSERT_TRUE(draft.isOk()) << draft.status().message();
    draft_ = std::move(draft).value();
    config_ = engineConfigFor(target_);
  }

  std::unique_ptr<Backend> gpuBackend(const Artifact &artifact,
                                      int64_t blocks) {
    auto params =
        loadParams(artifact, 0, weightsDirOf(artifact, /*override=*/""));
    EXPECT_TRUE(params.isOk()) << params.status().message();
    if (!params.isOk())
      return nullptr;
    cuda::CudaBackendOptions options;
    options.numBlocks = blocks;
    auto backend = cuda::createCudaBackend(artifact.plan, 0, *params, options);
    EXPECT_TRUE(backend.isOk()) << backend.status().message();
    return backend.isOk() ? std::move(backend).value() : nullptr;
  }

  /// Runs `requests` through one engine on the GPU, with `drafter` as
  /// the speculator's proposer when given; the output tokens per request.
  std::vector<std::vector<int32_t>>
  run(const std::vector<PromptRequest> &requests,
      std::unique_ptr<spec::Proposer> drafter = nullptr) {
    const int64_t blocks = blocksForAll(requests, config_) + 8;
    std::unique_ptr<Backend> backend = gpuBackend(target_, blocks);
    if (!backend)
      return {};
    EngineConfig config = config_;
    if (drafter)
      config.numSpeculativeTokens = 4;
    Engine engine(*backend, config);
    if (drafter)
      engine.setProposer(std::make_unique<spec::Speculator>(
          std::move(drafter), config.eosTokenIds));
    auto outputs = runToCompletion(engine, requests);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    std::vector<std::vector<int32_t>> tokens;
    if (outputs.isOk())
      for (const RequestOutput &o : *outputs)
        tokens.push_back(o.outputTokenIds);
    return tokens;
  }

  std::vector<PromptRequest> requests_;
  std::vector<std::vector<int32_t>> golden_;
  Artifact target_, draft_;
  EngineConfig config_;
};

TEST_F(EngineGpuTest, ContinuousBatchingGivesEachPromptsTokens) {
  // A small token budget so that prefills are chunked and mixed with the
  // decodes of requests already running.
  config_.scheduler.maxNumBatchedTokens = 16;
  const auto together = run(requests_);
  ASSERT_EQ(together.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i) {
    EXPECT_EQ(together[i], golden_[i]) << "prompt " << i << " in the batch";
    const auto alone = run({requests_[i]});
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0], together[i]) << "prompt " << i << " alone";
  }
}

TEST_F(EngineGpuTest, DraftModelSpeculationGivesTheGreedyTokens) {
  std::unique_ptr<Backend> draft =
      gpuBackend(draft_, blocksForAll(requests_, config_) + 8);
  ASSERT_NE(draft, nullptr);
  const auto tokens =
      run(requests_, std::make_unique<spec::DraftModelProposer>(
                         std::move(draft), draft_.plan.kvCache.blockSize));
  ASSERT_EQ(tokens.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i)
    EXPECT_EQ(tokens[i], golden_[i]) << "prompt " << i;
}

TEST_F(EngineGpuTest, NgramSpeculationGivesTheGreedyTokens) {
  const auto tokens =
      run(requests_, std::make_unique<spec::NgramProposer>(1, 3));
  ASSERT_EQ(tokens.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i)
    EXPECT_EQ(tokens[i], golden_[i]) << "prompt " << i;
}

} // namespace
} // namespace infer::testing
