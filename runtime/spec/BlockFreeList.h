//===- BlockFreeList.h - KV blocks of a fixed set of sequences --*- C++ -*-===//
//
// The blocks of a pool that the verification loop and the draft model hand
// to their sequences: a free list, a sequence's block table grown on demand
// and slots computed from it (slot(p) = table[p / block_size] * block_size +
// p % block_size). The engine's block manager replaces this when the engine
// drives speculation.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SPEC_BLOCKFREELIST_H
#define INFER_RUNTIME_SPEC_BLOCKFREELIST_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace infer::spec {

class BlockFreeList {
public:
  BlockFreeList(int64_t numBlocks, int64_t blockSize)
      : numBlocks_(numBlocks), blockSize_(blockSize) {
    for (int64_t b = numBlocks - 1; b >= 0; --b)
      free_.push_back(static_cast<int32_t>(b));
  }

  int64_t blockSize() const { return blockSize_; }

  /// Grows `table` to cover `numTokens` tokens.
  Status reserve(std::vector<int32_t> &table, int64_t numTokens) {
    while (static_cast<int64_t>(table.size()) * blockSize_ < numTokens) {
      if (free_.empty())
        return resourceExhausted(
            "the KV cache is full: " + std::to_string(numTokens) +
            " tokens of a sequence do not fit in the pool of " +
            std::to_string(numBlocks_) + " blocks of " +
            std::to_string(blockSize_));
      table.push_back(free_.back());
      free_.pop_back();
    }
    return Status::ok();
  }

  void release(std::vector<int32_t> &table) {
    free_.insert(free_.end(), table.rbegin(), table.rend());
    table.clear();
  }

  int64_t slot(const std::vector<int32_t> &table, int64_t position) const {
    return static_cast<int64_t>(table[position / blockSize_]) * blockSize_ +
           position % blockSize_;
  }

private:
  int64_t numBlocks_;
  int64_t blockSize_;
  std::vector<int32_t> free_;
};

} // namespace infer::spec

#endif // INFER_RUNTIME_SPEC_BLOCKFREELIST_H
