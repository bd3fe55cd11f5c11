//===- Bf16GemmTest.cpp - GEMMs of bf16 activations against the CPU -------===//
//
// Gemm::linear with a bf16 x and a bf16 (activations) or fp32 (logits) y on
// every path (Gemm::Path at T = 1 .. 300, bf16 and fp8 weights, with and
// without a bias, with and without a residual), each skinny kernel alone,
// and the per-token E4M3
// quantizer of bf16 rows, against the CPU backend's linear / linearFp8 on
// the same bf16 x widened to fp32 (the same weight values). Per element
// (ElementCheck.h):
//
//   |gpu - cpu| <= ulp_y(cpu) + 2^-14 sum_i |x_i w_ji|
//
// the rounding of y plus the fp32 accumulation: both sides form the
// products exactly (bf16 x bf16; x times an E4M3 code, the row scale
// applied to the sum) and sum K of them in different orders and blocks.
// Rounding every addition bounds that by K 2^-24 sum |x w|, and random
// signs keep it near sqrt(K) 2^-24 of it; 2^-14 leaves room for the tensor
// cores' accumulation at K = 9000 and still fails on a dropped, repeated or
// misplaced term, a missing bias or residual (drawn as large as y) or a wrong
// scale. A residual joins the CPU's fp32 sum before its one rounding (the
// step linear_residual), so the same bound holds with it.
// fp8 cuBLASLt (x quantized per token to E4M3) is compared with linearFp8
// on x rounded through the same quantization, within ulp_y +
// fp8QuantizedTolerance() of the largest |y| (Fp8Tolerance.h: the FP8 tensor
// cores' accumulation); a bf16 y for which the heuristic has no outer-vector
// algorithm takes the skinny kernels instead (Gemm::fp8Scaling says so and
// the test prints it) and is held to the first bound. Products of the sizes
// the backend captures (T <= 256) replay from a CUDA graph bit for bit.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/ElementCheck.h"
#include "tests/runtime/cuda/Fp8Tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <type_traits>

namespace infer::testing {
namespace {

using cuda::Gemm;
using Path = cuda::Gemm::Path;

constexpr double kAccumulation = 0x1p-14;

std::vector<float> absolute(std::vector<float> v) {
  for (float &x : v)
    x = std::fabs(x);
  return v;
}

double maxAbs(const std::vector<float> &v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, double(std::fabs(x)));
  return m;
}

/// The x rows quantized per token as launchQuantizeRowsFp8 does (scale =
/// amax / 448, codes of x / scale; 0 and codes 0 for a zero row), and the
/// values they stand for.
struct QuantizedRows {
  std::vector<uint8_t> codes;
  std::vector<float> scales, values;
};
QuantizedRows quantizeRows(const std::vector<float> &x, int64_t t, int64_t k) {
  QuantizedRows q;
  q.codes.resize(x.size());
  q.values.resize(x.size());
  q.scales.resize(size_t(t));
  for (int64_t r = 0; r < t; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i)
      amax = std::max(amax, std::fabs(x[r * k + i]));
    const float scale = amax / kFp8E4M3Max;
    q.scales[r] = scale;
    for (int64_t i = 0; i < k; ++i) {
      const size_t e = size_t(r * k + i);
      q.codes[e] =
          scale == 0.0f ? 0 : encodeFp8(x[e] / scale, Fp8Format::kE4M3);
      q.values[e] = decodeFp8(q.codes[e], Fp8Format::kE4M3) * scale;
    }
  }
  return q;
}

std::string shapeName(int64_t t, int64_t n, int64_t k) {
  return "T=" + std::to_string(t) + " N=" + std::to_string(n) +
         " K=" + std::to_string(k);
}

template <typename Y> constexpr cudaDataType_t cudaTypeOf() {
  return std::is_same_v<Y, float> ? CUDA_R_32F : CUDA_R_16BF;
}

struct Shape {
  int64_t t, n, k;
};

