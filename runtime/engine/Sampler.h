//===- Sampler.h - Next-token choice from logits ----------------*- C++ -*-===//
//
// One request's sampling, with vLLM's semantics. A row of logits becomes a
// distribution in a fixed order:
//
//   logits ─▶ penalties ─▶ EOS mask ─▶ / temperature ─▶ min-p ─▶ top-k
//          ─▶ top-p ─▶ softmax ─▶ one uniform draw (inverse CDF)
//
// repetition penalty: every token of the prompt and the output
//   (logit > 0 ? logit / r : logit * r); frequency and presence penalties:
//   output tokens only (logit -= f * count + p * [count > 0]).
// Temperature 0 is greedy: the argmax of the penalized logits, lowest id on
// ties; no random draw.
//
// The RNG (mt19937_64 seeded with the request's seed) belongs to the request
// and advances exactly one draw per sampled token, so a seeded request gets
// the same tokens whatever else runs in its batch.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_SAMPLER_H
#define INFER_RUNTIME_ENGINE_SAMPLER_H

#include "runtime/backend/Sampling.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace infer {

class Tokenizer;

struct SamplingParams {
  int64_t maxNewTokens = 16;
  /// 0 = greedy (argmax, lowest id on ties); > 0 samples softmax(logits / T).
  double temperature = 0.0;
  /// Keep the k most likely tokens; 0 keeps all.
  int64_t topK = 0;
  /// Keep the smallest set of most likely tokens whose mass reaches top_p.
  double topP = 1.0;
  /// Drop tokens less likely than min_p times the most likely one.
  double minP = 0.0;
  /// > 1 discourages every token of the prompt and the output.
  double repetitionPenalty = 1.0;
  /// Subtracted once from every token the output already holds.
  double presencePenalty = 0.0;
  /// Subtracted per occurrence in the output.
  double frequencyPenalty = 0.0;
  uint64_t seed = 0;
  /// Never choose an EOS id and never stop at one (HF min_new_tokens).
  bool ignoreEos = false;
  /// Ids that end the request (kept in the output ids), even with
  /// ignore_eos.
  std::vector<int32_t> stopTokenIds;
  /// Texts that end the request; the output text ends before the first one.
  std::vector<std::string> stopStrings;
  /// Top-N log-probabilities returned per sampled token; 0 returns none.
  int64_t logprobs = 0;
  /// Completions of the request; completion i samples with seed + i.
  int64_t n = 1;

  bool greedy() const { return temperature <= 0.0; }
  Status validate() const;
};

/// The parameters of completion `index` of an n > 1 request: the same
/// transforms, seed + index, n = 1.
SamplingParams completionParams(const SamplingParams &params, int64_t index);

/// Log-probabilities of one sampled position: the chosen token's and the
/// top N (most likely first, lowest id on ties).
struct TokenLogprobs {
  int32_t token = 0;
  double logprob = 0.0;
  std::vector<std::pair<int32_t, double>> top;
};

/// The tokens a request has seen, for penalties: the prompt as a set, the
/// output with counts.
class TokenHistory {
public:
  TokenHistory() = default;
  explicit TokenHistory(const std::vector<int32_t> &promptTokenIds);

  void addOutput(int32_t token);
  bool seen(int32_t token) const;
  int64_t outputCount(int32_t token) const;

private:
  std::unordered_set<int32_t> prompt_;
  std::unordered_map<int32_t, int64_t> output_;
};

/// Chooses tokens for one request (one completion).
class Sampler {
public:
  Sampler(const SamplingParams &params, std::vector<int32_t> eosTokenIds,
          const std::vector<int32_t> &promptTokenIds = {});

  /// Chooses the next token and records it in the history.
  int32_t sample(const float *logits, int64_t vocab);

  /// The processed distribution of a row (sums to 1; filtered tokens are
  /// 0). Greedy requests get a point mass on the greedy token.
  std::vector<double> probabilities(const float *logits, int64_t vocab) const;
  /// A token drawn from `probs` (unnormalized weights are fine) with one
  /// draw of the request's RNG.
  int32_t sampleFrom(const std::vector<double> &probs);
  /// The greedy token of a row under the current history.
  int32_t argmax(const float *logits, int64_t vocab) const;
  /// A uniform double in [0, 1): one draw of the request's RNG.
  double uniform();
  /// Whether a backend can choose this request's tokens
  /// (Backend::forwardSample): no penalties, which need the history, and
  /// at most RowSampling::kMaxMaskedIds masked ids.
  bool backendSamplable() const;
  /// The backend's parameters for the next token: one draw of the RNG
  /// unless greedy, as sample() makes. record() the token chosen.
  RowSampling nextRowSampling();
  /// Records a token chosen elsewhere (an accepted draft token).
  void record(int32_t token) {
    if (penalized_)
      history_.addOutput(token);
  }
  /// Restarts the RNG (a draft model's copy of the request's sampler).
  void reseed(uint64_t seed) { rng_.seed(seed); }

  /// Log-softmax of the processed distribution (temperature 1 when
  /// greedy): the chosen token's and the top params().logprobs.
  TokenLogprobs logprobs(const float *logits, int64_t vocab,
                         int32_t chosen) const;

  const SamplingParams &params() const { return params_; }
  const std::vector<int32_t> &eosTokenIds() const { return eosTokenIds_; }
  /// The tokens seen so far; kept only for requests with penalties (empty
  /// otherwise: nothing reads it).
  const TokenHistory &history() const { return history_; }

private:
  bool masked(int64_t id) const;
  /// Penalized logits with masked ids at -inf.
  std::vector<double> adjustedLogits(const float *logits, int64_t vocab) const;
  /// Unnormalized weights after temperature and the filters.
  std::vector<double> weights(const std::vector<double> &adjusted) const;

  SamplingParams params_;
  std::vector<int32_t> eosTokenIds_;
  /// Whether a penalty reads the history (repetition, presence or
  /// frequency): without one the sampler keeps none, a hash table insert a
  /// token saved on the engine's host work.
  bool penalized_;
  TokenHistory history_;
  std::mt19937_64 rng_;
};

/// Why a request stopped after a token.
enum class StopReason { kNone, kEos, kStopToken, kStopString, kLength };

/// Follows one request's output: detokenizes it incrementally and decides
/// when it ends (EOS unless ignore_eos, stop token ids, stop strings,
/// max_new_tokens). A stop string may span several tokens; the text is cut
/// right before it.
class StopChecker {
public:
  /// `tokenizer` may be null when the request has no stop strings.
  StopChecker(const SamplingParams &params, std::vector<int32_t> eosTokenIds,
              const Tokenizer *tokenizer,
              const std::vector<int32_t> &promptTokenIds);

  /// Appends a generated token; returns why the request ends with it, or
  /// kNone.
  StopReason append(int32_t token);
  /// The output text so far (cut before a stop string that matched).
  const std::string &text() const { return text_; }
  int64_t numOutputTokens() const { return numOutput_; }

private:
  SamplingParams params_;
  std::vector<int32_t> eosTokenIds_;
  const Tokenizer *tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefixOffset_ = 0;
  size_t readOffset_ = 0;
  std::string text_;
  int64_t numOutput_ = 0;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_SAMPLER_H
