//===- Verifier.h - Accepting draft tokens ----------------------*- C++ -*-===//
//
// Given the target's logits for the k + 1 positions of a proposal (the last
// accepted token, then each draft token), keeps a prefix of the drafts and
// adds one token of the target's own:
//
//   greedy    accept d_i while d_i == argmax p_i; then argmax p at the first
//             mismatch (or the bonus position k when all match). The output
//             is exactly non-speculative greedy decoding.
//   sampling  accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); on
//             rejection draw from norm(max(0, p_i - q_i)); when all k are
//             accepted draw a bonus token from p_k (Leviathan et al. 2023,
//             Chen et al. 2023). p and q are the processed distributions of
//             the same sampling transforms, so the output follows the
//             target's processed distribution.
//
// p_i is computed with the history that includes d_1 .. d_{i-1}, so
// penalties see the same tokens as in non-speculative decoding.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_VERIFIER_H
#define INFER_RUNTIME_SPEC_VERIFIER_H

#include "runtime/backend/Backend.h"
#include "runtime/spec/Proposer.h"

namespace infer::spec {

struct Verification {
  /// Accepted draft tokens, then the target's token.
  std::vector<int32_t> tokens;
  int64_t numAccepted = 0;
  /// Draft tokens the target judged: the accepted ones and the first
  /// rejected one (drafts after a rejection are never judged).
  int64_t numJudged = 0;
  /// One per token when the request asks for logprobs.
  std::vector<TokenLogprobs> logprobs;
};

/// Verifies `proposal` with target rows firstRow .. firstRow + k of
/// `logits`; records every returned token in `sampler`'s history and draws
/// randomness from its RNG (one draw per judged draft token, one more for a
/// resampled or bonus token; none when greedy).
Verification verify(Sampler &sampler, const Logits &logits, int64_t firstRow,
                    const Proposal &proposal);

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_VERIFIER_H
