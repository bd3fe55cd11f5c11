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
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/ElementCheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;

constexpr double kF32Tol = 1e-5;

class CudaKernelsTest : public GpuAttentionTest {
protected:
  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v)
      x = dist(rng_);
    return v;
  }
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
    ASSERT_EQ(cuda::launchEmbedding(dTable.get(), vocab, hidden, 0, dIds.get(),
                                    t, y.get(), nullptr),
              cudaSuccess);
    std::vector<float> ref(size_t(t) * hidden);
    for (int i = 0; i < t; ++i)
      std::copy_n(table.begin() + size_t(ids[i]) * hidden, hidden,
                  ref.begin() + size_t(i) * hidden);
    const double err = relError(y.download(), ref);
    report("embedding", std::to_string(t) + "x" + std::to_string(hidden), err);
    EXPECT_EQ(err, 0.0);

    // Vocabulary-parallel: the second half of the table as one rank's
    // slice; ids of the first half give zero rows.
    const int64_t offset = vocab / 2, rows = vocab - offset;
    DeviceArray<__nv_bfloat16> dSlice(toBf16(std::vector<float>(
        table.begin() + size_t(offset) * hidden, table.end())));
    auto ySlice = DeviceArray<float>::poisoned(size_t(t) * hidden);
    ASSERT_EQ(cuda::launchEmbedding(dSlice.get(), rows, hidden, offset,
                                    dIds.get(), t, ySlice.get(), nullptr),
              cudaSuccess);
    for (int i = 0; i < t; ++i)
      if (ids[i] < offset)
        std::fill_n(ref.begin() + size_t(i) * hidden, hidden, 0.0f);
    EXPECT_EQ(relError(ySlice.download(), ref), 0.0);
  }
}

TEST_F(CudaKernelsTest, RmsNorm) {
  // Rows of one to four packs of 4 a thread, and longer ones.
  for (auto [rows, h] :
       {std::pair{1, 64}, {5, 2048}, {33, 4096}, {3, 100}, {2, 16384}}) {
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
    // gelu_tanh(x) = 0.5 x (1 + tanh(..)) cancels for x << 0: a lone input
    // there has a reference near 1e-4 that only absolute error can judge.
    err = relError(y.download(), ref, /*floor=*/1.0);
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
    std::vector<float> invFreq = plan::ropeInverseFrequencies(config);
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
    const std::vector<float> got = y.download();
    const double err = relError(got, ref);
    report("rope",
           std::string(c.scaling) + " d=" + std::to_string(c.headDim) +
               " rot=" + std::to_string(c.rotaryDim),
           err);
    EXPECT_LT(err, kF32Tol);

    // The same rows as a column view of a wider matrix (q of a merged q/k/v
    // output, rows ld apart): the same values.
    const int64_t width = int64_t(c.heads) * c.headDim, ld = width + 37,
                  column = 5;
    std::vector<float> wide = random(size_t(c.t) * ld);
    for (int r = 0; r < c.t; ++r)
      std::copy_n(x.begin() + r * width, width, wide.begin() + r * ld + column);
    DeviceArray<float> dWide(wide);
    auto yView = DeviceArray<float>::poisoned(x.size());
    ASSERT_EQ(cuda::launchRope(dWide.get() + column, yView.get(), c.t, c.heads,
                               c.headDim, c.rotaryDim, dPos.get(), dFreq.get(),
                               nullptr, ld),
              cudaSuccess);
    EXPECT_EQ(yView.download(), got) << "rows " << ld << " apart";
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
                nullptr, ref.data(), threads_);
    const double err = relError(got, ref);
    cpu::linear(x.data(), t, k, w.data(), n, nullptr, ref.data(), threads_);
    const double errF32 = relError(got, ref);
    const std::string shape = "T=" + std::to_string(t) +
                              " N=" + std::to_string(n) +
                              " K=" + std::to_string(k);
    // T <= Gemm::kTuneMaxRows: the fastest of the heuristic's candidates.
    std::cout << "[ gemm     ] " << shape << ": heuristic candidate "
              << (*gemm)->tunedRank(false, t, n, k) << " after tuning\n";
    report("linear (bf16 inputs)", shape, err);
    report("linear (vs fp32)", shape, errF32);
    EXPECT_LT(err, 1e-4);
    EXPECT_LT(errF32, 1e-2);
  }
}

