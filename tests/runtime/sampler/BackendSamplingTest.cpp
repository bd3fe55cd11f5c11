//===- BackendSamplingTest.cpp - The backend sampling reference -----------===//
//
// runtime/backend/Sampling.h against the engine's Sampler: a row sampled
// with the parameters (and the draw) Sampler::nextRowSampling gives chooses
// the token Sampler::sample chooses, step after step, so moving sampling
// into a backend changes no token. Backend::forwardSample's default runs
// forward() and samples every row that way.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/Backend.h"
#include "runtime/engine/Sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace infer {
namespace {

std::vector<float> randomLogits(std::mt19937 &rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

SamplingParams params(double temperature, int64_t topK, double topP,
                      double minP, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.topK = topK;
  p.topP = topP;
  p.minP = minP;
  p.seed = seed;
  return p;
}

TEST(BackendSampling, RowSamplingChoosesTheSamplersTokens) {
  std::mt19937 rng(3);
  const int64_t vocab = 50;
  const std::vector<SamplingParams> cases = {
      params(0.0, 0, 1.0, 0.0, 0),   params(1.0, 0, 1.0, 0.0, 1),
      params(0.7, 5, 1.0, 0.0, 2),   params(1.3, 0, 0.8, 0.0, 3),
      params(1.0, 10, 0.9, 0.05, 4), params(2.0, 1, 1.0, 0.0, 5),
      params(0.5, 0, 1.0, 0.3, 6),   params(1.0, 100, 0.01, 0.0, 7),
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    for (bool ignoreEos : {false, true}) {
      SamplingParams p = cases[c];
      p.ignoreEos = ignoreEos;
      const std::vector<int32_t> eos = {3, 17};
      Sampler host(p, eos), backend(p, eos);
      ASSERT_TRUE(backend.backendSamplable());
      for (int step = 0; step < 40; ++step) {
        std::vector<float> logits = randomLogits(rng, vocab);
        // Ties with the maximum, on a masked id and on a later id.
        const float top = *std::max_element(logits.begin(), logits.end());
        logits[17] = top;
        logits[40] = top;
        logits[9] = -std::numeric_limits<float>::infinity();
        const RowSampling row = backend.nextRowSampling();
        const int32_t chosen = sampleRow(logits.data(), vocab, row);
        backend.record(chosen);
        ASSERT_EQ(chosen, host.sample(logits.data(), vocab))
            << "case " << c << " ignore_eos " << ignoreEos << " step " << step;
        if (ignoreEos) {
          EXPECT_NE(chosen, 3);
          EXPECT_NE(chosen, 17);
        }
      }
    }
  }
}

TEST(BackendSampling, GreedyTakesTheLowestIdOfTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  RowSampling row;
  EXPECT_EQ(sampleRow(logits.data(), 5, row), 1);
  row.maskedIds[0] = 1;
  row.numMaskedIds = 1;
  EXPECT_EQ(sampleRow(logits.data(), 5, row), 3);
}

TEST(BackendSampling, PenaltiesAndTooManyMaskedIdsStayOnTheHost) {
  SamplingParams p;
  EXPECT_TRUE(Sampler(p, {1, 2}).backendSamplable());
  p.repetitionPenalty = 1.1;
  EXPECT_FALSE(Sampler(p, {}).backendSamplable());
  p = SamplingParams();
  p.presencePenalty = 0.5;
  EXPECT_FALSE(Sampler(p, {}).backendSamplable());
  p = SamplingParams();
  p.ignoreEos = true;
  std::vector<int32_t> manyEos(RowSampling::kMaxMaskedIds + 1);
  EXPECT_FALSE(Sampler(p, manyEos).backendSamplable());
  p.ignoreEos = false;
  EXPECT_TRUE(Sampler(p, manyEos).backendSamplable());
}

TEST(BackendSampling, ValidateNamesTheBadRow) {
  SamplingBatch batch;
  batch.rows.resize(2);
  EXPECT_TRUE(batch.validate(2).isOk());
  Status wrongCount = batch.validate(3);
  EXPECT_FALSE(wrongCount.isOk());
  EXPECT_NE(wrongCount.message().find("3 logits rows"), std::string::npos);
  batch.rows[1].topP = 0.0;
  Status badTopP = batch.validate(2);
  EXPECT_FALSE(badTopP.isOk());
  EXPECT_NE(badTopP.message().find("row 1"), std::string::npos);
  batch.rows[1].topP = 1.0;
  batch.rows[0].uniform = 1.0;
  EXPECT_FALSE(batch.validate(2).isOk());
}

/// Returns fixed logits; samples with the base class's default.
class FixedLogitsBackend : public Backend {
public:
  explicit FixedLogitsBackend(Logits logits) : logits_(std::move(logits)) {}
  std::string_view name() const override { return "fixed"; }
  int64_t numBlocks() const override { return 1; }
  StatusOr<Logits> forward(const Batch &) override { return logits_; }

private:
  Logits logits_;
};

TEST(BackendSampling, DefaultForwardSampleSamplesEveryRowOnTheHost) {
  std::mt19937 rng(5);
  Logits logits;
  logits.rows = 3;
  logits.vocab = 30;
  logits.data = randomLogits(rng, logits.rows * logits.vocab);
  FixedLogitsBackend backend(logits);
  Batch batch;
  batch.logitsIndices = {0, 1, 2};
  SamplingBatch sampling;
  sampling.rows.resize(3);
  sampling.rows[1].temperature = 1.0;
  sampling.rows[1].topK = 4;
  sampling.rows[1].uniform = 0.6;
  sampling.rows[2].temperature = 0.8;
  sampling.rows[2].topP = 0.5;
  sampling.rows[2].uniform = 0.25;
  StatusOr<std::vector<int32_t>> tokens =
      backend.forwardSample(batch, sampling);
  ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
  ASSERT_EQ(tokens->size(), 3u);
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ((*tokens)[r],
              sampleRow(logits.row(r), logits.vocab, sampling.rows[r]));

  sampling.rows.pop_back();
  EXPECT_FALSE(backend.forwardSample(batch, sampling).isOk());
}

} // namespace
} // namespace infer
