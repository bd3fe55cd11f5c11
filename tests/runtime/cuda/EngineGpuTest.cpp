//===- EngineGpuTest.cpp - The engine on the CUDA backend -----------------===//
//
// The serving paths on the GPU, on the trained tiny-pycode pair: continuous
// batching (all prompts in one engine, chunked prefill mixed with decodes,
// rows sampled on the device) gives each prompt the tokens it gets alone
// (up to a near-tie, by the rule below), and it and speculative decoding
// (draft model and n-gram, rejected drafts rolled back) follow HF's greedy
// tokens by DESIGN.md's rule: equal until the first position where the two
// candidates are a near-tie, here judged on the GPU's own logits (the prompt
// and the reference's tokens so far in one call): the reference's token and
// the GPU's must be within kTieTol of max |logit|. A
// verification step (k + 1 rows, cuBLASLt) and a decode step (1 row, the
// skinny GEMM kernel) round differently, so on the GPU a near-tie may fall
// either way; anything else (a wrong slot, mask or rollback) is an O(1)
// difference.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/Speculator.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

namespace infer::testing {
namespace {

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

/// The bf16 logits bound of FixturesTest.cpp (why 5e-2: see there).
constexpr double kTieTol = 5e-2;

class EngineGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "no CUDA device: " << why;
    const std::vector<GreedyCase> cases =
        loadTinyPycodeGreedy(INFER_FIXTURES_DIR, "tiny-pycode-target");
    if (cases.empty() ||
        !std::filesystem::exists(kModels + "tiny-pycode-draft"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    for (const GreedyCase &c : cases) {
      PromptRequest r;
      r.promptTokenIds = c.inputIds;
      r.sampling.maxNewTokens = 48;
      r.sampling.ignoreEos = true;
      requests_.push_back(r);
      golden_.push_back(c.greedy);
    }
    auto target = buildLlamaArtifact(kModels + "tiny-pycode-target", 16,
                                     plan::DType::kBF16);
    ASSERT_TRUE(target.isOk()) << target.status().message();
    target_ = std::move(target).value();
    auto draft = buildLlamaArtifact(kModels + "tiny-pycode-draft", 16,
                                    plan::DType::kBF16);
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

  /// Checks `tokens` (from prompt i) against HF's greedy tokens by the
  /// rule above; `what` names the run in failures.
  void expectFollowsGolden(size_t i, const std::vector<int32_t> &tokens,
                           const std::string &what) {
    expectFollows(i, tokens, golden_[i], "HF's", what);
  }

  /// The rule above with `golden` (named `whose`) as the reference.
  void expectFollows(size_t i, const std::vector<int32_t> &tokens,
                     const std::vector<int32_t> &golden,
                     const std::string &whose, const std::string &what) {
    ASSERT_EQ(tokens.size(), golden.size()) << what << ", prompt " << i;
    size_t d = 0;
    while (d < golden.size() && tokens[d] == golden[d])
      ++d;
    if (d == golden.size())
      return;
    // The GPU's logits for the next token after the prompt and golden[0:d)
    // (equal to tokens[0:d)), one sequence in one call.
    std::vector<int32_t> context = requests_[i].promptTokenIds;
    context.insert(context.end(), golden.begin(), golden.begin() + d);
    const int64_t blockSize = target_.plan.kvCache.blockSize;
    const int64_t blocks =
        (static_cast<int64_t>(context.size()) + blockSize - 1) / blockSize;
    std::unique_ptr<Backend> backend = gpuBackend(target_, blocks);
    ASSERT_NE(backend, nullptr);
    const Batch batch =
        oneSequenceBatch(context, 0, blockSize, blocks, /*allLogits=*/false);
    StatusOr<Logits> logits = backend->forward(batch);
    ASSERT_TRUE(logits.isOk()) << logits.status().message();
    const float *row = logits->row(0);
    float scale = 0.0f;
    for (int64_t v = 0; v < logits->vocab; ++v)
      scale = std::max(scale, std::abs(row[v]));
    const double gap =
        std::abs(double(row[golden[d]]) - double(row[tokens[d]])) / scale;
    std::cout << "[ engine   ] " << what << ", prompt " << i << ": equal to "
              << whose << " tokens for " << d << " of " << golden.size()
              << ", then " << tokens[d] << " for " << whose << " " << golden[d]
              << " (GPU logit gap " << gap << " of max |logit|)\n";
    EXPECT_LT(gap, kTieTol) << what << ", prompt " << i << ": token " << d
                            << " is " << tokens[d] << ", " << whose << " is "
                            << golden[d] << ", and they are not a near-tie";
  }

  std::vector<PromptRequest> requests_;
  std::vector<std::vector<int32_t>> golden_;
  Artifact target_, draft_;
  EngineConfig config_;
};

TEST_F(EngineGpuTest, ContinuousBatchingGivesEachPromptItsTokens) {
  // A small token budget so that prefills are chunked and mixed with the
  // decodes of requests already running.
  config_.scheduler.maxNumBatchedTokens = 16;
  const auto together = run(requests_);
  ASSERT_EQ(together.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i) {
    expectFollowsGolden(i, together[i], "batched");
    const auto alone = run({requests_[i]});
    ASSERT_EQ(alone.size(), 1u);
    // Alone, a decode step is one row (the skinny GEMM kernel); batched, the
    // rows go through cuBLASLt: a near-tie may fall either way.
    expectFollows(i, alone[0], together[i], "batched run's", "alone");
  }
}

TEST_F(EngineGpuTest, DraftModelSpeculationFollowsTheGreedyTokens) {
  std::unique_ptr<Backend> draft =
      gpuBackend(draft_, blocksForAll(requests_, config_) + 8);
  ASSERT_NE(draft, nullptr);
  const auto tokens =
      run(requests_, std::make_unique<spec::DraftModelProposer>(
                         std::move(draft), draft_.plan.kvCache.blockSize));
  ASSERT_EQ(tokens.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i)
    expectFollowsGolden(i, tokens[i], "draft k=4");
}

TEST_F(EngineGpuTest, NgramSpeculationFollowsTheGreedyTokens) {
  const auto tokens =
      run(requests_, std::make_unique<spec::NgramProposer>(1, 3));
  ASSERT_EQ(tokens.size(), golden_.size());
  for (size_t i = 0; i < golden_.size(); ++i)
    expectFollowsGolden(i, tokens[i], "ngram k=4");
}

} // namespace
} // namespace infer::testing
