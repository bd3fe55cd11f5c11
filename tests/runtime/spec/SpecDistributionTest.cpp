//===- SpecDistributionTest.cpp - Sampled speculation follows the target --===//
//
// A synthetic target/draft pair over a vocabulary of 6: each "model" is a
// Markov chain whose logits depend only on the last token (hand-made tables,
// so the target's exact distribution of every continuation is known). Many
// seeded requests decode 3 tokens with draft-model speculation (k = 3) under
// temperature and top-k; a chi-square test compares the observed joint
// distribution of the 3 output tokens with the target's exact one, for the
// verification loop of runtime/spec and for the Engine with a Speculator.
//
// Significance: the test fails when p < 1e-3 (a correct implementation fails
// one run in a thousand; the seeds are fixed, so CI is deterministic). A
// verifier that skips rejection sampling (accepting every draft) is off by
// far more: the draft's distribution gives chi-square in the thousands.
//
//===----------------------------------------------------------------------===//

#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/SpeculativeGenerator.h"
#include "runtime/spec/Speculator.h"
#include "tests/runtime/support/Generate.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <iostream>

namespace infer::spec {
namespace {

constexpr int64_t kVocab = 6;
using Table = std::array<std::array<float, kVocab>, kVocab>;

/// logits[t] follow token t.
constexpr Table kTarget{{{2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 0.3f},
                         {0.2f, 1.5f, 1.4f, -0.5f, 0.8f, 0.0f},
                         {1.0f, -1.0f, 0.0f, 2.2f, 0.1f, 0.6f},
                         {0.0f, 0.4f, 0.9f, 0.3f, 1.8f, -0.2f},
                         {1.2f, 0.2f, -0.4f, 0.7f, 0.0f, 1.1f},
                         {-0.3f, 0.9f, 0.6f, 1.0f, 0.5f, 0.4f}}};
/// The draft: close to the target in places, far in others.
constexpr Table kDraft{{{1.5f, 1.2f, 0.5f, 0.4f, -1.0f, 0.0f},
                        {0.2f, 0.5f, 2.4f, -0.5f, 0.8f, 0.0f},
                        {1.0f, -1.0f, 0.0f, 2.2f, 0.1f, 0.6f},
                        {0.9f, 0.4f, 0.0f, 0.3f, 0.8f, 1.2f},
                        {0.0f, 0.2f, -0.4f, 1.7f, 0.0f, 0.1f},
                        {-0.3f, 1.9f, 0.6f, 0.0f, 0.5f, 0.4f}}};

/// A backend whose logits row for a token is its table's row: no cache, but
/// it checks the batch like a real backend.
class MarkovBackend : public Backend {
public:
  explicit MarkovBackend(const Table &table) : table_(table) {}
  std::string_view name() const override { return "markov"; }
  int64_t numBlocks() const override { return 1 << 16; }
  StatusOr<Logits> forward(const Batch &batch) override {
    INFER_RETURN_IF_ERROR(batch.validate(numBlocks(), 16));
    Logits out;
    out.rows = static_cast<int64_t>(batch.logitsIndices.size());
    out.vocab = kVocab;
    for (int32_t i : batch.logitsIndices) {
      const auto &row = table_[batch.tokenIds[i]];
      out.data.insert(out.data.end(), row.begin(), row.end());
    }
    return out;
  }

private:
  Table table_;
};

/// The target's processed next-token distribution after `token`.
std::vector<double> targetNext(const SamplingParams &params, int32_t token) {
  Sampler sampler(params, {});
  return sampler.probabilities(kTarget[token].data(), kVocab);
}

/// Upper regularized incomplete gamma Q(a, x) (Numerical Recipes gammq).
double gammaQ(double a, double x) {
  if (x <= 0)
    return 1.0;
  const double lnPrefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15)
        break;
    }
    return 1.0 - sum * std::exp(lnPrefix);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    d = std::fabs(d) < 1e-300 ? 1e-300 : d;
    c = b + an / c;
    c = std::fabs(c) < 1e-300 ? 1e-300 : c;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15)
      break;
  }
  return std::exp(lnPrefix) * h;
}

struct ChiSquare {
  double statistic = 0;
  int64_t degreesOfFreedom = 0;
  double pValue = 1;
};

