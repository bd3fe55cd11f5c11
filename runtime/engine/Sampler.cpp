//===- Sampler.cpp - Next-token choice from logits ------------------------===//

#include "runtime/engine/Sampler.h"
#include "runtime/backend/Sampling.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace infer {

static constexpr double kNegInf = -std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// SamplingParams
//===----------------------------------------------------------------------===//

Status SamplingParams::validate() const {
  if (maxNewTokens < 0)
    return invalidArgument("max_new_tokens must be >= 0");
  if (!(temperature >= 0))
    return invalidArgument("temperature must be >= 0");
  if (topK < 0)
    return invalidArgument("top_k must be >= 0 (0 disables it)");
  if (!(topP > 0 && topP <= 1))
    return invalidArgument("top_p must be in (0, 1]");
  if (!(minP >= 0 && minP <= 1))
    return invalidArgument("min_p must be in [0, 1]");
  if (!(repetitionPenalty > 0))
    return invalidArgument("repetition_penalty must be > 0");
  if (!std::isfinite(presencePenalty) || !std::isfinite(frequencyPenalty))
    return invalidArgument("presence and frequency penalties must be finite");
  if (logprobs < 0)
    return invalidArgument("logprobs must be >= 0");
  if (n < 1)
    return invalidArgument("n must be >= 1");
  for (const std::string &stop : stopStrings)
    if (stop.empty())
      return invalidArgument("stop strings must not be empty");
  return Status::ok();
}

SamplingParams completionParams(const SamplingParams &params, int64_t index) {
  SamplingParams p = params;
  p.seed = params.seed + static_cast<uint64_t>(index);
  p.n = 1;
  return p;
}

//===----------------------------------------------------------------------===//
// TokenHistory
//===----------------------------------------------------------------------===//

TokenHistory::TokenHistory(const std::vector<int32_t> &promptTokenIds)
    : prompt_(promptTokenIds.begin(), promptTokenIds.end()) {}

void TokenHistory::addOutput(int32_t token) { ++output_[token]; }

bool TokenHistory::seen(int32_t token) const {
  return prompt_.count(token) || output_.count(token);
}

int64_t TokenHistory::outputCount(int32_t token) const {
  auto it = output_.find(token);
  return it == output_.end() ? 0 : it->second;
}

//===----------------------------------------------------------------------===//
// Sampler
//===----------------------------------------------------------------------===//

Sampler::Sampler(const SamplingParams &params, std::vector<int32_t> eosTokenIds,
                 const std::vector<int32_t> &promptTokenIds)
    : params_(params), eosTokenIds_(std::move(eosTokenIds)),
      penalized_(params.repetitionPenalty != 1.0 ||
                 params.presencePenalty != 0.0 ||
                 params.frequencyPenalty != 0.0),
      history_(penalized_ ? TokenHistory(promptTokenIds) : TokenHistory()),
      rng_(params.seed) {}

bool Sampler::masked(int64_t id) const {
  return params_.ignoreEos &&
         std::find(eosTokenIds_.begin(), eosTokenIds_.end(), id) !=
             eosTokenIds_.end();
}

std::vector<double> Sampler::adjustedLogits(const float *logits,
                                            int64_t vocab) const {
  std::vector<double> out(logits, logits + vocab);
  for (int64_t i = 0; i < vocab && penalized_; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (params_.repetitionPenalty != 1.0 && history_.seen(id))
      out[i] = out[i] > 0 ? out[i] / params_.repetitionPenalty
                          : out[i] * params_.repetitionPenalty;
    const int64_t count = history_.outputCount(id);
    out[i] -= params_.frequencyPenalty * static_cast<double>(count) +
              params_.presencePenalty * (count > 0 ? 1.0 : 0.0);
  }
  for (int64_t i = 0; i < vocab; ++i)
    if (masked(i))
      out[i] = kNegInf;
  return out;
}

std::vector<double>
Sampler::weights(const std::vector<double> &adjusted) const {
  return filteredWeights(adjusted, params_.temperature, params_.topK,
                         params_.topP, params_.minP);
}

int32_t Sampler::argmax(const float *logits, int64_t vocab) const {
  return static_cast<int32_t>(
      std::max<int64_t>(argmaxOf(adjustedLogits(logits, vocab)), 0));
}

std::vector<double> Sampler::probabilities(const float *logits,
                                           int64_t vocab) const {
  if (params_.greedy()) {
    std::vector<double> p(vocab, 0.0);
    p[argmax(logits, vocab)] = 1.0;
    return p;
  }
  std::vector<double> w = weights(adjustedLogits(logits, vocab));
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (total > 0)
    for (double &x : w)
      x /= total;
  return w;
}

