//===- Generator.cpp - Batched generation for a fixed set of requests -----===//

#include "runtime/engine/Generator.h"
#include "runtime/engine/BlockAllocator.h"

#include <algorithm>

namespace infer {

namespace {

struct Sequence {
  std::vector<int32_t> tokens;
  size_t promptLength = 0;
  /// Tokens whose keys and values are in the cache.
  int64_t numCached = 0;
  std::vector<int32_t> blocks;
  Sampler sampler;
  bool finished = false;
  FinishReason finishReason = FinishReason::kLength;

  Sequence(const GenerationRequest &r, std::vector<int32_t> eos)
      : tokens(r.promptTokenIds), promptLength(r.promptTokenIds.size()),
        sampler(r.sampling, std::move(eos)) {}
};

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Grows `seq`'s block list to cover `numTokens` tokens.
Status reserveBlocks(Sequence &seq, int64_t numTokens, int64_t blockSize,
                     BlockAllocator &allocator, int64_t poolSize) {
  while (static_cast<int64_t>(seq.blocks.size()) * blockSize < numTokens) {
    std::optional<int32_t> block = allocator.allocate();
    if (!block)
      return resourceExhausted(
          "the KV cache is full: " + std::to_string(numTokens) +
          " tokens of a sequence do not fit in the pool of " +
          std::to_string(poolSize) + " blocks of " + std::to_string(blockSize) +
          " tokens");
    seq.blocks.push_back(*block);
  }
  return Status::ok();
}

/// One forward call over the uncached tokens of `seqs`; the logits of the
/// last token of each come back in order.
StatusOr<Logits> step(Backend &backend, const GenerationConfig &config,
                      const std::vector<Sequence *> &seqs, bool allLogits) {
  Batch batch;
  batch.queryStartLoc.push_back(0);
  for (Sequence *seq : seqs)
    batch.maxBlocksPerSeq = std::max<int64_t>(
        batch.maxBlocksPerSeq, static_cast<int64_t>(seq->blocks.size()));
  for (Sequence *seq : seqs) {
    const int64_t total = static_cast<int64_t>(seq->tokens.size());
    for (int64_t p = seq->numCached; p < total; ++p) {
      batch.tokenIds.push_back(seq->tokens[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slotMapping.push_back(
          static_cast<int64_t>(seq->blocks[p / config.blockSize]) *
              config.blockSize +
          p % config.blockSize);
      if (allLogits)
        batch.logitsIndices.push_back(
            static_cast<int32_t>(batch.tokenIds.size() - 1));
    }
    if (!allLogits)
      batch.logitsIndices.push_back(
          static_cast<int32_t>(batch.tokenIds.size() - 1));
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(static_cast<int32_t>(total));
    std::vector<int32_t> row = seq->blocks;
    row.resize(batch.maxBlocksPerSeq, -1);
    batch.blockTables.insert(batch.blockTables.end(), row.begin(), row.end());
  }
  INFER_ASSIGN_OR_RETURN(Logits logits, backend.forward(batch));
  for (Sequence *seq : seqs)
    seq->numCached = static_cast<int64_t>(seq->tokens.size());
  return logits;
}

Status validateRequests(const std::vector<GenerationRequest> &requests,
                        const GenerationConfig &config) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest &r = requests[i];
    const std::string which = "request " + std::to_string(i);
    if (r.promptTokenIds.empty())
      return invalidArgument(which + ": the prompt has no tokens");
    if (config.maxPositionEmbeddings > 0 &&
        static_cast<int64_t>(r.promptTokenIds.size()) >
            config.maxPositionEmbeddings)
      return outOfRange(which + ": the prompt has " +
                        std::to_string(r.promptTokenIds.size()) +
                        " tokens, more than max_position_embeddings (" +
                        std::to_string(config.maxPositionEmbeddings) + ")");
    if (r.sampling.maxNewTokens < 0)
      return invalidArgument(which + ": max_new_tokens must be >= 0");
    if (r.sampling.temperature < 0)
      return invalidArgument(which + ": temperature must be >= 0");
  }
  return Status::ok();
}

} // namespace

int64_t blocksNeeded(const std::vector<GenerationRequest> &requests,
                     const GenerationConfig &config) {
  int64_t blocks = 0;
  for (const GenerationRequest &r : requests) {
    int64_t tokens =
        static_cast<int64_t>(r.promptTokenIds.size()) + r.sampling.maxNewTokens;
    if (config.maxPositionEmbeddings > 0)
      tokens = std::min(tokens, config.maxPositionEmbeddings);
    blocks += ceilDiv(std::max<int64_t>(tokens, 1), config.blockSize);
  }
  return blocks;
}

StatusOr<std::vector<GenerationResult>>
generate(Backend &backend, const GenerationConfig &config,
         const std::vector<GenerationRequest> &requests) {
  INFER_RETURN_IF_ERROR(validateRequests(requests, config));
  BlockAllocator allocator(backend.numBlocks());
  std::vector<Sequence> seqs;
  seqs.reserve(requests.size());
  for (const GenerationRequest &r : requests)
    seqs.emplace_back(r, config.eosTokenIds);

  auto isEos = [&](int32_t token) {
    return std::find(config.eosTokenIds.begin(), config.eosTokenIds.end(),
                     token) != config.eosTokenIds.end();
  };
  auto live = [&] {
    std::vector<Sequence *> out;
    for (Sequence &s : seqs)
      if (!s.finished)
        out.push_back(&s);
    return out;
  };
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (requests[i].sampling.maxNewTokens == 0) {
      seqs[i].finished = true;
      continue;
    }
    INFER_RETURN_IF_ERROR(
        reserveBlocks(seqs[i], static_cast<int64_t>(seqs[i].tokens.size()),
                      config.blockSize, allocator, backend.numBlocks())
            .withContext("request " + std::to_string(i)));
  }

