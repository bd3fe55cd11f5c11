//===- KernelsTest.cpp - CPU kernels vs naive references ------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>

namespace infer::cpu {
namespace {

std::vector<float> randomVector(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

double maxAbsDiff(const std::vector<float> &a, const std::vector<double> &b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 100, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallelFor(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(Linear, MatchesNaiveProductWithBias) {
  ThreadPool pool(2);
  for (auto [t, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 384, 1024},
                         {7, 13, 33},
                         {33, 128, 512},
                         {5, 1, 3}}) {
    auto x = randomVector(t * k, 1), w = randomVector(n * k, 2),
         bias = randomVector(n, 3);
    std::vector<float> y(t * n);
    linear(x.data(), t, k, w.data(), n, bias.data(), y.data(), pool);
    std::vector<double> ref(t * n);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias[j];
        for (int64_t e = 0; e < k; ++e)
          s += static_cast<double>(x[i * k + e]) * w[j * k + e];
        ref[i * n + j] = s;
      }
    EXPECT_LT(maxAbsDiff(y, ref), 1e-4) << t << "x" << k << "x" << n;
  }
}

TEST(RmsNorm, MatchesNaive) {
  const int64_t rows = 3, h = 40;
  auto x = randomVector(rows * h, 4), w = randomVector(h, 5);
  std::vector<float> y(rows * h);
  rmsNorm(x.data(), w.data(), y.data(), rows, h, 1e-5);
  std::vector<double> ref(rows * h);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < h; ++i)
      ss += static_cast<double>(x[r * h + i]) * x[r * h + i];
    double inv = 1.0 / std::sqrt(ss / h + 1e-5);
    for (int64_t i = 0; i < h; ++i)
      ref[r * h + i] = w[i] * x[r * h + i] * inv;
  }
  EXPECT_LT(maxAbsDiff(y, ref), 1e-5);
}

TEST(Activations, SiluAndGeluTanh) {
  std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}, y(5), g(5);
  silu(x.data(), y.data(), 5);
  geluTanh(x.data(), g.data(), 5);
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    EXPECT_NEAR(y[i], v / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(
        g[i],
        0.5 * v *
            (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))),
        1e-6);
  }
}

/// Meta's reference apply_scaling for Llama 3.1, in double.
std::vector<double> llama3Reference(const RopeConfig &c) {
  std::vector<double> out;
  const double lowWavelen = c.originalMaxPositionEmbeddings / c.lowFreqFactor;
  const double highWavelen = c.originalMaxPositionEmbeddings / c.highFreqFactor;
  for (int64_t i = 0; i < c.rotaryDim / 2; ++i) {
    double freq = 1.0 / std::pow(c.theta, 2.0 * i / c.rotaryDim);
    double wavelen = 2 * M_PI / freq;
    if (wavelen < highWavelen) {
      out.push_back(freq);
    } else if (wavelen > lowWavelen) {
      out.push_back(freq / c.factor);
    } else {
      double smooth =
          (c.originalMaxPositionEmbeddings / wavelen - c.lowFreqFactor) /
          (c.highFreqFactor - c.lowFreqFactor);
      out.push_back((1 - smooth) * freq / c.factor + smooth * freq);
    }
  }
  return out;
}

TEST(Rope, Llama3ScalingMatchesTheDirectFormula) {
  RopeConfig c;
  c.headDim = c.rotaryDim = 128;
  c.theta = 500000.0;
  c.scaling = "llama3";
  c.factor = 8.0;
  c.lowFreqFactor = 1.0;
  c.highFreqFactor = 4.0;
  c.originalMaxPositionEmbeddings = 8192;
  ASSERT_TRUE(c.validate().isOk());
  std::vector<float> inv = plan::ropeInverseFrequencies(c);
  std::vector<double> ref = llama3Reference(c);
  ASSERT_EQ(inv.size(), ref.size());
  int scaled = 0, smoothed = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    EXPECT_NEAR(inv[i] / ref[i], 1.0, 1e-6) << "frequency " << i;
    double plain = 1.0 / std::pow(c.theta, 2.0 * i / c.rotaryDim);
    scaled += std::fabs(ref[i] - plain / 8) < 1e-12 * plain;
    smoothed += ref[i] < plain && ref[i] > plain / 8;
  }
  // The test only means something if all three regimes occur.
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(Rope, DefaultAndLinearFrequencies) {
  RopeConfig c;
  c.headDim = c.rotaryDim = 16;
  c.theta = 10000.0;
  std::vector<float> plain = plan::ropeInverseFrequencies(c);
  c.scaling = "linear";
  c.factor = 4.0;
  std::vector<float> linear = plan::ropeInverseFrequencies(c);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(plain[i], 1.0 / std::pow(10000.0, i / 8.0), 1e-7);
    EXPECT_NEAR(linear[i], plain[i] / 4, 1e-8);
  }
}

