//===- Sampler.cpp - Next-token choice from logits ------------------------===//

#include "runtime/engine/Sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace infer {

Sampler::Sampler(const SamplingParams &params, std::vector<int32_t> eosTokenIds)
    : params_(params), eosTokenIds_(std::move(eosTokenIds)), rng_(params.seed) {
}

bool Sampler::masked(int64_t id) const {
  return params_.ignoreEos &&
         std::find(eosTokenIds_.begin(), eosTokenIds_.end(), id) !=
             eosTokenIds_.end();
}

int32_t Sampler::sample(const float *logits, int64_t vocab) {
  int64_t best = -1;
  float bestLogit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    if (masked(i))
      continue;
    if (best < 0 || logits[i] > bestLogit) {
      best = i;
      bestLogit = logits[i];
    }
  }
  if (params_.temperature <= 0.0 || best < 0)
    return static_cast<int32_t>(std::max<int64_t>(best, 0));

  std::vector<double> weights(vocab, 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (masked(i))
      continue;
    weights[i] = std::exp((static_cast<double>(logits[i]) - bestLogit) /
                          params_.temperature);
    total += weights[i];
  }
  // A uniform double in [0, 1) from the top 53 bits: the same on every
  // standard library, unlike std::uniform_real_distribution.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (weights[i] == 0.0)
      continue;
    cumulative += weights[i];
    if (u < cumulative)
      return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(best);
}

} // namespace infer