/// One product's operands (x bf16 values; w bf16 values, or E4M3 codes and
/// row scales), a bias and a residual [T, N] drawn as large as y, and their
/// device copies.
struct Operands {
  Shape s;
  std::vector<float> x, w, bias, residual, scales;
  std::vector<uint8_t> codes;
  DeviceArray<__nv_bfloat16> dx, dw;
  DeviceArray<uint8_t> dCodes;
  DeviceArray<float> dScales;

  Operands(const Shape &s, bool fp8, std::mt19937 &rng)
      : s(s),
        x(roundedTo<__nv_bfloat16>(uniform(size_t(s.t * s.k), 1.0f, rng))),
        w(fp8 ? std::vector<float>()
              : roundedTo<__nv_bfloat16>(
                    uniform(size_t(s.n * s.k), 0.1f, rng))),
        bias(uniform(size_t(s.n), 0.05f * std::sqrt(float(s.k)), rng)),
        residual(
            uniform(size_t(s.t * s.n), 0.05f * std::sqrt(float(s.k)), rng)),
        codes(fp8 ? randomCodes(s, rng, scales) : std::vector<uint8_t>()),
        dx(narrowAll<__nv_bfloat16>(x)), dw(narrowAll<__nv_bfloat16>(w)),
        dCodes(codes), dScales(scales) {}

  cuda::GemmWeight weight() const {
    cuda::GemmWeight g;
    if (w.empty()) {
      g.fp8 = dCodes.get();
      g.rowScales = dScales.get();
    } else {
      g.bf16 = dw.get();
    }
    return g;
  }

  /// cpu::linear / linearFp8 of `in` (T rows of x's shape), no bias.
  std::vector<float> cpuProduct(const std::vector<float> &in, bool absWeights,
                                cpu::ThreadPool &pool) const {
    std::vector<float> y(size_t(s.t * s.n));
    if (w.empty()) {
      std::vector<uint8_t> c = codes;
      if (absWeights)
        for (uint8_t &code : c)
          code &= 0x7F;
      cpu::linearFp8(in.data(), s.t, s.k, c.data(), scales.data(), s.n, nullptr,
                     y.data(), pool);
    } else {
      const std::vector<float> ww = absWeights ? absolute(w) : w;
      cpu::linear(in.data(), s.t, s.k, ww.data(), s.n, nullptr, y.data(), pool);
    }
    return y;
  }

private:
  /// Random E4M3 weights with per-row scales, as quantize_fp8_e4m3
  /// per-channel makes them (`scales` filled as a side output).
  static std::vector<uint8_t> randomCodes(const Shape &s, std::mt19937 &rng,
                                          std::vector<float> &scales) {
    std::vector<uint8_t> codes(size_t(s.n * s.k));
    std::uniform_real_distribution<float> scale(0.5f / 448, 2.0f / 448);
    scales.resize(size_t(s.n));
    for (int64_t j = 0; j < s.n; ++j) {
      scales[j] = scale(rng);
      const std::vector<float> row = uniform(size_t(s.k), 448.0f, rng);
      for (int64_t i = 0; i < s.k; ++i)
        codes[j * s.k + i] = encodeFp8(row[i], Fp8Format::kE4M3);
    }
    return codes;
  }
};

