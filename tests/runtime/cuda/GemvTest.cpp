//===- GemvTest.cpp - Skinny GEMMs and fp8 weights on the GPU -------------===//
//
// Gemm::linear on every path (Gemm::Path: the CUDA-core and the tensor-core
// skinny kernels, cuBLASLt, fp8 dequantized in chunks; fp8 cuBLASLt, which
// quantizes x, has its own references in Fp8GemmTest) against the CPU
// backend's linear / linearFp8 on fresh random inputs, including K that is
// not a multiple of the 16-byte vector width and K longer than a shared-
// memory chunk of x. Tolerances are max |gpu - cpu| / max |cpu|:
//
//   1e-4  the CUDA-core kernel: the same fp32 x and the same weight values
//         as the CPU (bf16-rounded, or the exact E4M3 decode), so only the
//         order of the K-long fp32 sums (and, for fp8, scaling the row's
//         sum rather than each element) differs
//   1e-4  the paths that round x to bf16 (tensor-core kernel, cuBLASLt),
//         compared with the CPU run on that bf16-rounded x (KernelsTest's
//         GEMM bound)
//
// The E4M3 decode of every path is checked exactly against the host's
// decodeFp8 on all 256 codes, and an fp8 artifact end to end against the
// CPU backend (Fp8ArtifactTest below).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/Fp8Artifacts.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace infer::testing {
namespace {

constexpr double kGemmTol = 1e-4;

bool gpuAvailable(std::string *why) { return cuda::cudaDeviceAvailable(why); }

float roundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

std::vector<float> randomVector(size_t n, std::mt19937 &rng, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

double relativeError(const std::vector<float> &gpu,
                     const std::vector<float> &cpu) {
  double maxDiff = 0, maxRef = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!std::isfinite(gpu[i]))
      return INFINITY;
    maxDiff = std::max(maxDiff, double(std::fabs(gpu[i] - cpu[i])));
    maxRef = std::max(maxRef, double(std::fabs(cpu[i])));
  }
  return maxDiff / std::max(maxRef, 1e-30);
}

/// A random [n, k] weight as E4M3 codes with per-row scales, as
/// quantize_fp8_e4m3 per-channel makes them.
struct Fp8Weight {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Fp8Weight randomFp8(int64_t n, int64_t k, std::mt19937 &rng) {
  Fp8Weight w;
  w.codes.resize(size_t(n * k));
  w.scales.resize(size_t(n));
  std::uniform_real_distribution<float> scale(0.5f / 448, 2.0f / 448);
  for (int64_t j = 0; j < n; ++j) {
    w.scales[j] = scale(rng);
    const std::vector<float> row = randomVector(size_t(k), rng, 448.0f);
    for (int64_t i = 0; i < k; ++i)
      w.codes[j * k + i] = encodeFp8(row[i], Fp8Format::kE4M3);
  }
  return w;
}

class CudaGemvTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!gpuAvailable(&why))
      GTEST_SKIP() << "CUDA GEMM tests need a GPU: " << why;
    // A small dequantization scratch, so fp8 at large T takes several
    // chunks of rows (128 rows of the widest K below).
    auto gemm = cuda::Gemm::create(size_t(32) << 20, 128 * 4104 * 2);
    ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
    gemm_ = std::move(gemm).value();
  }

  /// Gemm::linear as the backend calls it: the fp32 x, its bf16 copy.
  std::vector<float> linear(const std::vector<float> &x,
                            const cuda::GemmWeight &w, const float *bias,
                            int64_t t, int64_t n, int64_t k) {
    DeviceArray<float> dx(x);
    auto dxb = DeviceArray<__nv_bfloat16>::poisoned(x.size());
    EXPECT_EQ(cuda::launchToBf16(dx.get(), dxb.get(), t * k, nullptr),
              cudaSuccess);
    auto dy = DeviceArray<float>::poisoned(size_t(t * n));
    Status status =
        gemm_->linear(dx.get(), dxb.get(), w, bias, dy.get(), t, n, k, nullptr);
    EXPECT_TRUE(status.isOk()) << status.message();
    return dy.download();
  }

  std::unique_ptr<cuda::Gemm> gemm_;
  cpu::ThreadPool pool_{2};
};

