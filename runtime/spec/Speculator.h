//===- Speculator.h - Speculative decoding inside the Engine ----*- C++ -*-===//
//
// Plugs a proposer of runtime/spec into the Engine's speculative-decoding
// hook (runtime/engine/Proposer.h): the engine schedules the k drafts with
// the request's pending token and hands back k + 1 logits rows; verify()
// runs greedy acceptance or rejection sampling against the draft
// distributions kept since propose(), and counts acceptance per request.
//
//   Engine::step ─▶ propose(request, k) ─▶ drafter (draft model | n-gram)
//                ─▶ forward (k + 1 rows) ─▶ verify ─▶ accepted + 1 token
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_SPECULATOR_H
#define INFER_RUNTIME_SPEC_SPECULATOR_H

#include "runtime/engine/Proposer.h"
#include "runtime/spec/AdaptiveSpeculation.h"
#include "runtime/spec/Proposer.h"
#include "runtime/spec/SpeculativeGenerator.h"

#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace infer::spec {

class Speculator : public infer::Proposer {
public:
  /// `eosTokenIds` are the model's (the drafter samples with the request's
  /// transforms, EOS mask included). With `adaptive`, k per request is
  /// chosen from the measured acceptance and the number of live requests.
  Speculator(std::unique_ptr<spec::Proposer> drafter,
             std::vector<int32_t> eosTokenIds,
             std::optional<AdaptiveOptions> adaptive = std::nullopt);

  std::vector<int32_t> propose(const Request &request,
                               int64_t maxTokens) override;
  std::vector<int32_t> verify(const Request &request,
                              const std::vector<int32_t> &draft,
                              const Logits &rows, int64_t firstRow,
                              Sampler &sampler) override;
  void onFinished(RequestId id) override;

  /// Counters of all requests so far.
  const SpecStats &stats() const { return total_; }
  /// Counters of one request (kept after it finishes).
  SpecStats stats(RequestId id) const;
  /// The first error of the drafter (a failed proposal only skips
  /// speculation for that step).
  const Status &status() const { return error_; }

private:
  std::unique_ptr<spec::Proposer> drafter_;
  std::vector<int32_t> eosTokenIds_;
  std::optional<AdaptiveSpeculation> adaptive_;
  /// The q rows of each request's pending proposal.
  std::unordered_map<RequestId, std::vector<std::vector<double>>> probs_;
  std::unordered_map<RequestId, SpecStats> perRequest_;
  std::unordered_set<RequestId> live_;
  SpecStats total_;
  Status error_;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_SPECULATOR_H