class Bf16GemmTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA GEMM tests need a GPU: " << why;
    // What the backend gives a plan with fp8 weights: 64 MiB of scratch.
    auto gemm = Gemm::create(size_t(32) << 20, size_t(64) << 20);
    ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
    gemm_ = std::move(gemm).value();
  }

  /// Gemm::linear into a poisoned y.
  template <typename Y>
  std::vector<Y> linear(const Operands &o, const Y *bias,
                        const Y *residual = nullptr) {
    auto y = DeviceArray<Y>::poisoned(size_t(o.s.t * o.s.n));
    Status status = gemm_->linear(o.dx.get(), o.weight(), bias, y.get(), o.s.t,
                                  o.s.n, o.s.k, nullptr, residual);
    EXPECT_TRUE(status.isOk())
        << shapeName(o.s.t, o.s.n, o.s.k) << ": " << status.message();
    return y.download();
  }

  /// The routed product and, at T <= 8, each skinny kernel that takes the
  /// shape, with y of type Y, a bias or not and a residual or not, against
  /// the CPU.
  template <typename Y>
  void check(const Operands &o, bool withBias, bool withResidual = false) {
    const Shape &s = o.s;
    const cuda::GemmWeight weight = o.weight();
    const bool fp8 = weight.fp8 != nullptr;
    constexpr bool kBf16Y = !std::is_same_v<Y, float>;
    const Path path =
        Gemm::path(s.t, s.n, s.k, weight, sizeof(Y), withBias, withResidual);
    const std::string where =
        shapeName(s.t, s.n, s.k) + (fp8 ? " fp8" : " bf16") + " weights, y " +
        ElementTraits<Y>::kName + (withBias ? " + bias" : "") +
        (withResidual ? " + residual" : "") + ", " + Gemm::pathName(path);
    // The CPU adds the bias and the residual (in y's type) to its fp32
    // sums.
    const std::vector<float> bias = roundedTo<Y>(o.bias);
    const std::vector<float> residual = roundedTo<Y>(o.residual);
    DeviceArray<Y> dBias(narrowAll<Y>(o.bias));
    DeviceArray<Y> dResidual(narrowAll<Y>(o.residual));
    const Y *b = withBias ? dBias.get() : nullptr;
    const Y *r = withResidual ? dResidual.get() : nullptr;
    auto withBiasAdded = [&](std::vector<float> y) {
      for (size_t i = 0; i < y.size(); ++i) {
        if (withBias)
          y[i] += bias[i % s.n];
        if (withResidual)
          y[i] += residual[i];
      }
      return y;
    };
    const std::vector<float> sumAbs =
        o.cpuProduct(absolute(o.x), /*absWeights=*/true, pool_);
    const std::vector<Y> got = linear(o, b, r);
    // fp8 cuBLASLt quantizes x, except where a bf16 y's chunk found no
    // outer-vector algorithm and took the skinny kernels (fp8Scaling says).
    const char *scaling =
        path == Path::kFp8CublasLt
            ? gemm_->fp8Scaling(s.t, s.n, s.k, cudaTypeOf<Y>(),
                                withBias && kBf16Y, withResidual && kBf16Y)
            : nullptr;
    if (path == Path::kFp8CublasLt) {
      ASSERT_NE(scaling, nullptr) << where;
      std::printf("[ bf16 gemm ] %s: scales in the %s\n", where.c_str(),
                  scaling);
    }
    if (scaling && std::string(scaling) != "skinny kernels") {
      const QuantizedRows q = quantizeRows(o.x, s.t, s.k);
      const std::vector<float> want =
          withBiasAdded(o.cpuProduct(q.values, false, pool_));
      const std::vector<double> absEach(want.size(),
                                        fp8QuantizedTolerance() * maxAbs(want));
      EXPECT_TRUE(withinBound(got, want, Bound{1.0, 0.0, 0.0}, s.n, absEach))
          << where;
      return;
    }
    const std::vector<float> want =
        withBiasAdded(o.cpuProduct(o.x, false, pool_));
    EXPECT_TRUE(matches(got, want, sumAbs, s.n)) << where;
    if (path == Path::kCublasLt)
      std::printf("[ bf16 gemm ] %s: heuristic candidate %d after tuning\n",
                  where.c_str(),
                  gemm_->tunedRank(false, s.t, s.n, s.k, cudaTypeOf<Y>(),
                                   withBias, withResidual));
    if (s.t > cuda::kGemvMaxRows)
      return;
    for (bool mma : {false, true}) {
      if (mma && !cuda::gemvMmaSupports(s.t, s.k, fp8))
        continue;
      auto y = DeviceArray<Y>::poisoned(size_t(s.t * s.n));
      const __nv_bfloat16 *x = o.dx.get();
      cudaError_t error;
      if (fp8)
        error = mma ? cuda::launchGemvMmaFp8(x, weight.fp8, weight.rowScales, b,
                                             y.get(), s.t, s.n, s.k, nullptr, r)
                    : cuda::launchGemvFp8(x, weight.fp8, weight.rowScales, b,
                                          y.get(), s.t, s.n, s.k, nullptr, r);
      else
        error = mma ? cuda::launchGemvMma(x, weight.bf16, b, y.get(), s.t, s.n,
                                          s.k, nullptr, r)
                    : cuda::launchGemv(x, weight.bf16, b, y.get(), s.t, s.n,
                                       s.k, nullptr, r);
      ASSERT_EQ(error, cudaSuccess) << where;
      EXPECT_TRUE(matches(y.download(), want, sumAbs, s.n))
          << where << (mma ? ": gemv-mma kernel" : ": gemv kernel");
    }
  }

  /// The per-element bound of the file comment.
  template <typename Y>
  ::testing::AssertionResult
  matches(const std::vector<Y> &got, const std::vector<float> &cpu,
          const std::vector<float> &sumAbs, int64_t n) {
    std::vector<double> absEach(sumAbs.size());
    for (size_t i = 0; i < sumAbs.size(); ++i)
      absEach[i] = kAccumulation * sumAbs[i];
    return withinBound(got, cpu, Bound{1.0, 0.0, 0.0}, n, absEach);
  }

  std::unique_ptr<Gemm> gemm_;
  cpu::ThreadPool pool_{2};
  std::mt19937 rng_{20251212};
};

