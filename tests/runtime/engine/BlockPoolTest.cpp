//===- BlockPoolTest.cpp - Block pool and KV-cache manager ----------------===//

#include "runtime/engine/KVCacheManager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace infer {
namespace {

std::vector<int32_t> iota(int32_t n, int32_t from = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(BlockPool, RefCountsAndExhaustion) {
  BlockPool pool(3);
  EXPECT_EQ(pool.numFreeBlocks(), 3);
  std::optional<std::vector<BlockId>> a = pool.allocate(2);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(pool.refCount(0), 1);
  EXPECT_FALSE(pool.allocate(2)) << "only one block is left";
  EXPECT_EQ(pool.numFreeBlocks(), 1) << "a failed allocation takes nothing";
  pool.touch({0});
  EXPECT_EQ(pool.refCount(0), 2);
  pool.release({0});
  EXPECT_EQ(pool.refCount(0), 1);
  EXPECT_EQ(pool.numFreeBlocks(), 1);
  pool.release({0, 1});
  EXPECT_EQ(pool.numFreeBlocks(), 3);
}

TEST(BlockPool, FreeListIsTheEvictionOrder) {
  BlockPool pool(4);
  std::vector<BlockId> all = *pool.allocate(4);
  const std::vector<int32_t> tokens = iota(2);
  for (BlockId b : all)
    ASSERT_TRUE(pool.publish(b, 1000 + b, 0, tokens.data(), 2));
  // Released 2, 0, 3, 1: the least recently released is handed out first.
  pool.release({2, 0});
  pool.release({3, 1});
  EXPECT_EQ(pool.numEvictions(), 0);
  // A hit takes block 0 out of the free list; it is not evicted.
  ASSERT_EQ(pool.lookup(1000, 0, tokens.data(), 2), std::optional<BlockId>(0));
  pool.touch({0});
  std::vector<BlockId> got = *pool.allocate(2);
  EXPECT_EQ(got, (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(pool.numEvictions(), 2);
  EXPECT_FALSE(pool.lookup(1002, 0, tokens.data(), 2)) << "2 was evicted";
  EXPECT_TRUE(pool.lookup(1001, 0, tokens.data(), 2)) << "1 is still cached";
  EXPECT_TRUE(pool.isCached(0));
}

TEST(BlockPool, PublishingTheSameContentsTwiceKeepsTheFirst) {
  BlockPool pool(2);
  std::vector<BlockId> b = *pool.allocate(2);
  const std::vector<int32_t> tokens = iota(4);
  const uint64_t h = hashBlockTokens(0, tokens.data(), 4);
  EXPECT_TRUE(pool.publish(b[0], h, 0, tokens.data(), 4));
  EXPECT_FALSE(pool.publish(b[1], h, 0, tokens.data(), 4));
  EXPECT_EQ(pool.lookup(h, 0, tokens.data(), 4), std::optional<BlockId>(b[0]));
  // A colliding hash with other contents is not a hit.
  const std::vector<int32_t> other = iota(4, 7);
  EXPECT_FALSE(pool.lookup(h, 0, other.data(), 4));
}

TEST(KVCacheManager, AllocatesBlocksAsTokensGrow) {
  KVCacheManager kv(4, 4, true);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocateSlots(1, 0, 5, nullptr, copies));
  EXPECT_EQ(kv.blockTable(1).size(), 2u);
  ASSERT_TRUE(kv.allocateSlots(1, 5, 3, nullptr, copies));
  EXPECT_EQ(kv.blockTable(1).size(), 2u) << "8 tokens fit in 2 blocks";
  ASSERT_TRUE(kv.allocateSlots(1, 8, 1, nullptr, copies));
  EXPECT_EQ(kv.blockTable(1).size(), 3u);
  EXPECT_FALSE(kv.allocateSlots(2, 0, 8, nullptr, copies))
      << "one block left, two needed";
  EXPECT_TRUE(kv.blockTable(2).empty());
  EXPECT_EQ(kv.numFreeBlocks(), 1);
  kv.truncate(1, 4);
  EXPECT_EQ(kv.blockTable(1).size(), 1u);
  EXPECT_EQ(kv.numFreeBlocks(), 3);
  kv.free(1);
  EXPECT_EQ(kv.numFreeBlocks(), 4);
  EXPECT_TRUE(copies.empty());
}

TEST(KVCacheManager, PrefixHitsFollowTheHashChain) {
  KVCacheManager kv(8, 4, true);
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> tokens = iota(10);
  ASSERT_TRUE(kv.allocateSlots(1, 0, 10, nullptr, copies));
  kv.cacheFullBlocks(1, tokens, 10);
  const std::vector<BlockId> table = kv.blockTable(1);
  kv.free(1);

  CachedPrefix same = kv.findCachedPrefix(tokens);
  EXPECT_EQ(same.numTokens, 8);
  EXPECT_EQ(same.blocks, (std::vector<BlockId>{table[0], table[1]}));

  std::vector<int32_t> secondDiffers = tokens;
  secondDiffers[5] = 1;
  EXPECT_EQ(kv.findCachedPrefix(secondDiffers).numTokens, 4);
  std::vector<int32_t> firstDiffers = tokens;
  firstDiffers[0] = 1;
  EXPECT_EQ(kv.findCachedPrefix(firstDiffers).numTokens, 0)
      << "block 1 matches, but its parent does not";

  // A prompt of exactly two blocks reuses one: its last token is computed.
  EXPECT_EQ(kv.findCachedPrefix(iota(8)).numTokens, 4);

  // A hit references the blocks again and allocates only the rest.
  const int64_t freeBefore = kv.numFreeBlocks();
  ASSERT_TRUE(kv.allocateSlots(2, same.numTokens, 2, &same, copies));
  EXPECT_EQ(kv.blockTable(2).size(), 3u);
  EXPECT_EQ(kv.blockTable(2)[0], table[0]);
  EXPECT_EQ(kv.pool().refCount(table[0]), 1);
  EXPECT_EQ(kv.numFreeBlocks(), freeBefore - 3);

  KVCacheManager off(8, 4, false);
  ASSERT_TRUE(off.allocateSlots(1, 0, 10, nullptr, copies));
  off.cacheFullBlocks(1, tokens, 10);
  off.free(1);
  EXPECT_EQ(off.findCachedPrefix(tokens).numTokens, 0);
}

TEST(KVCacheManager, ForksCopyASharedPartialBlockOnWrite) {
  KVCacheManager kv(6, 4, true);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocateSlots(1, 0, 6, nullptr, copies));
  kv.fork(1, 2);
  const std::vector<BlockId> parent = kv.blockTable(1);
  EXPECT_EQ(kv.blockTable(2), parent);
  EXPECT_EQ(kv.pool().refCount(parent[1]), 2);

  // The child writes slot 6, inside the shared partial block 1.
  ASSERT_TRUE(kv.allocateSlots(2, 6, 1, nullptr, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, parent[1]);
  EXPECT_EQ(copies[0].second, kv.blockTable(2)[1]);
  EXPECT_NE(kv.blockTable(2)[1], parent[1]);
  EXPECT_EQ(kv.blockTable(2)[0], parent[0]) << "full blocks stay shared";
  EXPECT_EQ(kv.pool().refCount(parent[0]), 2);
  EXPECT_EQ(kv.pool().refCount(parent[1]), 1);

  // The parent now owns its block alone: no copy.
  copies.clear();
  ASSERT_TRUE(kv.allocateSlots(1, 6, 1, nullptr, copies));
  EXPECT_TRUE(copies.empty());
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.numFreeBlocks(), 6);
}

} // namespace
} // namespace infer
