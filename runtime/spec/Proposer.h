//===- Proposer.h - Draft tokens for speculative decoding -------*- C++ -*-===//
//
// A proposer guesses the next k tokens of running sequences; the target model
// then scores all of them in one forward call (k + 1 rows of logits per
// sequence) and the verifier keeps the longest prefix the target agrees with.
//
//   accepted context  t0 .. tn      proposal  d1 d2 d3      (k = 3)
//   target batch      [.. tn d1 d2 d3]   logits rows for tn, d1, d2, d3
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_PROPOSER_H
#define INFER_RUNTIME_SPEC_PROPOSER_H

#include "runtime/engine/Sampler.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace infer::spec {

/// One sequence's request for draft tokens.
struct ProposalRequest {
  /// Identifies the sequence across steps (a proposer may keep state).
  int64_t seqId = 0;
  /// Prompt and accepted output so far.
  const std::vector<int32_t> *tokens = nullptr;
  /// At most this many draft tokens.
  int64_t numTokens = 0;
  /// The target request's sampler: its transforms and history shape the
  /// draft distribution, so p and q are processed alike.
  const Sampler *sampler = nullptr;
};

struct Proposal {
  std::vector<int32_t> tokens;
  /// Row i: the distribution q tokens[i] was drawn from. Empty when the
  /// proposer is deterministic (q is a point mass on each token).
  std::vector<std::vector<double>> probs;
};

class Proposer {
public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  /// One proposal per request, in order (possibly shorter than asked).
  virtual StatusOr<std::vector<Proposal>>
  propose(const std::vector<ProposalRequest> &requests) = 0;
  /// Forgets a sequence that finished.
  virtual void release(int64_t seqId) { (void)seqId; }
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_PROPOSER_H
