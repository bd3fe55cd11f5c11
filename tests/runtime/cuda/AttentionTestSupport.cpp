//===- AttentionTestSupport.cpp - Paged batches for GPU attention tests ---===//

#include "tests/runtime/cuda/AttentionTestSupport.h"

#include "runtime/cuda/CudaBackend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace infer::testing {

using cuda::KVCacheDtype;

std::string describe(const AttentionCase &c) {
  std::string s = "h=" + std::to_string(c.heads) +
                  " kvh=" + std::to_string(c.kvHeads) +
                  " d=" + std::to_string(c.headDim) +
                  " window=" + std::to_string(c.window) +
                  " bs=" + std::to_string(c.blockSize) + " seqs";
  for (auto [cached, fresh] : c.seqs)
    s += " " + std::to_string(cached) + "+" + std::to_string(fresh);
  return s;
}

double relError(const std::vector<float> &actual,
                const std::vector<float> &expected, double floor) {
  EXPECT_EQ(actual.size(), expected.size());
  double maxDiff = 0.0, maxRef = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i]))
      return INFINITY;
    maxDiff = std::max(maxDiff, std::fabs(double(actual[i]) - expected[i]));
    maxRef = std::max(maxRef, std::fabs(double(expected[i])));
  }
  maxRef = std::max(maxRef, floor);
  return maxRef > 0 ? maxDiff / maxRef : maxDiff;
}

std::vector<__nv_bfloat16> toBf16(const std::vector<float> &x) {
  std::vector<__nv_bfloat16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = __float2bfloat16_rn(x[i]);
  return y;
}

std::vector<float> fromBf16(const std::vector<__nv_bfloat16> &x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = __bfloat162float(x[i]);
  return y;
}

std::vector<__nv_bfloat16> freshRowsOfPool(const cpu::KVPool &pool,
                                           const cpu::CacheGeometry &g,
                                           int layer,
                                           const std::vector<int64_t> &slots) {
  const int64_t t = static_cast<int64_t>(slots.size()), d = g.headDim;
  std::vector<__nv_bfloat16> fresh(size_t(2) * t * g.slotElements(),
                                   __float2bfloat16_rn(NAN));
  std::vector<float> head(d);
  for (int64_t token = 0; token < t; ++token) {
    if (slots[token] < 0)
      continue;
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < g.numKVHeads; ++h) {
        pool.decodeHead(g.offset(slots[token], layer, kv) + h * d, d,
                        head.data());
        const int64_t row = ((kv * t + token) * g.numKVHeads + h) * d;
        for (int64_t e = 0; e < d; ++e)
          fresh[row + e] = __float2bfloat16_rn(head[e]);
      }
  }
  return fresh;
}

std::vector<float> rowsOfSequences(const std::vector<float> &rows,
                                   const std::vector<int32_t> &qsl,
                                   int64_t width, bool decode) {
  std::vector<float> picked;
  for (size_t s = 0; s + 1 < qsl.size(); ++s)
    if ((qsl[s + 1] - qsl[s] == 1) == decode)
      picked.insert(picked.end(), rows.begin() + qsl[s] * width,
                    rows.begin() + qsl[s + 1] * width);
  return picked;
}

cpu::CacheGeometry cacheGeometry(int numLayers, int kvHeads, int headDim,
                                 int blockSize) {
  cpu::CacheGeometry g;
  g.numLayers = numLayers;
  g.numKVHeads = kvHeads;
  g.headDim = headDim;
  g.blockSize = blockSize;
  return g;
}

cpu::AttentionParams cpuAttentionParams(int layer, int heads, int kvHeads,
                                        int headDim, int window,
                                        ScoreOptions scores) {
  cpu::AttentionParams p;
  p.layer = layer;
  p.numHeads = heads;
  p.numKVHeads = kvHeads;
  p.headDim = headDim;
  p.scale = scores.spread / std::sqrt(double(headDim));
  p.slidingWindow = window;
  p.logitSoftcap = scores.softcap;
  return p;
}

cuda::AttentionDims attentionDims(int layer, int heads, int kvHeads,
                                  int headDim, int window,
                                  ScoreOptions scores) {
  cuda::AttentionDims a;
  a.layer = layer;
  a.numHeads = heads;
  a.numKVHeads = kvHeads;
  a.headDim = headDim;
  a.scale = static_cast<float>(scores.spread / std::sqrt(double(headDim)));
  a.slidingWindow = window;
  a.logitSoftcap = static_cast<float>(scores.softcap);
  return a;
}

std::string describe(const ScoreOptions &scores) {
  std::ostringstream s;
  s << "softcap " << scores.softcap << " spread " << scores.spread;
  return s.str();
}

