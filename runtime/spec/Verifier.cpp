//===- Verifier.cpp - Accepting draft tokens against the target -----------===//

#include "runtime/spec/Verifier.h"

namespace infer::spec {

/// Appends `token`, chosen at `row`, to the verification and the history.
static void emit(Verification &v, Sampler &sampler, const float *row,
                 int64_t vocab, int32_t token) {
  if (sampler.params().logprobs > 0)
    v.logprobs.push_back(sampler.logprobs(row, vocab, token));
  sampler.record(token);
  v.tokens.push_back(token);
}

static Verification verifyGreedy(Sampler &sampler, const Logits &logits,
                                 int64_t firstRow, const Proposal &proposal) {
  Verification v;
  const int64_t k = static_cast<int64_t>(proposal.tokens.size());
  for (int64_t i = 0; i <= k; ++i) {
    const float *row = logits.row(firstRow + i);
    const int32_t best = sampler.argmax(row, logits.vocab);
    emit(v, sampler, row, logits.vocab, best);
    if (i == k)
      break;
    ++v.numJudged;
    if (best != proposal.tokens[i])
      break;
    ++v.numAccepted;
  }
  return v;
}

static Verification verifySampled(Sampler &sampler, const Logits &logits,
                                  int64_t firstRow, const Proposal &proposal) {
  Verification v;
  const int64_t k = static_cast<int64_t>(proposal.tokens.size());
  for (int64_t i = 0; i <= k; ++i) {
    const float *row = logits.row(firstRow + i);
    std::vector<double> p = sampler.probabilities(row, logits.vocab);
    if (i == k) {
      emit(v, sampler, row, logits.vocab, sampler.sampleFrom(p));
      break;
    }
    const int32_t draft = proposal.tokens[i];
    const bool pointMass = proposal.probs.empty();
    const double q = pointMass ? 1.0 : proposal.probs[i][draft];
    ++v.numJudged;
    // Accept with probability min(1, p / q); u * q < p avoids dividing by 0.
    if (q > 0 && sampler.uniform() * q < p[draft]) {
      emit(v, sampler, row, logits.vocab, draft);
      ++v.numAccepted;
      continue;
    }
    std::vector<double> residual = p;
    double mass = 0.0;
    for (size_t t = 0; t < residual.size(); ++t) {
      const double qt = pointMass
                            ? (static_cast<int32_t>(t) == draft ? 1.0 : 0.0)
                            : proposal.probs[i][t];
      residual[t] = std::max(0.0, p[t] - qt);
      mass += residual[t];
    }
    // p == q leaves no residual mass (rejection then has probability 0,
    // reached only through rounding): fall back to p.
    emit(v, sampler, row, logits.vocab,
         sampler.sampleFrom(mass > 0 ? residual : p));
    break;
  }
  return v;
}

Verification verify(Sampler &sampler, const Logits &logits, int64_t firstRow,
                    const Proposal &proposal) {
  if (sampler.params().greedy())
    return verifyGreedy(sampler, logits, firstRow, proposal);
  return verifySampled(sampler, logits, firstRow, proposal);
}

} // namespace infer::spec
