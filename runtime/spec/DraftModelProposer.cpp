//===- DraftModelProposer.cpp - Draft tokens from a small model -----------===//

#include "runtime/spec/DraftModelProposer.h"

#include <algorithm>

namespace infer::spec {

/// SplitMix64: the draft's RNG seed from the request's seed and length, so a
/// proposal depends only on its own request.
static uint64_t mixSeed(uint64_t seed, uint64_t length) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (length + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct DraftModelProposer::Active {
  size_t index;
  SeqState *state;
  /// Tokens to feed in the next forward call.
  std::vector<int32_t> pending;
  Sampler sampler;
};

DraftModelProposer::DraftModelProposer(std::unique_ptr<Backend> backend,
                                       int64_t blockSize,
                                       DraftContextPolicy policy)
    : backend_(std::move(backend)), blocks_(backend_->numBlocks(), blockSize),
      policy_(policy) {}

std::vector<int32_t>
DraftModelProposer::contextOf(const std::vector<int32_t> &tokens) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t sinks = std::min(policy_.sinkTokens, n);
  if (policy_.window <= 0 || n <= sinks + policy_.window)
    return tokens;
  // The recent part starts a whole number of chunks past the sinks, so the
  // context stays the same (the cache is reused) for `chunk` tokens.
  const int64_t chunk =
      std::max<int64_t>(policy_.window / 2, blocks_.blockSize());
  const int64_t begin = sinks + (n - sinks - policy_.window) / chunk * chunk;
  std::vector<int32_t> context(tokens.begin(), tokens.begin() + sinks);
  context.insert(context.end(), tokens.begin() + begin, tokens.end());
  return context;
}

void DraftModelProposer::reserve(std::vector<Active> &active) {
  std::vector<Active> fitting;
  for (Active &a : active) {
    const int64_t total =
        static_cast<int64_t>(a.state->cached.size() + a.pending.size());
    while (!blocks_.reserve(a.state->blocks, total).isOk()) {
      // The least recently used sequence not drafting now gives its blocks.
      auto victim = seqs_.end();
      for (auto it = seqs_.begin(); it != seqs_.end(); ++it) {
        const bool drafting =
            std::any_of(active.begin(), active.end(), [&](const Active &b) {
              return b.state == &it->second;
            });
        if (!drafting && (victim == seqs_.end() ||
                          it->second.lastUse < victim->second.lastUse))
          victim = it;
      }
      if (victim == seqs_.end())
        break;
      blocks_.release(victim->second.blocks);
      seqs_.erase(victim);
    }
    if (static_cast<int64_t>(a.state->blocks.size()) * blocks_.blockSize() >=
        total) {
      fitting.push_back(std::move(a));
      continue;
    }
    // Alone it does not fit: it drafts nothing more this step and starts
    // over next time.
    a.state->cached.clear();
    blocks_.release(a.state->blocks);
  }
  active = std::move(fitting);
}

void DraftModelProposer::release(int64_t seqId) {
  auto it = seqs_.find(seqId);
  if (it == seqs_.end())
    return;
  blocks_.release(it->second.blocks);
  seqs_.erase(it);
}

StatusOr<Logits> DraftModelProposer::forward(std::vector<Active> &active) {
  Batch batch;
  batch.queryStartLoc.push_back(0);
  for (Active &a : active)
    batch.maxBlocksPerSeq = std::max<int64_t>(
        batch.maxBlocksPerSeq, static_cast<int64_t>(a.state->blocks.size()));
  for (Active &a : active) {
    int64_t p = static_cast<int64_t>(a.state->cached.size());
    for (int32_t token : a.pending) {
      batch.tokenIds.push_back(token);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slotMapping.push_back(blocks_.slot(a.state->blocks, p));
      ++p;
    }
    batch.logitsIndices.push_back(static_cast<int32_t>(batch.tokenIds.size()) -
                                  1);
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(static_cast<int32_t>(p));
    std::vector<int32_t> row = a.state->blocks;
    row.resize(batch.maxBlocksPerSeq, -1);
    batch.blockTables.insert(batch.blockTables.end(), row.begin(), row.end());
  }
  INFER_ASSIGN_OR_RETURN(Logits logits, backend_->forward(batch));
  for (Active &a : active) {
    a.state->cached.insert(a.state->cached.end(), a.pending.begin(),
                           a.pending.end());
    a.pending.clear();
  }
  return logits;
}

StatusOr<std::vector<Proposal>>
DraftModelProposer::propose(const std::vector<ProposalRequest> &requests) {
  std::vector<Proposal> proposals(requests.size());
  std::vector<Active> active;
  int64_t maxK = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest &r = requests[i];
    if (r.numTokens <= 0 || r.tokens->empty())
      continue;
    SeqState &state = seqs_[r.seqId];
    state.lastUse = ++clock_;
    const std::vector<int32_t> context = contextOf(*r.tokens);
    // Keep the cached prefix the accepted tokens still agree with; at least
    // the last token is fed again for its logits.
    const auto mismatch =
        std::mismatch(state.cached.begin(), state.cached.end(), context.begin(),
                      context.end());
    size_t keep = static_cast<size_t>(mismatch.first - state.cached.begin());
    keep = std::min(keep, context.size() - 1);
    state.cached.resize(keep);
    Sampler sampler = *r.sampler;
    sampler.reseed(mixSeed(r.sampler->params().seed, r.tokens->size()));
    active.push_back(Active{
        i, &state, std::vector<int32_t>(context.begin() + keep, context.end()),
        std::move(sampler)});
    maxK = std::max(maxK, r.numTokens);
  }
  for (int64_t step = 0; step < maxK; ++step) {
    std::vector<Active> running;
    for (Active &a : active)
      if (requests[a.index].numTokens > step)
        running.push_back(std::move(a));
    active.clear();
    reserve(running);
    if (running.empty())
      break;
    INFER_ASSIGN_OR_RETURN(Logits logits, forward(running));
    for (size_t b = 0; b < running.size(); ++b) {
      Active &a = running[b];
      Proposal &proposal = proposals[a.index];
      const float *row = logits.row(static_cast<int64_t>(b));
      int32_t token;
      if (a.sampler.params().greedy()) {
        token = a.sampler.argmax(row, logits.vocab);
      } else {
        std::vector<double> q = a.sampler.probabilities(row, logits.vocab);
        token = a.sampler.sampleFrom(q);
        proposal.probs.push_back(std::move(q));
      }
      a.sampler.record(token);
      proposal.tokens.push_back(token);
      a.pending.push_back(token);
    }
    active = std::move(running);
  }
  return proposals;
}

} // namespace infer::spec
