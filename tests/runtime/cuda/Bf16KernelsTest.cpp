//===- Bf16KernelsTest.cpp - bf16 / f16 activation kernels vs the CPU -----===//
//
// Every activation kernel of Kernels.h and CacheWriteKernels.h on bf16 and
// f16 tensors (a typed test over both), against the CPU backend's kernel of
// the same name run on the same values widened to fp32. ElementCheck.h says
// how a kernel that computes in fp32 and rounds once compares with the
// CPU's fp32 result: |gpu - cpu| <= ulp/2 + |d|, with the bound on the fp32
// difference d stated per kernel:
//
//   exact (same bits)  cast, embedding, add, mul, bias_add, gather_rows,
//                      split, the sum of add_rms_norm, kv_cache_write into
//                      every pool (the same fp32 values, the same IEEE
//                      operation or none, the same rounding and fp8 codes)
//   2^-12 |cpu|        rms_norm, add_rms_norm: fp32 sums of squares against
//                      the CPU's double ones (h 2^-24 in the worst case for
//                      h = 4096; rsqrtf 2 ulp)
//   2^-20 |cpu|        silu, silu_mul: expf and fp32 division against exp
//                      in double (a few fp32 ulp); gelu_tanh adds 2^-16
//                      absolute, where 1 + tanh cancels for x << 0
//   2^-21 max |x|      rope, rope_kv_cache_write, rope_qkv_cache_write
//                      (bit for bit the two launches it replaces): the CPU's
//                      fp32 operations (ropeRotate, no fma), but the GPU's cos
//                      / sin in double may round to the neighbouring float
//                      (~2^-24 of the operands); fp8 pools: one code step,
//                      since either side of a midpoint is right, and E4M3
//                      scales 2^-19
//   2^-14 |cpu| +      fused: six ops in fp32 with expf / tanhf against the
//   2^-12              CPU's double ones, through products of up to |12|
//
// Shapes cover 16-byte packs (rows a multiple of 8 elements, aligned) and
// the element-wise fallback (odd rows, misaligned pointers); the rope and
// cache-write kernels of both give the same bits (column views of merged
// q/k/v rows, aligned and one element off). A kernel of
// each launcher family (map, binary, row norm, rows, fused, rope, cache
// write) also replays from a CUDA graph bit for bit after an eager run, as
// the backend's decode graphs run them.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CacheWriteKernels.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/ElementCheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>

namespace infer::testing {
namespace {

using cuda::KVCacheDtype;

/// A launcher's cudaError_t as the Status replaysInGraph takes.
Status launched(cudaError_t error) {
  return cuda::cudaStatus(error, "launch", __FILE__, __LINE__);
}

template <typename T> DeviceBytes bytesOf(const DeviceArray<T> &a, size_t n) {
  return DeviceBytes{a.get(), n * sizeof(T)};
}

template <typename T> class Bf16KernelsTest : public ::testing::Test {
public:
  /// The other 16-bit type (the target of a cast between the two).
  using Other = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __half,
                                   __nv_bfloat16>;

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
  /// Random values that T holds exactly (what a T activation carries).
  std::vector<float> randomT(size_t n, float scale = 1.0f) {
    return roundedTo<T>(random(n, scale));
  }

  static std::string name() { return ElementTraits<T>::kName; }

  std::mt19937 rng_{20251211};
};

using ActivationTypes = ::testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(Bf16KernelsTest, ActivationTypes);

TYPED_TEST(Bf16KernelsTest, CastRoundsToNearestEven) {
  using T = TypeParam;
  using Other = typename TestFixture::Other;
  const float inf = std::numeric_limits<float>::infinity();
  // Ties of both formats (1 + 2^-8 and 1 + 3 2^-8 for bf16, 1 + 2^-11 and
  // 1 + 3 2^-11 for f16), past f16's range (65520 rounds to inf), its
  // subnormals, signed zeros, infinities and NaN, then random values.
  std::vector<float> x = {0.0f,           -0.0f,           inf,
                          -inf,           std::nanf(""),   1.0f + 0x1p-8f,
                          1.0f + 0x3p-8f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                          65504.0f,       65520.0f,        -70000.0f,
                          0x1p-20f,       0x1.8p-24f,      1e-30f};
  const std::vector<float> tail = this->random(1000, 100.0f);
  x.insert(x.end(), tail.begin(), tail.end());
  // n = all (packs and a tail), and from the second element (misaligned).
  for (size_t offset : {size_t(0), size_t(1)}) {
    const int64_t n = int64_t(x.size() - offset);
    DeviceArray<float> dx(x);
    auto y = DeviceArray<T>::poisoned(x.size());
    ASSERT_EQ(cuda::launchCast(dx.get() + offset, y.get() + offset, n, nullptr),
              cudaSuccess);
    std::vector<T> got = y.download(), want = narrowAll<T>(x);
    got.erase(got.begin(), got.begin() + offset);
    want.erase(want.begin(), want.begin() + offset);
    EXPECT_TRUE(sameBits(got, want, n))
        << "f32 -> " << this->name() << ", offset " << offset;

    DeviceArray<T> dt(narrowAll<T>(x));
    auto back = DeviceArray<float>::poisoned(x.size());
    ASSERT_EQ(
        cuda::launchCast(dt.get() + offset, back.get() + offset, n, nullptr),
        cudaSuccess);
    std::vector<float> gotF = back.download(), wantF = roundedTo<T>(x);
    gotF.erase(gotF.begin(), gotF.begin() + offset);
    wantF.erase(wantF.begin(), wantF.begin() + offset);
    EXPECT_TRUE(sameBits(gotF, wantF, n))
        << this->name() << " -> f32, offset " << offset;

    auto other = DeviceArray<Other>::poisoned(x.size());
    ASSERT_EQ(
        cuda::launchCast(dt.get() + offset, other.get() + offset, n, nullptr),
        cudaSuccess);
    std::vector<Other> gotO = other.download(),
                       wantO = narrowAll<Other>(roundedTo<T>(x));
    gotO.erase(gotO.begin(), gotO.begin() + offset);
    wantO.erase(wantO.begin(), wantO.begin() + offset);
    EXPECT_TRUE(sameBits(gotO, wantO, n))
        << this->name() << " -> " << ElementTraits<Other>::kName << ", offset "
        << offset;
  }
  DeviceArray<float> dx(x);
  auto y = DeviceArray<T>::poisoned(x.size());
  EXPECT_TRUE(replaysInGraph(
      [&](cudaStream_t s) {
        return launched(cuda::launchCast(dx.get(), y.get(), x.size(), s));
      },
      {bytesOf(y, x.size())}));
}

TYPED_TEST(Bf16KernelsTest, EmbeddingConvertsTheTableRows) {
  using T = TypeParam;
  // hidden 64: packs of 8; 36: element by element.
  for (auto [vocab, hidden, t] : {std::tuple{100, 64, 7}, {50, 36, 5}}) {
    const std::vector<float> table =
        roundedTo<__nv_bfloat16>(this->random(size_t(vocab) * hidden, 3.0f));
    std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
    std::vector<int32_t> ids(t);
    for (int32_t &id : ids)
      id = pick(this->rng_);
    DeviceArray<__nv_bfloat16> dTable(narrowAll<__nv_bfloat16>(table));
    DeviceArray<int32_t> dIds(ids);
    // One rank's vocabulary slice: the second half; ids below it give zeros.
    for (int64_t offset : {int64_t(0), int64_t(vocab / 2)}) {
      const int64_t rows = vocab - offset;
      auto y = DeviceArray<T>::poisoned(size_t(t) * hidden);
      ASSERT_EQ(cuda::launchEmbedding(dTable.get() + offset * hidden, rows,
                                      hidden, offset, dIds.get(), t, y.get(),
                                      nullptr),
                cudaSuccess);
      std::vector<float> want(size_t(t) * hidden, 0.0f);
      for (int i = 0; i < t; ++i)
        if (ids[i] >= offset)
          std::copy_n(table.begin() + size_t(ids[i]) * hidden, hidden,
                      want.begin() + size_t(i) * hidden);
      EXPECT_TRUE(sameBits(y.download(), narrowAll<T>(want), hidden))
          << "vocab " << vocab << " hidden " << hidden << " offset " << offset;
      if (offset == 0)
        EXPECT_TRUE(replaysInGraph(
            [&](cudaStream_t s) {
              return launched(cuda::launchEmbedding(
                  dTable.get(), rows, hidden, 0, dIds.get(), t, y.get(), s));
            },
            {bytesOf(y, size_t(t) * hidden)}));
    }
  }
}

/// rms_norm with weights of type P (T or fp32) on aligned rows (h % 8 ==
/// 0: packs) and odd ones, and x one element off 16-byte alignment; rows of
/// several packs a thread (up to 8192 elements in packs of 8) and longer.
template <typename T, typename P> void checkRmsNorm(Bf16KernelsTest<T> &test) {
  const Bound bound{0.5, 0x1p-12, 0.0};
  for (auto [rows, h, misaligned] : {std::tuple{1, 64, false},
                                     {5, 2048, false},
                                     {7, 4096, false},
                                     {3, 100, false},
                                     {4, 256, true},
                                     {2, 3000, false},
                                     {2, 8192, false},
                                     {2, 12288, false},
                                     {2, 1030, true}}) {
    const size_t n = size_t(rows) * h, pad = misaligned ? 1 : 0;
    std::vector<float> x = test.randomT(n + pad, 3.0f);
    const std::vector<float> w = roundedTo<P>(test.random(h));
    DeviceArray<T> dx(narrowAll<T>(x));
    DeviceArray<P> dw(narrowAll<P>(w));
    auto y = DeviceArray<T>::poisoned(n + pad);
    ASSERT_EQ(cuda::launchRmsNorm(dx.get() + pad, dw.get(), y.get() + pad, rows,
                                  h, 1e-5f, nullptr),
              cudaSuccess);
    std::vector<float> want(n);
    cpu::rmsNorm(x.data() + pad, w.data(), want.data(), rows, h, 1e-5);
    std::vector<T> got = y.download();
    got.erase(got.begin(), got.begin() + pad);
    EXPECT_TRUE(withinBound(got, want, bound, h))
        << "rms_norm " << rows << "x" << h << " weights "
        << ElementTraits<P>::kName << (misaligned ? " misaligned" : "");
    if (rows == 7)
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchRmsNorm(dx.get(), dw.get(), y.get(),
                                                rows, h, 1e-5f, s));
          },
          {bytesOf(y, n)}));
  }
}