TEST(Rope, DynamicNtkBaseFollowsTheSequenceLength) {
  RopeConfig c;
  c.headDim = c.rotaryDim = 16;
  c.theta = 10000.0;
  c.scaling = "dynamic";
  c.factor = 2.0;
  c.originalMaxPositionEmbeddings = 16;
  ASSERT_TRUE(c.validate().isOk());
  // Up to max_position_embeddings: plain RoPE.
  std::vector<float> plain = plan::ropeInverseFrequencies(c);
  EXPECT_EQ(plan::dynamicRopeInverseFrequencies(c, 16), plain);
  EXPECT_EQ(plan::dynamicRopeBase(c, 1), 10000.0f);
  // Past it: base * (factor * L / max - (factor - 1))^(d / (d - 2)).
  for (int64_t length : {17, 33, 1000}) {
    const double base =
        10000.0 * std::pow(2.0 * length / 16 - 1.0, 16.0 / 14.0);
    EXPECT_NEAR(plan::dynamicRopeBase(c, length) / base, 1.0, 1e-6);
    std::vector<float> inv = plan::dynamicRopeInverseFrequencies(c, length);
    ASSERT_EQ(inv.size(), 8u);
    for (int64_t i = 0; i < 8; ++i)
      EXPECT_NEAR(inv[i] / (1.0 / std::pow(base, i / 8.0)), 1.0, 1e-6)
          << "length " << length << " frequency " << i;
  }
  c.rotaryDim = 2;
  EXPECT_FALSE(c.validate().isOk()) << "d / (d - 2) needs rotary_dim > 2";
}

TEST(Rope, RejectsBadConfigs) {
  RopeConfig c;
  c.headDim = 16;
  c.rotaryDim = 15;
  EXPECT_FALSE(c.validate().isOk());
  c.rotaryDim = 16;
  c.scaling = "yarn";
  EXPECT_FALSE(c.validate().isOk());
  c.scaling = "llama3";
  c.factor = 8;
  c.lowFreqFactor = 4;
  c.highFreqFactor = 1;
  c.originalMaxPositionEmbeddings = 8192;
  EXPECT_FALSE(c.validate().isOk());
}

TEST(Rope, RotatesHalvesAndPassesTheRest) {
  RopeConfig c;
  c.headDim = 12;
  c.rotaryDim = 8; // partial rotary: dims 8..11 pass through
  c.theta = 10000.0;
  const int64_t t = 3, heads = 2;
  auto x = randomVector(t * heads * c.headDim, 6);
  std::vector<int32_t> positions = {0, 5, 1000};
  std::vector<float> y = x;
  applyRope(y.data(), t, heads, positions.data(), c,
            plan::ropeInverseFrequencies(c));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const float *in = &x[(i * heads + h) * c.headDim];
      const float *out = &y[(i * heads + h) * c.headDim];
      for (int64_t f = 0; f < 4; ++f) {
        double angle = positions[i] / std::pow(10000.0, 2.0 * f / 8);
        EXPECT_NEAR(out[f],
                    in[f] * std::cos(angle) - in[f + 4] * std::sin(angle),
                    2e-4);
        EXPECT_NEAR(out[f + 4],
                    in[f + 4] * std::cos(angle) + in[f] * std::sin(angle),
                    2e-4);
      }
      for (int64_t e = 8; e < 12; ++e)
        EXPECT_EQ(out[e], in[e]);
    }
}