struct Shape {
  int64_t t, n, k;
};
// K: multiples of 64 (every kernel's vector path), 1000 (bf16 vectors, fp8
// not; no tensor-core kernel), 77 (neither), 4104 and 9000 (several x
// chunks at T = 2 and 8); N not a multiple of the rows per block. T 1..8
// every skinny kernel that takes the shape, larger T routed only (fp8: 9 to
// fp8 cuBLASLt, which Fp8GemmTest checks; 20, N % 4 != 0, in blocks of 8
// rows on the tensor cores; 24 and 40 dequantized).
const Shape kShapes[] = {
    {1, 64, 256},   {1, 300, 4104},  {2, 129, 9000},  {2, 300, 4096},
    {3, 70, 1000},  {3, 129, 8192},  {4, 33, 77},     {4, 40, 64},
    {5, 257, 512},  {6, 17, 4104},   {6, 64, 1024},   {7, 96, 1000},
    {7, 33, 14336}, {8, 130, 4104},  {8, 130, 4096},  {8, 7, 9000},
    {9, 64, 256},   {20, 130, 4096}, {24, 300, 4104}, {40, 129, 77}};

/// One shape through Gemm::linear (routed) and through each skinny kernel
/// that takes it, against `cpu(x, y)` on the fp32 x (CUDA-core kernel) or
/// on x rounded to bf16 (the other paths). `launch(mma, x, y)` runs one
/// kernel directly.
template <typename Cpu, typename Launch>
void checkEveryPath(const Shape &s, const std::vector<float> &x,
                    const cuda::GemmWeight &weight, bool fp8,
                    const std::vector<float> &gpuRouted, Cpu cpu,
                    Launch launch) {
  std::vector<float> xBf16 = x;
  for (float &v : xBf16)
    v = roundBf16(v);
  std::vector<float> refF32(size_t(s.t * s.n)), refBf16(refF32.size());
  cpu(x, refF32);
  cpu(xBf16, refBf16);
  const std::string where = "T=" + std::to_string(s.t) +
                            " N=" + std::to_string(s.n) +
                            " K=" + std::to_string(s.k);
  const cuda::Gemm::Path path = cuda::Gemm::path(s.t, s.n, s.k, weight);
  // fp8 cuBLASLt quantizes x: Fp8GemmTest checks it against its references.
  if (path == cuda::Gemm::Path::kFp8CublasLt)
    return;
  EXPECT_LT(relativeError(gpuRouted,
                          path == cuda::Gemm::Path::kGemv ? refF32 : refBf16),
            kGemmTol)
      << where << " routed (" << cuda::Gemm::pathName(path) << ")";
  if (s.t > cuda::kGemvMaxRows)
    return;
  DeviceArray<float> dx(x);
  for (bool mma : {false, true}) {
    if (mma && !cuda::gemvMmaSupports(s.t, s.k, fp8))
      continue;
    auto dy = DeviceArray<float>::poisoned(size_t(s.t * s.n));
    EXPECT_EQ(launch(mma, dx.get(), dy.get()), cudaSuccess) << where;
    EXPECT_LT(relativeError(dy.download(), mma ? refBf16 : refF32), kGemmTol)
        << where << (mma ? " gemv-mma" : " gemv");
  }
}

TEST_F(CudaGemvTest, Bf16WeightsMatchTheCpuLinear) {
  std::mt19937 rng(11);
  for (const Shape &s : kShapes) {
    const std::vector<float> x = randomVector(size_t(s.t * s.k), rng, 1.0f);
    std::vector<float> w = randomVector(size_t(s.n * s.k), rng, 0.1f);
    const std::vector<float> bias = randomVector(size_t(s.n), rng, 0.5f);
    std::vector<__nv_bfloat16> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      wb[i] = __float2bfloat16_rn(w[i]);
      w[i] = __bfloat162float(wb[i]);
    }
    DeviceArray<__nv_bfloat16> dw(wb);
    DeviceArray<float> dbias(bias);
    cuda::GemmWeight weight;
    weight.bf16 = dw.get();
    checkEveryPath(
        s, x, weight, /*fp8=*/false,
        linear(x, weight, dbias.get(), s.t, s.n, s.k),
        [&](const std::vector<float> &in, std::vector<float> &out) {
          cpu::linear(in.data(), s.t, s.k, w.data(), s.n, bias.data(),
                      out.data(), pool_);
        },
        [&](bool mma, const float *dx, float *dy) {
          return mma ? cuda::launchGemvMma(dx, dw.get(), dbias.get(), dy, s.t,
                                           s.n, s.k, nullptr)
                     : cuda::launchGemv(dx, dw.get(), dbias.get(), dy, s.t, s.n,
                                        s.k, nullptr);
        });
  }
}

