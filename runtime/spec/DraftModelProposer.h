//===- DraftModelProposer.h - Draft tokens from a small model ---*- C++ -*-===//
//
// A draft model with its own backend and KV-cache pool runs ahead of the
// target. Each proposal first feeds the draft the accepted tokens it has not
// cached yet, then decodes k tokens one forward call at a time (all
// sequences batched), greedily or sampled with the target request's
// transforms, keeping the distribution q each token was drawn from.
//
//   draft cache   t0 .. tn d1 .. d(k-1)        (d_k is never fed)
//   next step     t0 .. tn d1 .. dm x          m accepted, x the target's
//   rollback      keep t0 .. tn d1 .. dm, feed x (and nothing is copied:
//                 the slots of rejected drafts are simply overwritten)
//
// The draft's cache follows the target's policy. Under a window (a
// streaming target, or the draft's own context length) the draft sees the
// sink tokens and the most recent tokens, from a start that moves in whole
// chunks so that it re-reads them once per chunk, not once per token:
//
//   tokens   [ sinks | dropped ......... | recent (window .. window+chunk) ]
//   draft    [ sinks | recent ]           positions 0 .. from the start
//
// When its pool runs out, the sequences not drafting now give up their
// blocks, least recently used first (a preempted request's cache goes this
// way); a sequence that still does not fit gets no proposal this step.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H
#define INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H

#include "runtime/backend/Backend.h"
#include "runtime/spec/BlockFreeList.h"
#include "runtime/spec/Proposer.h"

#include <map>
#include <memory>

namespace infer::spec {

/// What of a sequence the draft model keeps in its cache.
struct DraftContextPolicy {
  /// Leading tokens always kept (attention sinks).
  int64_t sinkTokens = 0;
  /// Most recent tokens kept at least; 0 keeps every token.
  int64_t window = 0;
};

class DraftModelProposer : public Proposer {
public:
  /// `backend` runs the draft model with KV blocks of `blockSize` tokens.
  DraftModelProposer(std::unique_ptr<Backend> backend, int64_t blockSize,
                     DraftContextPolicy policy = {});

  std::string_view name() const override { return "draft_model"; }
  StatusOr<std::vector<Proposal>>
  propose(const std::vector<ProposalRequest> &requests) override;
  void release(int64_t seqId) override;

private:
  struct SeqState {
    /// Tokens whose keys and values are in the draft's cache.
    std::vector<int32_t> cached;
    std::vector<int32_t> blocks;
    /// When it last drafted (least recently used gives its blocks first).
    uint64_t lastUse = 0;
  };
  struct Active;

  /// The tokens of `tokens` the draft's cache holds under the policy.
  std::vector<int32_t> contextOf(const std::vector<int32_t> &tokens) const;
  /// Reserves blocks for each active sequence's next forward call; frees
  /// idle sequences' blocks when the pool runs out and drops (empties the
  /// proposal of) those that still do not fit.
  void reserve(std::vector<Active> &active);
  StatusOr<Logits> forward(std::vector<Active> &active);

  std::unique_ptr<Backend> backend_;
  BlockFreeList blocks_;
  DraftContextPolicy policy_;
  std::map<int64_t, SeqState> seqs_;
  uint64_t clock_ = 0;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H
