//===- SpeculativeGenerator.cpp - Generation with draft verification ------===//

#include "runtime/spec/SpeculativeGenerator.h"
#include "runtime/spec/BlockFreeList.h"
#include "runtime/spec/Verifier.h"

#include <algorithm>

namespace infer::spec {

double SpecStats::acceptanceRate() const {
  return numJudged > 0 ? static_cast<double>(numAccepted) / numJudged : 0.0;
}

double SpecStats::proposedAcceptanceRate() const {
  return numProposed > 0 ? static_cast<double>(numAccepted) / numProposed : 0.0;
}

void SpecStats::add(const SpecStats &other) {
  numSteps += other.numSteps;
  numProposed += other.numProposed;
  numJudged += other.numJudged;
  numAccepted += other.numAccepted;
  numEmitted += other.numEmitted;
}

SpecStats totalStats(const std::vector<SpeculativeOutput> &outputs) {
  SpecStats total;
  for (const SpeculativeOutput &o : outputs)
    total.add(o.stats);
  return total;
}

namespace {

struct Sequence {
  int64_t id = 0;
  const SpecRequest *request = nullptr;
  std::vector<int32_t> tokens;
  /// Tokens whose keys and values are in the target's cache.
  int64_t numCached = 0;
  std::vector<int32_t> blocks;
  Sampler sampler;
  StopChecker stop;
  bool finished = false;
  SpeculativeOutput output;
  Proposal proposal;

  Sequence(int64_t id, const SpecRequest &r, const ModelConfig &config,
           const Tokenizer *tokenizer)
      : id(id), request(&r), tokens(r.promptTokenIds),
        sampler(r.sampling, config.eosTokenIds, r.promptTokenIds),
        stop(r.sampling, config.eosTokenIds, tokenizer, r.promptTokenIds) {}

  int64_t numGenerated() const {
    return static_cast<int64_t>(output.outputTokenIds.size());
  }
};

/// The most draft tokens `seq` can use: one token of every step is the
/// target's, and positions end at max_position_embeddings.
int64_t draftLimit(const Sequence &seq, const ModelConfig &config) {
  int64_t limit = seq.request->sampling.maxNewTokens - seq.numGenerated() - 1;
  if (config.maxPositionEmbeddings > 0)
    limit = std::min(limit, config.maxPositionEmbeddings -
                                static_cast<int64_t>(seq.tokens.size()) - 1);
  return std::max<int64_t>(limit, 0);
}

/// One target forward over each sequence's uncached tokens and its drafts,
/// with logits for the last 1 + drafts positions of each.
StatusOr<Logits> verifyForward(Backend &backend, const BlockFreeList &blocks,
                               const std::vector<Sequence *> &seqs) {
  Batch batch;
  batch.queryStartLoc.push_back(0);
  for (Sequence *seq : seqs)
    batch.maxBlocksPerSeq = std::max<int64_t>(
        batch.maxBlocksPerSeq, static_cast<int64_t>(seq->blocks.size()));
  for (Sequence *seq : seqs) {
    std::vector<int32_t> fed(seq->tokens.begin() + seq->numCached,
                             seq->tokens.end());
    fed.insert(fed.end(), seq->proposal.tokens.begin(),
               seq->proposal.tokens.end());
    const int64_t rows = 1 + static_cast<int64_t>(seq->proposal.tokens.size());
    int64_t p = seq->numCached;
    for (size_t j = 0; j < fed.size(); ++j, ++p) {
      batch.tokenIds.push_back(fed[j]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slotMapping.push_back(blocks.slot(seq->blocks, p));
      if (static_cast<int64_t>(fed.size() - j) <= rows)
        batch.logitsIndices.push_back(
            static_cast<int32_t>(batch.tokenIds.size() - 1));
    }
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(static_cast<int32_t>(p));
    std::vector<int32_t> row = seq->blocks;
    row.resize(batch.maxBlocksPerSeq, -1);
    batch.blockTables.insert(batch.blockTables.end(), row.begin(), row.end());
  }
  return backend.forward(batch);
}

Status validate(const std::vector<SpecRequest> &requests,
                const ModelConfig &config, const SpeculativeOptions &options) {
  if (options.numSpeculativeTokens < 0)
    return invalidArgument("the number of speculative tokens must be >= 0");
  for (size_t i = 0; i < requests.size(); ++i) {
    const SpecRequest &r = requests[i];
    const std::string which = "request " + std::to_string(i);
    INFER_RETURN_IF_ERROR(r.sampling.validate().withContext(which));
    if (r.sampling.n != 1)
      return invalidArgument(which + ": n > 1 runs as n requests with "
                                     "completionParams (seed + i)");
    if (r.promptTokenIds.empty())
      return invalidArgument(which + ": the prompt has no tokens");
    if (config.maxPositionEmbeddings > 0 &&
        static_cast<int64_t>(r.promptTokenIds.size()) >
            config.maxPositionEmbeddings)
      return outOfRange(which + ": the prompt is longer than "
                                "max_position_embeddings");
  }
  return Status::ok();
}

/// Appends verified tokens to `seq` until one stops it.
void accept(Sequence &seq, const Verification &v, const ModelConfig &config) {
  for (size_t j = 0; j < v.tokens.size() && !seq.finished; ++j) {
    seq.tokens.push_back(v.tokens[j]);
    seq.output.outputTokenIds.push_back(v.tokens[j]);
    if (j < v.logprobs.size())
      seq.output.logprobs.push_back(v.logprobs[j]);
    ++seq.output.stats.numEmitted;
    const StopReason reason = seq.stop.append(v.tokens[j]);
    if (reason != StopReason::kNone) {
      seq.finished = true;
      seq.output.finishReason = reason;
    } else if (config.maxPositionEmbeddings > 0 &&
               static_cast<int64_t>(seq.tokens.size()) >=
                   config.maxPositionEmbeddings) {
      seq.finished = true;
    }
  }
}

} // namespace

int64_t blocksNeeded(const std::vector<SpecRequest> &requests,
                     const ModelConfig &config, int64_t numSpeculativeTokens) {
  int64_t total = 0;
  for (const SpecRequest &r : requests) {
    int64_t tokens = static_cast<int64_t>(r.promptTokenIds.size()) +
                     r.sampling.maxNewTokens + numSpeculativeTokens;
    if (config.maxPositionEmbeddings > 0)
      tokens = std::min(tokens, config.maxPositionEmbeddings);
    total += (std::max<int64_t>(tokens, 1) + config.blockSize - 1) /
             config.blockSize;
  }
  return total;
}

StatusOr<std::vector<SpeculativeOutput>>
generateSpeculative(Backend &target, const ModelConfig &config,
                    const std::vector<SpecRequest> &requests,
                    Proposer *proposer, const SpeculativeOptions &options,
                    const Tokenizer *tokenizer) {
  INFER_RETURN_IF_ERROR(validate(requests, config, options));
  BlockFreeList blocks(target.numBlocks(), config.blockSize);
  std::vector<Sequence> seqs;
  seqs.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    seqs.emplace_back(static_cast<int64_t>(i), requests[i], config, tokenizer);
    seqs.back().finished = requests[i].sampling.maxNewTokens == 0;
  }
  std::optional<AdaptiveSpeculation> adaptive;
  if (options.adaptive)
    adaptive.emplace(*options.adaptive);

