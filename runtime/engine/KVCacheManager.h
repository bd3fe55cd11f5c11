//===- KVCacheManager.h - Block tables of the running requests --*- C++ -*-===//
//
// Maps each request to the blocks that hold its keys and values. Token p of a
// request lives in slot p % block_size of block table[p / block_size]:
//
//   tokens      t0 ........ t15 | t16 ....... t31 | t32 t33 t34
//   table       [      b4       |       b9        |     b2      ]
//               '- full: published in the prefix cache    '- partial
//
// allocateSlots(computed = 33, new = 2) needs ceil(35 / 16) = 3 blocks: b2 is
// kept. With new = 16 it needs 4, and takes one more from the pool, or
// returns false when the pool has too few free blocks: the scheduler then
// preempts a request and tries again.
//
// Forked sequences (n > 1 completions) share all blocks of their parent. The
// first write into a shared partial block copies it (copy-on-write):
//
//   parent  [b4 b9 b2]   child [b4 b9 b2]    ref(b2) = 2
//   child writes slot 35 -> child [b4 b9 b6], copy b2 -> b6, ref(b2) = 1
//
// Under a streaming policy (StreamingLLM attention sinks), allocateSlots
// first evicts the blocks that fell out of the window: the first
// ceil(sink_tokens / block_size) blocks stay, and of the blocks after them
// the oldest go while at least `window` tokens remain after the sinks.
// Token p of the request then lives at index p - numEvictedTokens of its
// cache (sink tokens excepted, which keep theirs):
//
//   block_size 4, sink_tokens 4, window 8, 16 tokens computed:
//   before   [b4 | b9 | b2 | b7]       t0..t15
//   after    [b4 | b2 | b7]            t0..t3, t8..t15; b9 freed, 4 evicted
//            t8 -> index 4, t15 -> index 11
//
// Prefix caching is off under a streaming policy: a block's contents depend
// on which tokens were evicted before it was written.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_KVCACHEMANAGER_H
#define INFER_RUNTIME_ENGINE_KVCACHEMANAGER_H

#include "runtime/engine/BlockPool.h"

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace infer {

using RequestId = int64_t;

/// A block to copy before the next forward call: (source, destination).
using BlockCopy = std::pair<BlockId, BlockId>;

/// StreamingLLM's eviction policy (plan::KVCacheLayout's sink_tokens and
/// window).
struct StreamingPolicy {
  int64_t sinkTokens = 0;
  /// Most recent tokens kept, at least; 0 keeps every token.
  int64_t window = 0;

  bool enabled() const { return window > 0; }
};

/// The longest run of a request's leading full blocks found in the prefix
/// cache.
struct CachedPrefix {
  std::vector<BlockId> blocks;
  std::vector<uint64_t> hashes;
  int64_t numTokens = 0;
};

class KVCacheManager {
public:
  KVCacheManager(int64_t numBlocks, int64_t blockSize,
                 bool enablePrefixCaching, StreamingPolicy streaming = {});

  int64_t blockSize() const { return blockSize_; }
  int64_t numBlocks() const { return pool_.numBlocks(); }
  int64_t numFreeBlocks() const { return pool_.numFreeBlocks(); }
  int64_t blocksFor(int64_t numTokens) const {
    return (numTokens + blockSize_ - 1) / blockSize_;
  }
  const BlockPool &pool() const { return pool_; }
  const StreamingPolicy &streaming() const { return streaming_; }
  /// Blocks at the start of each sequence that are never evicted.
  int64_t numSinkBlocks() const { return blocksFor(streaming_.sinkTokens); }

  /// The cached prefix of `tokens` in whole blocks, always leaving at least
  /// the last token to compute (its logits are needed).
  CachedPrefix findCachedPrefix(const std::vector<int32_t> &tokens) const;

  /// Makes room for `numNewTokens` after the request's `numComputedTokens`
  /// (a new request starts with `prefix`, whose blocks it references),
  /// after evicting, under a streaming policy, the blocks that fell out of
  /// the window. Returns false, changing nothing else, when the pool has too
  /// few free blocks.
  /// Copies a shared partial block the new tokens write into, and appends
  /// the copy to `copies`.
  bool allocateSlots(RequestId id, int64_t numComputedTokens,
                     int64_t numNewTokens, const CachedPrefix *prefix,
                     std::vector<BlockCopy> &copies);

  /// Publishes the full blocks among the request's first `numTokens`
  /// tokens (whose keys and values are computed) in the prefix cache.
  void cacheFullBlocks(RequestId id, const std::vector<int32_t> &tokens,
                       int64_t numTokens);

  /// Frees the blocks past the first `numTokens` tokens (rollback of
  /// rejected speculative tokens).
  void truncate(RequestId id, int64_t numTokens);

  /// Releases all blocks of the request, last block first so that the
  /// ends of sequences are evicted before the prefixes others may share.
  void free(RequestId id);

  /// `child` starts as a copy of `parent`'s table, sharing every block.
  void fork(RequestId parent, RequestId child);

  /// The request's blocks (empty for an unknown request).
  const std::vector<BlockId> &blockTable(RequestId id) const;

  /// Tokens of the request evicted from its cache (streaming): its token p
  /// past the sinks is at index p - numEvictedTokens(id) of the cache.
  int64_t numEvictedTokens(RequestId id) const;

private:
  struct Table {
    std::vector<BlockId> blocks;
    /// Chained hashes of the leading blocks already published or found.
    std::vector<uint64_t> hashes;
    int64_t numEvictedTokens = 0;
  };

  /// Frees the oldest blocks after the sinks while `window` tokens remain.
  void evictOutsideWindow(Table &table, int64_t numComputedTokens);

  int64_t blockSize_;
  bool enablePrefixCaching_;
  StreamingPolicy streaming_;
  BlockPool pool_;
  std::unordered_map<RequestId, Table> tables_;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_KVCACHEMANAGER_H
