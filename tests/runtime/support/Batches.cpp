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

} // namespace infer::testing