// K: multiples of 64 (every vector path), 1000 (bf16 vectors, no tensor-core
// kernel), 77 (neither), 4104 and 9000 (several shared-memory chunks of x);
// N not a multiple of the rows per block, 33 and 129 odd (cuBLASLt's y rows
// not 16-byte multiples). T: 1 and 2 the CUDA-core kernel, then cuBLASLt
// tuned (T <= 256) and not (300).
const Shape kBf16Shapes[] = {{1, 64, 256},    {1, 300, 4104},  {2, 129, 9000},
                             {2, 33, 77},     {3, 70, 1000},   {4, 33, 77},
                             {8, 130, 4096},  {16, 256, 1024}, {33, 300, 4104},
                             {64, 256, 5632}, {300, 128, 256}};

TEST_F(Bf16GemmTest, Bf16WeightsOnEveryPath) {
  for (size_t i = 0; i < std::size(kBf16Shapes); ++i) {
    const Operands o(kBf16Shapes[i], /*fp8=*/false, rng_);
    check<__nv_bfloat16>(o, /*withBias=*/i % 2 == 0);
    check<float>(o, /*withBias=*/i % 2 == 1);
  }
}

// T = 1 the CUDA-core kernel; 2..8 the tensor-core one where K % 64 == 0;
// beyond, fp8 cuBLASLt where K % 16 == 0 and y's rows are 16-byte multiples
// (N % 8 bf16, N % 4 fp32), else bf16 y: skinny row blocks at any T, fp32
// y: tensor-core row blocks up to 24 rows, then dequantized weights.
const Shape kFp8Shapes[] = {{1, 64, 256},    {3, 129, 8192},  {4, 33, 77},
                            {8, 130, 4096},  {9, 64, 256},    {32, 1024, 4096},
                            {100, 200, 272}, {20, 130, 4096}, {40, 132, 4096},
                            {40, 130, 4096}};

TEST_F(Bf16GemmTest, Fp8WeightsOnEveryPath) {
  for (size_t i = 0; i < std::size(kFp8Shapes); ++i) {
    const Operands o(kFp8Shapes[i], /*fp8=*/true, rng_);
    check<__nv_bfloat16>(o, /*withBias=*/i % 2 == 0);
    check<float>(o, /*withBias=*/i % 2 == 1);
  }
}