/// Pearson's test of `counts` against `probs`; cells with expected count
/// below 5 are pooled into one.
ChiSquare chiSquare(const std::vector<int64_t> &counts,
                    const std::vector<double> &probs, int64_t total) {
  ChiSquare out;
  double pooledObserved = 0, pooledExpected = 0;
  int64_t cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(total);
    if (expected < 5) {
      pooledObserved += static_cast<double>(counts[i]);
      pooledExpected += expected;
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    out.statistic += diff * diff / expected;
    ++cells;
  }
  if (pooledExpected > 0) {
    const double diff = pooledObserved - pooledExpected;
    out.statistic += diff * diff / pooledExpected;
    ++cells;
  }
  out.degreesOfFreedom = cells - 1;
  out.pValue = gammaQ(0.5 * static_cast<double>(out.degreesOfFreedom),
                      0.5 * out.statistic);
  return out;
}

TEST(ChiSquareTest, MatchesKnownQuantiles) {
  // chi2.sf(11.07, 5) = 0.05, chi2.sf(3.841, 1) = 0.05, chi2.sf(20, 10) =
  // 0.0292527.
  EXPECT_NEAR(gammaQ(2.5, 11.0705 / 2), 0.05, 1e-4);
  EXPECT_NEAR(gammaQ(0.5, 3.8415 / 2), 0.05, 1e-4);
  EXPECT_NEAR(gammaQ(5, 10), 0.0292527, 1e-6);
}

constexpr int64_t kOutputLen = 3;
constexpr double kSignificance = 1e-3;

/// Joint counts of the 3 output tokens of `numSamples` seeded requests
/// that start from token 0.
std::vector<int64_t> sampleJoint(const SamplingParams &params,
                                 int64_t numSamples, bool speculate,
                                 SpecStats &stats) {
  MarkovBackend target(kTarget);
  DraftModelProposer draft(std::make_unique<MarkovBackend>(kDraft), 16);
  ModelConfig config;
  std::vector<int64_t> counts(kVocab * kVocab * kVocab, 0);
  constexpr int64_t kBatch = 500;
  for (int64_t first = 0; first < numSamples; first += kBatch) {
    std::vector<SpecRequest> requests;
    for (int64_t i = first; i < first + kBatch; ++i) {
      SpecRequest r;
      r.promptTokenIds = {0};
      r.sampling = params;
      r.sampling.seed = static_cast<uint64_t>(i);
      requests.push_back(r);
    }
    SpeculativeOptions options;
    options.numSpeculativeTokens = 3;
    auto outputs = generateSpeculative(target, config, requests,
                                       speculate ? &draft : nullptr, options);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    if (!outputs.isOk())
      return counts;
    for (const SpeculativeOutput &o : *outputs) {
      EXPECT_EQ(o.outputTokenIds.size(), 3u);
      ++counts[(o.outputTokenIds[0] * kVocab + o.outputTokenIds[1]) * kVocab +
               o.outputTokenIds[2]];
    }
    stats.add(totalStats(*outputs));
  }
  return counts;
}

/// The same through the Engine with a Speculator as its proposer.
std::vector<int64_t> sampleJointThroughEngine(const SamplingParams &params,
                                              int64_t numSamples,
                                              SpecStats &stats) {
  MarkovBackend target(kTarget);
  EngineConfig config;
  config.vocabSize = kVocab;
  config.numSpeculativeTokens = 3;
  std::vector<int64_t> counts(kVocab * kVocab * kVocab, 0);
  constexpr int64_t kBatch = 500;
  for (int64_t first = 0; first < numSamples; first += kBatch) {
    Engine engine(target, config);
    auto speculator = std::make_unique<Speculator>(
        std::make_unique<DraftModelProposer>(
            std::make_unique<MarkovBackend>(kDraft), 16),
        std::vector<int32_t>());
    Speculator *spec = speculator.get();
    engine.setProposer(std::move(speculator));
    std::vector<infer::testing::PromptRequest> requests;
    for (int64_t i = first; i < first + kBatch; ++i) {
      infer::testing::PromptRequest r;
      r.promptTokenIds = {0};
      r.sampling = params;
      r.sampling.seed = static_cast<uint64_t>(i);
      requests.push_back(r);
    }
    auto outputs = infer::testing::runToCompletion(engine, requests);
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    if (!outputs.isOk())
      return counts;
    for (const RequestOutput &o : *outputs) {
      EXPECT_EQ(o.outputTokenIds.size(), 3u);
      ++counts[(o.outputTokenIds[0] * kVocab + o.outputTokenIds[1]) * kVocab +
               o.outputTokenIds[2]];
    }
    stats.add(spec->stats());
  }
  return counts;
}