TEST_F(CudaKernelsTest, Split) {
  // The parts of a merged q/k/v and a merged gate/up GEMM.
  for (auto [rows, sizes] :
       {std::pair{5, std::vector<int64_t>{128, 32, 32}},
        std::pair{33, std::vector<int64_t>{2048, 256, 256}},
        std::pair{1, std::vector<int64_t>{5632, 5632}},
        std::pair{7, std::vector<int64_t>{3, 100, 1}}}) {
    int64_t cols = 0;
    for (int64_t size : sizes)
      cols += size;
    std::vector<float> x = random(size_t(rows) * cols);
    DeviceArray<float> dx(x);
    int64_t column = 0;
    for (int64_t width : sizes) {
      auto y = DeviceArray<float>::poisoned(size_t(rows) * width);
      ASSERT_EQ(cuda::launchSplitColumns(dx.get(), rows, cols, column, width,
                                         y.get(), nullptr),
                cudaSuccess);
      std::vector<float> ref;
      for (int64_t r = 0; r < rows; ++r)
        ref.insert(ref.end(), x.begin() + r * cols + column,
                   x.begin() + r * cols + column + width);
      EXPECT_EQ(relError(y.download(), ref), 0.0)
          << rows << "x" << cols << " column " << column;
      column += width;
    }
    report("split", std::to_string(rows) + "x" + std::to_string(cols), 0.0);
  }
}

TEST_F(CudaKernelsTest, AddRmsNorm) {
  // float4 rows (h % 4 == 0) and scalar ones (h = 102).
  for (auto [rows, h] :
       {std::pair{1, 64}, {5, 2048}, {33, 4096}, {3, 100}, {4, 102}}) {
    std::vector<float> a = random(size_t(rows) * h, 3.0f),
                       b = random(size_t(rows) * h), w = random(h);
    DeviceArray<float> da(a), db(b), dw(w);
    auto sum = DeviceArray<float>::poisoned(a.size());
    auto y = DeviceArray<float>::poisoned(a.size());
    ASSERT_EQ(cuda::launchAddRmsNorm(da.get(), db.get(), dw.get(), sum.get(),
                                     y.get(), rows, h, 1e-5f, nullptr),
              cudaSuccess);
    std::vector<float> refSum(a.size()), refY(a.size());
    cpu::addRmsNorm(a.data(), b.data(), w.data(), refSum.data(), refY.data(),
                    rows, h, 1e-5);
    EXPECT_EQ(relError(sum.download(), refSum), 0.0);
    const double err = relError(y.download(), refY);
    report("add_rms_norm", std::to_string(rows) + "x" + std::to_string(h), err);
    EXPECT_LT(err, kF32Tol);
  }
}