// The residual (linear_residual: o_proj and down_proj adding the residual
// stream) on every path: T = 1 and 2 the CUDA-core kernel (bf16 weights) or
// skinny kernels (fp8), 8 the tensor-core skinny kernel (fp8) or cuBLASLt
// (bf16, C = the residual), 24 and 256 cuBLASLt or fp8 cuBLASLt (C with the
// outer-vector scales); N = 130 takes the skinny kernels with a bf16 y
// (bf16: rows not 16-byte multiples; fp8: no fp8 cuBLASLt), and with an
// fp32 y the dequantized weights (fp8, T = 256) or cuBLASLt (bf16); with and
// without a bias.
const Shape kResidualShapes[] = {
    {1, 256, 1024},   {2, 256, 4096},  {8, 256, 4096},  {24, 512, 1024},
    {256, 256, 4096}, {24, 130, 1024}, {256, 130, 1024}};

TEST_F(Bf16GemmTest, ResidualOnEveryPath) {
  for (bool fp8 : {false, true})
    for (const Shape &s : kResidualShapes) {
      const Operands o(s, fp8, rng_);
      for (bool withBias : {false, true}) {
        check<__nv_bfloat16>(o, withBias, /*withResidual=*/true);
        check<float>(o, withBias, /*withResidual=*/true);
      }
    }
}

/// The residual and plain products of one shape are apart in the cache of
/// cuBLASLt shapes (ShapeKey::residual: C != D candidates), and alternating
/// them keeps each right.
TEST_F(Bf16GemmTest, ResidualAndPlainShapesAlternate) {
  for (bool fp8 : {false, true}) {
    const Operands o({16, 256, 1024}, fp8, rng_);
    for (int round = 0; round < 2; ++round) {
      check<__nv_bfloat16>(o, /*withBias=*/true, /*withResidual=*/false);
      check<__nv_bfloat16>(o, /*withBias=*/true, /*withResidual=*/true);
    }
    if (fp8) {
      EXPECT_NE(gemm_->fp8Scaling(16, 256, 1024, CUDA_R_16BF, true, true),
                nullptr);
      EXPECT_NE(gemm_->fp8Scaling(16, 256, 1024, CUDA_R_16BF, true, false),
                nullptr);
    } else {
      EXPECT_GE(gemm_->tunedRank(false, 16, 256, 1024, CUDA_R_16BF, true, true),
                0);
      EXPECT_GE(
          gemm_->tunedRank(false, 16, 256, 1024, CUDA_R_16BF, true, false), 0);
    }
  }
}

/// With tuning of new shapes off (a forward call with prefill rows) a shape
/// runs the heuristic's first choice, right, and stays untuned; the next
/// call with tuning on tunes it.
TEST_F(Bf16GemmTest, ShapesTuneOnlyWhereTuningIsOn) {
  for (bool fp8 : {false, true}) {
    const Operands o({24, 256, 1024}, fp8, rng_);
    gemm_->setTuneNewShapes(false);
    check<__nv_bfloat16>(o, /*withBias=*/false, /*withResidual=*/false);
    EXPECT_EQ(gemm_->tunedRank(fp8, 24, 256, 1024, CUDA_R_16BF), -1);
    gemm_->setTuneNewShapes(true);
    check<__nv_bfloat16>(o, /*withBias=*/false, /*withResidual=*/false);
    // (fp8: the heuristic may offer one outer-vector candidate, which is
    // not timed.)
    if (!fp8)
      EXPECT_GE(gemm_->tunedRank(fp8, 24, 256, 1024, CUDA_R_16BF), 0);
  }
}

