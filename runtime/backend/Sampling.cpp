//===- Sampling.cpp - Token choice inside a backend -----------------------===//

#include "runtime/backend/Sampling.h"
#include "runtime/backend/Backend.h"
#include "runtime/backend/FiniteLogits.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

namespace infer {

static constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Status SamplingBatch::validate(int64_t numLogitsRows) const {
  if (static_cast<int64_t>(rows.size()) != numLogitsRows)
    return invalidArgument("sampling: " + std::to_string(rows.size()) +
                           " rows of parameters for " +
                           std::to_string(numLogitsRows) + " logits rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowSampling &r = rows[i];
    const std::string row = "sampling row " + std::to_string(i) + ": ";
    if (!(r.temperature >= 0))
      return invalidArgument(row + "temperature must be >= 0");
    if (r.topK < 0)
      return invalidArgument(row + "top_k must be >= 0 (0 disables it)");
    if (!(r.topP > 0 && r.topP <= 1))
      return invalidArgument(row + "top_p must be in (0, 1]");
    if (!(r.minP >= 0 && r.minP <= 1))
      return invalidArgument(row + "min_p must be in [0, 1]");
    if (!(r.uniform >= 0 && r.uniform < 1))
      return invalidArgument(row + "the uniform draw must be in [0, 1)");
    if (r.numMaskedIds < 0 || r.numMaskedIds > RowSampling::kMaxMaskedIds)
      return invalidArgument(row + "at most " +
                             std::to_string(RowSampling::kMaxMaskedIds) +
                             " masked ids");
  }
  return Status::ok();
}

int64_t argmaxOf(const std::vector<double> &values) {
  int64_t best = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i)
    if (values[i] != kNegInf && (best < 0 || values[i] > values[best]))
      best = i;
  return best;
}

std::vector<double> filteredWeights(const std::vector<double> &logits,
                                    double temperature, int64_t topK,
                                    double topP, double minP) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<double> w(vocab, 0.0);
  const int64_t best = argmaxOf(logits);
  if (best < 0)
    return w;
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] != kNegInf)
      w[i] = std::exp((logits[i] - logits[best]) / temperature);
  // min-p: the most likely token has weight 1.
  if (minP > 0)
    for (double &x : w)
      if (x < minP)
        x = 0.0;
  // top-k keeps every token tied with the k-th (vLLM).
  if (topK > 0 && topK < vocab) {
    std::vector<double> sorted = w;
    std::nth_element(sorted.begin(), sorted.begin() + (topK - 1), sorted.end(),
                     std::greater<double>());
    const double kth = sorted[topK - 1];
    for (double &x : w)
      if (x < kth)
        x = 0.0;
  }
  // top-p (vLLM): from the least likely up, drop tokens while the dropped
  // mass stays <= 1 - p; the most likely token always stays.
  if (topP < 1.0) {
    std::vector<int64_t> order;
    for (int64_t i = 0; i < vocab; ++i)
      if (w[i] > 0)
        order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return w[a] != w[b] ? w[a] < w[b] : a > b;
    });
    double total = 0.0;
    for (int64_t i : order)
      total += w[i];
    double dropped = 0.0;
    for (size_t j = 0; j + 1 < order.size(); ++j) {
      dropped += w[order[j]] / total;
      if (dropped > 1.0 - topP)
        break;
      w[order[j]] = 0.0;
    }
  }
  return w;
}

int32_t drawFromWeights(const std::vector<double> &weights, double uniform) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double u = uniform * total;
  double cumulative = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(weights.size()); ++i) {
    if (weights[i] == 0.0)
      continue;
    cumulative += weights[i];
    last = i;
    if (u < cumulative)
      return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

int32_t sampleRow(const float *logits, int64_t vocab, const RowSampling &row) {
  if (!allFinite(logits, vocab))
    return kNonFiniteLogitsToken;
  std::vector<double> values(logits, logits + vocab);
  for (int32_t j = 0; j < row.numMaskedIds; ++j)
    if (row.maskedIds[j] >= 0 && row.maskedIds[j] < vocab)
      values[row.maskedIds[j]] = kNegInf;
  const int64_t best = argmaxOf(values);
  if (row.greedy() || best < 0)
    return static_cast<int32_t>(std::max<int64_t>(best, 0));
  return drawFromWeights(
      filteredWeights(values, row.temperature, row.topK, row.topP, row.minP),
      row.uniform);
}

StatusOr<std::vector<int32_t>>
Backend::forwardSample(const Batch &batch, const SamplingBatch &sampling) {
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  INFER_RETURN_IF_ERROR(
      sampling.validate(static_cast<int64_t>(batch.logitsIndices.size())));
  INFER_ASSIGN_OR_RETURN(Logits logits, forward(batch));
  if (logits.rows != static_cast<int64_t>(sampling.rows.size()))
    return internalError(
        std::string(name()) + " backend: " + std::to_string(logits.rows) +
        " logits rows for " + std::to_string(sampling.rows.size()) +
        " sampled rows");
  std::vector<int32_t> tokens(logits.rows);
  for (int64_t r = 0; r < logits.rows; ++r)
    tokens[r] = sampleRow(logits.row(r), logits.vocab, sampling.rows[r]);
  return tokens;
}

Status Backend::launchSample(const Batch &batch,
                             const SamplingBatch &sampling) {
  if (launched_.size() >= kMaxLaunchesInFlight)
    return internalError(std::string(name()) +
                         " backend: " + std::to_string(launched_.size()) +
                         " launches are not collected yet");
  const Batch *run = &batch;
  Batch resolved;
  if (!batch.sampledTokens.empty()) {
    if (!hasLastSampled_)
      return invalidArgument(std::string(name()) +
                             " backend: sampled tokens without an earlier "
                             "launch to take them from");
    resolved = batch;
    resolved.sampledTokens.clear();
    const int64_t t = batch.numTokens();
    for (const Batch::SampledToken &s : batch.sampledTokens) {
      // The rows of a launch that failed feed token 0: the engine fails
      // their requests when it collects that launch.
      if (lastFailed_ && s.tokenIndex >= 0 && s.tokenIndex < t) {
        resolved.tokenIds[s.tokenIndex] = 0;
        continue;
      }
      if (s.tokenIndex < 0 || s.tokenIndex >= t || s.row < 0 ||
          s.row >= static_cast<int64_t>(lastSampled_.size()))
        return outOfRange(std::string(name()) + " backend: sampled token " +
                          std::to_string(s.tokenIndex) + " reads row " +
                          std::to_string(s.row) + " of the " +
                          std::to_string(lastSampled_.size()) +
                          " the earlier launch sampled");
      // A row that chose no token (non-finite logits) feeds token 0: the
      // engine fails that request when it collects the row.
      const int32_t token = lastSampled_[s.row];
      resolved.tokenIds[s.tokenIndex] = token < 0 ? 0 : token;
    }
    run = &resolved;
  }
  StatusOr<std::vector<int32_t>> tokens = forwardSample(*run, sampling);
  hasLastSampled_ = true;
  lastFailed_ = !tokens.isOk();
  lastSampled_ = tokens.isOk() ? tokens.value() : std::vector<int32_t>();
  launched_.push_back(std::move(tokens));
  return Status::ok();
}

StatusOr<std::vector<int32_t>> Backend::collectSample() {
  if (launched_.empty())
    return internalError(std::string(name()) +
                         " backend: no launch to collect");
  StatusOr<std::vector<int32_t>> tokens = std::move(launched_.front());
  launched_.pop_front();
  return tokens;
}

} // namespace infer
