//===- Batches.cpp - Forward-call batches for backend tests ---------------===//

#include "tests/runtime/support/Batches.h"

namespace infer::testing {

Batch oneSequenceBatch(const std::vector<int32_t> &tokens, int64_t cached,
                       int64_t blockSize, int64_t maxBlocks, bool allLogits) {
  Batch batch;
  const int64_t total = static_cast<int64_t>(tokens.size());
  batch.maxBlocksPerSeq =
      maxBlocks > 0 ? maxBlocks : (total + blockSize - 1) / blockSize;
  for (int64_t j = 0; j < batch.maxBlocksPerSeq; ++j)
    batch.blockTables.push_back(static_cast<int32_t>(j));
  batch.queryStartLoc = {0, static_cast<int32_t>(total - cached)};
  batch.contextLens = {static_cast<int32_t>(total)};
  for (int64_t p = cached; p < total; ++p) {
    batch.tokenIds.push_back(tokens[p]);
    batch.positions.push_back(static_cast<int32_t>(p));
    batch.slotMapping.push_back(p);
    if (allLogits || p == total - 1)
      batch.logitsIndices.push_back(static_cast<int32_t>(p - cached));
  }
  return batch;
}

Batch multiSequenceBatch(const std::vector<SequencePart> &parts,
                         int64_t blockSize, int64_t blocksPerSeq) {
  Batch batch;
  batch.queryStartLoc = {0};
  batch.maxBlocksPerSeq = blocksPerSeq;
  for (const SequencePart &p : parts) {
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      const auto position = static_cast<int32_t>(p.position + i);
      if (p.everyLogit || i + 1 == p.tokens.size())
        batch.logitsIndices.push_back(
            static_cast<int32_t>(batch.tokenIds.size()));
      batch.tokenIds.push_back(p.tokens[i]);
      batch.positions.push_back(position);
      batch.slotMapping.push_back(p.seq * blocksPerSeq * blockSize + position);
    }
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(
        static_cast<int32_t>(p.position + p.tokens.size()));
    for (int64_t b = 0; b < blocksPerSeq; ++b)
      batch.blockTables.push_back(
          static_cast<int32_t>(p.seq * blocksPerSeq + b));
  }
  return batch;
}

} // namespace infer::testing
