//===- Proposer.h - The engine's hook for speculative decoding --*- C++ -*-===//
//
// A proposer (a draft model, n-gram prompt lookup, ...) guesses the next k
// tokens of a decoding request. The engine schedules the request's pending
// token and the k drafts in one forward call and asks for k + 1 rows of
// logits, row i predicting the token after draft i:
//
//   tokens     ... t41 | t42 (sampled, not yet computed)
//   drafts                    d0  d1  d2                       k = 3
//   scheduled  t42 d0 d1 d2   (4 tokens, 4 slots, logits_indices x4)
//   rows       r0  r1  r2  r3   r0 follows t42, r3 follows d2
//
// verify() returns the accepted drafts plus one token of the target: with
// d0 d1 accepted and r2 giving x, the request gains d0 d1 x, its computed
// tokens become 42 + 3 (t42 d0 d1: the slot of d2 is rolled back), and the
// blocks past them are freed.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_PROPOSER_H
#define INFER_RUNTIME_ENGINE_PROPOSER_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Request.h"
#include "runtime/engine/Sampler.h"

#include <cstdint>
#include <vector>

namespace infer {

class Proposer {
public:
  virtual ~Proposer();

  /// At most `maxTokens` draft tokens to follow `request.tokens` (fewer or
  /// none is fine: an empty proposal decodes normally). Called once per step
  /// for every running request that is decoding, before scheduling.
  virtual std::vector<int32_t> propose(const Request &request,
                                       int64_t maxTokens) = 0;

  /// The tokens the request gains from one verification: the accepted
  /// prefix of `draft`, then one token chosen from the row after it.
  /// `rows` are the k + 1 logits rows of the request, from `firstRow` on.
  /// The default samples each row with the request's sampler and accepts a
  /// draft while it equals the sample: exact for greedy, and distributed as
  /// the target model for sampling. Rejection sampling overrides this.
  virtual std::vector<int32_t> verify(const Request &request,
                                      const std::vector<int32_t> &draft,
                                      const Logits &rows, int64_t firstRow,
                                      Sampler &sampler);

  /// After verification: `numAccepted` of `numProposed` drafts became part
  /// of `request.tokens`. A drafter with its own cache rolls back to it.
  virtual void onVerified(const Request &request, int64_t numProposed,
                          int64_t numAccepted) {}

  /// The request finished or was aborted: drop its state.
  virtual void onFinished(RequestId id) {}
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_PROPOSER_H