/// With the Hopper skinny kernel among the tuning candidates, bf16
/// products of T <= 256 are right whichever candidate wins (the kernel's
/// own checks: SkinnyGemmSm90Test).
TEST_F(Bf16GemmTest, SkinnyCandidatesKeepProductsRight) {
  if (!cuda::skinnyGemmSm90Supports(1, 128, 64))
    GTEST_SKIP() << "the Hopper skinny GEMM needs an sm_90a device";
  gemm_->setSkinnyCandidates(true);
  const Shape shapes[] = {{24, 256, 1024}, {130, 384, 2048}, {256, 512, 4096}};
  for (const Shape &s : shapes) {
    const Operands o(s, /*fp8=*/false, rng_);
    for (bool withResidual : {false, true})
      check<__nv_bfloat16>(o, /*withBias=*/true, withResidual);
    std::printf("[ skinny ] T=%lld N=%lld K=%lld: tuned rank %d\n",
                (long long)s.t, (long long)s.n, (long long)s.k,
                gemm_->tunedRank(false, s.t, s.n, s.k, CUDA_R_16BF, true,
                                 false));
  }
}

/// The fp32-activation entry (x fp32 and its bf16 copy, y fp32) with a
/// residual: the skinny kernels add it in their epilogue, cuBLASLt and the
/// fp8 paths after the product, in fp32.
TEST_F(Bf16GemmTest, ResidualOfFp32Activations) {
  for (bool fp8 : {false, true})
    for (const Shape &s : kResidualShapes) {
      const Operands o(s, fp8, rng_);
      DeviceArray<float> dx(o.x);
      DeviceArray<float> bias(o.bias), residual(o.residual);
      auto y = DeviceArray<float>::poisoned(size_t(s.t * s.n));
      Status status =
          gemm_->linear(dx.get(), o.dx.get(), o.weight(), bias.get(), y.get(),
                        s.t, s.n, s.k, nullptr, residual.get());
      const std::string where =
          shapeName(s.t, s.n, s.k) + (fp8 ? " fp8" : " bf16") + " (" +
          Gemm::pathName(Gemm::path(s.t, s.n, s.k, o.weight())) + ")";
      ASSERT_TRUE(status.isOk()) << where << ": " << status.message();
      std::vector<float> want = o.cpuProduct(o.x, false, pool_);
      for (size_t i = 0; i < want.size(); ++i)
        want[i] += o.bias[i % s.n] + o.residual[i];
      const Path path = Gemm::path(s.t, s.n, s.k, o.weight());
      if (path == Path::kFp8CublasLt) {
        const char *scaling = gemm_->fp8Scaling(s.t, s.n, s.k);
        ASSERT_NE(scaling, nullptr) << where;
        const QuantizedRows q = quantizeRows(o.x, s.t, s.k);
        std::vector<float> quantized = o.cpuProduct(q.values, false, pool_);
        for (size_t i = 0; i < quantized.size(); ++i)
          quantized[i] += o.bias[i % s.n] + o.residual[i];
        const std::vector<double> absEach(
            quantized.size(), fp8QuantizedTolerance() * maxAbs(quantized));
        EXPECT_TRUE(withinBound(y.download(), quantized, Bound{1.0, 0.0, 0.0},
                                s.n, absEach))
            << where;
        continue;
      }
      EXPECT_TRUE(matches(y.download(), want,
                          o.cpuProduct(absolute(o.x), true, pool_), s.n))
          << where;
    }
}

TEST_F(Bf16GemmTest, AResidualOverlappingYIsAClearError) {
  const Operands o({4, 64, 256}, /*fp8=*/false, rng_);
  auto y = DeviceArray<__nv_bfloat16>::poisoned(2 * 4 * 64);
  Status status = gemm_->linear(o.dx.get(), o.weight(), nullptr, y.get(), 4, 64,
                                256, nullptr, y.get() + 64);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the residual overlaps y"), std::string::npos)
      << status.message();
}

