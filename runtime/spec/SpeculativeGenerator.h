//===- SpeculativeGenerator.h - Generation with verification ----*- C++ -*-===//
//
// The verification loop over Backend::forward, for a fixed set of requests
// (what `infer generate` runs; the engine's scheduler drives the same
// proposer and verifier step by step). Each step:
//
//   1. k per sequence: fixed, or chosen by AdaptiveSpeculation; never more
//      than the tokens the request may still produce, minus one.
//   2. the proposer drafts k tokens per sequence.
//   3. one target forward over the uncached tokens and the drafts, with
//      k + 1 logits rows per sequence:
//
//        seq   cached t0..t9 | t10 d1 d2 d3      logits rows t10 d1 d2 d3
//
//   4. the verifier keeps m drafts and adds one target token; the target
//      cache keeps t10 d1..dm (the rejected drafts' slots are rewritten
//      later), so the next step feeds only the new token.
//   5. the tokens go through the request's StopChecker in order; the first
//      stop cuts the rest.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_SPECULATIVEGENERATOR_H
#define INFER_RUNTIME_SPEC_SPECULATIVEGENERATOR_H

#include "runtime/backend/Backend.h"
#include "runtime/spec/AdaptiveSpeculation.h"
#include "runtime/spec/Proposer.h"

#include <optional>
#include <string>

namespace infer {
class Tokenizer;
} // namespace infer

namespace infer::spec {

/// What generation needs to know about the target model and its cache.
struct ModelConfig {
  int64_t blockSize = 16;
  /// 0 = no limit.
  int64_t maxPositionEmbeddings = 0;
  std::vector<int32_t> eosTokenIds;
};

struct SpecRequest {
  std::vector<int32_t> promptTokenIds;
  SamplingParams sampling;
};

/// KV blocks that let every request (with `numSpeculativeTokens` drafts in
/// flight) run to completion at the same time.
int64_t blocksNeeded(const std::vector<SpecRequest> &requests,
                     const ModelConfig &config, int64_t numSpeculativeTokens);

struct SpeculativeOptions {
  /// k, or the largest k when adaptive.
  int64_t numSpeculativeTokens = 4;
  /// Choose k per step (AdaptiveSpeculation) instead of always using k.
  std::optional<AdaptiveOptions> adaptive;
};

/// Counters of speculation.
struct SpecStats {
  /// Target forward calls.
  int64_t numSteps = 0;
  int64_t numProposed = 0;
  int64_t numJudged = 0;
  int64_t numAccepted = 0;
  /// Output tokens (accepted drafts plus target tokens).
  int64_t numEmitted = 0;

  /// Accepted draft tokens per judged draft token: the per-token agreement
  /// of draft and target (0 when nothing was judged).
  double acceptanceRate() const;
  /// Accepted draft tokens per proposed draft token (vLLM's
  /// draft_acceptance_rate).
  double proposedAcceptanceRate() const;
  void add(const SpecStats &other);
};

struct SpeculativeOutput {
  std::vector<int32_t> outputTokenIds;
  /// kEos, kStopToken, kStopString or kLength (max_new_tokens or the end of
  /// the positions).
  StopReason finishReason = StopReason::kLength;
  /// The detokenized output, cut before a stop string ("" without a
  /// tokenizer).
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  SpecStats stats;
};

/// Runs every request to completion with `proposer` (null: no speculation)
/// and returns the outputs in order. `tokenizer` detokenizes for stop strings
/// and may be null when no request has any.
StatusOr<std::vector<SpeculativeOutput>>
generateSpeculative(Backend &target, const ModelConfig &config,
                    const std::vector<SpecRequest> &requests,
                    Proposer *proposer, const SpeculativeOptions &options,
                    const Tokenizer *tokenizer = nullptr);

/// The sum of the outputs' counters.
SpecStats totalStats(const std::vector<SpeculativeOutput> &outputs);

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_SPECULATIVEGENERATOR_H
