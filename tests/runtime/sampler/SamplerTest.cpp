//===- SamplerTest.cpp - Sampling transforms, penalties, stops ------------===//
//
// Small hand-made logits with exactly known results: each filter, each
// penalty, log-probabilities, seeded reproducibility, and stop strings that
// span several tokens of the tiny-pycode tokenizer.
//
//===----------------------------------------------------------------------===//

#include "runtime/engine/Sampler.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace infer {
namespace {

constexpr double kTol = 1e-9;

/// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logitsOf(const std::vector<double> &probs) {
  std::vector<float> out;
  for (double p : probs)
    out.push_back(static_cast<float>(std::log(p)));
  return out;
}

const std::vector<double> kProbs{0.1, 0.4, 0.2, 0.05, 0.25};

SamplingParams sampled(double temperature = 1.0) {
  SamplingParams p;
  p.temperature = temperature;
  p.maxNewTokens = 100;
  return p;
}

void expectProbs(const std::vector<double> &actual,
                 const std::vector<double> &expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-6) << "token " << i;
}

TEST(SamplerTest, GreedyTakesTheLowestIdOfTiedMaxima) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.5f, 3.0f};
  Sampler sampler(SamplingParams{}, {});
  EXPECT_EQ(sampler.sample(logits.data(), 5), 1);
  expectProbs(sampler.probabilities(logits.data(), 5), {0, 1, 0, 0, 0});
}

TEST(SamplerTest, IgnoreEosMasksEosIds) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f};
  SamplingParams params;
  params.ignoreEos = true;
  Sampler sampler(params, {1});
  EXPECT_EQ(sampler.sample(logits.data(), 3), 2);
  params.temperature = 1.0;
  Sampler sampling(params, {1});
  EXPECT_EQ(sampling.probabilities(logits.data(), 3)[1], 0.0);
}

TEST(SamplerTest, TemperatureSharpens) {
  const std::vector<float> logits = logitsOf(kProbs);
  // p^(1/0.5) = p^2, normalized by 0.275.
  expectProbs(Sampler(sampled(0.5), {}).probabilities(logits.data(), 5),
              {0.01 / 0.275, 0.16 / 0.275, 0.04 / 0.275, 0.0025 / 0.275,
               0.0625 / 0.275});
  expectProbs(Sampler(sampled(1.0), {}).probabilities(logits.data(), 5),
              kProbs);
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams params = sampled();
  params.topK = 2;
  const std::vector<float> logits = logitsOf(kProbs);
  expectProbs(Sampler(params, {}).probabilities(logits.data(), 5),
              {0, 0.4 / 0.65, 0, 0, 0.25 / 0.65});
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams params = sampled();
  // Sorted: 0.4 0.25 0.2 | 0.1 0.05: the first three reach 0.85 >= 0.7.
  params.topP = 0.7;
  const std::vector<float> logits = logitsOf(kProbs);
  expectProbs(Sampler(params, {}).probabilities(logits.data(), 5),
              {0, 0.4 / 0.85, 0.2 / 0.85, 0, 0.25 / 0.85});
  // Top-p after top-k: of 0.4 / 0.65 and 0.25 / 0.65, 0.4 / 0.65 >= 0.6.
  params.topK = 2;
  params.topP = 0.6;
  expectProbs(Sampler(params, {}).probabilities(logits.data(), 5),
              {0, 1, 0, 0, 0});
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheBest) {
  SamplingParams params = sampled();
  params.minP = 0.3; // threshold 0.3 * 0.4 = 0.12
  const std::vector<float> logits = logitsOf(kProbs);
  expectProbs(Sampler(params, {}).probabilities(logits.data(), 5),
              {0, 0.4 / 0.85, 0.2 / 0.85, 0, 0.25 / 0.85});
}