/// The routing of fp8 weights with bf16 y: fp8 cuBLASLt needs N % 8 == 0
/// (16-byte rows of y), and without it the skinny kernels take any T.
TEST(Bf16GemmRoutingTest, Fp8WithBf16YNeedsWholeRows) {
  alignas(16) static const uint8_t kCodes[16] = {};
  cuda::GemmWeight weight;
  weight.fp8 = kCodes;
  EXPECT_TRUE(Gemm::fp8CublasLtSupports(132, 4096, kCodes, 4));
  EXPECT_FALSE(Gemm::fp8CublasLtSupports(132, 4096, kCodes, 2));
  EXPECT_EQ(Gemm::path(40, 132, 4096, weight, 4), Path::kFp8CublasLt);
  EXPECT_EQ(Gemm::path(40, 132, 4096, weight, 2), Path::kGemvMma);
  EXPECT_EQ(Gemm::path(400, 130, 4104, weight, 2), Path::kGemv);
  EXPECT_EQ(Gemm::path(40, 130, 4096, weight, 4), Path::kDequantCublasLt);
  EXPECT_EQ(Gemm::path(9, 4096, 4096, weight, 2), Path::kFp8CublasLt);
}

/// bf16 weights: cuBLASLt from 3 rows, except a bf16 y + bias or residual
/// whose rows are not 16-byte multiples (the skinny kernels round sum + bias
/// + residual once).
TEST(Bf16GemmRoutingTest, Bf16BiasOnUnalignedRowsTakesTheSkinnyKernels) {
  alignas(16) static const __nv_bfloat16 kValues[8] = {};
  cuda::GemmWeight weight;
  weight.bf16 = kValues;
  EXPECT_EQ(Gemm::path(2, 70, 1000, weight, 2, true), Path::kGemv);
  EXPECT_EQ(Gemm::path(3, 70, 1000, weight, 2, true), Path::kGemv);
  EXPECT_EQ(Gemm::path(33, 300, 4096, weight, 2, true), Path::kGemvMma);
  EXPECT_EQ(Gemm::path(33, 300, 4096, weight, 2, false), Path::kCublasLt);
  EXPECT_EQ(Gemm::path(33, 300, 4096, weight, 4, true), Path::kCublasLt);
  EXPECT_EQ(Gemm::path(33, 304, 4096, weight, 2, true), Path::kCublasLt);
  EXPECT_EQ(Gemm::path(33, 300, 4096, weight, 2, false, true), Path::kGemvMma);
  EXPECT_EQ(Gemm::path(33, 304, 4096, weight, 2, false, true), Path::kCublasLt);
}

/// Row n of the weight holds code n in column 5 and zeros elsewhere; x rows
/// are 448 e_5 (E4M3 code 0x7E with token scale 1 where x is quantized),
/// the row scales 1: y[r, n] = 448 decode(n), exact in bf16 too (at most 4
/// significant bits times 448's 3).
TEST_F(Bf16GemmTest, Fp8DecodeEqualsTheHostDecodeOnEveryCode) {
  constexpr int64_t n = 256, k = 64, column = 5;
  std::vector<uint8_t> codes(size_t(n * k), 0);
  for (int64_t j = 0; j < n; ++j)
    codes[j * k + column] = static_cast<uint8_t>(j);
  DeviceArray<uint8_t> dCodes(codes);
  DeviceArray<float> dScales(std::vector<float>(size_t(n), 1.0f));
  cuda::GemmWeight weight;
  weight.fp8 = dCodes.get();
  weight.rowScales = dScales.get();
  for (int64_t t : {int64_t(1), int64_t(3), int64_t(8), int64_t(16),
                    int64_t(32), int64_t(100)}) {
    std::vector<float> x(size_t(t * k), 0.0f);
    for (int64_t r = 0; r < t; ++r)
      x[r * k + column] = kFp8E4M3Max;
    DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x));
    auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(t * n));
    Status status =
        gemm_->linear(dx.get(), weight, nullptr, y.get(), t, n, k, nullptr);
    ASSERT_TRUE(status.isOk()) << status.message();
    const std::vector<float> got = widenAll(y.download());
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float want =
            kFp8E4M3Max * decodeFp8(static_cast<uint8_t>(j), Fp8Format::kE4M3);
        const float value = got[r * n + j];
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(value)) << "code " << j << " T=" << t;
        else
          EXPECT_EQ(value, want)
              << "code " << j << " T=" << t << " ("
              << Gemm::pathName(Gemm::path(t, n, k, weight, 2)) << ")";
      }
  }
}

