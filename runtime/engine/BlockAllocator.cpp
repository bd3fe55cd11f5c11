//===- BlockAllocator.cpp - Free list of KV-cache blocks ------------------===//

#include "runtime/engine/BlockAllocator.h"

namespace infer {

BlockAllocator::BlockAllocator(int64_t numBlocks) {
  // A stack whose top is block 0, so a fresh pool is used in order.
  for (int64_t b = numBlocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty())
    return std::nullopt;
  int32_t block = free_.back();
  free_.pop_back();
  return block;
}

void BlockAllocator::release(const std::vector<int32_t> &blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)
    free_.push_back(*it);
}

} // namespace infer
