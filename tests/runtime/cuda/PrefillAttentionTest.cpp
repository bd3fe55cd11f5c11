//===- PrefillAttentionTest.cpp - Tensor-core prefill attention vs CPU ----===//
//
// launchPagedAttention on batches with prefill rows, which it sends to the
// tensor-core kernel (PrefillAttention.cu) and its decode rows to the fp32
// kernel, against the CPU kernel on fresh random inputs: head_dim 64/128,
// GQA ratios 1/4/8, long prefills of lengths off the 64-row tile, chunked
// prefill over cached context, mixed prefill + decode batches, sliding
// windows. Keys and values are bf16 in both pools; the GPU also rounds q and
// the softmax probabilities to bf16, so the tolerance is bf16's, 1e-2 of the
// largest output. Slots no sequence owns hold NaN in both pools, so a read
// outside a sequence's keys shows.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;

constexpr double kBf16Tol = 1e-2;

/// Sequences as (cached tokens, new tokens).
using SeqShape = std::vector<std::pair<int, int>>;

struct Case {
  int heads, kvHeads, headDim, window, blockSize;
  SeqShape seqs;
};

/// One batch: host and device pools, tables and the CPU reference output.
struct Batch {
  std::vector<float> q, ref;
  std::vector<int32_t> tables, contextLens, qsl;
  std::vector<__nv_bfloat16> pool;
  int64_t maxBlocks = 0, t = 0;
};

class PrefillAttentionTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA kernel tests need a GPU: " << why;
  }

  float normal() { return dist_(rng_); }
  float bf16Normal() { return __bfloat162float(__float2bfloat16_rn(normal())); }

  Batch make(const Case &c, int layer, int numLayers) {
    cpu::CacheGeometry g;
    g.numLayers = numLayers;
    g.numKVHeads = c.kvHeads;
    g.headDim = c.headDim;
    g.blockSize = c.blockSize;
    Batch b;
    const int64_t numSeqs = c.seqs.size();
    for (auto [cached, fresh] : c.seqs)
      b.maxBlocks = std::max<int64_t>(
          b.maxBlocks, (cached + fresh + c.blockSize - 1) / c.blockSize);
    const int64_t numBlocks = numSeqs * b.maxBlocks + 3;
    std::vector<int32_t> free(numBlocks);
    for (int64_t i = 0; i < numBlocks; ++i)
      free[i] = int32_t(i);
    std::shuffle(free.begin(), free.end(), rng_);
    std::vector<float> pool(numBlocks * g.blockElements(),
                            std::numeric_limits<float>::quiet_NaN());
    b.tables.assign(numSeqs * b.maxBlocks, -1);
    b.qsl.push_back(0);
    const int64_t width = g.slotElements();
    std::vector<float> k(width), v(width);
    for (int64_t s = 0; s < numSeqs; ++s) {
      auto [cached, fresh] = c.seqs[s];
      for (int64_t j = 0; j * c.blockSize < cached + fresh; ++j)
        b.tables[s * b.maxBlocks + j] = free.back(), free.pop_back();
      for (int p = 0; p < cached + fresh; ++p) {
        const int64_t slot =
            int64_t(b.tables[s * b.maxBlocks + p / c.blockSize]) * c.blockSize +
            p % c.blockSize;
        for (int64_t e = 0; e < width; ++e) {
          k[e] = bf16Normal();
          v[e] = bf16Normal();
        }
        cpu::kvCacheWrite(pool.data(), g, layer, k.data(), v.data(), &slot, 1);
      }
      b.contextLens.push_back(cached + fresh);
      b.qsl.push_back(b.qsl.back() + fresh);
    }
    b.t = b.qsl.back();
    b.q.resize(size_t(b.t) * c.heads * c.headDim);
    for (float &x : b.q)
      x = normal();
    b.pool.resize(pool.size());
    for (size_t i = 0; i < pool.size(); ++i)
      b.pool[i] = __float2bfloat16_rn(pool[i]);

    cpu::AttentionParams p;
    p.layer = layer;
    p.numHeads = c.heads;
    p.numKVHeads = c.kvHeads;
    p.headDim = c.headDim;
    p.scale = 1.0 / std::sqrt(double(c.headDim));
    p.slidingWindow = c.window;
    b.ref.resize(b.q.size());
    cpu::pagedAttention(b.q.data(), pool.data(), g, p, b.tables.data(),
                        b.maxBlocks, b.contextLens.data(), b.qsl.data(),
                        numSeqs, b.ref.data(), threads_);
    return b;
  }

  std::mt19937 rng_{std::random_device{}()};
  std::normal_distribution<float> dist_{0.0f, 1.0f};
  cpu::ThreadPool threads_{4};
};

/// max |actual - expected| / max |expected|; NaN (an unwritten output or a
/// read of a slot no sequence owns) fails.
double relError(const std::vector<float> &actual,
                const std::vector<float> &expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double maxDiff = 0.0, maxRef = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i]))
      return INFINITY;
    maxDiff = std::max(maxDiff, std::fabs(double(actual[i]) - expected[i]));
    maxRef = std::max(maxRef, std::fabs(double(expected[i])));
  }
  return maxRef > 0 ? maxDiff / maxRef : maxDiff;
}

std::string describe(const Case &c) {
  std::string s = "h=" + std::to_string(c.heads) +
                  " kvh=" + std::to_string(c.kvHeads) +
                  " d=" + std::to_string(c.headDim) +
                  " window=" + std::to_string(c.window) +
                  " bs=" + std::to_string(c.blockSize) + " seqs";
  for (auto [cached, fresh] : c.seqs)
    s += " " + std::to_string(cached) + "+" + std::to_string(fresh);
  return s;
}

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
    Batch b = make(c, layer, numLayers);
    const int64_t numSeqs = c.seqs.size();
    AttentionDims a{layer,
                    c.heads,
                    c.kvHeads,
                    c.headDim,
                    1.0f / std::sqrt(float(c.headDim)),
                    c.window};
    ASSERT_TRUE(cuda::prefillAttentionSupports(a)) << describe(c);
    CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    DeviceArray<__nv_bfloat16> pool(b.pool);
    DeviceArray<float> q(b.q);
    DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
    auto out = DeviceArray<float>::poisoned(b.q.size());
    ASSERT_EQ(cuda::launchPagedAttention(
                  q.get(), pool.get(), dims, a, tables.get(), b.maxBlocks,
                  context.get(), qsl.get(), numSeqs, b.t, out.get(), nullptr),
              cudaSuccess);
    const double err = relError(out.download(), b.ref);
    std::cout << "[ kernel   ] prefill_attention " << describe(c)
              << " max rel err " << err << "\n";
    EXPECT_LT(err, kBf16Tol) << describe(c);
  }
}

TEST_F(PrefillAttentionTest, CapturedGraphReplaysTheEagerResult) {
  // A mixed batch through a captured graph: both launches read the batch on
  // the device, so a replay computes what the eager call did.
  const Case c{16, 4, 128, 0, 16, {{20, 90}, {50, 1}, {0, 65}}};
  const int layer = 0, numLayers = 1;
  Batch b = make(c, layer, numLayers);
  const int64_t numSeqs = c.seqs.size();
  AttentionDims a{layer,
                  c.heads,
                  c.kvHeads,
                  c.headDim,
                  1.0f / std::sqrt(float(c.headDim)),
                  c.window};
  CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
  DeviceArray<__nv_bfloat16> pool(b.pool);
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
