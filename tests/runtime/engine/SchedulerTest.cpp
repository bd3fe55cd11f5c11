//===- SchedulerTest.cpp - Token budget, chunking, priority, preemption ---===//

#include "runtime/engine/Scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <numeric>

namespace infer {
namespace {

/// A scheduler over a pool of 4-token blocks, driven like the engine does:
/// every scheduled request computes its tokens, and one that reaches its
/// last token gains a new one.
class SchedulerTest : public ::testing::Test {
protected:
  void init(int64_t numBlocks, SchedulerConfig config,
            bool prefixCaching = true) {
    kv_ = std::make_unique<KVCacheManager>(numBlocks, 4, prefixCaching);
    scheduler_ = std::make_unique<Scheduler>(config, *kv_);
  }

  Request *add(int64_t promptLength, double arrival, int64_t priority = 0) {
    Request &r = requests_.emplace_back();
    r.id = static_cast<RequestId>(requests_.size() - 1);
    r.tokens.resize(promptLength);
    std::iota(r.tokens.begin(), r.tokens.end(), 1000 * (r.id + 1));
    r.numPromptTokens = promptLength;
    r.arrivalTime = arrival;
    r.priority = priority;
    r.maxTotalTokens = promptLength + 100;
    scheduler_->addRequest(&r);
    return &r;
  }

  /// Runs the output as the engine would after the forward call.
  void complete(const SchedulerOutput &out) {
    for (const ScheduledRequest &s : out.scheduled) {
      Request &r = *s.request;
      const int64_t computed = r.numComputedTokens + s.numTokens;
      if (computed == r.numTokens())
        r.tokens.push_back(7);
      scheduler_->setComputed(r, computed);
    }
  }

  /// (request id, tokens) of each scheduled request, in batch order.
  static std::vector<std::pair<RequestId, int64_t>>
  summary(const SchedulerOutput &out) {
    std::vector<std::pair<RequestId, int64_t>> s;
    for (const ScheduledRequest &r : out.scheduled)
      s.emplace_back(r.request->id, r.numTokens);
    return s;
  }

  using Summary = std::vector<std::pair<RequestId, int64_t>>;

  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::deque<Request> requests_;
};

TEST_F(SchedulerTest, ChunksPromptsIntoTheTokenBudgetBesideDecodes) {
  SchedulerConfig config;
  config.maxNumBatchedTokens = 8;
  init(64, config);
  add(3, 0);
  add(20, 1);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 3}, {1, 5}}));
  EXPECT_EQ(out.numScheduledTokens, 8);
  EXPECT_TRUE(out.preempted.empty());
  complete(out);
  // Request 0 decodes one token; request 1 continues its prompt.
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 7}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 7}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 1}})) << "the last prompt token";
  EXPECT_EQ(kv_->blockTable(1).size(), 5u) << "20 tokens in 4-token blocks";
}

TEST_F(SchedulerTest, WithoutChunkingAPromptWaitsUntilItFitsWhole) {
  SchedulerConfig config;
  config.maxNumBatchedTokens = 8;
  config.enableChunkedPrefill = false;
  init(64, config);
  add(3, 0);
  add(6, 1);
  add(4, 2);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 3}})) << "6 more do not fit in 5";
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 6}}));
}

TEST_F(SchedulerTest, WithoutChunkingWhatNoStepHoldsIsStillChunked) {
  // Waiting for a step of more than max_num_batched_tokens would be waiting
  // forever (found by EngineStressTest).
  SchedulerConfig config;
  config.maxNumBatchedTokens = 8;
  config.enableChunkedPrefill = false;
  init(64, config);
  add(11, 0);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 8}})) << "a prompt longer than a step";
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 3}}));

  // A preempted request that grew past the budget recomputes in chunks.
  requests_.clear();
  init(4, config, /*prefixCaching=*/false);
  Request *a = add(2, 0);
  Request *b = add(6, 1);
  for (int step = 0; step < 3; ++step)
    complete(scheduler_->schedule());
  out = scheduler_->schedule();
  ASSERT_EQ(out.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(b->numTokens(), 9) << "more than a step holds";
  complete(out);
  scheduler_->finish(*a, FinishReason::kStop);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 8}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 1}}));
}