TEST(SamplerTest, RepetitionPenaltyCoversThePromptAndTheOutput) {
  const std::vector<float> logits{2.0f, 1.9f, -0.5f};
  SamplingParams params;
  params.repetitionPenalty = 2.0;
  // From the prompt: 2.0 / 2 = 1.0 < 1.9.
  EXPECT_EQ(Sampler(params, {}, {0}).argmax(logits.data(), 3), 1);
  // From the output.
  Sampler fromOutput(params, {}, {});
  fromOutput.record(0);
  EXPECT_EQ(fromOutput.argmax(logits.data(), 3), 1);
  // Negative logits are multiplied: -0.5 * 2 = -1.0 (log-softmax shows it).
  params.logprobs = 3;
  Sampler negative(params, {}, {0, 2});
  const TokenLogprobs lp = negative.logprobs(logits.data(), 3, 1);
  const double lse = std::log(
      std::exp(1.0) + std::exp(static_cast<double>(1.9f)) + std::exp(-1.0));
  EXPECT_NEAR(lp.logprob, 1.9f - lse, kTol);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[2].second, -1.0 - lse, kTol);
}

TEST(SamplerTest, PresencePenaltyCoversOnlyTheOutput) {
  const std::vector<float> logits{2.0f, 1.9f};
  SamplingParams params;
  params.presencePenalty = 0.2;
  EXPECT_EQ(Sampler(params, {}, {0}).argmax(logits.data(), 2), 0);
  Sampler sampler(params, {}, {});
  sampler.record(0);
  sampler.record(0);
  // Once, whatever the count: 2.0 - 0.2 = 1.8 < 1.9.
  EXPECT_EQ(sampler.argmax(logits.data(), 2), 1);
}

TEST(SamplerTest, FrequencyPenaltyScalesWithTheCount) {
  const std::vector<float> logits{2.0f, 1.9f};
  SamplingParams params;
  params.frequencyPenalty = 0.06;
  EXPECT_EQ(Sampler(params, {}, {0, 0, 0}).argmax(logits.data(), 2), 0);
  Sampler sampler(params, {}, {});
  sampler.record(0); // 2.0 - 0.06 = 1.94 > 1.9
  EXPECT_EQ(sampler.argmax(logits.data(), 2), 0);
  sampler.record(0); // 2.0 - 0.12 = 1.88 < 1.9
  EXPECT_EQ(sampler.argmax(logits.data(), 2), 1);
}

TEST(SamplerTest, PenaltiesCombineInVllmOrder) {
  // repetition, then frequency and presence: 0.5 / 2 - 0.1 * 2 - 0.3.
  const std::vector<float> logits{2.0f, -1.0f, 0.5f, 1.0f};
  SamplingParams params;
  params.repetitionPenalty = 2.0;
  params.frequencyPenalty = 0.1;
  params.presencePenalty = 0.3;
  params.logprobs = 4;
  Sampler sampler(params, {}, {0, 1});
  sampler.record(2);
  sampler.record(2);
  const std::vector<double> adjusted{1.0, -2.0, 0.5 / 2 - 0.2 - 0.3, 1.0};
  double sum = 0;
  for (double a : adjusted)
    sum += std::exp(a);
  const TokenLogprobs lp = sampler.logprobs(logits.data(), 4, 0);
  ASSERT_EQ(lp.top.size(), 4u);
  const std::vector<int32_t> order{0, 3, 2, 1};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lp.top[i].first, order[i]);
    EXPECT_NEAR(lp.top[i].second, adjusted[order[i]] - std::log(sum), kTol);
  }
  EXPECT_EQ(sampler.argmax(logits.data(), 4), 0);
}

