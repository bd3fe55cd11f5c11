//===- BlockPool.cpp - Ref-counted KV blocks with a prefix cache ----------===//

#include "runtime/engine/BlockPool.h"

#include <algorithm>
#include <cassert>

namespace infer {

uint64_t hashBlockTokens(uint64_t parentHash, const int32_t *tokens,
                         int64_t numTokens) {
  // FNV-1a over the parent hash and the tokens, then a splitmix64 finalizer
  // so that nearby inputs spread over the whole range.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (word >> (8 * byte)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(parentHash);
  mix(static_cast<uint64_t>(numTokens));
  for (int64_t i = 0; i < numTokens; ++i)
    mix(static_cast<uint32_t>(tokens[i]));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

BlockPool::BlockPool(int64_t numBlocks) : blocks_(numBlocks) {
  const int32_t sentinel = static_cast<int32_t>(numBlocks);
  head_.prev = head_.next = sentinel;
  for (int64_t b = 0; b < numBlocks; ++b)
    pushFreeTail(static_cast<BlockId>(b));
}

void BlockPool::pushFreeTail(BlockId block) {
  const int32_t sentinel = static_cast<int32_t>(numBlocks());
  Block &b = blocks_[block];
  b.prev = head_.prev;
  b.next = sentinel;
  node(head_.prev).next = block;
  head_.prev = block;
  ++numFree_;
}

void BlockPool::unlinkFree(BlockId block) {
  Block &b = blocks_[block];
  node(b.prev).next = b.next;
  node(b.next).prev = b.prev;
  b.prev = b.next = -1;
  --numFree_;
}

void BlockPool::unpublish(BlockId block) {
  Block &b = blocks_[block];
  if (!b.cached)
    return;
  auto [first, last] = cached_.equal_range(b.hash);
  for (auto it = first; it != last; ++it)
    if (it->second == block) {
      cached_.erase(it);
      break;
    }
  b.cached = false;
  b.tokens.clear();
  ++numEvictions_;
}

std::optional<std::vector<BlockId>> BlockPool::allocate(int64_t n) {
  if (n > numFree_)
    return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const BlockId block = head_.next;
    unlinkFree(block);
    unpublish(block);
    blocks_[block].refCount = 1;
    out.push_back(block);
  }
  return out;
}

void BlockPool::touch(const std::vector<BlockId> &blocks) {
  for (BlockId block : blocks) {
    if (blocks_[block].refCount++ == 0)
      unlinkFree(block);
  }
}

void BlockPool::release(const std::vector<BlockId> &blocks) {
  for (BlockId block : blocks) {
    assert(blocks_[block].refCount > 0 && "releasing a free block");
    if (--blocks_[block].refCount == 0)
      pushFreeTail(block);
  }
}

std::optional<BlockId> BlockPool::lookup(uint64_t hash, uint64_t parentHash,
                                         const int32_t *tokens,
                                         int64_t numTokens) const {
  auto [first, last] = cached_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const Block &b = blocks_[it->second];
    if (b.parentHash == parentHash &&
        static_cast<int64_t>(b.tokens.size()) == numTokens &&
        std::equal(b.tokens.begin(), b.tokens.end(), tokens))
      return it->second;
  }
  return std::nullopt;
}

bool BlockPool::publish(BlockId block, uint64_t hash, uint64_t parentHash,
                        const int32_t *tokens, int64_t numTokens) {
  Block &b = blocks_[block];
  if (b.cached || lookup(hash, parentHash, tokens, numTokens))
    return false;
  b.cached = true;
  b.hash = hash;
  b.parentHash = parentHash;
  b.tokens.assign(tokens, tokens + numTokens);
  cached_.emplace(hash, block);
  return true;
}

} // namespace infer
