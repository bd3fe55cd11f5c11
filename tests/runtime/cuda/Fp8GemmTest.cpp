//===- Fp8GemmTest.cpp - fp8 cuBLASLt against host references ------------===//
//
// Gemm's fp8 tensor-core path (Path::kFp8CublasLt: x quantized per token to
// E4M3, then cuBLASLt on E4M3 x E4M3) at T = 32..2048 on Llama-3-8B-like
// shapes, against two host references on a sample of rows:
//
//   quantized  the CPU backend's linearFp8 on x rounded through the same
//              per-token quantization (decode(code) * scale, the codes from
//              runtime/support/Fp8.h's encodeFp8): the same operand values,
//              so only the GPU's accumulation differs: within
//              fp8QuantizedTolerance() of max |reference| (Fp8Tolerance.h:
//              1e-2 with fast accumulation, the default; 1e-3 promoted).
//   exact      linearFp8 on the fp32 x, the product the model asks for. Each
//              activation moves by at most half an E4M3 step: 2^-4 of its
//              magnitude (3 mantissa bits) or, below the smallest normal
//              (2^-6 * scale), 2^-10 * scale. So, element by element,
//                |y - exact| <= sum_i |w_ji| (2^-4 |x_i| + 2^-10 scale_t)
//              (plus that tolerance of max |exact| for the sums), checked
//              with the host's sum of |w| |x|. Over the whole output the
//              error is statistical: about 2.5% of max |exact| for these
//              random rows (the rms relative rounding error of E4M3; an
//              H100 gives 2.2e-2 to 3.7e-2), held under 5e-2, the bound
//              FixturesTest gives bf16 logits.
//
// The quantization kernel is checked code for code against the host, chunks
// of rows (a scratch smaller than T x K) against one chunk, and a CUDA graph
// replay against the eager call.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/Fp8Tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

namespace infer::testing {
namespace {

constexpr double kExactTol = 5e-2;

/// One token's codes and scale, as launchQuantizeRowsFp8 makes them.
struct QuantizedRows {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
QuantizedRows quantizeRows(const std::vector<float> &x, int64_t t, int64_t k) {
  QuantizedRows q;
  q.codes.resize(x.size());
  q.scales.resize(size_t(t));
  for (int64_t r = 0; r < t; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i)
      amax = std::max(amax, std::fabs(x[r * k + i]));
    const float scale = amax / kFp8E4M3Max;
    q.scales[r] = scale;
    for (int64_t i = 0; i < k; ++i)
      q.codes[r * k + i] =
          amax == 0.0f ? 0 : encodeFp8(x[r * k + i] / scale, Fp8Format::kE4M3);
  }
  return q;
}

/// Rows whose magnitudes spread over four decades (per-token scales
/// matter), uniform within a row; `zeroRow` is all zeros.
std::vector<float> randomRows(int64_t t, int64_t k, std::mt19937 &rng,
                              int64_t zeroRow = -1) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), decade(-2.0f, 2.0f);
  std::vector<float> x(size_t(t * k));
  for (int64_t r = 0; r < t; ++r) {
    const float magnitude = r == zeroRow ? 0.0f : std::pow(10.0f, decade(rng));
    for (int64_t i = 0; i < k; ++i)
      x[r * k + i] = magnitude * unit(rng);
  }
  return x;
}

/// A random [n, k] E4M3 weight (any finite code) with row scales like
/// quantize_fp8_e4m3 per-channel makes; random bytes, so Llama-sized
/// matrices take no time to make.
struct Fp8Weight {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Fp8Weight randomFp8(int64_t n, int64_t k, std::mt19937 &rng) {
  Fp8Weight w;
  w.codes.resize(size_t(n * k));
  for (size_t i = 0; i < w.codes.size(); i += 4) {
    const uint32_t bits = rng();
    for (size_t b = 0; b < 4 && i + b < w.codes.size(); ++b) {
      const uint8_t code = uint8_t(bits >> (8 * b));
      w.codes[i + b] = (code & 0x7F) == 0x7F ? 0 : code; // no NaN
    }
  }
  std::uniform_real_distribution<float> scale(0.5f / 448, 2.0f / 448);
  w.scales.resize(size_t(n));
  for (float &s : w.scales)
    s = scale(rng);
  return w;
}

/// Rows of [t, cols] that the host checks: all up to 32, else 24 spread
/// over T (first and last included).
std::vector<int64_t> sampledRows(int64_t t) {
  std::vector<int64_t> rows;
  const int64_t count = std::min<int64_t>(t, t <= 32 ? 32 : 24);
  for (int64_t i = 0; i < count; ++i)
    rows.push_back(count == 1 ? 0 : i * (t - 1) / (count - 1));
  return rows;
}

std::vector<float> gatherRows(const std::vector<float> &m, int64_t cols,
                              const std::vector<int64_t> &rows) {
  std::vector<float> out;
  out.reserve(rows.size() * size_t(cols));
  for (int64_t r : rows)
    out.insert(out.end(), m.begin() + r * cols, m.begin() + (r + 1) * cols);
  return out;
}

double maxAbs(const std::vector<float> &v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, double(std::fabs(x)));
  return m;
}