TEST(SamplerTest, LogprobsAreTheLogSoftmaxOfTheProcessedDistribution) {
  SamplingParams params = sampled();
  params.logprobs = 3;
  const std::vector<float> logits = logitsOf(kProbs);
  TokenLogprobs lp = Sampler(params, {}).logprobs(logits.data(), 5, 2);
  EXPECT_EQ(lp.token, 2);
  EXPECT_NEAR(lp.logprob, std::log(0.2), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_NEAR(lp.top[0].second, std::log(0.4), 1e-6);
  EXPECT_EQ(lp.top[1].first, 4);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25), 1e-6);
  EXPECT_EQ(lp.top[2].first, 2);

  // Filtered tokens have probability 0: -inf.
  params.topK = 2;
  lp = Sampler(params, {}).logprobs(logits.data(), 5, 2);
  EXPECT_TRUE(std::isinf(lp.logprob) && lp.logprob < 0);
  EXPECT_NEAR(lp.top[0].second, std::log(0.4 / 0.65), 1e-6);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25 / 0.65), 1e-6);
  // Temperature 2: p^(1/2) normalized.
  params.topK = 0;
  params.temperature = 2.0;
  lp = Sampler(params, {}).logprobs(logits.data(), 5, 1);
  double norm = 0;
  for (double p : kProbs)
    norm += std::sqrt(p);
  EXPECT_NEAR(lp.logprob, std::log(std::sqrt(0.4) / norm), 1e-6);
}

TEST(SamplerTest, SeededSamplingDrawsOneUniformPerToken) {
  const std::vector<float> logits = logitsOf(kProbs);
  // The expected token of each draw, from the same mt19937_64 stream.
  std::mt19937_64 rng(42);
  std::vector<int32_t> expected;
  for (int i = 0; i < 50; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double c = 0;
    int32_t t = 0;
    for (; t < 5; ++t) {
      c += kProbs[t];
      if (u < c)
        break;
    }
    expected.push_back(t);
  }
  SamplingParams params = sampled();
  params.seed = 42;
  Sampler a(params, {}), b(params, {});
  Sampler other(completionParams(params, 1), {});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a.sample(logits.data(), 5), expected[i]) << "draw " << i;
    // Another request between the draws changes nothing.
    other.sample(logits.data(), 5);
  }
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(b.sample(logits.data(), 5), expected[i]);
}

TEST(SamplerTest, TheRngAdvancesTheSameWhateverTheLogits) {
  SamplingParams params = sampled();
  params.seed = 7;
  params.topK = 3;
  const std::vector<float> x = logitsOf(kProbs);
  const std::vector<float> y{0.3f, -2.0f, 1.0f, 0.0f, 0.7f};
  Sampler a(params, {}), b(params, {});
  a.sample(x.data(), 5);
  b.sample(y.data(), 5);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(a.sample(x.data(), 5), b.sample(x.data(), 5));
}

TEST(SamplerTest, CompletionIUsesSeedPlusI) {
  SamplingParams params = sampled();
  params.seed = 100;
  params.n = 3;
  for (int64_t i = 0; i < 3; ++i) {
    SamplingParams c = completionParams(params, i);
    EXPECT_EQ(c.seed, 100u + static_cast<uint64_t>(i));
    EXPECT_EQ(c.n, 1);
    EXPECT_EQ(c.temperature, 1.0);
  }
}

TEST(SamplerTest, ValidateRejectsOutOfRangeParameters) {
  SamplingParams p;
  EXPECT_TRUE(p.validate().isOk());
  p.topP = 0;
  EXPECT_FALSE(p.validate().isOk());
  p = SamplingParams();
  p.minP = 1.5;
  EXPECT_FALSE(p.validate().isOk());
  p = SamplingParams();
  p.repetitionPenalty = 0;
  EXPECT_FALSE(p.validate().isOk());
  p = SamplingParams();
  p.stopStrings = {""};
  EXPECT_FALSE(p.validate().isOk());
  p = SamplingParams();
  p.n = 0;
  EXPECT_FALSE(p.validate().isOk());
}

//===----------------------------------------------------------------------===//
// Stop conditions
//===----------------------------------------------------------------------===//

