//===- PrefillAttentionTest.cpp - Tensor-core prefill attention vs CPU ----===//
//
// The mma.sync tensor-core kernel (PrefillAttention.cuh, the fallback of the
// Hopper kernel) on the rows of sequences with two or more new tokens, and
// launchPagedAttention on whole batches (its prefill rows on whichever
// tensor-core kernel the device takes, its decode rows on the split-KV
// kernel), against the CPU kernel on fresh random inputs: head_dim 64/128,
// GQA ratios 1/4/8, long prefills of lengths off the 64-row tile, chunked
// prefill over cached context, mixed prefill + decode batches, sliding
// windows, fp32 and bf16 q/out. Keys and values are bf16 in both pools; the
// GPU also rounds q and the softmax probabilities to bf16, so the tolerance
// is bf16's, 1e-2 of the largest output (1/256 more for bf16 outputs).
// Slots no sequence owns hold NaN in both pools, so a read outside a
// sequence's keys shows. Soft-capped scores (Gemma 2's alternating sliding
// window 8 and global layers, chunked prefill, speculative-verification
// rows, fp8 pools) keep the bound, and the same batch run without the cap
// is far from the capped reference.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <iostream>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;
using cuda::KVCacheDtype;

constexpr double kBf16Tol = 1e-2;

using Case = AttentionCase;

class PrefillAttentionTest : public GpuAttentionTest {
protected:
  /// A bf16 pool (keys and values bf16 on both sides) with 3 spare blocks
  /// and bf16 queries.
  PagedBatch make(const Case &c, int layer, int numLayers) {
    return makePagedBatch(
        c.seqs, KVCacheDtype::kBf16,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window),
        /*spareBlocks=*/3, /*bf16Queries=*/true);
  }
};

TEST_F(PrefillAttentionTest, MatchesCpuAttention) {
  const Case cases[] = {
      {32, 8, 128, 0, 16, {{0, 300}}}, // GQA 4, prefill
      {8, 8, 64, 0, 16, {{0, 200}, {37, 1}, {5, 70}, {100, 1}}}, // MHA, mixed
      {16, 2, 128, 0, 16, {{150, 77}, {64, 64}}},        // GQA 8, chunked
      {4, 1, 64, 50, 16, {{0, 190}, {120, 33}, {9, 1}}}, // MQA 4, window
      {8, 1, 128, 100, 32, {{300, 130}, {0, 2}}},        // GQA 8, window
      {2, 2, 64, 0, 8, {{0, 2}, {3, 5}}},                // tiny prefills
  };
  const int layer = 1, numLayers = 2;
  for (const Case &c : cases) {
    PagedBatch b = make(c, layer, numLayers);
    const int64_t numSeqs = c.seqs.size();
    AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
    ASSERT_TRUE(cuda::prefillAttentionSupports(a)) << describe(c);
    CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    DeviceArray<__nv_bfloat16> pool(b.bf16);
    DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
    const int64_t width = int64_t(c.heads) * c.headDim;
    for (QueryType type : {QueryType::kF32, QueryType::kBf16}) {
      const std::vector<float> direct = rowsOfSequences(
          runWithQueries(type, b.q,
                         [&](auto q, auto out) {
                           return cuda::launchPrefillAttention(
                               q, pool.get(), dims, a, tables.get(),
                               b.maxBlocks, context.get(), qsl.get(), numSeqs,
                               b.t, out, nullptr);
                         }),
          b.qsl, width, false);
      const std::vector<float> routed =
          runWithQueries(type, b.q, [&](auto q, auto out) {
            return cuda::launchPagedAttention(
                q, pool.get(), dims, a, tables.get(), b.maxBlocks,
                context.get(), qsl.get(), numSeqs, b.t, out, nullptr);
          });
      const double directErr =
          relError(direct, rowsOfSequences(b.ref, b.qsl, width, false));
      const double routedErr = relError(routed, b.ref);
      std::cout << "[ kernel   ] prefill_attention " << nameOf(type) << " "
                << describe(c) << " max rel err mma.sync " << directErr
                << ", routed " << routedErr << "\n";
      const double tol = kBf16Tol + outputTolerance(type);
      EXPECT_LT(directErr, tol) << nameOf(type) << " " << describe(c);
      EXPECT_LT(routedErr, tol) << nameOf(type) << " routed " << describe(c);
    }
  }
}

