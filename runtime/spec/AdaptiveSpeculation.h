//===- AdaptiveSpeculation.h - Choosing k per step --------------*- C++ -*-===//
//
// SmartSpec-style choice of the number of speculative tokens: with a per-
// token acceptance rate a, a sequence speculating k tokens emits
//
//   E(k) = (1 - a^(k+1)) / (1 - a)       tokens per step
//
// while the step costs the target forward over the batch's tokens plus k
// draft steps:
//
//   cost(k) = 1 + perTokenCost * (baseTokens + numSeqs * k)
//               + k * draftStepCost
//
// (1 = the fixed cost of one target forward). The controller picks the k in
// [0, maxK] with the best goodput numSeqs * E(k) / cost(k) whose batch stays
// within the token budget; a is an exponential moving average of the
// measured acceptance. Under heavy load the extra verification tokens cost
// more than they return and k falls to 0.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_ADAPTIVESPECULATION_H
#define INFER_RUNTIME_SPEC_ADAPTIVESPECULATION_H

#include <cstdint>

namespace infer::spec {

struct AdaptiveOptions {
  int64_t maxK = 4;
  /// Weight of the newest step in the moving average.
  double smoothing = 0.2;
  /// The acceptance rate assumed before anything is measured.
  double initialAcceptance = 0.7;
  /// Cost of one scheduled token relative to a forward call's fixed cost.
  double perTokenCost = 1.0 / 256;
  /// Cost of one draft decode step relative to a target forward call.
  double draftStepCost = 0.1;
  /// Most tokens one target forward may take (max_num_batched_tokens);
  /// 0 is unlimited.
  int64_t tokenBudget = 0;
};

class AdaptiveSpeculation {
public:
  explicit AdaptiveSpeculation(const AdaptiveOptions &options);

  /// Records one step's outcome: `judged` draft tokens, `accepted` of them.
  void observe(int64_t judged, int64_t accepted);
  double acceptanceRate() const { return acceptance_; }

  /// k for a step of `numSeqs` sequences that schedule `baseTokens` tokens
  /// before speculation.
  int64_t choose(int64_t numSeqs, int64_t baseTokens) const;

  /// Expected goodput (tokens per unit cost) of speculating k tokens.
  double goodput(int64_t k, int64_t numSeqs, int64_t baseTokens) const;

private:
  AdaptiveOptions options_;
  double acceptance_;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_ADAPTIVESPECULATION_H