TYPED_TEST(Bf16KernelsTest, RmsNormRoundsTheCpuResultOnce) {
  checkRmsNorm<TypeParam, TypeParam>(*this);
  checkRmsNorm<TypeParam, float>(*this);
}

template <typename T, typename P>
void checkAddRmsNorm(Bf16KernelsTest<T> &test) {
  const Bound bound{0.5, 0x1p-12, 0.0};
  for (auto [rows, h] :
       {std::pair{1, 64}, {5, 2048}, {33, 4096}, {3, 100}, {4, 102}}) {
    const size_t n = size_t(rows) * h;
    const std::vector<float> a = test.randomT(n, 3.0f), b = test.randomT(n),
                             w = roundedTo<P>(test.random(h));
    DeviceArray<T> da(narrowAll<T>(a)), db(narrowAll<T>(b));
    DeviceArray<P> dw(narrowAll<P>(w));
    auto sum = DeviceArray<T>::poisoned(n);
    auto y = DeviceArray<T>::poisoned(n);
    ASSERT_EQ(cuda::launchAddRmsNorm(da.get(), db.get(), dw.get(), sum.get(),
                                     y.get(), rows, h, 1e-5f, nullptr),
              cudaSuccess);
    std::vector<float> wantSum(n), wantY(n);
    cpu::addRmsNorm(a.data(), b.data(), w.data(), wantSum.data(), wantY.data(),
                    rows, h, 1e-5);
    const std::string where = "add_rms_norm " + std::to_string(rows) + "x" +
                              std::to_string(h) + " weights " +
                              ElementTraits<P>::kName;
    // The CPU's fp32 sums are the GPU's: the same IEEE additions.
    EXPECT_TRUE(sameBits(sum.download(), narrowAll<T>(wantSum), h)) << where;
    EXPECT_TRUE(withinBound(y.download(), wantY, bound, h)) << where;
    if (rows == 33)
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchAddRmsNorm(da.get(), db.get(), dw.get(),
                                                   sum.get(), y.get(), rows, h,
                                                   1e-5f, s));
          },
          {bytesOf(sum, n), bytesOf(y, n)}));
  }
}

TYPED_TEST(Bf16KernelsTest, AddRmsNormNormalizesTheFp32Sum) {
  checkAddRmsNorm<TypeParam, TypeParam>(*this);
  checkAddRmsNorm<TypeParam, float>(*this);
  // The norm reads a + b again, so the sum may not overwrite them.
  DeviceArray<TypeParam> a(narrowAll<TypeParam>(this->random(64)));
  DeviceArray<float> w(this->random(64));
  auto y = DeviceArray<TypeParam>::poisoned(64);
  EXPECT_EQ(cuda::launchAddRmsNorm(a.get(), a.get(), w.get(), a.get(), y.get(),
                                   1, 64, 1e-5f, nullptr),
            cudaErrorInvalidValue);
}

TYPED_TEST(Bf16KernelsTest, ActivationsAndElementwise) {
  using T = TypeParam;
  for (int64_t n : {int64_t(1), int64_t(1003), int64_t(5632 * 17)}) {
    const std::vector<float> a = this->randomT(n, 4.0f), b = this->randomT(n);
    DeviceArray<T> da(narrowAll<T>(a)), db(narrowAll<T>(b));
    auto y = DeviceArray<T>::poisoned(n);
    std::vector<float> want(n);
    const std::string where = this->name() + " n=" + std::to_string(n);

    ASSERT_EQ(cuda::launchSilu(da.get(), y.get(), n, nullptr), cudaSuccess);
    cpu::silu(a.data(), want.data(), n);
    EXPECT_TRUE(withinBound(y.download(), want, Bound{0.5, 0x1p-20, 0.0}, n))
        << "silu " << where;

    ASSERT_EQ(cuda::launchGeluTanh(da.get(), y.get(), n, nullptr), cudaSuccess);
    cpu::geluTanh(a.data(), want.data(), n);
    EXPECT_TRUE(
        withinBound(y.download(), want, Bound{0.5, 0x1p-20, 0x1p-16}, n))
        << "gelu_tanh " << where;

    ASSERT_EQ(cuda::launchAdd(da.get(), db.get(), y.get(), n, nullptr),
              cudaSuccess);
    for (int64_t i = 0; i < n; ++i)
      want[i] = a[i] + b[i];
    EXPECT_TRUE(sameBits(y.download(), narrowAll<T>(want), n))
        << "add " << where;

    ASSERT_EQ(cuda::launchMul(da.get(), db.get(), y.get(), n, nullptr),
              cudaSuccess);
    for (int64_t i = 0; i < n; ++i)
      want[i] = a[i] * b[i];
    EXPECT_TRUE(sameBits(y.download(), narrowAll<T>(want), n))
        << "mul " << where;
    if (n == 1003) {
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchSilu(da.get(), y.get(), n, s));
          },
          {bytesOf(y, n)}));
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchMul(da.get(), db.get(), y.get(), n, s));
          },
          {bytesOf(y, n)}));
    }
  }
}

template <typename T, typename P> void checkBiasAdd(Bf16KernelsTest<T> &test) {
  // cols 256: packs; 300: element by element.
  for (auto [rows, cols] : {std::pair{5, 256}, {3, 300}}) {
    const size_t n = size_t(rows) * cols;
    const std::vector<float> x = test.randomT(n, 3.0f),
                             bias = roundedTo<P>(test.random(cols));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = x[i] + bias[i % cols];
    DeviceArray<T> dx(narrowAll<T>(x));
    DeviceArray<P> dBias(narrowAll<P>(bias));
    auto y = DeviceArray<T>::poisoned(n);
    const std::string where = "bias_add " + std::to_string(rows) + "x" +
                              std::to_string(cols) + " bias " +
                              ElementTraits<P>::kName;
    ASSERT_EQ(cuda::launchBiasAdd(dx.get(), dBias.get(), y.get(), rows, cols,
                                  nullptr),
              cudaSuccess);
    EXPECT_TRUE(sameBits(y.download(), narrowAll<T>(want), cols)) << where;
    ASSERT_EQ(cuda::launchAddBias(dx.get(), dBias.get(), rows, cols, nullptr),
              cudaSuccess);
    EXPECT_TRUE(sameBits(dx.download(), narrowAll<T>(want), cols))
        << where << " in place";
  }
}

TYPED_TEST(Bf16KernelsTest, BiasAddRoundsTheFp32Sum) {
  checkBiasAdd<TypeParam, TypeParam>(*this);
  checkBiasAdd<TypeParam, float>(*this);
}

