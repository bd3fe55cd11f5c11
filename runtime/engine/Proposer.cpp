//===- Proposer.cpp - The engine's hook for speculative decoding ----------===//

#include "runtime/engine/Proposer.h"

namespace infer {

Proposer::~Proposer() = default;

std::vector<int32_t> Proposer::verify(const Request &request,
                                      const std::vector<int32_t> &draft,
                                      const Logits &rows, int64_t firstRow,
                                      Sampler &sampler) {
  std::vector<int32_t> accepted;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const int32_t token = sampler.sample(
        rows.row(firstRow + static_cast<int64_t>(i)), rows.vocab);
    accepted.push_back(token);
    if (i == draft.size() || token != draft[i])
      break;
  }
  return accepted;
}

} // namespace infer