TEST_F(CudaGemvTest, Fp8WeightsMatchTheCpuLinearFp8) {
  std::mt19937 rng(12);
  for (const Shape &s : kShapes) {
    const std::vector<float> x = randomVector(size_t(s.t * s.k), rng, 1.0f);
    const Fp8Weight w = randomFp8(s.n, s.k, rng);
    const std::vector<float> bias = randomVector(size_t(s.n), rng, 0.5f);
    DeviceArray<uint8_t> dcodes(w.codes);
    DeviceArray<float> dscales(w.scales), dbias(bias);
    cuda::GemmWeight weight;
    weight.fp8 = dcodes.get();
    weight.rowScales = dscales.get();
    checkEveryPath(
        s, x, weight, /*fp8=*/true,
        linear(x, weight, dbias.get(), s.t, s.n, s.k),
        [&](const std::vector<float> &in, std::vector<float> &out) {
          cpu::linearFp8(in.data(), s.t, s.k, w.codes.data(), w.scales.data(),
                         s.n, bias.data(), out.data(), pool_);
        },
        [&](bool mma, const float *dx, float *dy) {
          return mma ? cuda::launchGemvMmaFp8(dx, dcodes.get(), dscales.get(),
                                              dbias.get(), dy, s.t, s.n, s.k,
                                              nullptr)
                     : cuda::launchGemvFp8(dx, dcodes.get(), dscales.get(),
                                           dbias.get(), dy, s.t, s.n, s.k,
                                           nullptr);
        });
  }
}

/// Row n of the weight holds code n in column 5 and zeros elsewhere; x rows
/// are 448 e_5 (an E4M3 code with token scale 1 where x is quantized) and
/// the row scales 1, so y[r, n] = 448 decode(n) exactly (T = 1 CUDA cores,
/// 3 and 8 tensor cores, 16, 32 and 100 fp8 cuBLASLt).
TEST_F(CudaGemvTest, Fp8DecodeEqualsTheHostDecodeOnEveryCode) {
  constexpr int64_t n = 256, k = 64, column = 5;
  std::vector<uint8_t> codes(size_t(n * k), 0);
  for (int64_t j = 0; j < n; ++j)
    codes[j * k + column] = static_cast<uint8_t>(j);
  DeviceArray<uint8_t> dcodes(codes);
  DeviceArray<float> dscales(std::vector<float>(size_t(n), 1.0f));
  cuda::GemmWeight weight;
  weight.fp8 = dcodes.get();
  weight.rowScales = dscales.get();
  for (int64_t t : {int64_t(1), int64_t(3), int64_t(8), int64_t(16),
                    int64_t(32), int64_t(100)}) {
    std::vector<float> x(size_t(t * k), 0.0f);
    for (int64_t r = 0; r < t; ++r)
      x[r * k + column] = kFp8E4M3Max;
    const std::vector<float> y = linear(x, weight, nullptr, t, n, k);
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float want =
            kFp8E4M3Max * decodeFp8(static_cast<uint8_t>(j), Fp8Format::kE4M3);
        const float got = y[r * n + j];
        // Exact values; code 0x80 (-0) sums to +0 (0 + -0), equal as floats.
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got)) << "code " << j << " T=" << t;
        else
          EXPECT_EQ(got, want) << "code " << j << " T=" << t;
      }
  }
}

TEST_F(CudaGemvTest, Fp8WithoutScratchIsAClearErrorAtLargeT) {
  // 32 rows: past the tensor-core row blocks, so fp8 cuBLASLt (K = 64) or,
  // where K is not a multiple of 16 (72), dequantized.
  constexpr int64_t t = 32;
  auto gemm = cuda::Gemm::create(size_t(1) << 20);
  ASSERT_TRUE(gemm.isOk());
  DeviceArray<uint8_t> codes(std::vector<uint8_t>(64 * 72, 0x38));
  DeviceArray<float> scales(std::vector<float>(64, 1.0f));
  DeviceArray<float> x(std::vector<float>(t * 72, 1.0f));
  auto xb = DeviceArray<__nv_bfloat16>::poisoned(t * 72);
  auto y = DeviceArray<float>::poisoned(t * 64);
  cuda::GemmWeight weight;
  weight.fp8 = codes.get();
  weight.rowScales = scales.get();
  const std::pair<int64_t, const char *> cases[] = {
      {64, "for the quantized activations"}, {72, "dequantization scratch"}};
  for (const auto &[k, message] : cases) {
    ASSERT_EQ(cuda::Gemm::path(t, 64, k, weight),
              k == 64 ? cuda::Gemm::Path::kFp8CublasLt
                      : cuda::Gemm::Path::kDequantCublasLt);
    Status status = (*gemm)->linear(x.get(), xb.get(), weight, nullptr, y.get(),
                                    t, 64, k, nullptr);
    EXPECT_FALSE(status.isOk());
    EXPECT_NE(status.message().find(message), std::string::npos)
        << status.message();
  }
}

