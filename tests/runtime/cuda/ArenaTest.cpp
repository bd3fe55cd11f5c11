//===- ArenaTest.cpp - First-fit ranges of the activation buffer ----------===//
//
// Host-side bookkeeping only: runs without a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Arena.h"

#include <gtest/gtest.h>

namespace infer::cuda {
namespace {

TEST(CudaArenaTest, FirstFitReusesAndMergesFreedRanges) {
  Arena arena;
  arena.reset(4096);
  std::optional<size_t> a = arena.allocate(1000), b = arena.allocate(256),
                        c = arena.allocate(1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 1024u); // rounded up to 256
  EXPECT_EQ(*c, 1280u);
  EXPECT_FALSE(arena.allocate(4096)); // 1536 in use
  arena.free(*b);
  EXPECT_EQ(arena.allocate(200), std::optional<size_t>(1024));
  arena.free(1024);
  arena.free(*a); // merges with the freed range after it
  EXPECT_EQ(arena.allocate(1280), std::optional<size_t>(0));
  arena.free(0);
  arena.free(*c); // merges with both neighbours: one range again
  EXPECT_EQ(arena.allocate(4096), std::optional<size_t>(0));
  arena.reset(arena.capacity());
  EXPECT_EQ(arena.allocate(4096), std::optional<size_t>(0));
}

} // namespace
} // namespace infer::cuda