class StopCheckerTest : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string path = std::string(INFER_FIXTURES_DIR) +
                             "/models/tiny-pycode-target/tokenizer.json";
    if (!std::filesystem::exists(path))
      GTEST_SKIP() << "no tiny-pycode tokenizer";
    auto t = Tokenizer::fromFile(path);
    ASSERT_TRUE(t.isOk()) << t.status().message();
    tokenizer_ = std::move(t).value();
    // "x = 1\nprint(x)\n": x | " =" | " 1" | "\n" | print | ( | x | ) | "\n"
    ids_ = tokenizer_->encode("x = 1\nprint(x)\n", false);
    ASSERT_EQ(ids_.size(), 9u);
  }

  /// Feeds ids_ until a stop; returns the index of the stopping token.
  size_t run(StopChecker &checker, StopReason &reason) {
    for (size_t i = 0; i < ids_.size(); ++i) {
      reason = checker.append(ids_[i]);
      if (reason != StopReason::kNone)
        return i;
    }
    return ids_.size();
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> ids_;
  const std::vector<int32_t> prompt_{1};
};

TEST_F(StopCheckerTest, StopStringAcrossTokensIsCutExactly) {
  SamplingParams params;
  params.maxNewTokens = 100;
  // "1\npr" spans " 1", "\n" and "print"; ")\n" comes later.
  params.stopStrings = {")\n", "1\npr"};
  StopChecker checker(params, {2}, tokenizer_.get(), prompt_);
  StopReason reason;
  EXPECT_EQ(run(checker, reason), 4u);
  EXPECT_EQ(reason, StopReason::kStopString);
  EXPECT_EQ(checker.text(), "x = ");
}

TEST_F(StopCheckerTest, StopStringInsideOneToken) {
  SamplingParams params;
  params.maxNewTokens = 100;
  params.stopStrings = {"="};
  StopChecker checker(params, {2}, tokenizer_.get(), prompt_);
  StopReason reason;
  EXPECT_EQ(run(checker, reason), 1u);
  EXPECT_EQ(checker.text(), "x ");
}

TEST_F(StopCheckerTest, StopStringAtTheEnd) {
  SamplingParams params;
  params.maxNewTokens = 100;
  params.stopStrings = {"(x)\n"};
  StopChecker checker(params, {2}, tokenizer_.get(), prompt_);
  StopReason reason;
  EXPECT_EQ(run(checker, reason), 8u);
  EXPECT_EQ(checker.text(), "x = 1\nprint");
}

TEST_F(StopCheckerTest, NoStopKeepsTheWholeTextUntilMaxTokens) {
  SamplingParams params;
  params.maxNewTokens = 9;
  params.stopStrings = {"never"};
  StopChecker checker(params, {2}, tokenizer_.get(), prompt_);
  StopReason reason;
  EXPECT_EQ(run(checker, reason), 8u);
  EXPECT_EQ(reason, StopReason::kLength);
  EXPECT_EQ(checker.text(), "x = 1\nprint(x)\n");
}

TEST_F(StopCheckerTest, StopTokenIdsAndEos) {
  SamplingParams params;
  params.maxNewTokens = 100;
  params.stopTokenIds = {ids_[3]};
  StopChecker byToken(params, {2}, tokenizer_.get(), prompt_);
  StopReason reason;
  EXPECT_EQ(run(byToken, reason), 3u);
  EXPECT_EQ(reason, StopReason::kStopToken);

  StopChecker byEos(SamplingParams(), {ids_[2]}, tokenizer_.get(), prompt_);
  EXPECT_EQ(run(byEos, reason), 2u);
  EXPECT_EQ(reason, StopReason::kEos);

  // ignore_eos: EOS goes on, stop token ids still stop.
  params.ignoreEos = true;
  StopChecker ignoring(params, {ids_[0]}, tokenizer_.get(), prompt_);
  EXPECT_EQ(run(ignoring, reason), 3u);
  EXPECT_EQ(reason, StopReason::kStopToken);
}

} // namespace
} // namespace infer