/// tiny-pycode-target compiled with `infer compile MODEL_DIR -o
/// $INFER_CUDA_FP8_ARTIFACTS/tiny-pycode-target --quant fp8
/// --quant-granularity per-channel` (skipped without it) on the GPU and the CPU
/// backend from the same loaded codes and scales: the prompt's logits (T = its
/// length: fp8 cuBLASLt beyond 8 tokens) and greedy decode steps (T = 1: the
/// CUDA-core fp8 kernel). Where the skinny kernels take the prompt, within
/// FixturesTest's bf16 bound 5e-2 (the GPU rounds GEMM activations and the KV
/// cache to bf16; the weights are the same values on both). Where fp8 cuBLASLt
/// does, x is quantized per token to E4M3 (2.2-3.7e-2 of max |y| per GEMM
/// against the fp32 x in Fp8GemmTest) and those errors pass through every layer
/// into the logits and the KV cache the decode steps read: twice that bound
/// (an H100 gives 3.1e-2 at the 9-token prompt, 0.8e-2 to 2.1e-2 after it).
TEST(CudaFp8ArtifactTest, MatchesTheCpuBackend) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  std::optional<Fp8TinyPycode> loaded;
  if (std::string skip = loadFp8TinyPycode(loaded); !skip.empty())
    GTEST_SKIP() << skip;
  const FixtureCase &fixture = loaded->fixture;
  const Artifact *artifact = &loaded->artifact;
  const ParamTable *params = &loaded->params;
  int fp8 = 0;
  for (const plan::Value &v : artifact->plan.ranks[0].values)
    fp8 += v.dtype == plan::DType::kF8E4M3;
  ASSERT_GT(fp8, 0) << "the artifact has no fp8 weights";

  const std::vector<int32_t> prompt = fixture.inputs.back();
  // How Gemm routes the prompt's first fp8 linear (a 16-byte aligned
  // stand-in for the codes: the route reads only their alignment).
  alignas(16) static const uint8_t kCodes[16] = {};
  bool quantizedX = false;
  for (const plan::Step &step : artifact->plan.ranks[0].steps) {
    if (step.op != "linear")
      continue;
    const plan::Value &w = artifact->plan.ranks[0].values[step.operands.at(1)];
    if (w.dtype != plan::DType::kF8E4M3)
      continue;
    cuda::GemmWeight probe;
    probe.fp8 = kCodes;
    quantizedX = cuda::Gemm::path(int64_t(prompt.size()), w.shape[0].size,
                                  w.shape[1].size,
                                  probe) == cuda::Gemm::Path::kFp8CublasLt;
    break;
  }
  const double tolerance = quantizedX ? 1e-1 : 5e-2;
  constexpr int64_t kSteps = 8;
  const int64_t blockSize = artifact->plan.kvCache.blockSize;
  const int64_t blocks =
      (int64_t(prompt.size()) + kSteps + blockSize - 1) / blockSize;
  cuda::CudaBackendOptions gpuOptions;
  gpuOptions.numBlocks = blocks;
  auto gpu = cuda::createCudaBackend(artifact->plan, 0, *params, gpuOptions);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  cpu::CpuBackendOptions cpuOptions;
  cpuOptions.numBlocks = blocks;
  auto cpuBackend =
      cpu::createCpuBackend(artifact->plan, 0, *params, cpuOptions);
  ASSERT_TRUE(cpuBackend.isOk()) << cpuBackend.status().message();

  std::vector<int32_t> tokens = prompt;
  int64_t cached = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    // One sequence in blocks 0..blocks-1: tokens[cached..] are new.
    const Batch batch =
        oneSequenceBatch(tokens, cached, blockSize, blocks, /*allLogits=*/true);
    StatusOr<Logits> g = (*gpu)->forward(batch);
    StatusOr<Logits> c = (*cpuBackend)->forward(batch);
    ASSERT_TRUE(g.isOk()) << g.status().message();
    ASSERT_TRUE(c.isOk()) << c.status().message();
    ASSERT_EQ(g->data.size(), c->data.size());
    const double error = relativeError(g->data, c->data);
    std::printf("[ fp8 artifact ] %s: %.2e (bound %.0e)\n",
                step == 0 ? "prompt" : "decode step", error, tolerance);
    EXPECT_LT(error, tolerance)
        << (step == 0 ? "prompt of " + std::to_string(prompt.size()) + " tokens"
                      : "decode step " + std::to_string(step));
    // Both continue with the CPU's greedy token.
    const float *last = c->row(c->rows - 1);
    cached = static_cast<int64_t>(tokens.size());
    tokens.push_back(
        static_cast<int32_t>(std::max_element(last, last + c->vocab) - last));
  }
}

} // namespace
} // namespace infer::testing
