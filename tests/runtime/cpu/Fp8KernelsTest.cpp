//===- Fp8KernelsTest.cpp - FP8 GEMM and KV cache of the CPU backend ------===//
//
// linearFp8 computes exactly what linear computes on the dequantized
// weights, and an fp8 KV pool reads back, bit for bit, what Fp8.h's
// conversions of the written keys and values give (E5M2 codes; E4M3 codes
// with a per-head scale amax / 448).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/support/Fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace infer::cpu {
namespace {

std::vector<float> randomValues(size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

TEST(Fp8Kernels, LinearFp8EqualsLinearOnDequantizedWeights) {
  // Odd sizes: a partial weight tile, a partial row group, a K tail.
  const int64_t t = 7, k = 45, n = 131;
  std::vector<float> x = randomValues(t * k, 1.0f, 1);
  std::vector<float> bias = randomValues(n, 0.1f, 2);
  std::vector<uint8_t> codes(n * k);
  std::mt19937 rng(3);
  for (uint8_t &c : codes) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7F) == 0x7F) // E4M3 NaN codes never come out of quantization.
      c = 0x7E;
  }
  std::vector<float> scales = randomValues(n, 0.01f, 4);
  std::vector<float> dequantized(n * k);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i)
      dequantized[j * k + i] =
          decodeFp8(codes[j * k + i], Fp8Format::kE4M3) * scales[j];

  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    std::vector<float> expected(t * n), actual(t * n);
    linear(x.data(), t, k, dequantized.data(), n, bias.data(), expected.data(),
           pool);
    linearFp8(x.data(), t, k, codes.data(), scales.data(), n, bias.data(),
              actual.data(), pool);
    for (int64_t i = 0; i < t * n; ++i)
      ASSERT_EQ(actual[i], expected[i])
          << "element " << i << ", " << threads << " threads";
  }
}

TEST(Fp8Kernels, DecodeTableIsDecodeFp8) {
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const float *table = fp8DecodeTable(format);
    for (int code = 0; code < 256; ++code) {
      const float expected = decodeFp8(static_cast<uint8_t>(code), format);
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(table[code])) << code;
      else
        EXPECT_EQ(table[code], expected) << code;
    }
  }
}

class Fp8KVPool : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8KVPool, WriteThenReadRoundTripsThroughFp8) {
  const Fp8Format format = GetParam();
  CacheGeometry g;
  g.numLayers = 2;
  g.numKVHeads = 3;
  g.headDim = 8;
  g.blockSize = 4;
  const int64_t numBlocks = 3, t = 5, layer = 1;
  std::vector<uint8_t> codes(numBlocks * g.blockElements(), 0);
  std::vector<float> scales(numBlocks * g.numLayers * 2 * g.blockSize *
                            g.numKVHeads);
  KVPool pool;
  pool.codes = codes.data();
  pool.scales = scales.data();
  pool.format = format;

  const int64_t width = g.slotElements();
  std::vector<float> k = randomValues(t * width, 3.0f, 5);
  std::vector<float> v = randomValues(t * width, 0.02f, 6);
  // A head of zeros (scale 0) and values past E5M2's range (saturation).
  std::fill_n(k.begin() + width, g.headDim, 0.0f);
  v[2 * width + 1] = 1e6f;
  // A head of subnormals so small that amax / 448 underflows to a scale of
  // 0, and a zero in it: codes 0, not 0 / 0.
  std::fill_n(k.begin() + 4 * width + g.headDim, g.headDim, 1e-44f);
  k[4 * width + g.headDim + 3] = 0.0f;
  const std::vector<int64_t> slots = {9, 0, 4, -1, 11};
  kvCacheWrite(pool, g, layer, k.data(), v.data(), slots.data(), t);