double Sampler::uniform() {
  // A uniform double in [0, 1) from the top 53 bits: the same on every
  // standard library, unlike std::uniform_real_distribution.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::sampleFrom(const std::vector<double> &probs) {
  return drawFromWeights(probs, uniform());
}

bool Sampler::backendSamplable() const {
  return !penalized_ &&
         (!params_.ignoreEos ||
          eosTokenIds_.size() <= size_t(RowSampling::kMaxMaskedIds));
}

RowSampling Sampler::nextRowSampling() {
  RowSampling row;
  row.temperature = params_.temperature;
  row.topK = params_.topK;
  row.topP = params_.topP;
  row.minP = params_.minP;
  if (params_.ignoreEos)
    for (int32_t id : eosTokenIds_)
      if (row.numMaskedIds < RowSampling::kMaxMaskedIds)
        row.maskedIds[row.numMaskedIds++] = id;
  if (!params_.greedy())
    row.uniform = uniform();
  return row;
}

int32_t Sampler::sample(const float *logits, int64_t vocab) {
  std::vector<double> adjusted = adjustedLogits(logits, vocab);
  int32_t token =
      static_cast<int32_t>(std::max<int64_t>(argmaxOf(adjusted), 0));
  if (!params_.greedy() && argmaxOf(adjusted) >= 0)
    token = sampleFrom(weights(adjusted));
  record(token);
  return token;
}

TokenLogprobs Sampler::logprobs(const float *logits, int64_t vocab,
                                int32_t chosen) const {
  std::vector<double> adjusted = adjustedLogits(logits, vocab);
  std::vector<double> logp(vocab, kNegInf);
  if (params_.greedy()) {
    const int64_t best = argmaxOf(adjusted);
    double total = 0.0;
    for (int64_t i = 0; i < vocab && best >= 0; ++i)
      if (adjusted[i] != kNegInf)
        total += std::exp(adjusted[i] - adjusted[best]);
    for (int64_t i = 0; i < vocab && best >= 0; ++i)
      if (adjusted[i] != kNegInf)
        logp[i] = adjusted[i] - adjusted[best] - std::log(total);
  } else {
    std::vector<double> w = weights(adjusted);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (int64_t i = 0; i < vocab; ++i)
      if (w[i] > 0)
        logp[i] = std::log(w[i] / total);
  }
  TokenLogprobs out;
  out.token = chosen;
  out.logprob = chosen >= 0 && chosen < vocab ? logp[chosen] : kNegInf;
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t n = std::min<int64_t>(params_.logprobs, vocab);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logp[a] != logp[b] ? logp[a] > logp[b] : a < b;
                    });
  for (int64_t i = 0; i < n; ++i)
    out.top.emplace_back(ids[i], logp[ids[i]]);
  return out;
}

//===----------------------------------------------------------------------===//
// StopChecker
//===----------------------------------------------------------------------===//

/// Tokens before the prompt's end that give incremental decoding its context
/// (vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
static constexpr size_t kDetokenizerContext = 5;

StopChecker::StopChecker(const SamplingParams &params,
                         std::vector<int32_t> eosTokenIds,
                         const Tokenizer *tokenizer,
                         const std::vector<int32_t> &promptTokenIds)
    : params_(params), eosTokenIds_(std::move(eosTokenIds)),
      tokenizer_(tokenizer), ids_(promptTokenIds) {
  readOffset_ = ids_.size();
  prefixOffset_ =
      readOffset_ > kDetokenizerContext ? readOffset_ - kDetokenizerContext : 0;
}

static bool contains(const std::vector<int32_t> &ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

StopReason StopChecker::append(int32_t token) {
  ++numOutput_;
  if (!params_.ignoreEos && contains(eosTokenIds_, token))
    return StopReason::kEos;
  if (contains(params_.stopTokenIds, token))
    return StopReason::kStopToken;
  if (tokenizer_) {
    ids_.push_back(token);
    DetokenizerState state{prefixOffset_, readOffset_};
    const size_t before = text_.size();
    text_ += tokenizer_->decodeIncremental(ids_, state, true);
    prefixOffset_ = state.prefixOffset;
    readOffset_ = state.readOffset;
    // Only a match that ends in the new text is new; the earliest wins.
    size_t cut = std::string::npos;
    for (const std::string &stop : params_.stopStrings) {
      const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      const size_t at = text_.find(stop, from);
      if (at != std::string::npos)
        cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      return StopReason::kStopString;
    }
  }
  if (numOutput_ >= params_.maxNewTokens)
    return StopReason::kLength;
  return StopReason::kNone;
}

} // namespace infer