TEST_F(PrefillAttentionTest, SoftcappedScoresMatchCpuAttention) {
  struct SoftcapCase {
    KVCacheDtype dtype;
    Case shape;
    ScoreOptions scores;
  };
  const SoftcapCase cases[] = {
      {KVCacheDtype::kBf16, {32, 8, 128, 0, 16, {{0, 300}}}, {4, 5}},
      {KVCacheDtype::kBf16,
       {8, 8, 64, 0, 16, {{0, 200}, {37, 1}, {5, 70}, {100, 1}}},
       {4, 10}}, // mixed
      {KVCacheDtype::kBf16,
       {16, 2, 128, 0, 16, {{150, 77}}},
       {30, 50}}, // chunked
      {KVCacheDtype::kBf16, {8, 4, 128, 8, 16, {{0, 33}, {40, 7}}}, {4, 5}},
      {KVCacheDtype::kBf16, {8, 2, 64, 0, 32, {{3000, 5}, {700, 3}}}, {4, 5}},
      {KVCacheDtype::kF8E4M3,
       {32, 8, 128, 0, 16, {{100, 150}, {7, 1}}},
       {4, 5}},
      {KVCacheDtype::kF8E5M2, {8, 2, 64, 40, 8, {{0, 150}}}, {4, 10}},
  };
  const int layer = 1, numLayers = 2;
  for (const SoftcapCase &k : cases) {
    const Case &c = k.shape;
    const std::string what =
        std::string(k.dtype == KVCacheDtype::kBf16     ? "bf16"
                    : k.dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                       : "e4m3") +
        " " + describe(c) + " " + describe(k.scores);
    PagedBatch b = makePagedBatch(
        c.seqs, k.dtype,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window,
                           k.scores),
        /*spareBlocks=*/3, /*bf16Queries=*/true);
    const int64_t numSeqs = c.seqs.size();
    const AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window, k.scores);
    AttentionDims uncapped = a;
    uncapped.logitSoftcap = 0.0f;
    ASSERT_TRUE(cuda::prefillAttentionSupports(a)) << what;
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    DevicePool pool(b, k.dtype);
    DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> want = rowsOfSequences(b.ref, b.qsl, width, false);
    auto direct = [&](QueryType type, const AttentionDims &attention) {
      return rowsOfSequences(
          runWithQueries(type, b.q,
                         [&](auto q, auto out) {
                           return cuda::launchPrefillAttention(
                               q, pool.pool, dims, attention, tables.get(),
                               b.maxBlocks, context.get(), qsl.get(), numSeqs,
                               b.t, out, nullptr);
                         }),
          b.qsl, width, false);
    };
    for (QueryType type : {QueryType::kF32, QueryType::kBf16}) {
      const std::vector<float> routed =
          runWithQueries(type, b.q, [&](auto q, auto out) {
            return cuda::launchPagedAttention(
                q, pool.pool, dims, a, tables.get(), b.maxBlocks, context.get(),
                qsl.get(), numSeqs, b.t, out, nullptr);
          });
      const double directErr = relError(direct(type, a), want);
      const double routedErr = relError(routed, b.ref);
      std::cout << "[ kernel   ] prefill_attention " << nameOf(type) << " "
                << what << " max rel err mma.sync " << directErr << ", routed "
                << routedErr << "\n";
      const double tol = kBf16Tol + outputTolerance(type);
      EXPECT_LT(directErr, tol) << nameOf(type) << " " << what;
      EXPECT_LT(routedErr, tol) << nameOf(type) << " routed " << what;
    }
    const double uncappedErr =
        relError(direct(QueryType::kF32, uncapped), want);
    std::cout << "[ kernel   ] prefill_attention " << what
              << " without the cap: max rel err " << uncappedErr << "\n";
    EXPECT_GT(uncappedErr, 0.1) << what;
  }
}

TEST_F(PrefillAttentionTest, CapturedGraphReplaysTheEagerResult) {
  // A mixed batch through a captured graph: both launches read the batch on
  // the device, so a replay computes what the eager call did.
  const Case c{16, 4, 128, 0, 16, {{20, 90}, {50, 1}, {0, 65}}};
  const int layer = 0, numLayers = 1;
  PagedBatch b = make(c, layer, numLayers);
  const int64_t numSeqs = c.seqs.size();
  AttentionDims a =
      attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
  CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
  DeviceArray<__nv_bfloat16> pool(b.bf16);
  DeviceArray<float> q(b.q);
  DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
  auto eager = DeviceArray<float>::poisoned(b.q.size());
  auto replayed = DeviceArray<float>::poisoned(b.q.size());
  ASSERT_EQ(cuda::launchPagedAttention(
                q.get(), pool.get(), dims, a, tables.get(), b.maxBlocks,
                context.get(), qsl.get(), numSeqs, b.t, eager.get(), nullptr),
            cudaSuccess);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  const cudaError_t launched = cuda::launchPagedAttention(
      q.get(), pool.get(), dims, a, tables.get(), b.maxBlocks, context.get(),
      qsl.get(), numSeqs, b.t, replayed.get(), stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(launched, cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  const std::vector<float> want = eager.download();
  const std::vector<float> got = replayed.download();
  EXPECT_EQ(relError(got, want), 0.0);
  EXPECT_LT(relError(want, b.ref), kBf16Tol);
}

} // namespace
} // namespace infer::testing