TEST_F(SchedulerTest, MaxNumSeqsCapsTheRunningRequests) {
  SchedulerConfig config;
  config.maxNumSeqs = 2;
  init(64, config);
  add(2, 0);
  add(2, 1);
  add(2, 2);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 2}, {1, 2}}));
  EXPECT_EQ(scheduler_->waiting().size(), 1u);
}

TEST_F(SchedulerTest, PriorityPolicyAdmitsTheLowestValueFirst) {
  SchedulerConfig config;
  config.policy = SchedulingPolicy::kPriority;
  config.maxNumSeqs = 2;
  init(64, config);
  add(2, 0, /*priority=*/5);
  add(2, 1, /*priority=*/1);
  add(2, 2, /*priority=*/1);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 2}, {2, 2}}));

  config.policy = SchedulingPolicy::kFcfs;
  requests_.clear();
  init(64, config);
  add(2, 0, 5);
  add(2, 1, 1);
  add(2, 2, 1);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 2}, {1, 2}}));
}

TEST_F(SchedulerTest, PreemptsTheLatestArrivalWhenBlocksRunOut) {
  SchedulerConfig config;
  init(4, config);
  Request *a = add(4, 0);
  add(4, 1);
  Request *c = add(3, 2);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 4}, {1, 4}, {2, 3}}));
  complete(out);
  // a and b each need a second block, c a... there is one free block.
  out = scheduler_->schedule();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{2}));
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 1}}));
  EXPECT_EQ(c->numComputedTokens, 0);
  EXPECT_EQ(c->status, RequestStatus::kWaiting);
  EXPECT_EQ(c->numTokens(), 4) << "its sampled token is kept";
  EXPECT_EQ(scheduler_->numPreemptions(), 1);
  EXPECT_TRUE(kv_->blockTable(2).empty());
  complete(out);
  // a finishes: c resumes, recomputing its prompt and sampled token.
  scheduler_->finish(*a, FinishReason::kStop);
  EXPECT_EQ(a->status, RequestStatus::kFinished);
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 1}, {2, 4}}));
  EXPECT_EQ(c->numPreemptions, 1);
}

TEST_F(SchedulerTest, PriorityPolicyPreemptsTheLowestPriority) {
  SchedulerConfig config;
  config.policy = SchedulingPolicy::kPriority;
  init(4, config);
  add(4, 0, /*priority=*/0);
  add(4, 1, /*priority=*/9);
  add(3, 2, /*priority=*/1);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 4}, {2, 3}, {1, 4}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {2, 1}}));
}

TEST_F(SchedulerTest, AHigherPriorityArrivalDisplacesRunningRequests) {
  SchedulerConfig config;
  config.policy = SchedulingPolicy::kPriority;
  init(6, config);
  add(7, 0, /*priority=*/5);
  add(6, 1, /*priority=*/3);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 6}, {0, 7}}));
  complete(out);
  // Priority 1 needs three blocks and two are free: request 0 (priority 5)
  // makes room, although it was already scheduled for this step.
  add(12, 2, /*priority=*/1);
  out = scheduler_->schedule();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{0}));
  EXPECT_EQ(summary(out), (Summary{{1, 1}, {2, 12}}));
  EXPECT_EQ(out.numScheduledTokens, 13);

  // FCFS never displaces running requests for waiting ones.
  config.policy = SchedulingPolicy::kFcfs;
  requests_.clear();
  init(6, config);
  add(7, 0);
  add(6, 1);
  complete(scheduler_->schedule());
  add(12, 2);
  out = scheduler_->schedule();
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 1}}));
}

TEST_F(SchedulerTest, ARequestThatOutgrowsThePoolAloneEnds) {
  SchedulerConfig config;
  init(2, config);
  Request *a = add(8, 0);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 8}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_TRUE(out.scheduled.empty());
  ASSERT_EQ(out.finished.size(), 1u);
  EXPECT_EQ(out.finished[0], a);
  EXPECT_EQ(a->finishReason, FinishReason::kLength);
  EXPECT_FALSE(scheduler_->hasUnfinished());
  EXPECT_EQ(kv_->numFreeBlocks(), 2);
}