TEST_F(CudaKernelsTest, SiluMul) {
  // Contiguous operands (vectorized where cols % 4 == 0, scalar otherwise),
  // then gate and up as the column views of one merged gate/up row (a
  // split's views), including an odd width that takes the scalar path.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1},
                            {1, 1000},
                            {17, 5632},
                            {3, 333},
                            {70000, 4}}) {
    const int64_t n = rows * cols;
    std::vector<float> gate = random(n, 4.0f), up = random(n);
    DeviceArray<float> dg(gate), du(up);
    auto y = DeviceArray<float>::poisoned(n);
    ASSERT_EQ(cuda::launchSiluMul(dg.get(), cols, du.get(), cols, y.get(), rows,
                                  cols, nullptr),
              cudaSuccess);
    std::vector<float> ref(n);
    cpu::siluMul(gate.data(), up.data(), ref.data(), n);
    const std::vector<float> got = y.download();
    const double err = relError(got, ref);
    report("silu_mul", std::to_string(rows) + "x" + std::to_string(cols), err);
    EXPECT_LT(err, kF32Tol);

    DeviceArray<float> dMerged(mergedHalves(gate, up, rows, cols));
    auto yView = DeviceArray<float>::poisoned(n);
    ASSERT_EQ(cuda::launchSiluMul(dMerged.get(), 2 * cols, dMerged.get() + cols,
                                  2 * cols, yView.get(), rows, cols, nullptr),
              cudaSuccess);
    EXPECT_EQ(yView.download(), got) << rows << "x" << cols << " as views";
  }
  EXPECT_EQ(cuda::launchSiluMul<float>(nullptr, 3, nullptr, 4, nullptr, 2, 4,
                                       nullptr),
            cudaErrorInvalidValue);
}

