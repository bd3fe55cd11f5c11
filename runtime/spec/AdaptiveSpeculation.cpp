//===- AdaptiveSpeculation.cpp - Choosing k per step ----------------------===//

#include "runtime/spec/AdaptiveSpeculation.h"

#include <algorithm>
#include <cmath>

namespace infer::spec {

AdaptiveSpeculation::AdaptiveSpeculation(const AdaptiveOptions &options)
    : options_(options), acceptance_(options.initialAcceptance) {}

void AdaptiveSpeculation::observe(int64_t judged, int64_t accepted) {
  if (judged <= 0)
    return;
  const double rate =
      static_cast<double>(accepted) / static_cast<double>(judged);
  acceptance_ =
      (1.0 - options_.smoothing) * acceptance_ + options_.smoothing * rate;
}

double AdaptiveSpeculation::goodput(int64_t k, int64_t numSeqs,
                                    int64_t baseTokens) const {
  const double a = std::min(acceptance_, 1.0 - 1e-9);
  const double emitted = (1.0 - std::pow(a, static_cast<double>(k + 1))) /
                         (1.0 - a) * static_cast<double>(numSeqs);
  const double cost =
      1.0 +
      options_.perTokenCost * static_cast<double>(baseTokens + numSeqs * k) +
      options_.draftStepCost * static_cast<double>(k);
  return emitted / cost;
}

int64_t AdaptiveSpeculation::choose(int64_t numSeqs, int64_t baseTokens) const {
  if (numSeqs <= 0)
    return 0;
  int64_t best = 0;
  double bestGoodput = goodput(0, numSeqs, baseTokens);
  for (int64_t k = 1; k <= options_.maxK; ++k) {
    if (options_.tokenBudget > 0 &&
        baseTokens + numSeqs * k > options_.tokenBudget)
      break;
    const double g = goodput(k, numSeqs, baseTokens);
    if (g > bestGoodput) {
      best = k;
      bestGoodput = g;
    }
  }
  return best;
}

} // namespace infer::spec
