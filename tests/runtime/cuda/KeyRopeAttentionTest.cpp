//===- KeyRopeAttentionTest.cpp - Streaming attention (key rope) vs CPU ---===//
//
// launchPagedAttention with AttentionDims::keyRotaryDim (StreamingLLM: keys
// cached unrotated, key j of a sequence rotated at j, its index in the
// cache) against the CPU kernel with AttentionParams::keyRope, on fresh
// random inputs: bf16 and both fp8 pools, full and partial rotary dims,
// GQA, block sizes 16/32, mixed prefill + decode batches over several
// blocks. Both sides rotate the same dequantized keys with the same fp32
// arithmetic (cos and sin in double, rounded to float) and sum in fp32 in a
// different order: 1e-5 of the largest output.
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

using cuda::KVCacheDtype;

constexpr double kF32Tol = 1e-5;

struct Case {
  int heads, kvHeads, headDim, rotaryDim, blockSize;
  std::vector<std::pair<int, int>> seqs; ///< (cached tokens, new tokens)
};

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

class KeyRopeAttentionTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA kernel tests need a GPU: " << why;
  }

  std::mt19937 rng_{std::random_device{}()};
  std::normal_distribution<float> dist_{0.0f, 1.0f};
  cpu::ThreadPool threads_{4};
};

TEST_F(KeyRopeAttentionTest, MatchesCpuAttention) {
  const Case cases[] = {
      {8, 2, 64, 64, 16, {{40, 1}, {0, 37}, {100, 1}}},
      {32, 8, 128, 128, 32, {{300, 1}, {20, 50}}},
      {4, 4, 64, 32, 16, {{70, 9}, {5, 1}}},
  };
  const int layer = 1, numLayers = 2;
  for (KVCacheDtype dtype :
       {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2, KVCacheDtype::kF8E4M3})
    for (const Case &c : cases) {
      const std::string what =
          std::string(dtype == KVCacheDtype::kBf16     ? "bf16"
                      : dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                       : "e4m3") +
          " h=" + std::to_string(c.heads) +
          " kvh=" + std::to_string(c.kvHeads) +
          " d=" + std::to_string(c.headDim) +
          " rotary=" + std::to_string(c.rotaryDim);
      cpu::CacheGeometry g;
      g.numLayers = numLayers;
      g.numKVHeads = c.kvHeads;
      g.headDim = c.headDim;
      g.blockSize = c.blockSize;
      const int64_t numSeqs = c.seqs.size();
      int64_t maxBlocks = 0;
      for (auto [cached, fresh] : c.seqs)
        maxBlocks = std::max<int64_t>(
            maxBlocks, (cached + fresh + c.blockSize - 1) / c.blockSize);
      const int64_t numBlocks = numSeqs * maxBlocks + 2;
      std::vector<int32_t> free(numBlocks);
      for (int64_t i = 0; i < numBlocks; ++i)
        free[i] = int32_t(i);
      std::shuffle(free.begin(), free.end(), rng_);
      const size_t elements = numBlocks * g.blockElements();
      std::vector<float> values;
      std::vector<uint8_t> codes;
      std::vector<float> scales;
      cpu::KVPool pool;
      if (dtype == KVCacheDtype::kBf16) {
        values.assign(elements, std::numeric_limits<float>::quiet_NaN());
        pool.values = values.data();
      } else {
        codes.assign(elements, 0x7F);
        scales.assign(elements / c.headDim,
                      std::numeric_limits<float>::quiet_NaN());
        pool.codes = codes.data();
        pool.scales = scales.data();
        pool.format = dtype == KVCacheDtype::kF8E4M3 ? Fp8Format::kE4M3
                                                     : Fp8Format::kE5M2;
      }
      std::vector<int32_t> tables(numSeqs * maxBlocks, -1), contextLens, qsl{0};
      const int64_t width = g.slotElements();
      std::vector<float> k(width), v(width);
      for (int64_t s = 0; s < numSeqs; ++s) {
        auto [cached, fresh] = c.seqs[s];
        for (int64_t j = 0; j * c.blockSize < cached + fresh; ++j)
          tables[s * maxBlocks + j] = free.back(), free.pop_back();
        for (int p = 0; p < cached + fresh; ++p) {
          const int64_t slot =
              int64_t(tables[s * maxBlocks + p / c.blockSize]) * c.blockSize +
              p % c.blockSize;
          for (int64_t e = 0; e < width; ++e) {
            k[e] = __bfloat162float(__float2bfloat16_rn(dist_(rng_)));
            v[e] = __bfloat162float(__float2bfloat16_rn(dist_(rng_)));
          }
          cpu::kvCacheWrite(pool, g, layer, k.data(), v.data(), &slot, 1);
        }
        contextLens.push_back(cached + fresh);
        qsl.push_back(qsl.back() + fresh);
      }
      const int64_t t = qsl.back();
      std::vector<float> q(size_t(t) * c.heads * c.headDim);
      for (float &x : q)
        x = dist_(rng_);

      cpu::AttentionParams p;
      p.layer = layer;
      p.numHeads = c.heads;
      p.numKVHeads = c.kvHeads;
      p.headDim = c.headDim;
      p.scale = 1.0 / std::sqrt(double(c.headDim));
      p.keyRope.headDim = c.headDim;
      p.keyRope.rotaryDim = c.rotaryDim;
      p.keyRope.theta = 10000.0;
      ASSERT_TRUE(p.keyRope.validate().isOk());
      p.keyRopeInvFreq = cpu::ropeInverseFrequencies(p.keyRope);
      std::vector<float> ref(q.size());
      cpu::pagedAttention(q.data(), pool, g, p, tables.data(), maxBlocks,
                          contextLens.data(), qsl.data(), numSeqs, ref.data(),
                          threads_);

      std::vector<__nv_bfloat16> bf16(dtype == KVCacheDtype::kBf16 ? elements
                                                                   : 0);
      for (size_t i = 0; i < bf16.size(); ++i)
        bf16[i] = __float2bfloat16_rn(values[i]);
      DeviceArray<__nv_bfloat16> dBf16(bf16);
      DeviceArray<uint8_t> dCodes(codes);
      DeviceArray<float> dScales(scales), dq(q), dFreq(p.keyRopeInvFreq);
      DeviceArray<int32_t> dTables(tables), dContext(contextLens), dQsl(qsl);
      const cuda::KVCachePool devicePool =
          dtype == KVCacheDtype::kBf16
              ? cuda::KVCachePool(dBf16.get())
              : cuda::KVCachePool(dCodes.get(), dScales.get(), dtype);
      cuda::AttentionDims a{layer,
                            c.heads,
                            c.kvHeads,
                            c.headDim,
                            1.0f / std::sqrt(float(c.headDim)),
                            0,
                            c.rotaryDim,
                            dFreq.get()};
      cuda::CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      auto out = DeviceArray<float>::poisoned(q.size());
      ASSERT_EQ(cuda::launchPagedAttention(
                    dq.get(), devicePool, dims, a, dTables.get(), maxBlocks,
                    dContext.get(), dQsl.get(), numSeqs, t, out.get(), nullptr),
                cudaSuccess);
      const double err = relError(out.download(), ref);
      std::cout << "[ kernel   ] key_rope_attention " << what << " max rel err "
                << err << "\n";
      EXPECT_LT(err, kF32Tol) << what;
    }
}

} // namespace
} // namespace infer::testing
