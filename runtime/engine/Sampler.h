//===- Sampler.h - Next-token choice from logits ------------------*- C++
//-*-===//

#ifndef INFER_RUNTIME_ENGINE_SAMPLER_H
#define INFER_RUNTIME_ENGINE_SAMPLER_H

#include <cstdint>
#include <random>
#include <vector>

namespace infer {

struct SamplingParams {
  int64_t maxNewTokens = 16;
  /// 0 = greedy (argmax, lowest id on ties); > 0 samples softmax(logits / T).
  double temperature = 0.0;
  uint64_t seed = 0;
  /// Never choose an EOS id and never stop at one (HF min_new_tokens).
  bool ignoreEos = false;
};

/// Chooses tokens for one request; the RNG is the request's own, so a seeded
/// request samples the same tokens whatever else is in the batch.
class Sampler {
public:
  Sampler(const SamplingParams &params, std::vector<int32_t> eosTokenIds);

  int32_t sample(const float *logits, int64_t vocab);

private:
  bool masked(int64_t id) const;

  SamplingParams params_;
  std::vector<int32_t> eosTokenIds_;
  std::mt19937_64 rng_;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_SAMPLER_H
