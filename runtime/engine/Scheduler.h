//===- Scheduler.h - Token-budget continuous batching -----------*- C++ -*-===//
//
// Each step the scheduler turns the running and waiting queues into one
// SchedulerOutput: which requests run and how many of their tokens, within
// max_num_batched_tokens and max_num_seqs. Running requests go first (in
// policy order), then waiting ones are admitted while budget and blocks
// last; a prompt that does not fit the rest of the budget is chunked, so one
// step mixes decodes with a slice of a long prefill (Sarathi-Serve):
//
//   budget 8      running: A decode, B decode     waiting: C (prompt 20)
//   step          A:1  B:1  C:6 (chunk 0..5)      = 8 tokens
//   next step     A:1  B:1  C:6 (chunk 6..11)
//
// When a running request needs a block and the pool has none, its draft
// tokens are dropped, then the lowest priority running request (the latest
// arrival under FCFS) is preempted: its blocks are freed and it returns to
// the waiting queue, to be recomputed when there is room again. Under the
// priority policy a waiting request also displaces running requests of lower
// priority when the pool is full. With a prefill ratio (Colossal-Inference), a
// step is either all prefill or all decode: prefill when prefilling / decoding
// requests >= ratio.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_SCHEDULER_H
#define INFER_RUNTIME_ENGINE_SCHEDULER_H

#include "runtime/engine/KVCacheManager.h"
#include "runtime/engine/Request.h"

#include <cstdint>
#include <deque>
#include <vector>

namespace infer {

enum class SchedulingPolicy {
  /// First come, first served: arrival time orders admission, and the
  /// latest arrival is preempted first.
  kFcfs,
  /// Lowest `priority` value first, then arrival time.
  kPriority,
};

struct SchedulerConfig {
  int64_t maxNumSeqs = 256;
  int64_t maxNumBatchedTokens = 2048;
  /// Split prompts over steps to fill the token budget; without it a prompt
  /// waits until it fits the budget whole. Tokens no step holds (a prompt
  /// longer than max_num_batched_tokens, or a preempted request that grew
  /// past it and recomputes) are split all the same: they would wait forever.
  bool enableChunkedPrefill = true;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  /// 0 mixes prefill and decode tokens in every step; r > 0 makes each step
  /// all prefill or all decode (Colossal-Inference's prefill_ratio).
  double prefillRatio = 0.0;
};

struct ScheduledRequest {
  Request *request = nullptr;
  /// Tokens computed this step: request->tokens from numComputedTokens on,
  /// then the draft tokens.
  int64_t numTokens = 0;
  int64_t numDraftTokens = 0;
};

/// What one step runs: the batch contract is built from this.
struct SchedulerOutput {
  /// In batch order.
  std::vector<ScheduledRequest> scheduled;
  int64_t numScheduledTokens = 0;
  /// Blocks to copy before the forward call (copy-on-write).
  std::vector<BlockCopy> blockCopies;
  std::vector<RequestId> preempted;
  /// Requests that cannot grow even with the whole pool to themselves:
  /// finished with FinishReason::kLength.
  std::vector<Request *> finished;
};

class Scheduler {
public:
  Scheduler(const SchedulerConfig &config, KVCacheManager &kvCache);

  const SchedulerConfig &config() const { return config_; }
  /// Queues a request (owned by the caller until it is finished).
  void addRequest(Request *request);
  /// Adds a request that already holds its blocks (a fork) to the running
  /// queue.
  void addRunning(Request *request);
  SchedulerOutput schedule();

  /// Records that the request's first `numComputedTokens` tokens are in
  /// the cache: blocks past them are freed and its full blocks published.
  void setComputed(Request &request, int64_t numComputedTokens);
  /// Removes the request from the queues and frees its blocks.
  void finish(Request &request, FinishReason reason);

  const std::vector<Request *> &running() const { return running_; }
  /// In the order they are admitted (the policy's): kept sorted as they
  /// arrive, so a step costs no sort and no scan of a long queue.
  const std::deque<Request *> &waiting() const { return waiting_; }
  bool hasUnfinished() const { return !running_.empty() || !waiting_.empty(); }
  int64_t numPreemptions() const { return numPreemptions_; }
  /// Prompt and resumed tokens found in the prefix cache, and looked up.
  int64_t numCachedTokens() const { return numCachedTokens_; }
  int64_t numQueriedTokens() const { return numQueriedTokens_; }

private:
  /// Whether a request with `pending` tokens to compute sits out a step
  /// with `budget` tokens left, waiting for one that holds them whole
  /// (chunked prefill off).
  bool waitsToFitWhole(int64_t pending, int64_t budget) const;
  /// Whether `a` runs before `b` under the policy.
  bool before(const Request *a, const Request *b) const;
  void preempt(Request *request, SchedulerOutput &out);
  /// Inserts into `waiting_` at its place in the policy's order.
  void enqueueWaiting(Request *request);
  void scheduleRunning(SchedulerOutput &out, int64_t &budget, bool decodes,
                       bool prefills, bool &preempted);
  void scheduleWaiting(SchedulerOutput &out, int64_t &budget);

  SchedulerConfig config_;
  KVCacheManager &kvCache_;
  std::deque<Request *> waiting_;
  std::vector<Request *> running_;
  int64_t numPreemptions_ = 0;
  int64_t numCachedTokens_ = 0;
  int64_t numQueriedTokens_ = 0;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_SCHEDULER_H