TYPED_TEST(Bf16KernelsTest, GatherRowsAndSplitCopyBits) {
  using T = TypeParam;
  const int rows = 37, cols = 304;
  const std::vector<float> x = this->randomT(size_t(rows) * cols);
  DeviceArray<T> dx(narrowAll<T>(x));
  const std::vector<int32_t> idx{36, 0, 5, 5, 17};
  DeviceArray<int32_t> dIdx(idx);
  auto gathered = DeviceArray<T>::poisoned(idx.size() * cols);
  ASSERT_EQ(cuda::launchGatherRows(dx.get(), cols, dIdx.get(), idx.size(),
                                   gathered.get(), nullptr),
            cudaSuccess);
  std::vector<float> want;
  for (int32_t i : idx)
    want.insert(want.end(), x.begin() + size_t(i) * cols,
                x.begin() + size_t(i + 1) * cols);
  EXPECT_TRUE(sameBits(gathered.download(), narrowAll<T>(want), cols))
      << "gather_rows";
  // Parts of multiples of 8 (packs), then odd ones (element by element).
  for (const std::vector<int64_t> &sizes :
       {std::vector<int64_t>{128, 32, 144},
        std::vector<int64_t>{3, 100, 201}}) {
    int64_t column = 0;
    for (int64_t width : sizes) {
      auto y = DeviceArray<T>::poisoned(size_t(rows) * width);
      ASSERT_EQ(cuda::launchSplitColumns(dx.get(), rows, cols, column, width,
                                         y.get(), nullptr),
                cudaSuccess);
      std::vector<float> part;
      for (int r = 0; r < rows; ++r)
        part.insert(part.end(), x.begin() + size_t(r) * cols + column,
                    x.begin() + size_t(r) * cols + column + width);
      EXPECT_TRUE(sameBits(y.download(), narrowAll<T>(part), width))
          << "split column " << column << " width " << width;
      column += width;
    }
  }
}

TYPED_TEST(Bf16KernelsTest, SiluMulOnRowsAndColumnViews) {
  using T = TypeParam;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1},
                            {1, 1000},
                            {17, 5632},
                            {3, 333},
                            {70000, 8}}) {
    const int64_t n = rows * cols;
    const std::vector<float> gate = this->randomT(n, 4.0f),
                             up = this->randomT(n);
    DeviceArray<T> dg(narrowAll<T>(gate)), du(narrowAll<T>(up));
    auto y = DeviceArray<T>::poisoned(n);
    ASSERT_EQ(cuda::launchSiluMul(dg.get(), cols, du.get(), cols, y.get(), rows,
                                  cols, nullptr),
              cudaSuccess);
    std::vector<float> want(n);
    cpu::siluMul(gate.data(), up.data(), want.data(), n);
    const std::vector<T> got = y.download();
    EXPECT_TRUE(withinBound(got, want, Bound{0.5, 0x1p-20, 0.0}, cols))
        << "silu_mul " << rows << "x" << cols;
    // gate and up as the column views of one merged gate/up row.
    DeviceArray<T> dMerged(narrowAll<T>(mergedHalves(gate, up, rows, cols)));
    auto yView = DeviceArray<T>::poisoned(n);
    ASSERT_EQ(cuda::launchSiluMul(dMerged.get(), 2 * cols, dMerged.get() + cols,
                                  2 * cols, yView.get(), rows, cols, nullptr),
              cudaSuccess);
    EXPECT_TRUE(sameBits(yView.download(), got, cols))
        << "silu_mul " << rows << "x" << cols << " as views";
    if (rows == 17)
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchSiluMul(dMerged.get(), 2 * cols,
                                                dMerged.get() + cols, 2 * cols,
                                                yView.get(), rows, cols, s));
          },
          {bytesOf(yView, n)}));
  }
}

TYPED_TEST(Bf16KernelsTest, FusedRoundsOnlyItsOutputs) {
  using T = TypeParam;
  // gelu_tanh(0); mul(3, 1); add(4, 2); silu_mul(2, 5); silu(6); mul(7, 0)
  // with yields [5, 8]; input 1 and output 1 fp32, the others T.
  using cuda::ElementType;
  using cuda::FusedOp;
  const ElementType type =
      std::is_same_v<T, __nv_bfloat16> ? ElementType::kBf16 : ElementType::kF16;
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
  p.inputTypes[0] = type;
  p.inputTypes[1] = ElementType::kF32;
  p.inputTypes[2] = type;
  p.outputTypes[0] = type;
  p.outputTypes[1] = ElementType::kF32;
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(5632 * 17)}) {
    const std::vector<float> x0 = this->randomT(n, 3.0f), x1 = this->random(n),
                             x2 = this->randomT(n);
    DeviceArray<T> d0(narrowAll<T>(x0)), d2(narrowAll<T>(x2));
    DeviceArray<float> d1(x1);
    auto y0 = DeviceArray<T>::poisoned(n);
    auto y1 = DeviceArray<float>::poisoned(n);
    p.inputs[0] = d0.get();
    p.inputs[1] = d1.get();
    p.inputs[2] = d2.get();
    p.outputs[0] = y0.get();
    p.outputs[1] = y1.get();
    ASSERT_EQ(cuda::launchFused(p, n, nullptr), cudaSuccess);
    // The CPU kernels one op at a time, in fp32 throughout.
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
    const Bound bound{0.5, 0x1p-14, 0x1p-12};
    EXPECT_TRUE(withinBound(y0.download(), r5, bound, n))
        << "fused output 0 (" << this->name() << ") n=" << n;
    EXPECT_TRUE(withinBound(y1.download(), r8, bound, n))
        << "fused output 1 (f32) n=" << n;
    if (n == 1000)
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) { return launched(cuda::launchFused(p, n, s)); },
          {bytesOf(y0, n), bytesOf(y1, n)}));
  }
}

TYPED_TEST(Bf16KernelsTest, RopeRotatesInFp32) {
  using T = TypeParam;
  struct Case {
    const char *scaling;
    int headDim, rotaryDim, heads, t;
  };
  // Contiguous rows take the packed kernel where head_dim and rotary_dim / 2
  // are multiples of 8 (rotary 24 never does; 64 heads of 128 loop over 512
  // items a block; head_dim 96 with rotary 32 copies packs past them).
  for (Case c :
       {Case{"default", 64, 64, 4, 9}, Case{"linear", 128, 128, 32, 3},
        Case{"llama3", 128, 128, 8, 17}, Case{"default", 64, 32, 2, 5},
        Case{"default", 64, 24, 2, 5}, Case{"llama3", 128, 128, 64, 4},
        Case{"default", 96, 32, 3, 7}, Case{"default", 96, 96, 4, 40}}) {
    cpu::RopeConfig config;
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.theta = 500000.0;
    config.scaling = c.scaling;
    config.factor = 8.0;
    config.originalMaxPositionEmbeddings = 8192;
    ASSERT_TRUE(config.validate().isOk());
    const std::vector<float> invFreq = plan::ropeInverseFrequencies(config);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> x = this->randomT(size_t(c.t) * width);
    std::uniform_int_distribution<int32_t> pos(0, 20000);
    std::vector<int32_t> positions(c.t);
    for (int32_t &p : positions)
      p = pos(this->rng_);
    DeviceArray<T> dx(narrowAll<T>(x));
    DeviceArray<float> dFreq(invFreq);
    DeviceArray<int32_t> dPos(positions);
    auto y = DeviceArray<T>::poisoned(x.size());
    ASSERT_EQ(cuda::launchRope(dx.get(), y.get(), c.t, c.heads, c.headDim,
                               c.rotaryDim, dPos.get(), dFreq.get(), nullptr),
              cudaSuccess);
    std::vector<float> want = x;
    cpu::applyRope(want.data(), c.t, c.heads, positions.data(), config,
                   invFreq);
    double maxAbs = 0.0;
    for (float v : x)
      maxAbs = std::max(maxAbs, double(std::fabs(v)));
    const std::vector<T> got = y.download();
    const std::string where = std::string("rope ") + c.scaling +
                              " d=" + std::to_string(c.headDim) +
                              " rot=" + std::to_string(c.rotaryDim);
    EXPECT_TRUE(
        withinBound(got, want, Bound{0.5, 0x1p-22, 0x1p-21 * maxAbs}, width))
        << where;
    const std::vector<T> cpuRounded = narrowAll<T>(want);
    int64_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i)
      differing += std::memcmp(&got[i], &cpuRounded[i], sizeof(T)) != 0;
    std::cout << "[ kernel   ] " << where << " (" << this->name()
              << "): elements differing from the cpu's: " << differing << "\n";
    // The same rows as column views of a wider matrix (q of a merged q/k/v
    // output): rows a multiple of 8 apart from an aligned column (the
    // packed kernel) and an odd number apart from an odd one (the element
    // kernel). The same bits.
    for (auto [ld, column] : {std::pair<int64_t, int64_t>{width + 24, 8},
                              std::pair<int64_t, int64_t>{width + 37, 5}}) {
      std::vector<float> wide = this->randomT(size_t(c.t) * ld);
      for (int r = 0; r < c.t; ++r)
        std::copy_n(x.begin() + r * width, width,
                    wide.begin() + r * ld + column);
      DeviceArray<T> dWide(narrowAll<T>(wide));
      auto yView = DeviceArray<T>::poisoned(x.size());
      ASSERT_EQ(cuda::launchRope(dWide.get() + column, yView.get(), c.t,
                                 c.heads, c.headDim, c.rotaryDim, dPos.get(),
                                 dFreq.get(), nullptr, ld),
                cudaSuccess);
      EXPECT_TRUE(sameBits(yView.download(), got, width))
          << where << ", rows " << ld << " apart from column " << column;
    }
    if (c.t == 17)
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t s) {
            return launched(cuda::launchRope(dx.get(), y.get(), c.t, c.heads,
                                             c.headDim, c.rotaryDim, dPos.get(),
                                             dFreq.get(), s));
          },
          {bytesOf(y, x.size())}));
  }
}

