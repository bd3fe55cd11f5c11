//===- KVCacheManager.cpp - Block tables of the running requests ----------===//

#include "runtime/engine/KVCacheManager.h"

#include <algorithm>

namespace infer {

KVCacheManager::KVCacheManager(int64_t numBlocks, int64_t blockSize,
                               bool enablePrefixCaching,
                               StreamingPolicy streaming)
    : blockSize_(blockSize),
      enablePrefixCaching_(enablePrefixCaching && !streaming.enabled()),
      streaming_(streaming), pool_(numBlocks) {}

CachedPrefix
KVCacheManager::findCachedPrefix(const std::vector<int32_t> &tokens) const {
  CachedPrefix prefix;
  if (!enablePrefixCaching_ || tokens.empty())
    return prefix;
  const int64_t maxBlocks =
      (static_cast<int64_t>(tokens.size()) - 1) / blockSize_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < maxBlocks; ++i) {
    const int32_t *blockTokens = tokens.data() + i * blockSize_;
    const uint64_t hash = hashBlockTokens(parent, blockTokens, blockSize_);
    std::optional<BlockId> block =
        pool_.lookup(hash, parent, blockTokens, blockSize_);
    if (!block)
      break;
    prefix.blocks.push_back(*block);
    prefix.hashes.push_back(hash);
    parent = hash;
  }
  prefix.numTokens = static_cast<int64_t>(prefix.blocks.size()) * blockSize_;
  return prefix;
}

bool KVCacheManager::allocateSlots(RequestId id, int64_t numComputedTokens,
                                   int64_t numNewTokens,
                                   const CachedPrefix *prefix,
                                   std::vector<BlockCopy> &copies) {
  Table &table = tables_[id];
  if (streaming_.enabled())
    evictOutsideWindow(table, numComputedTokens);
  // From here on, token counts are positions in the cache.
  numComputedTokens -= table.numEvictedTokens;
  const int64_t numPrefixBlocks =
      prefix ? static_cast<int64_t>(prefix->blocks.size()) : 0;
  const int64_t held =
      static_cast<int64_t>(table.blocks.size()) + numPrefixBlocks;
  const int64_t needed = blocksFor(numComputedTokens + numNewTokens);
  int64_t numNew = std::max<int64_t>(needed - held, 0);

  // A write into a partial block that others also reference needs a copy.
  const int64_t writeBlock = numComputedTokens / blockSize_;
  const bool copyOnWrite =
      numNewTokens > 0 && numComputedTokens % blockSize_ != 0 &&
      writeBlock < static_cast<int64_t>(table.blocks.size()) &&
      pool_.refCount(table.blocks[writeBlock]) > 1;
  // Prefix blocks with no other reference are counted as free until taken.
  int64_t prefixFromFree = 0;
  if (prefix)
    for (BlockId b : prefix->blocks)
      prefixFromFree += pool_.refCount(b) == 0;
  if (numNew + copyOnWrite + prefixFromFree > pool_.numFreeBlocks()) {
    if (table.blocks.empty() && table.hashes.empty())
      tables_.erase(id);
    return false;
  }

  if (prefix) {
    pool_.touch(prefix->blocks);
    table.blocks.insert(table.blocks.end(), prefix->blocks.begin(),
                        prefix->blocks.end());
    table.hashes = prefix->hashes;
  }
  if (copyOnWrite) {
    BlockId shared = table.blocks[writeBlock];
    BlockId copy = pool_.allocate(1)->front();
    copies.emplace_back(shared, copy);
    table.blocks[writeBlock] = copy;
    pool_.release({shared});
  }
  std::optional<std::vector<BlockId>> fresh = pool_.allocate(numNew);
  table.blocks.insert(table.blocks.end(), fresh->begin(), fresh->end());
  return true;
}

void KVCacheManager::cacheFullBlocks(RequestId id,
                                     const std::vector<int32_t> &tokens,
                                     int64_t numTokens) {
  if (!enablePrefixCaching_)
    return;
  auto it = tables_.find(id);
  if (it == tables_.end())
    return;
  Table &table = it->second;
  const int64_t numFull = std::min<int64_t>(
      numTokens / blockSize_, static_cast<int64_t>(table.blocks.size()));
  for (int64_t i = static_cast<int64_t>(table.hashes.size()); i < numFull;
       ++i) {
    const uint64_t parent = i == 0 ? 0 : table.hashes[i - 1];
    const int32_t *blockTokens = tokens.data() + i * blockSize_;
    const uint64_t hash = hashBlockTokens(parent, blockTokens, blockSize_);
    // When an identical block is already published (two equal prompts ran
    // at once), this one stays private and is reused without a hit later.
    pool_.publish(table.blocks[i], hash, parent, blockTokens, blockSize_);
    table.hashes.push_back(hash);
  }
}

void KVCacheManager::truncate(RequestId id, int64_t numTokens) {
  auto it = tables_.find(id);
  if (it == tables_.end())
    return;
  Table &table = it->second;
  const int64_t keep = blocksFor(numTokens - table.numEvictedTokens);
  if (static_cast<int64_t>(table.blocks.size()) <= keep)
    return;
  std::vector<BlockId> tail(table.blocks.rbegin(), table.blocks.rend() - keep);
  pool_.release(tail);
  table.blocks.resize(keep);
  table.hashes.resize(std::min<size_t>(table.hashes.size(), keep));
}

void KVCacheManager::free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end())
    return;
  std::vector<BlockId> reversed(it->second.blocks.rbegin(),
                                it->second.blocks.rend());
  pool_.release(reversed);
  tables_.erase(it);
}

void KVCacheManager::fork(RequestId parent, RequestId child) {
  Table copy = tables_[parent];
  pool_.touch(copy.blocks);
  tables_[child] = std::move(copy);
}

int64_t KVCacheManager::numEvictedTokens(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? 0 : it->second.numEvictedTokens;
}

void KVCacheManager::evictOutsideWindow(Table &table,
                                        int64_t numComputedTokens) {
  const int64_t sinkBlocks = numSinkBlocks();
  const int64_t afterSinks =
      numComputedTokens - table.numEvictedTokens - sinkBlocks * blockSize_;
  if (afterSinks < streaming_.window + blockSize_)
    return;
  // Whole blocks from the oldest on, keeping at least `window` tokens.
  const int64_t numEvict = (afterSinks - streaming_.window) / blockSize_;
  auto first = table.blocks.begin() + sinkBlocks;
  pool_.release(std::vector<BlockId>(first, first + numEvict));
  table.blocks.erase(first, first + numEvict);
  table.numEvictedTokens += numEvict * blockSize_;
}

const std::vector<BlockId> &KVCacheManager::blockTable(RequestId id) const {
  static const std::vector<BlockId> kEmpty;
  auto it = tables_.find(id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

} // namespace infer
