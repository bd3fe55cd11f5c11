//===- Request.h - The state of one generation request ----------*- C++ -*-===//
//
// A request has no prefill or decode phase: it has tokens (prompt, then the
// generated ones) and a count of those whose keys and values are in the
// cache. Each step computes some of the rest:
//
//   tokens     p0 p1 p2 p3 p4 p5 p6 | o0 o1        (prompt | output)
//   computed   ^^^^^^^^^^^^^^^^^^^^^^^^^^^          numComputedTokens = 8
//   to compute                          o1 + drafts (1 + k tokens)
//
// Preemption sets numComputedTokens back to 0 and frees the blocks; the
// tokens stay, so the request resumes by recomputing them (and whatever the
// prefix cache still holds comes back for free).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_REQUEST_H
#define INFER_RUNTIME_ENGINE_REQUEST_H

#include "runtime/engine/KVCacheManager.h"
#include "runtime/engine/Sampler.h"

#include <cstdint>
#include <string>
#include <vector>

namespace infer {

enum class RequestStatus { kWaiting, kRunning, kFinished };

enum class FinishReason {
  kNone,
  /// An EOS token (or another stop condition of the sampling parameters).
  kStop,
  /// max_new_tokens, the model's context, or the KV-cache pool.
  kLength,
  kAbort,
  /// The request failed (Request::error says why); the engine serves on.
  kError,
};

struct Request {
  RequestId id = 0;
  std::vector<int32_t> tokens;
  int64_t numPromptTokens = 0;
  int64_t numComputedTokens = 0;
  /// Speculative tokens proposed for this step, verified after the forward
  /// call; never part of `tokens` until accepted.
  std::vector<int32_t> draftTokens;
  SamplingParams sampling;
  /// Lower runs first (the priority policy); ties go to the earlier arrival.
  int64_t priority = 0;
  double arrivalTime = 0.0;
  /// The most tokens this request may ever hold (prompt + max_new_tokens,
  /// capped by the model's context).
  int64_t maxTotalTokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finishReason = FinishReason::kNone;
  int64_t numPreemptions = 0;
  /// Prompt tokens found in the prefix cache when it was first scheduled.
  int64_t numCachedPromptTokens = -1;
  /// Why the request failed (FinishReason::kError).
  std::string error;
  /// Asynchronous scheduling: while the step that samples this request's
  /// next token is in flight, the last of `tokens` is kPendingToken, a
  /// placeholder for that step's logits row `pendingRow`; the next step
  /// takes the token from the device (Batch::sampledTokens). -1 otherwise.
  int32_t pendingRow = -1;
  static constexpr int32_t kPendingToken = -1;

  bool hasPendingToken() const { return pendingRow >= 0; }

  int64_t numTokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t numOutputTokens() const { return numTokens() - numPromptTokens; }
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_REQUEST_H