BlockTables shuffledBlockTables(const SeqShape &seqs, int blockSize,
                                int64_t spareBlocks, std::mt19937 &rng) {
  BlockTables b;
  b.blockSize = blockSize;
  const int64_t numSeqs = seqs.size();
  for (auto [cached, fresh] : seqs)
    b.maxBlocks = std::max<int64_t>(
        b.maxBlocks, (cached + fresh + blockSize - 1) / blockSize);
  b.numBlocks = numSeqs * b.maxBlocks + spareBlocks;
  std::vector<int32_t> free(b.numBlocks);
  for (int64_t i = 0; i < b.numBlocks; ++i)
    free[i] = int32_t(i);
  std::shuffle(free.begin(), free.end(), rng);
  b.tables.assign(numSeqs * b.maxBlocks, -1);
  b.qsl.push_back(0);
  for (int64_t s = 0; s < numSeqs; ++s) {
    auto [cached, fresh] = seqs[s];
    for (int64_t j = 0; j * blockSize < cached + fresh; ++j)
      b.tables[s * b.maxBlocks + j] = free.back(), free.pop_back();
    b.contextLens.push_back(cached + fresh);
    b.qsl.push_back(b.qsl.back() + fresh);
  }
  return b;
}

std::vector<int64_t> shuffledSlots(int64_t numBlocks, int blockSize, int t,
                                   std::mt19937 &rng) {
  std::vector<int64_t> slots(numBlocks * blockSize);
  for (size_t i = 0; i < slots.size(); ++i)
    slots[i] = int64_t(i);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(t);
  slots[t / 2] = -1;
  return slots;
}

DevicePool::DevicePool(const PagedBatch &b, KVCacheDtype dtype)
    : bf16(b.bf16), codes(b.codes), scales(b.scales) {
  pool = dtype == KVCacheDtype::kBf16
             ? cuda::KVCachePool(bf16.get())
             : cuda::KVCachePool(codes.get(), scales.get(), dtype);
}

void GpuAttentionTest::SetUp() {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "CUDA kernel tests need a GPU: " << why;
}

PagedBatch GpuAttentionTest::makePagedBatch(
    const SeqShape &seqs, KVCacheDtype dtype, const cpu::CacheGeometry &g,
    const cpu::AttentionParams &p, int64_t spareBlocks, bool bf16Queries) {
  PagedBatch b;
  static_cast<BlockTables &>(b) =
      shuffledBlockTables(seqs, g.blockSize, spareBlocks, rng_);
  const int64_t numSeqs = seqs.size();
  const bool fp8 = dtype != KVCacheDtype::kBf16;
  const size_t elements = b.numBlocks * g.blockElements();
  std::vector<float> values;
  cpu::KVPool pool;
  if (fp8) {
    b.codes.assign(elements, 0x7F); // NaN in both formats
    b.scales.assign(elements / g.headDim,
                    std::numeric_limits<float>::quiet_NaN());
    pool.codes = b.codes.data();
    pool.scales = b.scales.data();
    pool.format =
        dtype == KVCacheDtype::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  } else {
    values.assign(elements, std::numeric_limits<float>::quiet_NaN());
    pool.values = values.data();
  }
  const int64_t width = g.slotElements();
  std::vector<float> k(width), v(width);
  for (int64_t s = 0; s < numSeqs; ++s) {
    auto [cached, fresh] = seqs[s];
    for (int pos = 0; pos < cached + fresh; ++pos) {
      const int64_t slot = b.slot(s, pos);
      for (int64_t e = 0; e < width; ++e) {
        k[e] = __bfloat162float(__float2bfloat16_rn(normal()));
        v[e] = __bfloat162float(__float2bfloat16_rn(normal()));
      }
      cpu::kvCacheWrite(pool, g, p.layer, k.data(), v.data(), &slot, 1);
    }
  }
  if (!fp8) {
    b.bf16.resize(elements);
    for (size_t i = 0; i < elements; ++i)
      b.bf16[i] = __float2bfloat16_rn(values[i]);
  }
  b.t = b.qsl.back();
  b.q.resize(size_t(b.t) * p.numHeads * p.headDim);
  for (float &x : b.q)
    x = bf16Queries ? __bfloat162float(__float2bfloat16_rn(normal()))
                    : normal();
  b.ref.resize(b.q.size());
  cpu::pagedAttention(b.q.data(), pool, g, p, b.tables.data(), b.maxBlocks,
                      b.contextLens.data(), b.qsl.data(), numSeqs, b.ref.data(),
                      threads_);
  return b;
}

} // namespace infer::testing
