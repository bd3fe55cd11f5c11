//===- SpecUnitTest.cpp - n-gram lookup, verifier, adaptive k -------------===//

#include "runtime/spec/AdaptiveSpeculation.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/Verifier.h"

#include <gtest/gtest.h>

namespace infer::spec {
namespace {

using Tokens = std::vector<int32_t>;

TEST(NgramTest, LongestSuffixMatchProposesWhatFollowed) {
  // Last 3 "1 2 3" occurred at 0 and was followed by 4 9 8.
  const Tokens tokens{1, 2, 3, 4, 9, 8, 7, 1, 2, 3};
  EXPECT_EQ(lookupNgram(tokens, 1, 3, 3), (Tokens{4, 9, 8}));
  EXPECT_EQ(lookupNgram(tokens, 1, 3, 2), (Tokens{4, 9}));
  EXPECT_EQ(lookupNgram(tokens, 1, 3, 0), Tokens{});
}

TEST(NgramTest, FallsBackToShorterNgramsDownToMin) {
  // "5 3" never occurred before; "3" did, at 2, followed by 4 1.
  const Tokens tokens{1, 2, 3, 4, 1, 5, 3};
  EXPECT_EQ(lookupNgram(tokens, 1, 3, 2), (Tokens{4, 1}));
  EXPECT_EQ(lookupNgram(tokens, 2, 3, 2), Tokens{});
}

TEST(NgramTest, TheMostRecentMatchWinsAndProposalsStopAtTheEnd) {
  // "7" occurred at 0 (followed by 1) and at 3 (followed by 2 7).
  const Tokens tokens{7, 1, 5, 7, 2, 7};
  EXPECT_EQ(lookupNgram(tokens, 1, 1, 5), (Tokens{2, 7}));
  EXPECT_EQ(lookupNgram(Tokens{7}, 1, 3, 5), Tokens{});
}

TEST(NgramTest, ProposerAnswersEachRequest) {
  NgramProposer proposer(1, 2);
  const Tokens a{1, 2, 1}, b{4, 5, 6};
  Sampler sampler(SamplingParams{}, {});
  StatusOr<std::vector<Proposal>> p =
      proposer.propose({{0, &a, 3, &sampler}, {1, &b, 3, &sampler}});
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ((*p)[0].tokens, (Tokens{2, 1}));
  EXPECT_TRUE((*p)[0].probs.empty());
  EXPECT_EQ((*p)[1].tokens, Tokens{});
}

/// Rows of logits with a clear argmax each.
Logits rowsWithArgmax(const Tokens &argmax, int64_t vocab) {
  Logits l;
  l.rows = static_cast<int64_t>(argmax.size());
  l.vocab = vocab;
  l.data.assign(l.rows * vocab, 0.0f);
  for (int64_t r = 0; r < l.rows; ++r)
    l.data[r * vocab + argmax[r]] = 5.0f;
  return l;
}

TEST(VerifierTest, GreedyAcceptsWhileDraftEqualsArgmax) {
  Sampler sampler(SamplingParams{}, {});
  Proposal proposal{{1, 2, 3}, {}};
  Verification v =
      verify(sampler, rowsWithArgmax({1, 2, 0, 4}, 5), 0, proposal);
  EXPECT_EQ(v.tokens, (Tokens{1, 2, 0}));
  EXPECT_EQ(v.numAccepted, 2);
  EXPECT_EQ(v.numJudged, 3);
}

TEST(VerifierTest, GreedyAllAcceptedAddsTheBonusToken) {
  Sampler sampler(SamplingParams{}, {});
  Logits rows = rowsWithArgmax({9, 1, 2, 4}, 5 + 5);
  Verification v = verify(sampler, rows, 1, Proposal{{1, 2}, {}});
  EXPECT_EQ(v.tokens, (Tokens{1, 2, 4}));
  EXPECT_EQ(v.numAccepted, 2);
  EXPECT_EQ(v.numJudged, 2);
  // Nothing proposed: the target's own token.
  Verification none = verify(sampler, rows, 3, Proposal{});
  EXPECT_EQ(none.tokens, (Tokens{4}));
  EXPECT_EQ(none.numJudged, 0);
}

TEST(VerifierTest, GreedyPenaltiesSeeEarlierDrafts) {
  // Row 1 prefers 1 by 0.5, but 1 was just accepted: presence 1.0 turns the
  // choice to 2, as non-speculative decoding would.
  SamplingParams params;
  params.presencePenalty = 1.0;
  Sampler sampler(params, {});
  Logits rows;
  rows.rows = 2;
  rows.vocab = 3;
  rows.data = {0.0f, 5.0f, 0.0f, 0.0f, 2.5f, 2.0f};
  Verification v = verify(sampler, rows, 0, Proposal{{1}, {}});
  EXPECT_EQ(v.tokens, (Tokens{1, 2}));
}

TEST(VerifierTest, SamplingAcceptsWhenTheDraftDistributionIsTheTarget) {
  SamplingParams params;
  params.temperature = 1.0;
  Sampler sampler(params, {});
  Logits rows = rowsWithArgmax({0, 1, 2}, 3);
  std::vector<std::vector<double>> q;
  for (int r = 0; r < 2; ++r)
    q.push_back(sampler.probabilities(rows.row(r), 3));
  // p == q: min(1, p/q) = 1 for every draft.
  for (int trial = 0; trial < 20; ++trial) {
    Verification v = verify(sampler, rows, 0, Proposal{{2, 0}, q});
    EXPECT_EQ(v.numAccepted, 2);
    EXPECT_EQ(v.tokens.size(), 3u);
  }
}

TEST(VerifierTest, SamplingRejectsTokensTheTargetCannotProduce) {
  SamplingParams params;
  params.temperature = 1.0;
  params.topK = 1;
  Sampler sampler(params, {});
  // Top-1 leaves p = point mass on 1: draft 0 is always rejected and the
  // residual max(0, p - q) is that point mass.
  Logits rows = rowsWithArgmax({1, 1}, 3);
  for (int trial = 0; trial < 20; ++trial) {
    Verification v = verify(sampler, rows, 0, Proposal{{0}, {}});
    EXPECT_EQ(v.tokens, (Tokens{1}));
    EXPECT_EQ(v.numAccepted, 0);
    EXPECT_EQ(v.numJudged, 1);
  }
}

TEST(AdaptiveTest, MoreAcceptanceMeansLongerSpeculation) {
  AdaptiveOptions options;
  options.maxK = 8;
  options.initialAcceptance = 0.9;
  options.smoothing = 1.0;
  AdaptiveSpeculation adaptive(options);
  const int64_t high = adaptive.choose(1, 1);
  adaptive.observe(10, 3);
  EXPECT_NEAR(adaptive.acceptanceRate(), 0.3, 1e-12);
  const int64_t low = adaptive.choose(1, 1);
  EXPECT_GT(high, low);
  EXPECT_GE(low, 1);
  adaptive.observe(10, 0);
  EXPECT_EQ(adaptive.choose(1, 1), 0);
}

TEST(AdaptiveTest, HeavyLoadTurnsSpeculationOff) {
  AdaptiveOptions options;
  options.maxK = 5;
  options.initialAcceptance = 0.74;
  AdaptiveSpeculation adaptive(options);
  int64_t previous = options.maxK;
  for (int64_t seqs : {1, 8, 64, 256, 1024}) {
    const int64_t k = adaptive.choose(seqs, seqs);
    EXPECT_LE(k, previous) << seqs << " sequences";
    previous = k;
  }
  EXPECT_GE(adaptive.choose(1, 1), 3);
  EXPECT_EQ(adaptive.choose(1024, 1024), 0);
}

TEST(AdaptiveTest, TheTokenBudgetCapsK) {
  AdaptiveOptions options;
  options.maxK = 5;
  options.initialAcceptance = 0.95;
  options.tokenBudget = 40;
  AdaptiveSpeculation adaptive(options);
  // 10 sequences with 10 tokens: 10 + 10 * k <= 40 allows k <= 3.
  EXPECT_EQ(adaptive.choose(10, 10), 3);
  EXPECT_EQ(adaptive.choose(10, 40), 0);
}

} // namespace
} // namespace infer::spec
