//===- NgramProposer.cpp - Prompt-lookup draft tokens ---------------------===//

#include "runtime/spec/NgramProposer.h"

#include <algorithm>

namespace infer::spec {

std::vector<int32_t> lookupNgram(const std::vector<int32_t> &tokens,
                                 int64_t minN, int64_t maxN, int64_t k) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k <= 0)
    return {};
  for (int64_t n = std::min(maxN, size - 1); n >= std::max<int64_t>(minN, 1);
       --n) {
    const auto suffix = tokens.end() - n;
    // The match must end before the suffix itself; the latest one wins.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, tokens.end(), tokens.begin() + start))
        continue;
      const int64_t from = start + n;
      const int64_t to = std::min(size, from + k);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

StatusOr<std::vector<Proposal>>
NgramProposer::propose(const std::vector<ProposalRequest> &requests) {
  std::vector<Proposal> proposals(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    proposals[i].tokens =
        lookupNgram(*requests[i].tokens, minN_, maxN_, requests[i].numTokens);
  return proposals;
}

} // namespace infer::spec
