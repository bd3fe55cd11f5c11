//===- HfParityTest.cpp - CPU backend logits vs Hugging Face fp32 ---------===//
//
// Hand-built plans (no compiler) for every fixture model, run by the CPU
// backend and compared with the logits transformers computed.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kRelTol = 1e-4;

using Case = FixtureCase;

std::vector<Case> fixtureCases() {
  return loadFixtureCases(INFER_FIXTURES_DIR, INFER_PROJECT_FIXTURES_DIR);
}

class HfParityTest : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    for (Case &c : fixtureCases())
      if (c.name == GetParam())
        case_ = c;
    if (case_.name.empty())
      GTEST_SKIP() << "fixture " << GetParam() << " not found";
    StatusOr<Artifact> artifact = buildLlamaArtifact(case_.modelDir);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(artifact).value();
    config_ = engineConfigFor(artifact_);
  }

  std::unique_ptr<Backend> backend(int64_t blocks) {
    StatusOr<std::unique_ptr<Backend>> b = createTestBackend(artifact_, blocks);
    EXPECT_TRUE(b.isOk()) << b.status().message();
    return b.isOk() ? std::move(b).value() : nullptr;
  }

  Case case_;
  Artifact artifact_;
  EngineConfig config_;
};

TEST_P(HfParityTest, LogitsMatchTransformers) {
  std::unique_ptr<Backend> b = backend(64);
  ASSERT_TRUE(b);
  for (size_t k = 0; k < case_.inputs.size(); ++k) {
    StatusOr<Logits> logits =
        promptLogits(*b, config_.blockSize, case_.inputs[k]);
    ASSERT_TRUE(logits.isOk()) << logits.status().message();
    auto file = safetensors::File::open(case_.logits[k].first);
    ASSERT_TRUE(file.isOk()) << file.status().message();
    StatusOr<std::vector<float>> ref =
        (*file)->readAsF32(case_.logits[k].second);
    ASSERT_TRUE(ref.isOk()) << ref.status().message();
    ASSERT_EQ(static_cast<int64_t>(ref->size()), logits->rows * logits->vocab);
    const double err = maxRelativeError(logits->data.data(), ref->data(),
                                        logits->rows * logits->vocab);
    std::cout << "[ parity   ] " << case_.name << "[" << k
              << "] T=" << case_.inputs[k].size() << " max rel err " << err
              << "\n";
    EXPECT_LT(err, kRelTol) << case_.name << " input " << k;
  }
}

TEST_P(HfParityTest, BatchedGreedyMatchesTransformers) {
  std::vector<PromptRequest> requests;
  for (const auto &input : case_.inputs) {
    PromptRequest r;
    r.promptTokenIds = input;
    r.sampling.maxNewTokens = static_cast<int64_t>(case_.greedy[0].size());
    r.sampling.ignoreEos = true;
    requests.push_back(r);
  }
  std::unique_ptr<Backend> b = backend(blocksForAll(requests, config_));
  ASSERT_TRUE(b);
  StatusOr<std::vector<RequestOutput>> results =
      generate(*b, config_, requests);
  ASSERT_TRUE(results.isOk()) << results.status().message();
  for (size_t k = 0; k < requests.size(); ++k) {
    // HF stops at max_new_tokens; the goldens of the trained models may be
    // shorter when they ended on EOS.
    std::vector<int32_t> got = (*results)[k].outputTokenIds;
    got.resize(std::min(got.size(), case_.greedy[k].size()));
    EXPECT_EQ(got, case_.greedy[k]) << case_.name << " input " << k;
  }
}

TEST_P(HfParityTest, BatchEqualsEachSequenceAlone) {
  // All inputs in one forward call, every position's logits.
  std::unique_ptr<Backend> batched = backend(64);
  ASSERT_TRUE(batched);
  Batch batch;
  batch.queryStartLoc.push_back(0);
  int32_t nextBlock = 0;
  batch.maxBlocksPerSeq = 16;
  for (const auto &input : case_.inputs) {
    std::vector<int32_t> table(batch.maxBlocksPerSeq, -1);
    const int64_t bs = config_.blockSize;
    for (int64_t j = 0; j * bs < static_cast<int64_t>(input.size()); ++j)
      table[j] = nextBlock++;
    for (size_t p = 0; p < input.size(); ++p) {
      batch.tokenIds.push_back(input[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slotMapping.push_back(table[p / bs] * bs + p % bs);
      batch.logitsIndices.push_back(
          static_cast<int32_t>(batch.tokenIds.size() - 1));
    }
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(static_cast<int32_t>(input.size()));
    batch.blockTables.insert(batch.blockTables.end(), table.begin(),
                             table.end());
  }
  StatusOr<Logits> all = batched->forward(batch);
  ASSERT_TRUE(all.isOk()) << all.status().message();
  int64_t row = 0;
  for (const auto &input : case_.inputs) {
    std::unique_ptr<Backend> alone = backend(64);
    StatusOr<Logits> one = promptLogits(*alone, config_.blockSize, input);
    ASSERT_TRUE(one.isOk()) << one.status().message();
    const int64_t n = one->rows * one->vocab;
    EXPECT_LT(maxRelativeError(all->row(row), one->data.data(), n), 1e-6);
    row += one->rows;
  }
}

TEST_P(HfParityTest, ChunkedPrefillAndDecodeEqualOneShot) {
  const std::vector<int32_t> &input = case_.inputs.back();
  const int64_t t = static_cast<int64_t>(input.size());
  if (t < 3)
    GTEST_SKIP() << "input too short";
  std::unique_ptr<Backend> oneShot = backend(64);
  StatusOr<Logits> ref = promptLogits(*oneShot, config_.blockSize, input);
  ASSERT_TRUE(ref.isOk()) << ref.status().message();

  // Chunks of 5, 1, 1, then the rest, each with its cached context; blocks
  // deliberately out of order.
  std::unique_ptr<Backend> chunked = backend(64);
  const int64_t bs = config_.blockSize;
  std::vector<int32_t> table;
  for (int64_t j = 0; j * bs < t; ++j)
    table.push_back(static_cast<int32_t>(40 - 3 * j));
  std::vector<int64_t> cuts{0, std::min<int64_t>(5, t - 2)};
  cuts.push_back(cuts.back() + 1);
  cuts.push_back(cuts.back() + 1);
  if (cuts.back() < t)
    cuts.push_back(t);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    Batch batch;
    batch.maxBlocksPerSeq = static_cast<int64_t>(table.size());
    batch.blockTables = table;
    batch.queryStartLoc = {0, static_cast<int32_t>(cuts[c + 1] - cuts[c])};
    batch.contextLens = {static_cast<int32_t>(cuts[c + 1])};
    for (int64_t p = cuts[c]; p < cuts[c + 1]; ++p) {
      batch.tokenIds.push_back(input[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slotMapping.push_back(table[p / bs] * bs + p % bs);
      batch.logitsIndices.push_back(static_cast<int32_t>(p - cuts[c]));
    }
    StatusOr<Logits> part = chunked->forward(batch);
    ASSERT_TRUE(part.isOk()) << part.status().message();
    EXPECT_LT(maxRelativeError(part->data.data(), ref->row(cuts[c]),
                               part->rows * part->vocab),
              1e-6)
        << "chunk " << c;
  }
}

std::vector<std::string> fixtureNames() {
  std::vector<std::string> names;
  for (const Case &c : fixtureCases())
    names.push_back(c.name);
  if (names.empty())
    names.push_back("missing");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParityTest,
                         ::testing::ValuesIn(fixtureNames()),
                         [](const auto &info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

} // namespace
} // namespace infer::testing
