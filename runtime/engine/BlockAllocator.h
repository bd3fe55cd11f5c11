//===- BlockAllocator.h - Free list of KV-cache blocks ------------*- C++
//-*-===//

#ifndef INFER_RUNTIME_ENGINE_BLOCKALLOCATOR_H
#define INFER_RUNTIME_ENGINE_BLOCKALLOCATOR_H

#include <cstdint>
#include <optional>
#include <vector>

namespace infer {

/// Hands out the blocks of a KV-cache pool; freed blocks are reused first.
class BlockAllocator {
public:
  explicit BlockAllocator(int64_t numBlocks);

  int64_t numFree() const { return static_cast<int64_t>(free_.size()); }
  /// A free block, or nothing when the pool is exhausted.
  std::optional<int32_t> allocate();
  void release(const std::vector<int32_t> &blocks);

private:
  std::vector<int32_t> free_;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_BLOCKALLOCATOR_H