TEST_F(Bf16GemmTest, QuantizeBf16RowsEqualsTheHostQuantizer) {
  // K % 8 == 0 (16-byte loads) and not; a zero row; a tiny value.
  for (int64_t k : {int64_t(4096), int64_t(1000), int64_t(77)}) {
    constexpr int64_t t = 9;
    std::vector<float> x = uniform(size_t(t * k), 1.0f, rng_);
    for (int64_t r = 0; r < t; ++r)
      for (int64_t i = 0; i < k; ++i)
        x[r * k + i] *= r == 3 ? 0.0f : std::pow(10.0f, float(r % 5) - 2.0f);
    x[5 * k + 7] = 1e-30f;
    x = roundedTo<__nv_bfloat16>(x);
    const QuantizedRows want = quantizeRows(x, t, k);
    DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x));
    auto codes = DeviceArray<uint8_t>::poisoned(size_t(t * k));
    auto scales = DeviceArray<float>::poisoned(size_t(t));
    ASSERT_EQ(cuda::launchQuantizeRowsFp8(dx.get(), t, k, codes.get(),
                                          scales.get(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(sameBits(scales.download(), want.scales, 1)) << "K=" << k;
    const std::vector<uint8_t> got = codes.download();
    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want.codes[i]) {
        mismatches++;
        if (first < 0)
          first = int64_t(i);
      }
    EXPECT_EQ(mismatches, 0) << "K=" << k << ", first at row " << first / k
                             << " column " << first % k;
  }
}

/// Every path of the sizes the backend captures, with a bias and with a
/// residual or not: the eager call (which tunes cuBLASLt) and a graph replay
/// give the same bits.
TEST_F(Bf16GemmTest, GraphReplayEqualsTheEagerCall) {
  const std::pair<Shape, bool> cases[] = {
      {{1, 300, 4104}, false}, // gemv
      {{4, 256, 1024}, false}, // cuBLASLt, bias epilogue
      {{3, 256, 1024}, true},  // fp8 gemv-mma
      {{16, 256, 1024}, true}, // fp8 cuBLASLt, bias epilogue
      {{40, 130, 1024}, true}, // fp8, skinny row blocks (N % 8 != 0)
  };
  for (bool withResidual : {false, true})
    for (const auto &[s, fp8] : cases) {
      const Operands o(s, fp8, rng_);
      DeviceArray<__nv_bfloat16> bias(narrowAll<__nv_bfloat16>(o.bias));
      DeviceArray<__nv_bfloat16> residual(narrowAll<__nv_bfloat16>(o.residual));
      auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(s.t * s.n));
      EXPECT_TRUE(replaysInGraph(
          [&](cudaStream_t stream) {
            return gemm_->linear(o.dx.get(), o.weight(), bias.get(), y.get(),
                                 s.t, s.n, s.k, stream,
                                 withResidual ? residual.get() : nullptr);
          },
          {DeviceBytes{y.get(), size_t(s.t * s.n) * sizeof(__nv_bfloat16)}}))
          << shapeName(s.t, s.n, s.k) << (fp8 ? " fp8" : " bf16")
          << (withResidual ? " + residual" : "") << " ("
          << Gemm::pathName(
                 Gemm::path(s.t, s.n, s.k, o.weight(), 2, true, withResidual))
          << ")";
    }
}

TEST_F(Bf16GemmTest, AMisalignedBiasIsAClearError) {
  const Operands o({4, 64, 256}, /*fp8=*/false, rng_);
  DeviceArray<__nv_bfloat16> bias(narrowAll<__nv_bfloat16>(o.bias));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(4 * 64);
  Status status = gemm_->linear(o.dx.get(), o.weight(), bias.get() + 1, y.get(),
                                4, 63, 256, nullptr);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("16-byte aligned"), std::string::npos)
      << status.message();
}

} // namespace
} // namespace infer::testing
