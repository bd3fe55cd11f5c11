//===- KernelsTest.cpp - CUDA kernels against the CPU reference -----------===//
//
// Every kernel of the CUDA backend on fresh random inputs of several shapes,
// compared with the CPU backend's kernel by max |gpu - cpu| / max |cpu|.
// Kernels whose inputs are bf16 on the device (embedding table, GEMM
// operands, KV pool) are compared with the CPU kernel run on the same
// bf16-rounded values, so the tolerance measures the kernel, not the
// storage format: fp32 arithmetic in a different order, 1e-5 (1e-4 for
// GEMMs, whose K-long sums cuBLASLt splits differently). The GEMM is also
// checked against unrounded fp32 inputs at the bf16 tolerance, 1e-2.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;

constexpr double kF32Tol = 1e-5;

class CudaKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA kernel tests need a GPU: " << why;
  }

  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v)
      x = dist(rng_);
    return v;
  }

  std::mt19937 rng_{std::random_device{}()};
  cpu::ThreadPool pool_{4};
};

std::vector<__nv_bfloat16> toBf16(const std::vector<float> &v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

std::vector<float> roundedToBf16(const std::vector<float> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
  return out;
}

/// max |a - b| / max |b|; NaN (an unwritten output) fails.
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

void report(const std::string &kernel, const std::string &shape, double err) {
  std::cout << "[ kernel   ] " << kernel << " " << shape << " max rel err "
            << err << "\n";
}

TEST_F(CudaKernelsTest, Embedding) {
  for (auto [vocab, hidden, t] : {std::tuple{100, 64, 7}, {32000, 2048, 33}}) {
    std::vector<float> table = roundedToBf16(random(size_t(vocab) * hidden));
    std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
    std::vector<int32_t> ids(t);
    for (int32_t &id : ids)
      id = pick(rng_);
    DeviceArray<__nv_bfloat16> dTable(toBf16(table));
    DeviceArray<int32_t> dIds(ids);
    auto y = DeviceArray<float>::poisoned(size_t(t) * hidden);
    ASSERT_EQ(cuda::launchEmbedding(dTable.get(), hidden, dIds.get(), t,
                                    y.get(), nullptr),
              cudaSuccess);
    std::vector<float> ref(size_t(t) * hidden);
    for (int i = 0; i < t; ++i)
      std::copy_n(table.begin() + size_t(ids[i]) * hidden, hidden,
                  ref.begin() + size_t(i) * hidden);
    const double err = relError(y.download(), ref);
    report("embedding", std::to_string(t) + "x" + std::to_string(hidden), err);
    EXPECT_EQ(err, 0.0);
  }
}

TEST_F(CudaKernelsTest, RmsNorm) {
  for (auto [rows, h] : {std::pair{1, 64}, {5, 2048}, {33, 4096}, {3, 100}}) {
    std::vector<float> x = random(size_t(rows) * h, 3.0f), w = random(h);
    DeviceArray<float> dx(x), dw(w);
    auto y = DeviceArray<float>::poisoned(x.size());
    ASSERT_EQ(cuda::launchRmsNorm(dx.get(), dw.get(), y.get(), rows, h, 1e-5f,
                                  nullptr),
              cudaSuccess);
    std::vector<float> ref(x.size());
    cpu::rmsNorm(x.data(), w.data(), ref.data(), rows, h, 1e-5);
    const double err = relError(y.download(), ref);
    report("rms_norm", std::to_string(rows) + "x" + std::to_string(h), err);
    EXPECT_LT(err, kF32Tol);
  }
}

TEST_F(CudaKernelsTest, ActivationsAndElementwise) {
  for (int64_t n : {1, 1000, 5632 * 17}) {
    std::vector<float> a = random(n, 4.0f), b = random(n);
    DeviceArray<float> da(a), db(b);
    std::vector<float> ref(n);
    auto y = DeviceArray<float>::poisoned(n);
    ASSERT_EQ(cuda::launchSilu(da.get(), y.get(), n, nullptr), cudaSuccess);
    cpu::silu(a.data(), ref.data(), n);
    double err = relError(y.download(), ref);
    report("silu", std::to_string(n), err);
    EXPECT_LT(err, kF32Tol);

    ASSERT_EQ(cuda::launchGeluTanh(da.get(), y.get(), n, nullptr), cudaSuccess);
    cpu::geluTanh(a.data(), ref.data(), n);
    err = relError(y.download(), ref);
    report("gelu_tanh", std::to_string(n), err);
    EXPECT_LT(err, kF32Tol);

    ASSERT_EQ(cuda::launchAdd(da.get(), db.get(), y.get(), n, nullptr),
              cudaSuccess);
    for (int64_t i = 0; i < n; ++i)
      ref[i] = a[i] + b[i];
    EXPECT_EQ(relError(y.download(), ref), 0.0);
    ASSERT_EQ(cuda::launchMul(da.get(), db.get(), y.get(), n, nullptr),
              cudaSuccess);
    for (int64_t i = 0; i < n; ++i)
      ref[i] = a[i] * b[i];
    EXPECT_EQ(relError(y.download(), ref), 0.0);
  }
}

TEST_F(CudaKernelsTest, GatherRowsAndBias) {
  const int rows = 37, cols = 300;
  std::vector<float> x = random(size_t(rows) * cols), bias = random(cols);
  std::vector<int32_t> idx{36, 0, 5, 5, 17};
  DeviceArray<float> dx(x), dBias(bias);
  DeviceArray<int32_t> dIdx(idx);
  auto y = DeviceArray<float>::poisoned(idx.size() * cols);
  ASSERT_EQ(cuda::launchGatherRows(dx.get(), cols, dIdx.get(), idx.size(),
                                   y.get(), nullptr),
            cudaSuccess);
  std::vector<float> ref;
  for (int32_t i : idx)
    ref.insert(ref.end(), x.begin() + size_t(i) * cols,
               x.begin() + size_t(i + 1) * cols);
  EXPECT_EQ(relError(y.download(), ref), 0.0);
  ASSERT_EQ(cuda::launchAddBias(dx.get(), dBias.get(), rows, cols, nullptr),
            cudaSuccess);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      x[size_t(r) * cols + c] += bias[c];
  EXPECT_EQ(relError(dx.download(), x), 0.0);
}

TEST_F(CudaKernelsTest, Rope) {
  struct Case {
    const char *scaling;
    int headDim, rotaryDim, heads, t;
  };
  for (Case c :
       {Case{"default", 64, 64, 4, 9}, Case{"linear", 128, 128, 32, 3},
        Case{"llama3", 128, 128, 8, 17}, Case{"default", 64, 32, 2, 5}}) {
    cpu::RopeConfig config;
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.theta = 500000.0;
    config.scaling = c.scaling;
    config.factor = 8.0;
    config.originalMaxPositionEmbeddings = 8192;
    ASSERT_TRUE(config.validate().isOk());
    std::vector<float> invFreq = cpu::ropeInverseFrequencies(config);
    std::vector<float> x = random(size_t(c.t) * c.heads * c.headDim);
    std::uniform_int_distribution<int32_t> pos(0, 20000);
    std::vector<int32_t> positions(c.t);
    for (int32_t &p : positions)
      p = pos(rng_);
    DeviceArray<float> dx(x), dFreq(invFreq);
    DeviceArray<int32_t> dPos(positions);
    auto y = DeviceArray<float>::poisoned(x.size());
    ASSERT_EQ(cuda::launchRope(dx.get(), y.get(), c.t, c.heads, c.headDim,
                               c.rotaryDim, dPos.get(), dFreq.get(), nullptr),
              cudaSuccess);
    std::vector<float> ref = x;
    cpu::applyRope(ref.data(), c.t, c.heads, positions.data(), config, invFreq);
    const double err = relError(y.download(), ref);
    report("rope",
           std::string(c.scaling) + " d=" + std::to_string(c.headDim) +
               " rot=" + std::to_string(c.rotaryDim),
           err);
    EXPECT_LT(err, kF32Tol);
  }
}

TEST_F(CudaKernelsTest, LinearThroughCublasLt) {
  auto gemm = cuda::Gemm::create(32 << 20);
  ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
  for (auto [t, n, k] : {std::tuple{1, 2048, 2048},
                         {7, 5632, 2048},
                         {64, 256, 5632},
                         {3, 100, 72}}) {
    std::vector<float> x = random(size_t(t) * k), w = random(size_t(n) * k);
    DeviceArray<__nv_bfloat16> dx(toBf16(x)), dw(toBf16(w));
    auto y = DeviceArray<float>::poisoned(size_t(t) * n);
    Status s = (*gemm)->run(dx.get(), dw.get(), y.get(), t, n, k, nullptr);
    ASSERT_TRUE(s.isOk()) << s.message();
    std::vector<float> got = y.download(), ref(size_t(t) * n);
    cpu::linear(roundedToBf16(x).data(), t, k, roundedToBf16(w).data(), n,
                nullptr, ref.data(), pool_);
    const double err = relError(got, ref);
    cpu::linear(x.data(), t, k, w.data(), n, nullptr, ref.data(), pool_);
    const double errF32 = relError(got, ref);
    const std::string shape = "T=" + std::to_string(t) +
                              " N=" + std::to_string(n) +
                              " K=" + std::to_string(k);
    report("linear (bf16 inputs)", shape, err);
    report("linear (vs fp32)", shape, errF32);
    EXPECT_LT(err, 1e-4);
    EXPECT_LT(errF32, 1e-2);
  }
}

/// Sequences as (cached tokens, new tokens).
using SeqShape = std::vector<std::pair<int, int>>;

TEST_F(CudaKernelsTest, KVCacheWriteAndPagedAttention) {
  struct Case {
    int heads, kvHeads, headDim, window, blockSize;
    SeqShape seqs;
  };
  const Case cases[] = {
      {4, 4, 64, 0, 16, {{0, 20}}},                  // prefill, MHA
      {8, 2, 128, 0, 16, {{0, 5}, {37, 1}, {3, 9}}}, // mixed, GQA
      {32, 4, 64, 0, 16, {{100, 1}, {15, 1}}},       // decode
      {4, 1, 32, 7, 8, {{0, 30}, {12, 4}}},          // MQA, sliding window
      {2, 2, 256, 0, 16, {{40, 3}}},                 // largest head_dim
  };
  for (const Case &c : cases) {
    cpu::CacheGeometry g;
    g.numLayers = 2;
    g.numKVHeads = c.kvHeads;
    g.headDim = c.headDim;
    g.blockSize = c.blockSize;
    const int layer = 1, width = c.kvHeads * c.headDim;
    const int64_t b = c.seqs.size();
    int64_t maxBlocks = 0;
    for (auto [cached, fresh] : c.seqs)
      maxBlocks = std::max<int64_t>(
          maxBlocks, (cached + fresh + c.blockSize - 1) / c.blockSize);
    const int64_t numBlocks = b * maxBlocks + 3;
    // Blocks handed out in a shuffled order.
    std::vector<int32_t> free(numBlocks);
    for (int64_t i = 0; i < numBlocks; ++i)
      free[i] = int32_t(i);
    std::shuffle(free.begin(), free.end(), rng_);
    std::vector<int32_t> tables(b * maxBlocks, -1), contextLens, qsl{0};
    std::vector<int64_t> allSlots, newSlots;
    for (int64_t s = 0; s < b; ++s) {
      auto [cached, fresh] = c.seqs[s];
      for (int64_t j = 0; j * c.blockSize < cached + fresh; ++j)
        tables[s * maxBlocks + j] = free.back(), free.pop_back();
      for (int p = 0; p < cached + fresh; ++p) {
        const int64_t slot =
            int64_t(tables[s * maxBlocks + p / c.blockSize]) * c.blockSize +
            p % c.blockSize;
        (p < cached ? allSlots : newSlots).push_back(slot);
      }
      contextLens.push_back(cached + fresh);
      qsl.push_back(qsl.back() + fresh);
    }
    const int64_t t = qsl.back();
    // The cached context is written first (as earlier steps would), then
    // the new tokens, both through the kernel under test.
    std::vector<float> cacheK = roundedToBf16(random(allSlots.size() * width));
    std::vector<float> cacheV = roundedToBf16(random(allSlots.size() * width));
    std::vector<float> k = roundedToBf16(random(size_t(t) * width));
    std::vector<float> v = roundedToBf16(random(size_t(t) * width));
    std::vector<float> q = random(size_t(t) * c.heads * c.headDim);

    std::vector<float> cpuPool(numBlocks * g.blockElements(), 0.0f);
    cpu::kvCacheWrite(cpuPool.data(), g, layer, cacheK.data(), cacheV.data(),
                      allSlots.data(), allSlots.size());
    cpu::kvCacheWrite(cpuPool.data(), g, layer, k.data(), v.data(),
                      newSlots.data(), t);

    CacheDims dims{2, c.kvHeads, c.headDim, c.blockSize};
    auto pool =
        DeviceArray<__nv_bfloat16>::poisoned(numBlocks * g.blockElements());
    DeviceArray<float> dCacheK(cacheK), dCacheV(cacheV), dk(k), dv(v), dq(q);
    DeviceArray<int64_t> dAllSlots(allSlots), dNewSlots(newSlots);
    ASSERT_EQ(cuda::launchKVCacheWrite(pool.get(), dims, layer, dCacheK.get(),
                                       dCacheV.get(), dAllSlots.get(),
                                       allSlots.size(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::launchKVCacheWrite(pool.get(), dims, layer, dk.get(),
                                       dv.get(), dNewSlots.get(), t, nullptr),
              cudaSuccess);
    // Every written slot of the layer holds the CPU pool's value.
    std::vector<__nv_bfloat16> gpuPool = pool.download();
    double writeErr = 0.0;
    for (const auto *slots : {&allSlots, &newSlots})
      for (int64_t slot : *slots)
        for (int kv = 0; kv < 2; ++kv)
          for (int e = 0; e < width; ++e) {
            const int64_t off = g.offset(slot, layer, kv) + e;
            writeErr = std::max<double>(
                writeErr,
                std::fabs(__bfloat162float(gpuPool[off]) - cpuPool[off]));
          }
    EXPECT_EQ(writeErr, 0.0);

    AttentionDims a{layer,
                    c.heads,
                    c.kvHeads,
                    c.headDim,
                    1.0f / std::sqrt(float(c.headDim)),
                    c.window};
    cpu::AttentionParams p{layer,
                           c.heads,
                           c.kvHeads,
                           c.headDim,
                           1.0 / std::sqrt(double(c.headDim)),
                           c.window};
    DeviceArray<int32_t> dTables(tables), dContext(contextLens), dQsl(qsl);
    auto out = DeviceArray<float>::poisoned(q.size());
    ASSERT_EQ(cuda::launchPagedAttention(
                  dq.get(), pool.get(), dims, a, dTables.get(), maxBlocks,
                  dContext.get(), dQsl.get(), b, t, out.get(), nullptr),
              cudaSuccess);
    std::vector<float> ref(q.size());
    cpu::pagedAttention(q.data(), cpuPool.data(), g, p, tables.data(),
                        maxBlocks, contextLens.data(), qsl.data(), b,
                        ref.data(), pool_);
    const double err = relError(out.download(), ref);
    report(
        "paged_attention",
        "h=" + std::to_string(c.heads) + " kvh=" + std::to_string(c.kvHeads) +
            " d=" + std::to_string(c.headDim) +
            " window=" + std::to_string(c.window) + " T=" + std::to_string(t),
        err);
    EXPECT_LT(err, kF32Tol);
  }
}

} // namespace
} // namespace infer::testing
