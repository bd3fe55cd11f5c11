//===- Batch.cpp - Validation of the batch contract -----------------------===//

#include "runtime/backend/Backend.h"

#include <string>
#include <vector>

namespace infer {

static std::string str(int64_t v) { return std::to_string(v); }

Status Batch::validate(int64_t numBlocks, int64_t blockSize) const {
  const int64_t t = numTokens();
  const int64_t b = numSeqs();
  if (static_cast<int64_t>(positions.size()) != t ||
      static_cast<int64_t>(slotMapping.size()) != t)
    return invalidArgument("batch: token_ids, positions and slot_mapping "
                           "must have the same length");
  if (static_cast<int64_t>(queryStartLoc.size()) != b + 1)
    return invalidArgument("batch: query_start_loc must have " + str(b + 1) +
                           " entries (one more than context_lens)");
  if (queryStartLoc.front() != 0 || queryStartLoc.back() != t)
    return invalidArgument("batch: query_start_loc must go from 0 to " +
                           str(t));
  if (maxBlocksPerSeq < 0 ||
      static_cast<int64_t>(blockTables.size()) != b * maxBlocksPerSeq)
    return invalidArgument("batch: block_tables must be [" + str(b) + ", " +
                           str(maxBlocksPerSeq) + "]");
  for (int64_t s = 0; s < b; ++s) {
    const int64_t newTokens = queryStartLoc[s + 1] - queryStartLoc[s];
    if (newTokens < 0)
      return invalidArgument("batch: query_start_loc decreases at sequence " +
                             str(s));
    // A sequence in a batch schedules at least one token (the batch
    // contract's "all scheduled tokens"); the CUDA attention routing counts
    // on it (a batch with as many tokens as sequences is all decode rows).
    if (newTokens == 0)
      return invalidArgument("batch: sequence " + str(s) +
                             " has no new tokens (query_start_loc repeats)");
    const int64_t context = contextLens[s];
    if (context < newTokens)
      return invalidArgument("batch: sequence " + str(s) + " has " +
                             str(newTokens) + " new tokens but context_len " +
                             str(context));
    if (context > maxBlocksPerSeq * blockSize)
      return invalidArgument("batch: sequence " + str(s) + " context_len " +
                             str(context) + " does not fit its block table");
    const int64_t usedBlocks = (context + blockSize - 1) / blockSize;
    for (int64_t k = 0; k < usedBlocks; ++k) {
      const int32_t block = blockTables[s * maxBlocksPerSeq + k];
      if (block < 0 || block >= numBlocks)
        return invalidArgument("batch: sequence " + str(s) + " uses block " +
                               str(block) + " outside the pool of " +
                               str(numBlocks));
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    if (positions[i] < 0)
      return invalidArgument("batch: negative position at token " + str(i));
    if (slotMapping[i] < -1 || slotMapping[i] >= numBlocks * blockSize)
      return invalidArgument("batch: slot " + str(slotMapping[i]) +
                             " of token " + str(i) + " outside the pool");
  }
  for (int32_t idx : logitsIndices)
    if (idx < 0 || idx >= t)
      return invalidArgument("batch: logits index " + str(idx) +
                             " outside the " + str(t) + " tokens");
  std::vector<bool> fed(sampledTokens.empty() ? 0 : t, false);
  for (const SampledToken &s : sampledTokens) {
    if (s.tokenIndex < 0 || s.tokenIndex >= t)
      return invalidArgument("batch: sampled token index " + str(s.tokenIndex) +
                             " outside the " + str(t) + " tokens");
    if (s.row < 0)
      return invalidArgument("batch: negative sampled row for token " +
                             str(s.tokenIndex));
    if (fed[s.tokenIndex])
      return invalidArgument("batch: token " + str(s.tokenIndex) +
                             " is named by two sampled tokens");
    fed[s.tokenIndex] = true;
  }
  return Status::ok();
}

Status Batch::rejectSampledTokens(std::string_view backend) const {
  if (sampledTokens.empty())
    return Status::ok();
  return invalidArgument(std::string(backend) +
                         " backend: a batch with sampled tokens (from an "
                         "earlier launch) runs only through launchSample");
}

} // namespace infer