  std::vector<float> scratch(g.headDim);
  for (int64_t i = 0; i < t; ++i) {
    if (slots[i] < 0)
      continue;
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < g.numKVHeads; ++h) {
        const float *in = (kv == 0 ? k : v).data() + i * width + h * g.headDim;
        float scale = 1.0f;
        if (format == Fp8Format::kE4M3) {
          float amax = 0.0f;
          for (int64_t e = 0; e < g.headDim; ++e)
            amax = std::max(amax, std::fabs(in[e]));
          scale = amax / kFp8E4M3Max;
        }
        const int64_t offset = g.offset(slots[i], layer, kv) + h * g.headDim;
        const float *out = pool.loadHead(offset, g.headDim, scratch.data());
        for (int64_t e = 0; e < g.headDim; ++e) {
          const uint8_t code =
              scale == 0.0f ? 0 : encodeFp8(in[e] / scale, format);
          ASSERT_EQ(codes[offset + e], code);
          ASSERT_FALSE(std::isnan(out[e]));
          ASSERT_EQ(out[e], decodeFp8(code, format) * scale)
              << "token " << i << " kv " << kv << " head " << h << " elem "
              << e;
        }
      }
  }
  // Slot -1 wrote nothing: only the four tokens' codes are set.
  const int64_t written =
      std::count_if(codes.begin(), codes.end(), [](uint8_t c) { return c; });
  EXPECT_LE(written, 4 * 2 * width);
}

TEST_P(Fp8KVPool, AttentionReadsTheDequantizedCache) {
  // Paged attention over an fp8 pool equals attention over an fp32 pool
  // holding the dequantized keys and values.
  const Fp8Format format = GetParam();
  CacheGeometry g;
  g.numLayers = 1;
  g.numKVHeads = 2;
  g.headDim = 16;
  g.blockSize = 4;
  const int64_t numBlocks = 3, t = 10;
  std::vector<uint8_t> codes(numBlocks * g.blockElements());
  std::vector<float> scales(numBlocks * 2 * g.blockSize * g.numKVHeads);
  std::vector<float> reference(numBlocks * g.blockElements());
  KVPool pool{nullptr, codes.data(), scales.data(), format};

  const int64_t width = g.slotElements();
  std::vector<float> k = randomValues(t * width, 1.0f, 7);
  std::vector<float> v = randomValues(t * width, 1.0f, 8);
  std::vector<int64_t> slots(t);
  const std::vector<int32_t> table = {2, 0, 1};
  for (int64_t i = 0; i < t; ++i)
    slots[i] = table[i / g.blockSize] * g.blockSize + i % g.blockSize;
  kvCacheWrite(pool, g, 0, k.data(), v.data(), slots.data(), t);
  for (int64_t b = 0; b < numBlocks * 2 * g.blockSize; ++b)
    for (int64_t h = 0; h < g.numKVHeads; ++h) {
      const int64_t offset = (b * g.numKVHeads + h) * g.headDim;
      pool.decodeHead(offset, g.headDim, reference.data() + offset);
    }

  AttentionParams p;
  p.numHeads = 4;
  p.numKVHeads = 2;
  p.headDim = 16;
  p.scale = 0.25;
  std::vector<float> q = randomValues(t * p.numHeads * p.headDim, 1.0f, 9);
  const std::vector<int32_t> contextLens = {static_cast<int32_t>(t)};
  const std::vector<int32_t> queryStartLoc = {0, static_cast<int32_t>(t)};
  ThreadPool threads(2);
  std::vector<float> expected(q.size()), actual(q.size());
  pagedAttention(q.data(), reference.data(), g, p, table.data(), 3,
                 contextLens.data(), queryStartLoc.data(), 1, expected.data(),
                 threads);
  pagedAttention(q.data(), pool, g, p, table.data(), 3, contextLens.data(),
                 queryStartLoc.data(), 1, actual.data(), threads);
  EXPECT_EQ(actual, expected);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8KVPool,
                         ::testing::Values(Fp8Format::kE5M2, Fp8Format::kE4M3),
                         [](const ::testing::TestParamInfo<Fp8Format> &i) {
                           return i.param == Fp8Format::kE4M3 ? "E4M3" : "E5M2";
                         });

} // namespace
} // namespace infer::cpu