TEST_F(CudaKernelsTest, FusedRegisterProgram) {
  // gelu_tanh(0); mul(3, 1); add(4, 2); silu_mul(2, 5); silu(6); mul(7, 0)
  // with yields [5, 8]: every op, two results, registers read twice.
  using cuda::FusedOp;
  cuda::FusedProgram p;
  p.numInputs = 3;
  const std::tuple<FusedOp, int, int> instrs[] = {
      {FusedOp::kGeluTanh, 0, 0}, {FusedOp::kMul, 3, 1},
      {FusedOp::kAdd, 4, 2},      {FusedOp::kSiluMul, 2, 5},
      {FusedOp::kSilu, 6, 6},     {FusedOp::kMul, 7, 0}};
  for (auto [op, a, b] : instrs) {
    p.op[p.numInstructions] = op;
    p.arg0[p.numInstructions] = static_cast<int8_t>(a);
    p.arg1[p.numInstructions] = static_cast<int8_t>(b);
    ++p.numInstructions;
  }
  p.numOutputs = 2;
  p.yields[0] = 5;
  p.yields[1] = 8;
  for (int64_t n : {1, 1000, 5632 * 17}) {
    std::vector<float> x0 = random(n, 3.0f), x1 = random(n), x2 = random(n);
    DeviceArray<float> d0(x0), d1(x1), d2(x2);
    auto y0 = DeviceArray<float>::poisoned(n),
         y1 = DeviceArray<float>::poisoned(n);
    p.inputs[0] = d0.get();
    p.inputs[1] = d1.get();
    p.inputs[2] = d2.get();
    p.outputs[0] = y0.get();
    p.outputs[1] = y1.get();
    ASSERT_EQ(cuda::launchFused(p, n, nullptr), cudaSuccess);
    // The CPU kernels, one op at a time (as the CPU backend's interpreter).
    std::vector<float> r3(n), r4(n), r5(n), r6(n), r7(n), r8(n);
    cpu::geluTanh(x0.data(), r3.data(), n);
    for (int64_t i = 0; i < n; ++i)
      r4[i] = r3[i] * x1[i];
    for (int64_t i = 0; i < n; ++i)
      r5[i] = r4[i] + x2[i];
    cpu::siluMul(x2.data(), r5.data(), r6.data(), n);
    cpu::silu(r6.data(), r7.data(), n);
    for (int64_t i = 0; i < n; ++i)
      r8[i] = r7[i] * x0[i];
    const double err0 = relError(y0.download(), r5);
    const double err1 = relError(y1.download(), r8);
    report("fused (interpreted, 6 ops, 2 results)", std::to_string(n),
           std::max(err0, err1));
    EXPECT_LT(err0, kF32Tol);
    EXPECT_LT(err1, kF32Tol);
  }
  p.numInstructions = cuda::kMaxFusedInstructions + 1;
  EXPECT_EQ(cuda::launchFused(p, 10, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaKernelsTest, RopeKVCacheWrite) {
  struct Case {
    int kvHeads, headDim, rotaryDim, blockSize, t;
  };
  for (Case c : {Case{2, 64, 64, 16, 20}, Case{8, 128, 128, 16, 5},
                 Case{1, 64, 32, 8, 9}, Case{4, 256, 256, 16, 3}}) {
    cpu::RopeConfig config;
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.theta = 10000.0;
    ASSERT_TRUE(config.validate().isOk());
    std::vector<float> invFreq = plan::ropeInverseFrequencies(config);
    const cpu::CacheGeometry g =
        cacheGeometry(2, c.kvHeads, c.headDim, c.blockSize);
    cuda::CacheDims dims{2, c.kvHeads, c.headDim, c.blockSize};
    const int layer = 1, width = c.kvHeads * c.headDim;
    const int64_t numBlocks = (c.t + c.blockSize - 1) / c.blockSize + 2;
    const std::vector<int64_t> slots =
        shuffledSlots(numBlocks, c.blockSize, c.t, rng_);
    std::uniform_int_distribution<int32_t> pos(0, 5000);
    std::vector<int32_t> positions(c.t);
    for (int32_t &p : positions)
      p = pos(rng_);
    std::vector<float> k = random(size_t(c.t) * width),
                       v = random(size_t(c.t) * width);
    DeviceArray<float> dk(k), dv(v), dFreq(invFreq);
    DeviceArray<int64_t> dSlots(slots);
    DeviceArray<int32_t> dPos(positions);
    const size_t poolSize = numBlocks * g.blockElements();
    std::vector<__nv_bfloat16> zeros(poolSize, __float2bfloat16_rn(0.0f));
    DeviceArray<__nv_bfloat16> fused(zeros), unfused(zeros);
    ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                  fused.get(), dims, layer, dk.get(), dv.get(), dSlots.get(),
                  dPos.get(), c.t, c.rotaryDim, dFreq.get(), nullptr),
              cudaSuccess);
    // rope then kv_cache_write, the unfused steps: bit-identical.
    auto rotated = DeviceArray<float>::poisoned(k.size());
    ASSERT_EQ(cuda::launchRope(dk.get(), rotated.get(), c.t, c.kvHeads,
                               c.headDim, c.rotaryDim, dPos.get(), dFreq.get(),
                               nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::launchKVCacheWrite(unfused.get(), dims, layer,
                                       rotated.get(), dv.get(), dSlots.get(),
                                       c.t, nullptr),
              cudaSuccess);
    std::vector<__nv_bfloat16> got = fused.download(),
                               same = unfused.download();
    std::vector<float> gotF(poolSize), sameF(poolSize);
    for (size_t i = 0; i < poolSize; ++i) {
      gotF[i] = __bfloat162float(got[i]);
      sameF[i] = __bfloat162float(same[i]);
    }
    EXPECT_EQ(relError(gotF, sameF), 0.0);
    // k and v as column views of one merged q/k/v output (rows ld apart,
    // q first): the same cache contents.
    const int64_t ld = 3 * int64_t(width) + 8;
    std::vector<float> qkv = random(size_t(c.t) * ld);
    for (int r = 0; r < c.t; ++r) {
      std::copy_n(k.begin() + r * width, width, qkv.begin() + r * ld + width);
      std::copy_n(v.begin() + r * width, width,
                  qkv.begin() + r * ld + 2 * width);
    }
    DeviceArray<float> dQkv(qkv);
    DeviceArray<__nv_bfloat16> viewed(zeros);
    ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                  viewed.get(), dims, layer, dQkv.get() + width,
                  dQkv.get() + 2 * width, dSlots.get(), dPos.get(), c.t,
                  c.rotaryDim, dFreq.get(), nullptr, ld, ld),
              cudaSuccess);
    std::vector<__nv_bfloat16> gotView = viewed.download();
    EXPECT_EQ(std::memcmp(gotView.data(), got.data(),
                          got.size() * sizeof(__nv_bfloat16)),
              0)
        << "k and v rows " << ld << " apart";
    // The CPU kernel on an fp32 pool, rounded to bf16 as the GPU stores it.
    std::vector<float> ref(poolSize, 0.0f);
    cpu::ropeKVCacheWrite(ref.data(), g, layer, k.data(), v.data(),
                          slots.data(), positions.data(), c.t, config, invFreq);
    const double err = relError(gotF, roundedToBf16(ref));
    report("rope_kv_cache_write",
           "T=" + std::to_string(c.t) + " kvh=" + std::to_string(c.kvHeads) +
               " d=" + std::to_string(c.headDim) +
               " rot=" + std::to_string(c.rotaryDim),
           err);
    // One bf16 rounding apart at most where fp32 sums differ in a last bit.
    EXPECT_LT(err, 1e-2);
  }
}