TYPED_TEST(Bf16KernelsTest, DynamicRopeFollowsEachSequencesLength) {
  using T = TypeParam;
  // Three sequences of a batch: a prefill past max_position_embeddings 16,
  // a decode token before it and one after it. Each sequence's tokens take
  // the frequencies of its length after the step, as the CPU backend.
  cpu::RopeConfig config;
  config.headDim = config.rotaryDim = 64;
  config.theta = 10000.0;
  config.scaling = "dynamic";
  config.factor = 2.0;
  config.originalMaxPositionEmbeddings = 16;
  ASSERT_TRUE(config.validate().isOk());
  const std::vector<int32_t> queryStartLoc = {0, 33, 34, 35};
  std::vector<int32_t> positions;
  for (int32_t p = 0; p < 33; ++p)
    positions.push_back(p);
  positions.push_back(9);
  positions.push_back(40);
  const int heads = 4, t = static_cast<int>(positions.size());
  const int64_t width = int64_t(heads) * config.headDim;
  const std::vector<float> x = this->randomT(size_t(t) * width);
  std::vector<float> want = x;
  for (size_t b = 0; b + 1 < queryStartLoc.size(); ++b) {
    const int32_t first = queryStartLoc[b],
                  count = queryStartLoc[b + 1] - first;
    cpu::applyRope(want.data() + first * width, count, heads,
                   positions.data() + first, config,
                   plan::dynamicRopeInverseFrequencies(
                       config, positions[first + count - 1] + 1));
  }
  DeviceArray<T> dx(narrowAll<T>(x));
  DeviceArray<float> dFreq(plan::ropeInverseFrequencies(config));
  DeviceArray<int32_t> dPos(positions), dStarts(queryStartLoc);
  cuda::DynamicRope dynamic;
  dynamic.queryStartLoc = dStarts.get();
  dynamic.numSeqs = 3;
  dynamic.theta = 10000.0f;
  dynamic.factor = 2.0f;
  dynamic.originalMaxPositionEmbeddings = 16;
  auto y = DeviceArray<T>::poisoned(x.size());
  ASSERT_EQ(cuda::launchRope(dx.get(), y.get(), t, heads, config.headDim,
                             config.rotaryDim, dPos.get(), dFreq.get(), nullptr,
                             0, 0, dynamic),
            cudaSuccess);
  double maxAbs = 0.0;
  for (float v : x)
    maxAbs = std::max(maxAbs, double(std::fabs(v)));
  EXPECT_TRUE(withinBound(y.download(), want,
                          Bound{0.5, 0x1p-22, 0x1p-21 * maxAbs}, width));
  // The element kernel (rows one element off alignment): the same bits.
  const int64_t ld = width + 1;
  std::vector<float> wide = this->randomT(size_t(t) * ld + 1);
  for (int r = 0; r < t; ++r)
    std::copy_n(x.begin() + r * width, width, wide.begin() + r * ld + 1);
  DeviceArray<T> dWide(narrowAll<T>(wide));
  auto yOdd = DeviceArray<T>::poisoned(x.size());
  ASSERT_EQ(cuda::launchRope(dWide.get() + 1, yOdd.get(), t, heads,
                             config.headDim, config.rotaryDim, dPos.get(),
                             dFreq.get(), nullptr, ld, 0, dynamic),
            cudaSuccess);
  EXPECT_TRUE(sameBits(yOdd.download(), y.download(), width));
}

//===----------------------------------------------------------------------===//
// Cache writes
//===----------------------------------------------------------------------===//

struct CacheCase {
  int kvHeads, headDim, rotaryDim, blockSize, t;
};
// head_dim 96 leaves lanes of the last 32-element step idle; 256 is the
// largest; partial rotary dims. The packed kernel takes every case but
// rotary 24 (half 12) in contiguous rows: rows of 4, 6 (padded to 8), 10
// (to 16) and 16 items of 8 elements, Llama-3's shape over several blocks.
const CacheCase kCacheCases[] = {{2, 64, 64, 16, 20},  {8, 128, 128, 16, 5},
                                 {1, 96, 32, 8, 9},    {4, 256, 256, 16, 3},
                                 {3, 96, 96, 16, 11},  {2, 64, 24, 16, 7},
                                 {8, 128, 128, 16, 40}};

const KVCacheDtype kPoolDtypes[] = {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2,
                                    KVCacheDtype::kF8E4M3};

const char *poolName(KVCacheDtype dtype) {
  switch (dtype) {
  case KVCacheDtype::kBf16:
    return "bf16";
  case KVCacheDtype::kF8E5M2:
    return "fp8 e5m2";
  case KVCacheDtype::kF8E4M3:
    return "fp8 e4m3";
  }
  return "?";
}

/// A zeroed pool of `elements` on both sides: the CPU's (fp32 values, or
/// codes and E4M3 scales) and the GPU's of the same layout.
struct TwoPools {
  KVCacheDtype dtype;
  int headDim;
  std::vector<float> cpuValues, cpuScales;
  std::vector<uint8_t> cpuCodes;
  DeviceArray<__nv_bfloat16> gpuValues;
  DeviceArray<uint8_t> gpuCodes;
  DeviceArray<float> gpuScales;

  TwoPools(KVCacheDtype dtype, size_t elements, int headDim)
      : dtype(dtype), headDim(headDim),
        cpuValues(dtype == KVCacheDtype::kBf16 ? elements : 0, 0.0f),
        cpuScales(elements / headDim, 0.0f),
        cpuCodes(dtype == KVCacheDtype::kBf16 ? 0 : elements, 0),
        gpuValues(std::vector<__nv_bfloat16>(cpuValues.size(),
                                             __float2bfloat16_rn(0.0f))),
        gpuCodes(cpuCodes), gpuScales(cpuScales) {}

  cpu::KVPool cpuPool() {
    cpu::KVPool p;
    if (dtype == KVCacheDtype::kBf16) {
      p.values = cpuValues.data();
      return p;
    }
    p.codes = cpuCodes.data();
    p.scales = cpuScales.data();
    p.format =
        dtype == KVCacheDtype::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
    return p;
  }
  cuda::KVCachePool gpuPool() const {
    if (dtype == KVCacheDtype::kBf16)
      return cuda::KVCachePool(gpuValues.get());
    return cuda::KVCachePool(gpuCodes.get(), gpuScales.get(), dtype);
  }
  /// The GPU pool's bytes equal those of `other`'s GPU pool.
  ::testing::AssertionResult sameGpuBytes(const TwoPools &other) const {
    if (auto same =
            sameBits(gpuValues.download(), other.gpuValues.download(), headDim);
        !same)
      return same;
    if (gpuCodes.download() != other.gpuCodes.download())
      return ::testing::AssertionFailure() << "fp8 codes differ";
    return sameBits(gpuScales.download(), other.gpuScales.download(), 1);
  }
  /// The GPU pool's bytes equal the CPU's (bf16: its fp32 values rounded).
  ::testing::AssertionResult sameAsCpu() const {
    if (dtype == KVCacheDtype::kBf16)
      return sameBits(gpuValues.download(), narrowAll<__nv_bfloat16>(cpuValues),
                      headDim);
    if (gpuCodes.download() != cpuCodes)
      return ::testing::AssertionFailure() << "fp8 codes differ";
    if (dtype == KVCacheDtype::kF8E4M3)
      return sameBits(gpuScales.download(), cpuScales, 1);
    return ::testing::AssertionSuccess();
  }
};

