//===- NgramProposer.h - Prompt-lookup draft tokens -------------*- C++ -*-===//
//
// Prompt lookup decoding: the last n tokens of a sequence (n from max down to
// min) are searched for earlier in the prompt and output; the tokens that
// followed the most recent earlier match are the proposal.
//
//   tokens  a b c d x y a b c      last 3 = "a b c" matched at 0
//   propose d x y                  (k = 3)
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_NGRAMPROPOSER_H
#define INFER_RUNTIME_SPEC_NGRAMPROPOSER_H

#include "runtime/spec/Proposer.h"

namespace infer::spec {

/// The tokens that followed the most recent earlier occurrence of the last n
/// tokens of `tokens`, for the largest n in [minN, maxN] that matches; at most
/// `k` of them; empty when nothing matches.
std::vector<int32_t> lookupNgram(const std::vector<int32_t> &tokens,
                                 int64_t minN, int64_t maxN, int64_t k);

class NgramProposer : public Proposer {
public:
  NgramProposer(int64_t minN, int64_t maxN) : minN_(minN), maxN_(maxN) {}

  std::string_view name() const override { return "ngram"; }
  StatusOr<std::vector<Proposal>>
  propose(const std::vector<ProposalRequest> &requests) override;

private:
  int64_t minN_;
  int64_t maxN_;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_NGRAMPROPOSER_H