std::vector<double> exactJoint(const SamplingParams &params) {
  std::vector<double> probs(kVocab * kVocab * kVocab, 0.0);
  const std::vector<double> p1 = targetNext(params, 0);
  for (int32_t a = 0; a < kVocab; ++a) {
    const std::vector<double> p2 = targetNext(params, a);
    for (int32_t b = 0; b < kVocab; ++b) {
      const std::vector<double> p3 = targetNext(params, b);
      for (int32_t c = 0; c < kVocab; ++c)
        probs[(a * kVocab + b) * kVocab + c] = p1[a] * p2[b] * p3[c];
    }
  }
  return probs;
}

class SpecDistributionTest
    : public ::testing::TestWithParam<std::pair<double, int64_t>> {};

TEST_P(SpecDistributionTest, SampledSpeculationFollowsTheTarget) {
  SamplingParams params;
  params.temperature = GetParam().first;
  params.topK = GetParam().second;
  params.maxNewTokens = kOutputLen;
  constexpr int64_t kSamples = 40000;
  SpecStats stats;
  const std::vector<int64_t> counts =
      sampleJoint(params, kSamples, /*speculate=*/true, stats);
  const ChiSquare chi = chiSquare(counts, exactJoint(params), kSamples);
  std::cout << "[ chi2     ] T=" << params.temperature
            << " top_k=" << params.topK << ": chi2 " << chi.statistic << ", df "
            << chi.degreesOfFreedom << ", p " << chi.pValue << "; acceptance "
            << stats.acceptanceRate() << " (" << stats.numAccepted << "/"
            << stats.numJudged << ")\n";
  EXPECT_GT(chi.pValue, kSignificance)
      << "chi2 " << chi.statistic << " df " << chi.degreesOfFreedom;
  EXPECT_GT(stats.numAccepted, 0);
  EXPECT_LT(stats.numAccepted, stats.numJudged);
}

TEST_P(SpecDistributionTest,
       SampledSpeculationThroughTheEngineFollowsTheTarget) {
  SamplingParams params;
  params.temperature = GetParam().first;
  params.topK = GetParam().second;
  params.maxNewTokens = kOutputLen;
  constexpr int64_t kSamples = 20000;
  SpecStats stats;
  const std::vector<int64_t> counts =
      sampleJointThroughEngine(params, kSamples, stats);
  const ChiSquare chi = chiSquare(counts, exactJoint(params), kSamples);
  std::cout << "[ chi2     ] engine T=" << params.temperature
            << " top_k=" << params.topK << ": chi2 " << chi.statistic << ", df "
            << chi.degreesOfFreedom << ", p " << chi.pValue << "; acceptance "
            << stats.acceptanceRate() << "\n";
  EXPECT_GT(chi.pValue, kSignificance)
      << "chi2 " << chi.statistic << " df " << chi.degreesOfFreedom;
  EXPECT_GT(stats.numAccepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Transforms, SpecDistributionTest,
                         ::testing::Values(std::make_pair(1.0, int64_t{0}),
                                           std::make_pair(0.7, int64_t{3})));

TEST(SpecDistributionCheck, TheDraftAloneIsDetected) {
  // The same test catches a wrong distribution: sampling the draft model
  // itself (no verification) is rejected with p far below the threshold.
  SamplingParams params;
  params.temperature = 1.0;
  params.maxNewTokens = kOutputLen;
  MarkovBackend draftAsTarget(kDraft);
  ModelConfig config;
  std::vector<SpecRequest> requests;
  for (int64_t i = 0; i < 5000; ++i) {
    SpecRequest r;
    r.promptTokenIds = {0};
    r.sampling = params;
    r.sampling.seed = static_cast<uint64_t>(i);
    requests.push_back(r);
  }
  auto outputs = generateSpeculative(draftAsTarget, config, requests, nullptr,
                                     SpeculativeOptions());
  ASSERT_TRUE(outputs.isOk()) << outputs.status().message();
  std::vector<int64_t> counts(kVocab * kVocab * kVocab, 0);
  for (const SpeculativeOutput &o : *outputs)
    ++counts[(o.outputTokenIds[0] * kVocab + o.outputTokenIds[1]) * kVocab +
             o.outputTokenIds[2]];
  const ChiSquare chi = chiSquare(counts, exactJoint(params), 5000);
  EXPECT_LT(chi.pValue, 1e-12) << "chi2 " << chi.statistic;
}

} // namespace
} // namespace infer::spec