/// The signed magnitude order of an fp8 code (sign-magnitude encoding, so
/// neighbouring values are neighbouring integers; +0 and -0 are both 0).
int codeOrder(uint8_t code) {
  return code & 0x80 ? -int(code & 0x7F) : int(code & 0x7F);
}

TYPED_TEST(Bf16KernelsTest, KVCacheWriteStoresWhatTheCpuStores) {
  using T = TypeParam;
  constexpr int kLayers = 2, kLayer = 1;
  for (const CacheCase &c : kCacheCases) {
    const cpu::CacheGeometry g =
        cacheGeometry(kLayers, c.kvHeads, c.headDim, c.blockSize);
    const cuda::CacheDims dims{kLayers, c.kvHeads, c.headDim, c.blockSize};
    const int64_t width = int64_t(c.kvHeads) * c.headDim;
    const int64_t numBlocks = (c.t + c.blockSize - 1) / c.blockSize + 2;
    const std::vector<int64_t> slots =
        shuffledSlots(numBlocks, c.blockSize, c.t, this->rng_);
    DeviceArray<int64_t> dSlots(slots);
    // k and v as column views of one merged q/k/v output (q first, rows ld
    // apart); the CPU takes them contiguous.
    const std::vector<float> k = this->randomT(size_t(c.t) * width, 2.0f),
                             v = this->randomT(size_t(c.t) * width);
    const int64_t ld = 3 * width + 8;
    std::vector<float> qkv = this->randomT(size_t(c.t) * ld);
    for (int r = 0; r < c.t; ++r) {
      std::copy_n(k.begin() + r * width, width, qkv.begin() + r * ld + width);
      std::copy_n(v.begin() + r * width, width,
                  qkv.begin() + r * ld + 2 * width);
    }
    // The same one element off 16-byte alignment: the element kernel.
    const int64_t ldOdd = ld + 1;
    std::vector<float> qkvOdd = this->randomT(size_t(c.t) * ldOdd);
    for (int r = 0; r < c.t; ++r) {
      std::copy_n(k.begin() + r * width, width,
                  qkvOdd.begin() + r * ldOdd + width + 1);
      std::copy_n(v.begin() + r * width, width,
                  qkvOdd.begin() + r * ldOdd + 2 * width + 1);
    }
    DeviceArray<T> dOdd(narrowAll<T>(qkvOdd));
    DeviceArray<T> dk(narrowAll<T>(k)), dv(narrowAll<T>(v)),
        dQkv(narrowAll<T>(qkv));
    for (KVCacheDtype dtype : kPoolDtypes) {
      const std::string where = std::string(poolName(dtype)) +
                                " pool, kvh=" + std::to_string(c.kvHeads) +
                                " d=" + std::to_string(c.headDim) +
                                " T=" + std::to_string(c.t) + " (" +
                                this->name() + " rows)";
      const size_t elements = size_t(numBlocks) * g.blockElements();
      TwoPools pools(dtype, elements, c.headDim);
      cpu::kvCacheWrite(pools.cpuPool(), g, kLayer, k.data(), v.data(),
                        slots.data(), c.t);
      ASSERT_EQ(cuda::launchKVCacheWrite(pools.gpuPool(), dims, kLayer,
                                         dk.get(), dv.get(), dSlots.get(), c.t,
                                         nullptr),
                cudaSuccess);
      EXPECT_TRUE(pools.sameAsCpu()) << where;
      TwoPools viewed(dtype, elements, c.headDim);
      cpu::kvCacheWrite(viewed.cpuPool(), g, kLayer, k.data(), v.data(),
                        slots.data(), c.t);
      ASSERT_EQ(cuda::launchKVCacheWrite(
                    viewed.gpuPool(), dims, kLayer, dQkv.get() + width,
                    dQkv.get() + 2 * width, dSlots.get(), c.t, nullptr, ld, ld),
                cudaSuccess);
      EXPECT_TRUE(viewed.sameAsCpu()) << where << ", rows " << ld << " apart";
      TwoPools odd(dtype, elements, c.headDim);
      ASSERT_EQ(cuda::launchKVCacheWrite(
                    odd.gpuPool(), dims, kLayer, dOdd.get() + width + 1,
                    dOdd.get() + 2 * width + 1, dSlots.get(), c.t, nullptr,
                    ldOdd, ldOdd),
                cudaSuccess);
      EXPECT_TRUE(odd.sameGpuBytes(pools))
          << where << ", rows " << ldOdd << " apart, one element off";
      if (c.t == 20)
        EXPECT_TRUE(replaysInGraph(
            [&](cudaStream_t s) {
              return launched(cuda::launchKVCacheWrite(
                  viewed.gpuPool(), dims, kLayer, dQkv.get() + width,
                  dQkv.get() + 2 * width, dSlots.get(), c.t, s, ld, ld));
            },
            {DeviceBytes{viewed.gpuValues.get(),
                         viewed.cpuValues.size() * sizeof(__nv_bfloat16)},
             DeviceBytes{viewed.gpuCodes.get(), viewed.cpuCodes.size()},
             DeviceBytes{viewed.gpuScales.get(),
                         viewed.cpuScales.size() * sizeof(float)}},
            /*fill=*/0));
    }
  }
}

