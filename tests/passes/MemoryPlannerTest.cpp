//===- MemoryPlannerTest.cpp - workspace placement invariants -------------===//

#include "passes/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace infer::memory {
namespace {

bool liveTogether(const Buffer &a, const Buffer &b) {
  return a.firstStep <= b.lastStep && b.firstStep <= a.lastStep;
}

bool overlapInMemory(int64_t offsetA, int64_t sizeA, int64_t offsetB,
                     int64_t sizeB) {
  return offsetA < offsetB + sizeB && offsetB < offsetA + sizeA;
}

TEST(MemoryPlanner, ReusesTheSpaceOfDeadBuffers) {
  // a -> b -> c: c can take a's place.
  Placement p = placeBuffers({{512, 0, 1}, {512, 1, 2}, {512, 2, 3}});
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 512, 0}));
  EXPECT_EQ(p.peakBytes, 1024);
}

TEST(MemoryPlanner, AlignsOffsets) {
  Placement p = placeBuffers({{10, 0, 1}, {10, 0, 1}});
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, kAlignment}));
  EXPECT_EQ(p.peakBytes, 2 * kAlignment);
}

TEST(MemoryPlanner, BuffersAliveTogetherNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Buffer> buffers;
    int64_t sumOfSizes = 0;
    for (int i = 0; i < 40; ++i) {
      int64_t first = rng() % 60;
      buffers.push_back({64 * static_cast<int64_t>(1 + rng() % 16), first,
                         first + static_cast<int64_t>(rng() % 12)});
      sumOfSizes += buffers.back().bytes;
    }
    Placement p = placeBuffers(buffers);
    ASSERT_EQ(p.offsets.size(), buffers.size());
    EXPECT_LE(p.peakBytes, sumOfSizes);
    for (size_t a = 0; a < buffers.size(); ++a) {
      EXPECT_EQ(p.offsets[a] % kAlignment, 0);
      EXPECT_LE(p.offsets[a] + buffers[a].bytes, p.peakBytes);
      for (size_t b = a + 1; b < buffers.size(); ++b)
        if (liveTogether(buffers[a], buffers[b]))
          EXPECT_FALSE(overlapInMemory(p.offsets[a], buffers[a].bytes,
                                       p.offsets[b], buffers[b].bytes))
              << "buffers " << a << " and " << b << ", trial " << trial;
    }
  }
}

} // namespace
} // namespace infer::memory
