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
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H
#define INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H

#include "runtime/backend/Backend.h"
#include "runtime/spec/BlockFreeList.h"
#include "runtime/spec/Proposer.h"

#include <map>
#include <memory>

namespace infer::spec {

class DraftModelProposer : public Proposer {
public:
  /// `backend` runs the draft model with KV blocks of `blockSize` tokens.
  DraftModelProposer(std::unique_ptr<Backend> backend, int64_t blockSize);

  std::string_view name() const override { return "draft_model"; }
  StatusOr<std::vector<Proposal>>
  propose(const std::vector<ProposalRequest> &requests) override;
  void release(int64_t seqId) override;

private:
  struct SeqState {
    /// Tokens whose keys and values are in the draft's cache.
    std::vector<int32_t> cached;
    std::vector<int32_t> blocks;
  };
  struct Active;

  StatusOr<Logits> forward(std::vector<Active> &active);

  std::unique_ptr<Backend> backend_;
  BlockFreeList blocks_;
  std::map<int64_t, SeqState> seqs_;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_DRAFTMODELPROPOSER_H
