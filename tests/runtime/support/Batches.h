//===- Batches.h - Forward-call batches for backend tests -------*- C++ -*-===//
//
// The batches backend tests build by hand: one sequence whose KV cache is
// blocks 0, 1, ... of the pool, position p in slot p; or several, each with
// a fixed range of blocks.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_BATCHES_H
#define INFER_TESTS_RUNTIME_SUPPORT_BATCHES_H

#include "runtime/backend/Backend.h"

#include <cstdint>
#include <vector>

namespace infer::testing {

/// tokens[cached..] as the new tokens of one sequence whose first `cached`
/// tokens are in the cache already. Its block table is blocks 0 ..
/// maxBlocks - 1 (0: just enough blocks of `blockSize` for all of
/// `tokens`); logits for every new token when `allLogits`, else for the
/// last one.
Batch oneSequenceBatch(const std::vector<int32_t> &tokens, int64_t cached,
                       int64_t blockSize, int64_t maxBlocks, bool allLogits);

/// New tokens of sequence `seq` from `position` on (its first `position`
/// tokens are cached); logits for every one when `everyLogit`, else for the
/// last.
struct SequencePart {
  int seq = 0;
  int32_t position = 0;
  std::vector<int32_t> tokens;
  bool everyLogit = false;
};

/// The parts in order as one batch; sequence s owns blocks s * blocksPerSeq
/// .. (s + 1) * blocksPerSeq - 1, position p in slot s * blocksPerSeq *
/// blockSize + p.
Batch multiSequenceBatch(const std::vector<SequencePart> &parts,
                         int64_t blockSize, int64_t blocksPerSeq);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_BATCHES_H