class CudaFp8GemmTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "fp8 cuBLASLt tests need a GPU: " << why;
    // What the backend gives a plan with fp8 weights: 64 MiB.
    auto gemm = cuda::Gemm::create(size_t(32) << 20, size_t(64) << 20);
    ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
    gemm_ = std::move(gemm).value();
  }

  /// Gemm::linear as the backend calls it for fp8 cuBLASLt: the fp32 x, no
  /// bf16 copy.
  std::vector<float> linear(cuda::Gemm &gemm, const std::vector<float> &x,
                            const cuda::GemmWeight &w, const float *bias,
                            int64_t t, int64_t n, int64_t k) {
    DeviceArray<float> dx(x);
    auto dy = DeviceArray<float>::poisoned(size_t(t * n));
    Status status =
        gemm.linear(dx.get(), nullptr, w, bias, dy.get(), t, n, k, nullptr);
    EXPECT_TRUE(status.isOk()) << status.message();
    return dy.download();
  }

  /// Checks y (all T rows from the GPU) against both references on the
  /// sampled rows and prints both errors with where the GPU applied the
  /// scales (`scaling`, Gemm::fp8Scaling).
  void checkAgainstReferences(const char *scaling, const std::vector<float> &y,
                              const std::vector<float> &x, const Fp8Weight &w,
                              const std::vector<float> &bias, int64_t t,
                              int64_t n, int64_t k) {
    const std::string where = "T=" + std::to_string(t) +
                              " N=" + std::to_string(n) +
                              " K=" + std::to_string(k);
    const std::vector<int64_t> rows = sampledRows(t);
    const int64_t s = int64_t(rows.size());
    const std::vector<float> xs = gatherRows(x, k, rows);
    const QuantizedRows q = quantizeRows(xs, s, k);
    std::vector<float> xq(xs.size()), xAbs(xs.size());
    const float *decode = cpu::fp8DecodeTable(Fp8Format::kE4M3);
    for (size_t i = 0; i < xs.size(); ++i) {
      xq[i] = decode[q.codes[i]] * q.scales[i / size_t(k)];
      xAbs[i] = std::fabs(xs[i]);
    }
    std::vector<uint8_t> wAbs(w.codes);
    for (uint8_t &c : wAbs)
      c &= 0x7F;
    const float *b = bias.empty() ? nullptr : bias.data();
    std::vector<float> refQ(size_t(s * n)), refExact(refQ.size()),
        sumAbs(refQ.size());
    cpu::linearFp8(xq.data(), s, k, w.codes.data(), w.scales.data(), n, b,
                   refQ.data(), pool_);
    cpu::linearFp8(xs.data(), s, k, w.codes.data(), w.scales.data(), n, b,
                   refExact.data(), pool_);
    cpu::linearFp8(xAbs.data(), s, k, wAbs.data(), w.scales.data(), n, nullptr,
                   sumAbs.data(), pool_);
    const std::vector<float> ys = gatherRows(y, n, rows);
    // sum_i |w_ji| scale_t: the subnormal term's weight, from the same sums.
    const std::vector<float> ones(static_cast<size_t>(k), 1.0f);
    std::vector<float> sumAbsW(static_cast<size_t>(n));
    cpu::linearFp8(ones.data(), 1, k, wAbs.data(), w.scales.data(), n, nullptr,
                   sumAbsW.data(), pool_);
    const double maxQ = maxAbs(refQ), maxExact = maxAbs(refExact);
    double diffQ = 0, diffExact = 0;
    int64_t outOfBound = 0;
    for (int64_t r = 0; r < s; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const size_t i = size_t(r * n + j);
        ASSERT_TRUE(std::isfinite(ys[i])) << where << " row " << rows[r];
        diffQ = std::max(diffQ, double(std::fabs(ys[i] - refQ[i])));
        const double d = std::fabs(ys[i] - refExact[i]);
        diffExact = std::max(diffExact, d);
        const double bound = 0.0625 * sumAbs[i] +
                             std::ldexp(1.0, -10) * q.scales[r] * sumAbsW[j] +
                             fp8QuantizedTolerance() * maxExact;
        outOfBound += d > bound;
      }
    const double errQ = diffQ / std::max(maxQ, 1e-30);
    const double errExact = diffExact / std::max(maxExact, 1e-30);
    std::printf("[ fp8 cuBLASLt ] %-22s vs quantized x %.2e, vs fp32 x "
                "%.2e (%s)\n",
                where.c_str(), errQ, errExact,
                scaling ? scaling : "scales: shape not cached");
    EXPECT_LT(errQ, fp8QuantizedTolerance()) << where;
    EXPECT_LT(errExact, kExactTol) << where;
    EXPECT_EQ(outOfBound, 0)
        << where << ": elements beyond the per-element quantization bound";
  }

  std::unique_ptr<cuda::Gemm> gemm_;
  cpu::ThreadPool pool_{int(std::max(2u, std::thread::hardware_concurrency()))};
};