  for (;;) {
    std::vector<Sequence *> live;
    int64_t baseTokens = 0;
    for (Sequence &s : seqs) {
      if (s.finished)
        continue;
      live.push_back(&s);
      baseTokens += static_cast<int64_t>(s.tokens.size()) - s.numCached;
    }
    if (live.empty())
      break;

    int64_t k = proposer ? options.numSpeculativeTokens : 0;
    if (proposer && adaptive)
      k = std::min(
          k, adaptive->choose(static_cast<int64_t>(live.size()), baseTokens));
    std::vector<ProposalRequest> proposalRequests;
    std::vector<Sequence *> proposing;
    for (Sequence *seq : live) {
      seq->proposal = Proposal();
      const int64_t seqK = std::min(k, draftLimit(*seq, config));
      if (seqK <= 0)
        continue;
      proposalRequests.push_back(
          ProposalRequest{seq->id, &seq->tokens, seqK, &seq->sampler});
      proposing.push_back(seq);
    }
    if (!proposalRequests.empty()) {
      INFER_ASSIGN_OR_RETURN(std::vector<Proposal> proposals,
                             proposer->propose(proposalRequests));
      for (size_t i = 0; i < proposing.size(); ++i)
        proposing[i]->proposal = std::move(proposals[i]);
    }

    for (Sequence *seq : live) {
      const int64_t drafts = static_cast<int64_t>(seq->proposal.tokens.size());
      INFER_RETURN_IF_ERROR(
          blocks
              .reserve(seq->blocks,
                       static_cast<int64_t>(seq->tokens.size()) + drafts)
              .withContext("request " + std::to_string(seq->id)));
    }
    INFER_ASSIGN_OR_RETURN(Logits logits, verifyForward(target, blocks, live));

    int64_t row = 0, stepJudged = 0, stepAccepted = 0;
    for (Sequence *seq : live) {
      const Proposal &proposal = seq->proposal;
      for (const std::vector<double> &q : proposal.probs)
        if (static_cast<int64_t>(q.size()) != logits.vocab)
          return invalidArgument("the draft model's vocabulary (" +
                                 std::to_string(q.size()) +
                                 ") differs from the target's (" +
                                 std::to_string(logits.vocab) + ")");
      const int64_t cachedBefore = static_cast<int64_t>(seq->tokens.size());
      Verification v = verify(seq->sampler, logits, row, proposal);
      row += 1 + static_cast<int64_t>(proposal.tokens.size());
      SpecStats &stats = seq->output.stats;
      ++stats.numSteps;
      stats.numProposed += static_cast<int64_t>(proposal.tokens.size());
      stats.numJudged += v.numJudged;
      stats.numAccepted += v.numAccepted;
      stepJudged += v.numJudged;
      stepAccepted += v.numAccepted;
      seq->numCached = cachedBefore + v.numAccepted;
      accept(*seq, v, config);
      if (seq->finished) {
        blocks.release(seq->blocks);
        if (proposer)
          proposer->release(seq->id);
      }
    }
    if (adaptive)
      adaptive->observe(stepJudged, stepAccepted);
  }

  std::vector<SpeculativeOutput> outputs;
  for (Sequence &seq : seqs) {
    seq.output.text = seq.stop.text();
    outputs.push_back(std::move(seq.output));
  }
  return outputs;
}

} // namespace infer::spec
