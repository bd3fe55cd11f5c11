//===- MemoryEstimateTest.cpp - Device memory estimate of a plan ----------===//

#include "runtime/engine/MemoryEstimate.h"

#include <gtest/gtest.h>

using namespace infer;

namespace {

plan::Value value(int id, plan::ValueKind kind, plan::DType dtype,
                  std::vector<plan::Dim> shape, int64_t workspaceOffset = -1) {
  plan::Value v;
  v.id = id;
  v.kind = kind;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.workspaceOffset = workspaceOffset;
  return v;
}

/// One rank: a bf16 [100, 10] matrix, an fp32 [10] vector, one activation in
/// the workspace (40 bytes per row), one outside it (8 bytes per row), and
/// the [S, 100] logits; a 2-layer cache of 2 KV heads of size 4.
std::pair<plan::Manifest, plan::Plan> tinyArtifact() {
  using plan::Dim;
  plan::Plan p;
  plan::RankPlan rank;
  rank.values = {
      value(0, plan::ValueKind::kParam, plan::DType::kBF16,
            {Dim::fixed(100), Dim::fixed(10)}),
      value(1, plan::ValueKind::kParam, plan::DType::kF32, {Dim::fixed(10)}),
      value(2, plan::ValueKind::kActivation, plan::DType::kF32,
            {Dim::dynamic("T"), Dim::fixed(10)}, /*workspaceOffset=*/0),
      value(3, plan::ValueKind::kActivation, plan::DType::kF32,
            {Dim::dynamic("T"), Dim::fixed(2)}),
      value(4, plan::ValueKind::kActivation, plan::DType::kF32,
            {Dim::dynamic("S"), Dim::fixed(100)}),
  };
  rank.workspaceBytesPerRow = 40;
  p.ranks.push_back(rank);
  p.kvCache.numLayers = 2;
  p.kvCache.numKVHeads = 2;
  p.kvCache.headDim = 4;
  p.kvCache.blockSize = 16;
  plan::Manifest m;
  m.model.vocabSize = 100;
  m.model.maxPositionEmbeddings = 1024;
  return {m, p};
}

} // namespace

TEST(MemoryEstimate, SplitsTheDeviceIntoWeightsActivationsAndWholeBlocks) {
  auto [manifest, plan] = tinyArtifact();
  MemoryEstimateOptions options;
  options.deviceMemoryBytes = 1 << 20;
  options.utilization = 0.5;
  options.maxNumBatchedTokens = 100;
  options.maxNumSeqs = 4;
  options.kvElementBytes = 2;
  StatusOr<MemoryEstimate> e = estimateMemory(manifest, plan, options);
  ASSERT_TRUE(e.isOk()) << e.status().message();
  EXPECT_EQ(e->weightBytes, 100 * 10 * 2 + 10 * 4);
  // (40 workspace + 8 own) bytes per row x 100 tokens + 4 x 100 fp32 logits.
  EXPECT_EQ(e->activationBytes, 48 * 100 + 4 * 100 * 4);
  EXPECT_EQ(e->kvBytesPerToken, 2 * 2 * 2 * 4 * 2);
  EXPECT_EQ(e->usableBytes, 1 << 19);
  EXPECT_EQ(e->kvCacheBytes, (1 << 19) - 2040 - 6400);
  // 515,848 bytes / (64 bytes x 16 tokens) = 503 whole blocks.
  EXPECT_EQ(e->maxCachedTokens, 503 * 16);
  EXPECT_EQ(e->maxFullContextSequences, 503 * 16 / 1024);
  std::string text = formatMemoryEstimate(*e, options);
  EXPECT_NE(text.find("max cached tokens    8048"), std::string::npos) << text;
}

TEST(MemoryEstimate, AModelThatDoesNotFitHasNoCache) {
  auto [manifest, plan] = tinyArtifact();
  MemoryEstimateOptions options;
  options.deviceMemoryBytes = 4096;
  StatusOr<MemoryEstimate> e = estimateMemory(manifest, plan, options);
  ASSERT_TRUE(e.isOk());
  EXPECT_EQ(e->kvCacheBytes, 0);
  EXPECT_EQ(e->maxCachedTokens, 0);
  EXPECT_NE(formatMemoryEstimate(*e, options).find("does not fit"),
            std::string::npos);
}

TEST(MemoryEstimate, RejectsBadOptions) {
  auto [manifest, plan] = tinyArtifact();
  MemoryEstimateOptions options;
  options.utilization = 1.5;
  EXPECT_FALSE(estimateMemory(manifest, plan, options).isOk());
  plan.ranks.clear();
  EXPECT_FALSE(estimateMemory(manifest, plan, MemoryEstimateOptions()).isOk());
}

TEST(MemoryEstimate, ParsesByteSizes) {
  EXPECT_EQ(*parseByteSize("80GiB"), int64_t(80) << 30);
  EXPECT_EQ(*parseByteSize("80 GB"), int64_t(80) * 1000 * 1000 * 1000);
  EXPECT_EQ(*parseByteSize("1.5MiB"), int64_t(3) << 19);
  EXPECT_EQ(*parseByteSize("4096"), 4096);
  EXPECT_FALSE(parseByteSize("lots").isOk());
  EXPECT_FALSE(parseByteSize("80PB").isOk());
  EXPECT_FALSE(parseByteSize(".").isOk());
  EXPECT_FALSE(parseByteSize("0GiB").isOk());
}