TEST_F(CudaFp8GemmTest, QuantizeRowsEqualsTheHostQuantizer) {
  std::mt19937 rng(21);
  // K % 4 == 0 (vector loads) and not; a zero row; several blocks' worth.
  for (int64_t k : {int64_t(4096), int64_t(1000), int64_t(77)}) {
    constexpr int64_t t = 9;
    std::vector<float> x = randomRows(t, k, rng, /*zeroRow=*/3);
    x[5 * k + 7] = 1e-30f; // far below the row's subnormal range
    const QuantizedRows want = quantizeRows(x, t, k);
    DeviceArray<float> dx(x);
    auto codes = DeviceArray<uint8_t>::poisoned(size_t(t * k));
    auto scales = DeviceArray<float>::poisoned(size_t(t));
    ASSERT_EQ(cuda::launchQuantizeRowsFp8(dx.get(), t, k, codes.get(),
                                          scales.get(), nullptr),
              cudaSuccess);
    const std::vector<float> gotScales = scales.download();
    const std::vector<uint8_t> gotCodes = codes.download();
    for (int64_t r = 0; r < t; ++r)
      EXPECT_EQ(gotScales[r], want.scales[r]) << "K=" << k << " row " << r;
    int64_t mismatches = 0;
    for (size_t i = 0; i < gotCodes.size(); ++i)
      mismatches += gotCodes[i] != want.codes[i];
    EXPECT_EQ(mismatches, 0) << "K=" << k;
  }
}

struct Shape {
  int64_t t, n, k;
};

/// Llama-3-8B's projections (o_proj 4096x4096, gate/up 14336x4096, down
/// 4096x14336, merged q/k/v 6144x4096) at decode batches and prefill
/// lengths, and a small shape with a bias.
TEST_F(CudaFp8GemmTest, LinearMatchesTheHostReferences) {
  const Shape shapes[] = {{32, 4096, 4096},    {100, 14336, 4096},
                          {512, 4096, 14336},  {2048, 6144, 4096},
                          {2048, 14336, 4096}, {100, 200, 272}};
  std::mt19937 rng(22);
  for (const Shape &s : shapes) {
    const Fp8Weight w = randomFp8(s.n, s.k, rng);
    const std::vector<float> x = randomRows(s.t, s.k, rng, /*zeroRow=*/1);
    std::vector<float> bias;
    if (s.n == 200)
      for (int64_t j = 0; j < s.n; ++j)
        bias.push_back(0.01f * float(j % 17) - 0.08f);
    DeviceArray<uint8_t> codes(w.codes);
    DeviceArray<float> scales(w.scales), dbias(bias);
    cuda::GemmWeight weight;
    weight.fp8 = codes.get();
    weight.rowScales = scales.get();
    ASSERT_EQ(cuda::Gemm::path(s.t, s.n, s.k, weight),
              cuda::Gemm::Path::kFp8CublasLt);
    EXPECT_FALSE(cuda::Gemm::needsBf16Input(s.t, s.n, s.k, weight));
    const std::vector<float> y = linear(
        *gemm_, x, weight, bias.empty() ? nullptr : dbias.get(), s.t, s.n, s.k);
    // The 64 MiB scratch takes each T in one chunk.
    const char *scaling = gemm_->fp8Scaling(s.t, s.n, s.k);
    EXPECT_NE(scaling, nullptr);
    checkAgainstReferences(scaling, y, x, w, bias, s.t, s.n, s.k);
  }
}