TEST_F(CudaKernelsTest, KVCacheWriteAndPagedAttention) {
  const AttentionCase cases[] = {
      {4, 4, 64, 0, 16, {{0, 20}}},                  // prefill, MHA
      {8, 2, 128, 0, 16, {{0, 5}, {37, 1}, {3, 9}}}, // mixed, GQA
      {32, 4, 64, 0, 16, {{100, 1}, {15, 1}}},       // decode
      {4, 1, 32, 7, 8, {{0, 30}, {12, 4}}},          // MQA, sliding window
      {2, 2, 256, 0, 16, {{40, 3}}},                 // largest head_dim
  };
  for (const AttentionCase &c : cases) {
    const cpu::CacheGeometry g =
        cacheGeometry(2, c.kvHeads, c.headDim, c.blockSize);
    const int layer = 1, width = c.kvHeads * c.headDim;
    const int64_t b = c.seqs.size();
    const BlockTables blocks =
        shuffledBlockTables(c.seqs, c.blockSize, /*spareBlocks=*/3, rng_);
    const int64_t numBlocks = blocks.numBlocks, maxBlocks = blocks.maxBlocks;
    const std::vector<int32_t> &tables = blocks.tables,
                               &contextLens = blocks.contextLens,
                               &qsl = blocks.qsl;
    std::vector<int64_t> allSlots, newSlots;
    for (int64_t s = 0; s < b; ++s) {
      auto [cached, fresh] = c.seqs[s];
      for (int p = 0; p < cached + fresh; ++p)
        (p < cached ? allSlots : newSlots).push_back(blocks.slot(s, p));
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

    AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
    const cpu::AttentionParams p =
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window);
    DeviceArray<int32_t> dTables(tables), dContext(contextLens), dQsl(qsl);
    auto out = DeviceArray<float>::poisoned(q.size());
    ASSERT_EQ(cuda::launchPagedAttention(
                  dq.get(), pool.get(), dims, a, dTables.get(), maxBlocks,
                  dContext.get(), dQsl.get(), b, t, out.get(), nullptr),
              cudaSuccess);
    std::vector<float> ref(q.size());
    cpu::pagedAttention(q.data(), cpuPool.data(), g, p, tables.data(),
                        maxBlocks, contextLens.data(), qsl.data(), b,
                        ref.data(), threads_);
    const double err = relError(out.download(), ref);
    report(
        "paged_attention",
        "h=" + std::to_string(c.heads) + " kvh=" + std::to_string(c.kvHeads) +
            " d=" + std::to_string(c.headDim) +
            " window=" + std::to_string(c.window) + " T=" + std::to_string(t),
        err);
    // Batches with prefill rows take the tensor-core kernel where it supports
    // the shape: bf16 q and probabilities (PrefillAttentionTest covers it).
    const bool tensorCores = t > b && cuda::prefillAttentionSupports(a);
    EXPECT_LT(err, tensorCores ? 1e-2 : kF32Tol);
  }
}