TEST_F(SchedulerTest, PrefillRatioAlternatesPrefillAndDecodeSteps) {
  SchedulerConfig config;
  config.prefillRatio = 1.0;
  init(64, config);
  add(3, 0);
  add(3, 1);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 3}, {1, 3}})) << "nothing decodes yet";
  complete(out);
  add(5, 2);
  // 1 waiting / 2 decoding < 1: a decode step.
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 1}}));
  complete(out);
  add(5, 3);
  // 2 waiting / 2 decoding >= 1: a prefill step.
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{2, 5}, {3, 5}}));
}

TEST_F(SchedulerTest, PrefillRatioDecodesWhenThePrefillsOnlyPreempt) {
  // A prefill that cannot grow preempts itself; the decode holding the
  // blocks it needs runs in the same step, or the prefill would be admitted
  // and preempted again forever (found by EngineStressTest).
  SchedulerConfig config;
  config.maxNumBatchedTokens = 8;
  config.prefillRatio = 1.0;
  init(5, config, /*prefixCaching=*/false);
  add(8, 0);
  add(16, 1);
  add(4, 2);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{0, 8}}));
  complete(out);
  // 2 waiting / 1 decoding: prefill steps.
  out = scheduler_->schedule();
  EXPECT_EQ(summary(out), (Summary{{1, 8}}));
  complete(out);
  out = scheduler_->schedule();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{1})) << "1 block free of 2";
  EXPECT_EQ(summary(out), (Summary{{0, 1}}));
}

TEST_F(SchedulerTest, DraftTokensRideAlongAndAreTrimmedToTheBudget) {
  SchedulerConfig config;
  config.maxNumBatchedTokens = 6;
  init(64, config);
  Request *a = add(3, 0);
  complete(scheduler_->schedule());
  a->draftTokens = {5, 6, 7};
  SchedulerOutput out = scheduler_->schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].numTokens, 4);
  EXPECT_EQ(out.scheduled[0].numDraftTokens, 3);
  EXPECT_EQ(kv_->blockTable(0).size(), 2u) << "3 + 1 + 3 drafts = 7 slots";
  // Every draft rejected: the target's token is appended, the drafts'
  // slots are rolled back and the second block is freed.
  a->tokens.push_back(9);
  scheduler_->setComputed(*a, 4);
  EXPECT_EQ(kv_->blockTable(0).size(), 1u);
  EXPECT_EQ(kv_->numFreeBlocks(), 63);

  a->draftTokens = {1, 2, 3, 4, 5, 6, 7};
  out = scheduler_->schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].numTokens, 6) << "1 pending + 5 drafts";
  EXPECT_EQ(out.scheduled[0].numDraftTokens, 5);
  EXPECT_EQ(a->draftTokens.size(), 5u);
}

TEST_F(SchedulerTest, DraftTokensGiveWayBeforeAnyRequestIsPreempted) {
  // Preempting for a guess would cost a recomputation, and a request alone
  // would end for it while the pool still holds its next token (found by
  // EngineStressTest).
  SchedulerConfig config;
  init(4, config);
  Request *a = add(4, 0);
  Request *b = add(4, 1);
  complete(scheduler_->schedule());
  a->draftTokens = std::vector<int32_t>(8, 5);
  SchedulerOutput out = scheduler_->schedule();
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(summary(out), (Summary{{0, 1}, {1, 1}})) << "13 slots of 16";
  EXPECT_TRUE(a->draftTokens.empty());
  complete(out);

  scheduler_->finish(*b, FinishReason::kStop);
  a->draftTokens = std::vector<int32_t>(12, 5);
  out = scheduler_->schedule();
  EXPECT_TRUE(out.finished.empty()) << "alone, 6 + 1 tokens fit";
  EXPECT_EQ(summary(out), (Summary{{0, 1}}));
}

} // namespace
} // namespace infer