/// A scratch of 128 tokens of K = 4096: T = 300 runs as 128 + 128 + 44 rows,
/// each chunk quantized and multiplied on its own.
TEST_F(CudaFp8GemmTest, ChunksOfRowsMatchTheReferences) {
  constexpr int64_t t = 300, n = 1024, k = 4096;
  auto small = cuda::Gemm::create(size_t(32) << 20, 256 + 128 * (k + 4));
  ASSERT_TRUE(small.isOk()) << small.status().message();
  std::mt19937 rng(23);
  const Fp8Weight w = randomFp8(n, k, rng);
  const std::vector<float> x = randomRows(t, k, rng);
  DeviceArray<uint8_t> codes(w.codes);
  DeviceArray<float> scales(w.scales);
  cuda::GemmWeight weight;
  weight.fp8 = codes.get();
  weight.rowScales = scales.get();
  const std::vector<float> y = linear(**small, x, weight, nullptr, t, n, k);
  EXPECT_NE((*small)->fp8Scaling(128, n, k), nullptr);
  EXPECT_NE((*small)->fp8Scaling(44, n, k), nullptr);
  EXPECT_EQ((*small)->fp8Scaling(t, n, k), nullptr) << "T ran in one chunk";
  checkAgainstReferences((*small)->fp8Scaling(128, n, k), y, x, w, {}, t, n, k);
}

/// The measured crossover (Gemm.h): the tensor-core skinny kernel up to one
/// block of 8 rows, fp8 cuBLASLt beyond; where fp8 cuBLASLt does not take
/// the shape (N % 4 != 0 here), row blocks up to 24, then dequantization.
TEST(CudaFp8GemmRoutingTest, FollowsTheMeasuredCrossover) {
  alignas(16) static const uint8_t kCodes[16] = {};
  cuda::GemmWeight weight;
  weight.fp8 = kCodes;
  using Path = cuda::Gemm::Path;
  EXPECT_EQ(cuda::Gemm::path(1, 4096, 4096, weight), Path::kGemv);
  EXPECT_EQ(cuda::Gemm::path(8, 4096, 4096, weight), Path::kGemvMma);
  EXPECT_EQ(cuda::Gemm::path(9, 4096, 4096, weight), Path::kFp8CublasLt);
  EXPECT_EQ(cuda::Gemm::path(2048, 14336, 4096, weight), Path::kFp8CublasLt);
  EXPECT_EQ(cuda::Gemm::path(24, 4098, 4096, weight), Path::kGemvMma);
  EXPECT_EQ(cuda::Gemm::path(25, 4098, 4096, weight), Path::kDequantCublasLt);
  EXPECT_FALSE(cuda::Gemm::needsBf16Input(9, 4096, 4096, weight));
  EXPECT_TRUE(cuda::Gemm::needsBf16Input(25, 4098, 4096, weight));
}

/// Once a shape has run, quantization and cuBLASLt replay from a CUDA graph
/// with the eager call's result.
TEST_F(CudaFp8GemmTest, GraphReplayEqualsTheEagerCall) {
  constexpr int64_t t = 64, n = 512, k = 1024;
  std::mt19937 rng(24);
  const Fp8Weight w = randomFp8(n, k, rng);
  DeviceArray<float> x(randomRows(t, k, rng));
  DeviceArray<uint8_t> codes(w.codes);
  DeviceArray<float> scales(w.scales);
  cuda::GemmWeight weight;
  weight.fp8 = codes.get();
  weight.rowScales = scales.get();
  auto eager = DeviceArray<float>::poisoned(size_t(t * n));
  auto replayed = DeviceArray<float>::poisoned(size_t(t * n));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  Status status = gemm_->linear(x.get(), nullptr, weight, nullptr, eager.get(),
                                t, n, k, stream);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  status = gemm_->linear(x.get(), nullptr, weight, nullptr, replayed.get(), t,
                         n, k, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(status.isOk()) << status.message();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(replayed.download(), eager.download());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(CudaFp8GemmTest, UnsupportedOperandsAreClearErrors) {
  DeviceArray<uint8_t> codes(std::vector<uint8_t>(64 * 80 + 16, 0x38));
  DeviceArray<float> scales(std::vector<float>(64, 1.0f));
  DeviceArray<float> x(std::vector<float>(32 * 80, 1.0f));
  auto y = DeviceArray<float>::poisoned(32 * 64);
  cuda::GemmWeight weight;
  weight.fp8 = codes.get();
  weight.rowScales = scales.get();
  // K = 72 is not a multiple of 16: routed to the dequantized path instead.
  EXPECT_EQ(cuda::Gemm::path(32, 64, 72, weight),
            cuda::Gemm::Path::kDequantCublasLt);
  Status status =
      gemm_->runFp8(x.get(), weight, nullptr, y.get(), 32, 64, 72, nullptr);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("K % 16 == 0"), std::string::npos)
      << status.message();
  // Codes off 16-byte alignment.
  weight.fp8 = codes.get() + 8;
  EXPECT_EQ(cuda::Gemm::path(32, 64, 64, weight),
            cuda::Gemm::Path::kDequantCublasLt);
  status =
      gemm_->runFp8(x.get(), weight, nullptr, y.get(), 32, 64, 64, nullptr);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("aligned"), std::string::npos)
      << status.message();
}

} // namespace
} // namespace infer::testing