TYPED_TEST(Bf16KernelsTest, RopeKVCacheWriteRotatesOnTheWayIn) {
  using T = TypeParam;
  constexpr int kLayers = 2, kLayer = 1;
  for (const CacheCase &c : kCacheCases) {
    cpu::RopeConfig config;
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.theta = 10000.0;
    ASSERT_TRUE(config.validate().isOk());
    const std::vector<float> invFreq = plan::ropeInverseFrequencies(config);
    const cpu::CacheGeometry g =
        cacheGeometry(kLayers, c.kvHeads, c.headDim, c.blockSize);
    const cuda::CacheDims dims{kLayers, c.kvHeads, c.headDim, c.blockSize};
    const int64_t width = int64_t(c.kvHeads) * c.headDim;
    const int64_t numBlocks = (c.t + c.blockSize - 1) / c.blockSize + 2;
    const std::vector<int64_t> slots =
        shuffledSlots(numBlocks, c.blockSize, c.t, this->rng_);
    std::uniform_int_distribution<int32_t> pos(0, 5000);
    std::vector<int32_t> positions(c.t);
    for (int32_t &p : positions)
      p = pos(this->rng_);
    const std::vector<float> k = this->randomT(size_t(c.t) * width, 2.0f),
                             v = this->randomT(size_t(c.t) * width);
    double maxAbs = 0.0;
    for (float x : k)
      maxAbs = std::max(maxAbs, double(std::fabs(x)));
    const int64_t ld = 3 * width + 8;
    std::vector<float> qkv = this->randomT(size_t(c.t) * ld);
    for (int r = 0; r < c.t; ++r) {
      std::copy_n(k.begin() + r * width, width, qkv.begin() + r * ld + width);
      std::copy_n(v.begin() + r * width, width,
                  qkv.begin() + r * ld + 2 * width);
    }
    // The same one element off 16-byte alignment: the element kernel.
    const int64_t ldOdd = ld + 1;
    std::vector<float> qkvOdd = this->randomT(size_t(c.t) * ldOdd);
    for (int r = 0; r < c.t; ++r) {
      std::copy_n(k.begin() + r * width, width,
                  qkvOdd.begin() + r * ldOdd + width + 1);
      std::copy_n(v.begin() + r * width, width,
                  qkvOdd.begin() + r * ldOdd + 2 * width + 1);
    }
    DeviceArray<T> dOdd(narrowAll<T>(qkvOdd));
    DeviceArray<T> dk(narrowAll<T>(k)), dv(narrowAll<T>(v)),
        dQkv(narrowAll<T>(qkv));
    DeviceArray<float> dFreq(invFreq);
    DeviceArray<int64_t> dSlots(slots);
    DeviceArray<int32_t> dPos(positions);
    const size_t elements = size_t(numBlocks) * g.blockElements();
    for (KVCacheDtype dtype : kPoolDtypes) {
      const std::string where = std::string(poolName(dtype)) +
                                " pool, kvh=" + std::to_string(c.kvHeads) +
                                " d=" + std::to_string(c.headDim) +
                                " rot=" + std::to_string(c.rotaryDim) + " (" +
                                this->name() + " rows)";
      TwoPools pools(dtype, elements, c.headDim);
      cpu::ropeKVCacheWrite(pools.cpuPool(), g, kLayer, k.data(), v.data(),
                            slots.data(), positions.data(), c.t, config,
                            invFreq);
      ASSERT_EQ(cuda::launchRopeKVCacheWrite(pools.gpuPool(), dims, kLayer,
                                             dk.get(), dv.get(), dSlots.get(),
                                             dPos.get(), c.t, c.rotaryDim,
                                             dFreq.get(), nullptr),
                cudaSuccess);
      if (dtype == KVCacheDtype::kBf16) {
        EXPECT_TRUE(withinBound(pools.gpuValues.download(), pools.cpuValues,
                                Bound{0.5, 0x1p-22, 0x1p-21 * maxAbs},
                                c.headDim))
            << where;
      } else {
        // Either code of a value near a midpoint is right: one step apart
        // at most; E4M3 scales (amax / 448) as close as the largest rotated
        // values, a few 2^-24 of them.
        const std::vector<uint8_t> got = pools.gpuCodes.download();
        int64_t apart = 0, worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const int d =
              std::abs(codeOrder(got[i]) - codeOrder(pools.cpuCodes[i]));
          apart += d != 0;
          worst = std::max<int64_t>(worst, d);
        }
        EXPECT_LE(worst, 1) << where << ": " << apart << " codes differ";
        if (dtype == KVCacheDtype::kF8E4M3)
          EXPECT_TRUE(withinBound(pools.gpuScales.download(), pools.cpuScales,
                                  Bound{0.0, 0x1p-19, 0.0}, c.kvHeads))
              << where << " scales";
      }
      // k and v as column views: the same bytes as contiguous rows.
      TwoPools viewed(dtype, elements, c.headDim);
      ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                    viewed.gpuPool(), dims, kLayer, dQkv.get() + width,
                    dQkv.get() + 2 * width, dSlots.get(), dPos.get(), c.t,
                    c.rotaryDim, dFreq.get(), nullptr, ld, ld),
                cudaSuccess);
      EXPECT_TRUE(sameBits(viewed.gpuValues.download(),
                           pools.gpuValues.download(), c.headDim))
          << where << ", rows " << ld << " apart";
      EXPECT_EQ(viewed.gpuCodes.download(), pools.gpuCodes.download())
          << where << ", rows " << ld << " apart";
      EXPECT_TRUE(sameBits(viewed.gpuScales.download(),
                           pools.gpuScales.download(), c.kvHeads))
          << where << ", rows " << ld << " apart";
      TwoPools odd(dtype, elements, c.headDim);
      ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                    odd.gpuPool(), dims, kLayer, dOdd.get() + width + 1,
                    dOdd.get() + 2 * width + 1, dSlots.get(), dPos.get(), c.t,
                    c.rotaryDim, dFreq.get(), nullptr, ldOdd, ldOdd),
                cudaSuccess);
      EXPECT_TRUE(odd.sameGpuBytes(pools))
          << where << ", rows " << ldOdd << " apart, one element off";
      if (c.t == 20)
        EXPECT_TRUE(replaysInGraph(
            [&](cudaStream_t s) {
              return launched(cuda::launchRopeKVCacheWrite(
                  viewed.gpuPool(), dims, kLayer, dQkv.get() + width,
                  dQkv.get() + 2 * width, dSlots.get(), dPos.get(), c.t,
                  c.rotaryDim, dFreq.get(), s, ld, ld));
            },
            {DeviceBytes{viewed.gpuValues.get(),
                         viewed.cpuValues.size() * sizeof(__nv_bfloat16)},
             DeviceBytes{viewed.gpuCodes.get(), viewed.cpuCodes.size()},
             DeviceBytes{viewed.gpuScales.get(),
                         viewed.cpuScales.size() * sizeof(float)}},
            /*fill=*/0));
    }
    // bf16 rows into a bf16 pool: rope then kv_cache_write round the same
    // fp32 rotation once, as the fused kernel does.
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      TwoPools fused(KVCacheDtype::kBf16, elements, c.headDim),
          unfused(KVCacheDtype::kBf16, elements, c.headDim);
      ASSERT_EQ(cuda::launchRopeKVCacheWrite(fused.gpuPool(), dims, kLayer,
                                             dk.get(), dv.get(), dSlots.get(),
                                             dPos.get(), c.t, c.rotaryDim,
                                             dFreq.get(), nullptr),
                cudaSuccess);
      auto rotated = DeviceArray<T>::poisoned(k.size());
      ASSERT_EQ(cuda::launchRope(dk.get(), rotated.get(), c.t, c.kvHeads,
                                 c.headDim, c.rotaryDim, dPos.get(),
                                 dFreq.get(), nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::launchKVCacheWrite(unfused.gpuPool(), dims, kLayer,
                                         rotated.get(), dv.get(), dSlots.get(),
                                         c.t, nullptr),
                cudaSuccess);
      EXPECT_TRUE(sameBits(fused.gpuValues.download(),
                           unfused.gpuValues.download(), c.headDim))
          << "rope + kv_cache_write against rope_kv_cache_write, d="
          << c.headDim << " rot=" << c.rotaryDim;
    }
  }
}

/// The ropes rope_qkv_cache_write runs: one table, longrope's two (tokens
/// on both sides of original_max_position_embeddings) and dynamic NTK.
enum class RopeKind { kDefault, kLongRope, kDynamic };

/// A rope of `kind` for `c`, and for a dynamic one the batch's two
/// sequences (the last token a decode of its own).
struct QKVRope {
  cpu::RopeConfig config;
  std::vector<int32_t> queryStartLoc;

  QKVRope(RopeKind kind, const CacheCase &c) {
    config.headDim = c.headDim;
    config.rotaryDim = c.rotaryDim;
    config.theta = 10000.0;
    if (kind == RopeKind::kLongRope) {
      config.scaling = "longrope";
      config.originalMaxPositionEmbeddings = 2048;
      for (int j = 0; j < c.rotaryDim / 2; ++j) {
        config.shortFactor.push_back(1.0 + 0.05 * j);
        config.longFactor.push_back(2.0 + 0.25 * j);
      }
    } else if (kind == RopeKind::kDynamic) {
      config.scaling = "dynamic";
      config.factor = 2.0;
      config.originalMaxPositionEmbeddings = 4;
      queryStartLoc = {0, c.t - 1, c.t};
    }
  }
  /// The CPU's rotation of x [t, heads * head_dim] in place, each dynamic
  /// sequence with its own frequencies (CpuSteps.cpp's forEachRopeSpan).
  void applyCpu(float *x, int t, int64_t heads,
                const std::vector<int32_t> &positions) const {
    if (queryStartLoc.empty()) {
      cpu::applyRope(x, t, heads, positions.data(), config,
                     plan::ropeInverseFrequencies(config));
      return;
    }
    for (size_t b = 0; b + 1 < queryStartLoc.size(); ++b) {
      const int32_t first = queryStartLoc[b],
                    count = queryStartLoc[b + 1] - first;
      cpu::applyRope(x + first * heads * config.headDim, count, heads,
                     positions.data() + first, config,
                     plan::dynamicRopeInverseFrequencies(
                         config, positions[first + count - 1] + 1));
    }
  }
};

uint16_t bf16Bits(__nv_bfloat16 x) {
  uint16_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

/// FreshKV's rows (Kernels.h) of the tokens with a slot, in planes of
/// t + contextRows rows: the bf16 of each element of `pools`' GPU pool as
/// the CPU decodes it (code x scale), element for element what the Hopper
/// prefill's staging computes.
::testing::AssertionResult
freshRowsDecodePool(const std::vector<__nv_bfloat16> &fresh,
                    const TwoPools &pools, const std::vector<int64_t> &slots,
                    const cuda::CacheDims &dims, int layer,
                    int64_t contextRows = 0) {
  std::vector<uint8_t> codes = pools.gpuCodes.download();
  std::vector<float> scales = pools.gpuScales.download();
  cpu::KVPool pool;
  pool.codes = codes.data();
  pool.scales = scales.data();
  pool.format = pools.dtype == KVCacheDtype::kF8E5M2 ? Fp8Format::kE5M2
                                                      : Fp8Format::kE4M3;
  const std::vector<__nv_bfloat16> want = freshRowsOfPool(
      pool,
      cacheGeometry(dims.numLayers, dims.numKVHeads, dims.headDim,
                    dims.blockSize),
      layer, slots);
  const int64_t t = static_cast<int64_t>(slots.size()),
                width = int64_t(dims.numKVHeads) * dims.headDim;
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t token = 0; token < t; ++token) {
      if (slots[token] < 0)
        continue;
      for (int64_t e = 0; e < width; ++e) {
        const size_t i = size_t((kv * t + token) * width + e);
        const size_t got = size_t((kv * (t + contextRows) + token) * width + e);
        if (bf16Bits(fresh[got]) != bf16Bits(want[i]))
          return ::testing::AssertionFailure()
                 << "token " << token << " kv " << kv << " element " << e
                 << ": 0x" << std::hex << bf16Bits(fresh[got])
                 << ", the pool's decode 0x" << bf16Bits(want[i]);
      }
    }
  return ::testing::AssertionSuccess();
}

