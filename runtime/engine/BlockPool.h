//===- BlockPool.h - Ref-counted KV blocks with a prefix cache --*- C++ -*-===//
//
// Every physical block of a rank's KV-cache pool, its reference count, and
// the prefix cache: full blocks are published under a hash of their tokens
// chained with the hash of the block before them, so a hit on block i means
// blocks 0..i all match.
//
//   block hash  h0 = H(0, t0..t15)   h1 = H(h0, t16..t31)   h2 = H(h1, ...)
//
// Blocks whose reference count drops to zero join the tail of one free list;
// allocation takes from its head. A free block that is still published keeps
// its contents until it is handed out again, so the list is also the
// eviction order (least recently used first):
//
//   free list   head -> [b7 h=..] [b2] [b9 h=..] <- tail (released last)
//   touch(b9)   b9 leaves the list, ref count 1: a prefix-cache hit
//   allocate(2) b7 (unpublished: its hash is evicted), b2
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_BLOCKPOOL_H
#define INFER_RUNTIME_ENGINE_BLOCKPOOL_H

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace infer {

using BlockId = int32_t;

/// The chained hash of a full block: its parent's hash (0 for the first
/// block) and its tokens.
uint64_t hashBlockTokens(uint64_t parentHash, const int32_t *tokens,
                         int64_t numTokens);

class BlockPool {
public:
  explicit BlockPool(int64_t numBlocks);

  int64_t numBlocks() const { return static_cast<int64_t>(blocks_.size()); }
  /// Blocks with reference count zero, published or not.
  int64_t numFreeBlocks() const { return numFree_; }
  int32_t refCount(BlockId block) const { return blocks_[block].refCount; }
  bool isCached(BlockId block) const { return blocks_[block].cached; }
  /// Published blocks whose contents were dropped to reuse them.
  int64_t numEvictions() const { return numEvictions_; }

  /// `n` blocks with reference count one, taken from the head of the free
  /// list (unpublishing them), or none when fewer than `n` are free: the
  /// caller preempts and retries.
  std::optional<std::vector<BlockId>> allocate(int64_t n);

  /// Takes a reference on each block; free ones leave the free list.
  void touch(const std::vector<BlockId> &blocks);

  /// Drops a reference on each block in order; those reaching zero join the
  /// tail of the free list, the first of them to be evicted first.
  void release(const std::vector<BlockId> &blocks);

  /// The published block holding `tokens` after the chain `parentHash`.
  std::optional<BlockId> lookup(uint64_t hash, uint64_t parentHash,
                                const int32_t *tokens, int64_t numTokens) const;

  /// Publishes a full block; false (and nothing changes) when another block
  /// already holds the same contents.
  bool publish(BlockId block, uint64_t hash, uint64_t parentHash,
               const int32_t *tokens, int64_t numTokens);

private:
  struct Block {
    int32_t refCount = 0;
    bool cached = false;
    uint64_t hash = 0;
    uint64_t parentHash = 0;
    std::vector<int32_t> tokens;
    /// Free-list neighbours; the sentinel is index numBlocks.
    int32_t prev = -1;
    int32_t next = -1;
  };

  void pushFreeTail(BlockId block);
  void unlinkFree(BlockId block);
  void unpublish(BlockId block);

  std::vector<Block> blocks_;
  /// Sentinel of the circular free list.
  Block head_;
  int64_t numFree_ = 0;
  int64_t numEvictions_ = 0;
  std::unordered_multimap<uint64_t, BlockId> cached_;

  Block &node(int32_t index) {
    return index == numBlocks() ? head_ : blocks_[index];
  }
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_BLOCKPOOL_H
