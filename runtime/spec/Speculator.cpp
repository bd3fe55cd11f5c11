//===- Speculator.cpp - Speculative decoding inside the Engine ------------===//

#include "runtime/spec/Speculator.h"
#include "runtime/spec/Verifier.h"

#include <algorithm>

namespace infer::spec {

Speculator::Speculator(std::unique_ptr<spec::Proposer> drafter,
                       std::vector<int32_t> eosTokenIds,
                       std::optional<AdaptiveOptions> adaptive)
    : drafter_(std::move(drafter)), eosTokenIds_(std::move(eosTokenIds)) {
  if (adaptive)
    adaptive_.emplace(*adaptive);
}

std::vector<int32_t> Speculator::propose(const Request &request,
                                         int64_t maxTokens) {
  live_.insert(request.id);
  int64_t k = maxTokens;
  if (adaptive_) {
    const int64_t seqs = static_cast<int64_t>(live_.size());
    k = std::min(k, adaptive_->choose(seqs, seqs));
  }
  probs_.erase(request.id);
  if (k <= 0)
    return {};
  // The request's sampler as it stands: transforms and history.
  const auto promptEnd = request.tokens.begin() + request.numPromptTokens;
  Sampler sampler(request.sampling, eosTokenIds_,
                  std::vector<int32_t>(request.tokens.begin(), promptEnd));
  for (auto it = promptEnd; it != request.tokens.end(); ++it)
    sampler.record(*it);
  StatusOr<std::vector<Proposal>> proposals = drafter_->propose(
      {ProposalRequest{request.id, &request.tokens, k, &sampler}});
  if (!proposals.isOk()) {
    if (error_.isOk())
      error_ = proposals.status();
    return {};
  }
  Proposal &proposal = proposals->front();
  probs_[request.id] = std::move(proposal.probs);
  return proposal.tokens;
}

std::vector<int32_t> Speculator::verify(const Request &request,
                                        const std::vector<int32_t> &draft,
                                        const Logits &rows, int64_t firstRow,
                                        Sampler &sampler) {
  Proposal proposal;
  proposal.tokens = draft;
  auto it = probs_.find(request.id);
  if (it != probs_.end()) {
    proposal.probs = std::move(it->second);
    probs_.erase(it);
  }
  // The engine may have shortened the proposal.
  if (!proposal.probs.empty())
    proposal.probs.resize(draft.size());
  const bool vocabMatches =
      std::all_of(proposal.probs.begin(), proposal.probs.end(),
                  [&](const std::vector<double> &q) {
                    return static_cast<int64_t>(q.size()) == rows.vocab;
                  });
  if (!vocabMatches) {
    if (error_.isOk())
      error_ = invalidArgument("the draft model's vocabulary differs from "
                               "the target's");
    proposal.probs.clear();
  }
  Verification v = spec::verify(sampler, rows, firstRow, proposal);
  SpecStats step;
  step.numSteps = 1;
  step.numProposed = static_cast<int64_t>(draft.size());
  step.numJudged = v.numJudged;
  step.numAccepted = v.numAccepted;
  step.numEmitted = static_cast<int64_t>(v.tokens.size());
  perRequest_[request.id].add(step);
  total_.add(step);
  if (adaptive_)
    adaptive_->observe(v.numJudged, v.numAccepted);
  return v.tokens;
}

void Speculator::onFinished(RequestId id) {
  live_.erase(id);
  probs_.erase(id);
  drafter_->release(static_cast<int64_t>(id));
}

SpecStats Speculator::stats(RequestId id) const {
  auto it = perRequest_.find(id);
  return it == perRequest_.end() ? SpecStats() : it->second;
}

} // namespace infer::spec