TYPED_TEST(Bf16KernelsTest, RopeQKVCacheWriteIsRopeAndRopeKVCacheWrite) {
  // One launch rotating q and writing rotated k and v: the same bytes as
  // launchRope of q and launchRopeKVCacheWrite of k and v, for every pool,
  // rope and shape (16-byte packs in column views of the q/k/v rows, and the
  // element kernel one element off), with a padding token (slot -1) whose
  // queries are rotated all the same; and within the rope bound of the CPU.
  using T = TypeParam;
  constexpr int kLayers = 2, kLayer = 1;
  for (const CacheCase &c : kCacheCases)
    for (RopeKind kind :
         {RopeKind::kDefault, RopeKind::kLongRope, RopeKind::kDynamic}) {
      if (kind == RopeKind::kDynamic && c.t < 2)
        continue;
      const QKVRope rope(kind, c);
      ASSERT_TRUE(rope.config.validate().isOk());
      const int qHeads = 2 * c.kvHeads;
      const cpu::CacheGeometry g =
          cacheGeometry(kLayers, c.kvHeads, c.headDim, c.blockSize);
      const cuda::CacheDims dims{kLayers, c.kvHeads, c.headDim, c.blockSize};
      const int64_t qWidth = int64_t(qHeads) * c.headDim,
                    width = int64_t(c.kvHeads) * c.headDim;
      const int64_t numBlocks = (c.t + c.blockSize - 1) / c.blockSize + 2;
      std::vector<int64_t> slots =
          shuffledSlots(numBlocks, c.blockSize, c.t, this->rng_);
      if (c.t > 2)
        slots[1] = -1;
      std::vector<int32_t> positions(c.t);
      std::uniform_int_distribution<int32_t> pos(0, 5000);
      for (int i = 0; i < c.t; ++i)
        positions[i] = kind == RopeKind::kDynamic
                           ? (i + 1 < c.t ? 3 + i : 2) // past 4, and a decode
                           : pos(this->rng_);
      // Merged q/k/v rows, 16-byte aligned and one element off.
      const int64_t ld = qWidth + 2 * width + 8, ldOdd = ld + 1;
      const std::vector<float> qkv = this->randomT(size_t(c.t) * ld, 2.0f);
      std::vector<float> qkvOdd(size_t(c.t) * ldOdd, 0.0f);
      for (int r = 0; r < c.t; ++r)
        std::copy_n(qkv.begin() + r * ld, ld, qkvOdd.begin() + r * ldOdd + 1);
      DeviceArray<T> dQkv(narrowAll<T>(qkv)), dOdd(narrowAll<T>(qkvOdd));
      DeviceArray<float> dFreq(plan::ropeInverseFrequencies(rope.config));
      DeviceArray<int64_t> dSlots(slots);
      DeviceArray<int32_t> dPos(positions),
          dStarts(rope.queryStartLoc.empty() ? std::vector<int32_t>{0}
                                             : rope.queryStartLoc);
      cuda::DynamicRope dynamic;
      if (kind == RopeKind::kDynamic) {
        dynamic.queryStartLoc = dStarts.get();
        dynamic.numSeqs = 2;
        dynamic.theta = 10000.0f;
        dynamic.factor = 2.0f;
        dynamic.originalMaxPositionEmbeddings = 4;
      }
      const int longFrom = static_cast<int>(rope.config.longFrom());
      // The CPU's rotated queries.
      std::vector<float> qCpu(size_t(c.t) * qWidth);
      double maxAbs = 0.0;
      for (int r = 0; r < c.t; ++r)
        for (int64_t e = 0; e < qWidth; ++e) {
          qCpu[r * qWidth + e] = qkv[r * ld + e];
          maxAbs = std::max(maxAbs, double(std::fabs(qkv[r * ld + e])));
        }
      rope.applyCpu(qCpu.data(), c.t, qHeads, positions);
      const size_t elements = size_t(numBlocks) * g.blockElements();
      for (KVCacheDtype dtype : kPoolDtypes) {
        const char *kinds[] = {"default", "longrope", "dynamic"};
        const std::string where = std::string(poolName(dtype)) + " pool, " +
                                  kinds[static_cast<int>(kind)] +
                                  " rope, kvh=" + std::to_string(c.kvHeads) +
                                  " d=" + std::to_string(c.headDim) +
                                  " rot=" + std::to_string(c.rotaryDim) +
                                  " T=" + std::to_string(c.t) + " (" +
                                  this->name() + " rows)";
        // Two launches: rope of q, rope_kv_cache_write of k and v.
        TwoPools twoLaunches(dtype, elements, c.headDim);
        auto qTwo = DeviceArray<T>::poisoned(size_t(c.t) * qWidth);
        ASSERT_EQ(cuda::launchRope(dQkv.get(), qTwo.get(), c.t, qHeads,
                                   c.headDim, c.rotaryDim, dPos.get(),
                                   dFreq.get(), nullptr, ld, longFrom, dynamic),
                  cudaSuccess);
        ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                      twoLaunches.gpuPool(), dims, kLayer, dQkv.get() + qWidth,
                      dQkv.get() + qWidth + width, dSlots.get(), dPos.get(),
                      c.t, c.rotaryDim, dFreq.get(), nullptr, ld, ld, longFrom,
                      dynamic),
                  cudaSuccess);
        // FreshKV beside that rope_kv_cache_write and beside a
        // kv_cache_write of the same rows (no rope, planes with context
        // rows after the call's): the packed kernels write it and say so,
        // the rows decode the pool each wrote, and the pool's bytes are
        // those of a launch without it.
        if (dtype != KVCacheDtype::kBf16) {
          for (bool rotate : {true, false}) {
            TwoPools withFresh(dtype, elements, c.headDim),
                plain(dtype, elements, c.headDim);
            const int64_t contextRows = rotate ? 0 : 5;
            auto fresh = DeviceArray<__nv_bfloat16>::poisoned(
                size_t(2) * (c.t + contextRows) * width);
            const cuda::FreshKV freshKV{fresh.get(), c.t, contextRows};
            bool written = false;
            const T *kRows = dQkv.get() + qWidth,
                    *vRows = dQkv.get() + qWidth + width;
            if (rotate) {
              ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                            withFresh.gpuPool(), dims, kLayer, kRows, vRows,
                            dSlots.get(), dPos.get(), c.t, c.rotaryDim,
                            dFreq.get(), nullptr, ld, ld, longFrom, dynamic,
                            freshKV, &written),
                        cudaSuccess);
            } else {
              ASSERT_EQ(cuda::launchKVCacheWrite(withFresh.gpuPool(), dims,
                                                 kLayer, kRows, vRows,
                                                 dSlots.get(), c.t, nullptr, ld,
                                                 ld, freshKV, &written),
                        cudaSuccess);
              ASSERT_EQ(cuda::launchKVCacheWrite(plain.gpuPool(), dims, kLayer,
                                                 kRows, vRows, dSlots.get(),
                                                 c.t, nullptr, ld, ld),
                        cudaSuccess);
            }
            const std::string path =
                where + (rotate ? ", rope_kv_cache_write" : ", kv_cache_write");
            const bool packed =
                c.headDim % 8 == 0 && (!rotate || c.rotaryDim / 2 % 8 == 0);
            EXPECT_EQ(written, packed) << path << ": FreshKV written";
            EXPECT_TRUE(withFresh.sameGpuBytes(rotate ? twoLaunches : plain))
                << path << ": FreshKV cache";
            if (written)
              EXPECT_TRUE(freshRowsDecodePool(fresh.download(), withFresh,
                                              slots, dims, kLayer, contextRows))
                  << path << ": FreshKV rows";
          }
        }
        // One launch, packed (aligned views) and element-wise (odd views).
        for (bool odd : {false, true}) {
          const T *rows = odd ? dOdd.get() + 1 : dQkv.get();
          const int64_t rowLd = odd ? ldOdd : ld;
          TwoPools fused(dtype, elements, c.headDim);
          auto qFused = DeviceArray<T>::poisoned(size_t(c.t) * qWidth);
          ASSERT_EQ(cuda::launchRopeQKVCacheWrite(
                        rows, qFused.get(), qHeads, fused.gpuPool(), dims,
                        kLayer, rows + qWidth, rows + qWidth + width,
                        dSlots.get(), dPos.get(), c.t, c.rotaryDim, dFreq.get(),
                        nullptr, rowLd, rowLd, rowLd, longFrom, dynamic),
                    cudaSuccess);
          const std::string path = where + (odd ? ", element" : ", packed");
          EXPECT_TRUE(sameBits(qFused.download(), qTwo.download(), qWidth))
              << path << ": queries";
          EXPECT_TRUE(fused.sameGpuBytes(twoLaunches)) << path << ": cache";
          EXPECT_TRUE(withinBound(qFused.download(), qCpu,
                                  Bound{0.5, 0x1p-22, 0x1p-21 * maxAbs},
                                  qWidth))
              << path << ": queries against the CPU";
          // FreshKV beside an fp8 pool: the packed kernel writes it and
          // says so, the element one (odd views, or a rotary half that is
          // not whole 16-byte packs) does not; the pool's bytes are the
          // same either way.
          if (dtype == KVCacheDtype::kBf16)
            continue;
          TwoPools withFresh(dtype, elements, c.headDim);
          auto qFresh = DeviceArray<T>::poisoned(size_t(c.t) * qWidth);
          auto fresh =
              DeviceArray<__nv_bfloat16>::poisoned(size_t(2) * c.t * width);
          bool written = odd;
          ASSERT_EQ(cuda::launchRopeQKVCacheWrite(
                        rows, qFresh.get(), qHeads, withFresh.gpuPool(), dims,
                        kLayer, rows + qWidth, rows + qWidth + width,
                        dSlots.get(), dPos.get(), c.t, c.rotaryDim, dFreq.get(),
                        nullptr, rowLd, rowLd, rowLd, longFrom, dynamic,
                        cuda::FreshKV{fresh.get(), c.t}, &written),
                    cudaSuccess);
          const bool packed =
              !odd && c.headDim % 8 == 0 && c.rotaryDim / 2 % 8 == 0;
          EXPECT_EQ(written, packed) << path << ": FreshKV written";
          EXPECT_TRUE(withFresh.sameGpuBytes(fused))
              << path << ": FreshKV cache";
          if (written)
            EXPECT_TRUE(freshRowsDecodePool(fresh.download(), withFresh, slots,
                                            dims, kLayer))
                << path << ": FreshKV rows";
        }
        if (c.t == 20 && kind == RopeKind::kDefault) {
          TwoPools graphed(dtype, elements, c.headDim);
          auto qGraphed = DeviceArray<T>::poisoned(size_t(c.t) * qWidth);
          EXPECT_TRUE(replaysInGraph(
              [&](cudaStream_t s) {
                return launched(cuda::launchRopeQKVCacheWrite(
                    dQkv.get(), qGraphed.get(), qHeads, graphed.gpuPool(), dims,
                    kLayer, dQkv.get() + qWidth, dQkv.get() + qWidth + width,
                    dSlots.get(), dPos.get(), c.t, c.rotaryDim, dFreq.get(), s,
                    ld, ld, ld));
              },
              {bytesOf(qGraphed, size_t(c.t) * qWidth),
               DeviceBytes{graphed.gpuValues.get(),
                           graphed.cpuValues.size() * sizeof(__nv_bfloat16)},
               DeviceBytes{graphed.gpuCodes.get(), graphed.cpuCodes.size()},
               DeviceBytes{graphed.gpuScales.get(),
                           graphed.cpuScales.size() * sizeof(float)}},
              /*fill=*/0));
        }
      }
    }
}