TEST_F(CudaKernelsTest, PagedAttentionSoftcapOnTheFp32Kernel) {
  // The rows no fast kernel takes: head_dim 32 (the Gemma 2 fixture's
  // shape, sliding window 8) and 96, and soft-capping with streaming key
  // rotation (specializedScoreOptions), whose every row runs on the fp32
  // kernel, as the routing checks say. fp32 arithmetic on both sides.
  struct Case {
    AttentionCase shape;
    int rotaryDim;
    ScoreOptions scores;
  };
  const Case cases[] = {
      {{8, 2, 32, 8, 16, {{0, 33}, {20, 7}, {40, 1}}}, 0, {4, 5}},
      {{8, 2, 32, 0, 16, {{0, 33}, {9, 1}}}, 0, {8, 20}},
      {{4, 1, 96, 0, 8, {{100, 30}, {300, 1}}}, 0, {4, 5}},
      {{8, 2, 128, 0, 16, {{50, 70}, {600, 1}}}, 128, {4, 5}},
      {{8, 8, 64, 0, 16, {{0, 40}, {70, 1}}}, 32, {4, 10}},
  };
  const int layer = 1, numLayers = 2;
  for (const Case &k : cases) {
    const AttentionCase &c = k.shape;
    const std::string what = describe(c) + " rotary " +
                             std::to_string(k.rotaryDim) + " " +
                             describe(k.scores);
    cpu::AttentionParams p = cpuAttentionParams(layer, c.heads, c.kvHeads,
                                                c.headDim, c.window, k.scores);
    if (k.rotaryDim > 0) {
      p.keyRope.headDim = c.headDim;
      p.keyRope.rotaryDim = k.rotaryDim;
      p.keyRope.theta = 10000.0;
      ASSERT_TRUE(p.keyRope.validate().isOk());
      p.keyRopeInvFreq = plan::ropeInverseFrequencies(p.keyRope);
    }
    const PagedBatch b = makePagedBatch(
        c.seqs, cuda::KVCacheDtype::kBf16,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize), p,
        /*spareBlocks=*/2, /*bf16Queries=*/true);
    const int64_t numSeqs = c.seqs.size();
    DeviceArray<float> freq(p.keyRopeInvFreq);
    AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window, k.scores);
    a.keyRotaryDim = k.rotaryDim;
    a.keyRopeInvFreq = k.rotaryDim > 0 ? freq.get() : nullptr;
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    EXPECT_FALSE(cuda::splitKVDecodeSupports(a, dims)) << what;
    EXPECT_FALSE(cuda::prefillAttentionSupports(a)) << what;
    EXPECT_FALSE(
        cuda::prefillAttentionSm90Supports(a, dims, cuda::KVCacheDtype::kBf16))
        << what;
    DevicePool pool(b, cuda::KVCacheDtype::kBf16);
    DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
    auto run = [&](QueryType type, const AttentionDims &attention) {
      return runWithQueries(type, b.q, [&](auto q, auto out) {
        return cuda::launchPagedAttention(
            q, pool.pool, dims, attention, tables.get(), b.maxBlocks,
            context.get(), qsl.get(), numSeqs, b.t, out, nullptr);
      });
    };
    for (QueryType type : {QueryType::kF32, QueryType::kBf16}) {
      const double err = relError(run(type, a), b.ref);
      report("paged_attention_softcap", std::string(nameOf(type)) + " " + what,
             err);
      EXPECT_LT(err, kF32Tol + outputTolerance(type))
          << nameOf(type) << " " << what;
    }
    AttentionDims uncapped = a;
    uncapped.logitSoftcap = 0.0f;
    const double uncappedErr = relError(run(QueryType::kF32, uncapped), b.ref);
    report("paged_attention_softcap", what + " without the cap", uncappedErr);
    EXPECT_GT(uncappedErr, 0.1) << what;
  }
}

} // namespace
} // namespace infer::testing