  // The first iteration prefills every prompt; later ones decode one token
  // per live sequence.
  for (std::vector<Sequence *> batch = live(); !batch.empty(); batch = live()) {
    INFER_ASSIGN_OR_RETURN(Logits logits,
                           step(backend, config, batch, /*allLogits=*/false));
    for (size_t b = 0; b < batch.size(); ++b) {
      Sequence &seq = *batch[b];
      const size_t index = static_cast<size_t>(&seq - seqs.data());
      const int32_t token =
          seq.sampler.sample(logits.row(static_cast<int64_t>(b)), logits.vocab);
      seq.tokens.push_back(token);
      const int64_t generated =
          static_cast<int64_t>(seq.tokens.size() - seq.promptLength);
      if (!requests[index].sampling.ignoreEos && isEos(token)) {
        seq.finished = true;
        seq.finishReason = FinishReason::kStop;
      } else if (generated >= requests[index].sampling.maxNewTokens ||
                 (config.maxPositionEmbeddings > 0 &&
                  static_cast<int64_t>(seq.tokens.size()) >=
                      config.maxPositionEmbeddings)) {
        seq.finished = true;
      }
      if (seq.finished) {
        allocator.release(seq.blocks);
        seq.blocks.clear();
        continue;
      }
      INFER_RETURN_IF_ERROR(
          reserveBlocks(seq, static_cast<int64_t>(seq.tokens.size()),
                        config.blockSize, allocator, backend.numBlocks()));
    }
  }

  std::vector<GenerationResult> results;
  for (Sequence &seq : seqs) {
    GenerationResult r;
    r.outputTokenIds.assign(seq.tokens.begin() + seq.promptLength,
                            seq.tokens.end());
    r.finishReason = seq.finishReason;
    results.push_back(std::move(r));
  }
  return results;
}

StatusOr<Logits> promptLogits(Backend &backend, const GenerationConfig &config,
                              const std::vector<int32_t> &tokens) {
  GenerationRequest request;
  request.promptTokenIds = tokens;
  request.sampling.maxNewTokens = 0;
  INFER_RETURN_IF_ERROR(validateRequests({request}, config));
  BlockAllocator allocator(backend.numBlocks());
  Sequence seq(request, {});
  INFER_RETURN_IF_ERROR(reserveBlocks(seq, static_cast<int64_t>(tokens.size()),
                                      config.blockSize, allocator,
                                      backend.numBlocks()));
  return step(backend, config, {&seq}, /*allLogits=*/true);
}

} // namespace infer