/// Dense causal attention of one sequence: q [n, h*d] at positions
/// ctx-n .. ctx-1 over k, v [ctx, kvh*d], in double.
std::vector<double> denseAttention(const std::vector<float> &q,
                                   const std::vector<float> &k,
                                   const std::vector<float> &v, int64_t n,
                                   int64_t ctx, const AttentionParams &p) {
  const int64_t d = p.headDim, group = p.numHeads / p.numKVHeads;
  std::vector<double> out(n * p.numHeads * d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = ctx - n + i;
    for (int64_t h = 0; h < p.numHeads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> s;
      std::vector<int64_t> js;
      for (int64_t j = 0; j <= pos; ++j) {
        if (p.slidingWindow > 0 && j <= pos - p.slidingWindow)
          continue;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += static_cast<double>(q[(i * p.numHeads + h) * d + e]) *
                 k[(j * p.numKVHeads + kvh) * d + e];
        s.push_back(dot * p.scale);
        js.push_back(j);
      }
      double mx = *std::max_element(s.begin(), s.end()), sum = 0;
      for (double &x : s)
        sum += (x = std::exp(x - mx));
      for (size_t a = 0; a < s.size(); ++a)
        for (int64_t e = 0; e < d; ++e)
          out[(i * p.numHeads + h) * d + e] +=
              s[a] / sum * v[(js[a] * p.numKVHeads + kvh) * d + e];
    }
  }
  return out;
}

struct AttentionCase {
  int64_t heads, kvHeads, window;
};

class PagedAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttention, MatchesDenseCausalAttention) {
  const AttentionCase ac = GetParam();
  CacheGeometry g{/*numLayers=*/2, ac.kvHeads, /*headDim=*/8, /*blockSize=*/4};
  AttentionParams p{/*layer=*/1,          ac.heads, ac.kvHeads, 8,
                    1.0 / std::sqrt(8.0), ac.window};
  const int64_t numBlocks = 32, maxBlocks = 8;
  std::vector<float> pool(numBlocks * g.blockElements(), NAN);
  ThreadPool threads(2);
  // Three sequences: context 13 with 1 new (decode), 9 all new (prefill),
  // 20 with 6 new (chunked prefill). Blocks are scattered.
  const std::vector<int64_t> ctx = {13, 9, 20}, fresh = {1, 9, 6};
  std::vector<int32_t> tables(3 * maxBlocks, -1);
  std::vector<int32_t> shuffled;
  for (int32_t b = numBlocks - 1; b >= 0; --b)
    shuffled.push_back((b * 7) % numBlocks);
  size_t next = 0;
  std::vector<std::vector<float>> keys, values, queries;
  std::vector<float> qAll;
  std::vector<int32_t> qsl = {0}, contextLens;
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t b = 0; b * g.blockSize < ctx[s]; ++b)
      tables[s * maxBlocks + b] = shuffled[next++];
    keys.push_back(randomVector(ctx[s] * g.slotElements(), 10 + s));
    values.push_back(randomVector(ctx[s] * g.slotElements(), 20 + s));
    queries.push_back(randomVector(fresh[s] * ac.heads * 8, 30 + s));
    std::vector<int64_t> slots;
    for (int64_t j = 0; j < ctx[s]; ++j)
      slots.push_back(tables[s * maxBlocks + j / g.blockSize] * g.blockSize +
                      j % g.blockSize);
    // Write all of layer 1 (and garbage into layer 0, which must be unused).
    kvCacheWrite(pool.data(), g, 1, keys[s].data(), values[s].data(),
                 slots.data(), ctx[s]);
    auto garbage = randomVector(ctx[s] * g.slotElements(), 99, 100.0f);
    kvCacheWrite(pool.data(), g, 0, garbage.data(), garbage.data(),
                 slots.data(), ctx[s]);
    qAll.insert(qAll.end(), queries[s].begin(), queries[s].end());
    qsl.push_back(qsl.back() + static_cast<int32_t>(fresh[s]));
    contextLens.push_back(static_cast<int32_t>(ctx[s]));
  }
  std::vector<float> out(qAll.size());
  pagedAttention(qAll.data(), pool.data(), g, p, tables.data(), maxBlocks,
                 contextLens.data(), qsl.data(), 3, out.data(), threads);
  for (int64_t s = 0; s < 3; ++s) {
    std::vector<double> ref =
        denseAttention(queries[s], keys[s], values[s], fresh[s], ctx[s], p);
    std::vector<float> got(out.begin() + qsl[s] * ac.heads * 8,
                           out.begin() + qsl[s + 1] * ac.heads * 8);
    EXPECT_LT(maxAbsDiff(got, ref), 1e-5) << "sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttention,
                         ::testing::Values(AttentionCase{4, 4, 0},
                                           AttentionCase{4, 2, 0},
                                           AttentionCase{6, 1, 0},
                                           AttentionCase{4, 2, 5},
                                           AttentionCase{4, 4, 1}));

} // namespace
} // namespace infer::cpu