TYPED_TEST(Bf16KernelsTest, DynamicRopeKVCacheWriteFollowsEachSequencesLength) {
  using T = TypeParam;
  // The keys of two sequences, a 20-token prefill past max_position_embeddings
  // 16 and a decode token at 5, rotated on their way into a bf16 pool with
  // each sequence's frequencies, as the CPU backend writes them.
  constexpr int kLayers = 2, kLayer = 1, kvHeads = 2, headDim = 64,
                blockSize = 16;
  cpu::RopeConfig config;
  config.headDim = config.rotaryDim = headDim;
  config.theta = 10000.0;
  config.scaling = "dynamic";
  config.factor = 2.0;
  config.originalMaxPositionEmbeddings = 16;
  ASSERT_TRUE(config.validate().isOk());
  const std::vector<int32_t> queryStartLoc = {0, 20, 21};
  std::vector<int32_t> positions;
  for (int32_t p = 0; p < 20; ++p)
    positions.push_back(p);
  positions.push_back(5);
  const int t = static_cast<int>(positions.size());
  const cpu::CacheGeometry g =
      cacheGeometry(kLayers, kvHeads, headDim, blockSize);
  const cuda::CacheDims dims{kLayers, kvHeads, headDim, blockSize};
  const int64_t width = int64_t(kvHeads) * headDim;
  const int64_t numBlocks = (t + blockSize - 1) / blockSize + 2;
  const std::vector<int64_t> slots =
      shuffledSlots(numBlocks, blockSize, t, this->rng_);
  const std::vector<float> k = this->randomT(size_t(t) * width, 2.0f),
                           v = this->randomT(size_t(t) * width);
  double maxAbs = 0.0;
  for (float x : k)
    maxAbs = std::max(maxAbs, double(std::fabs(x)));
  TwoPools pools(KVCacheDtype::kBf16, size_t(numBlocks) * g.blockElements(),
                 headDim);
  for (size_t b = 0; b + 1 < queryStartLoc.size(); ++b) {
    const int32_t first = queryStartLoc[b],
                  count = queryStartLoc[b + 1] - first;
    cpu::ropeKVCacheWrite(pools.cpuPool(), g, kLayer, k.data() + first * width,
                          v.data() + first * width, slots.data() + first,
                          positions.data() + first, count, config,
                          plan::dynamicRopeInverseFrequencies(
                              config, positions[first + count - 1] + 1));
  }
  DeviceArray<T> dk(narrowAll<T>(k)), dv(narrowAll<T>(v));
  DeviceArray<float> dFreq(plan::ropeInverseFrequencies(config));
  DeviceArray<int64_t> dSlots(slots);
  DeviceArray<int32_t> dPos(positions), dStarts(queryStartLoc);
  cuda::DynamicRope dynamic;
  dynamic.queryStartLoc = dStarts.get();
  dynamic.numSeqs = 2;
  dynamic.theta = 10000.0f;
  dynamic.factor = 2.0f;
  dynamic.originalMaxPositionEmbeddings = 16;
  ASSERT_EQ(cuda::launchRopeKVCacheWrite(
                pools.gpuPool(), dims, kLayer, dk.get(), dv.get(), dSlots.get(),
                dPos.get(), t, headDim, dFreq.get(), nullptr, 0, 0, 0, dynamic),
            cudaSuccess);
  EXPECT_TRUE(withinBound(pools.gpuValues.download(), pools.cpuValues,
                          Bound{0.5, 0x1p-22, 0x1p-21 * maxAbs}, headDim));
}

TEST(SiluMulF32Test, Fp32HalvesOfMergedRowsRoundOnceToBf16) {
  // linear_swiglu's GEMM path: the [gate | up] rows of an fp32 product, as
  // column views, into bf16 rounded once (the SwiGLU epilogue's rounding).
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "CUDA kernel tests need a GPU: " << why;
  std::mt19937 rng(23);
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 1}, {3, 333}, {17, 5632}, {2000, 64}}) {
    const int64_t n = rows * cols;
    const std::vector<float> gate = uniform(size_t(n), 4.0f, rng),
                             up = uniform(size_t(n), 1.0f, rng);
    DeviceArray<float> dMerged(mergedHalves(gate, up, rows, cols));
    auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(n));
    ASSERT_EQ(cuda::launchSiluMulF32(dMerged.get(), 2 * cols,
                                     dMerged.get() + cols, 2 * cols, y.get(),
                                     rows, cols, nullptr),
              cudaSuccess);
    std::vector<float> want(static_cast<size_t>(n));
    cpu::siluMul(gate.data(), up.data(), want.data(), n);
    EXPECT_TRUE(withinBound(y.download(), want, Bound{0.5, 0x1p-20, 0.0}, cols))
        << "silu_mul of fp32 rows " << rows << "x" << cols;
  }
  DeviceArray<float> x(std::vector<float>(64));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(64);
  EXPECT_EQ(
      cuda::launchSiluMulF32(x.get(), 4, x.get(), 8, y.get(), 2, 8, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

} // namespace
} // namespace infer::testing
