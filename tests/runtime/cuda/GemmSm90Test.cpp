//===- GemmSm90Test.cpp - The Hopper GEMM and its SwiGLU epilogue ---------===//
//
// launchGemmSm90 (kernels/GemmSm90.cu) on fresh random bf16 operands against
// cpu::linear on the same values: T from 1 to several token tiles (rows past
// T in the last tile, which the TMA store must not write), N of 1-6 tiles of
// 256 rows, K of 1-40 tiles of 64, and several hundred tiles (more than
// SMs: the persistent loop and the grouped tile order), with both
// epilogues:
//   kStore   y = x w^T, within Bf16GemmTest's bound: ulp_y(cpu) + 2^-14
//            sum_i |x_i w_ji| (y's one rounding plus fp32 accumulation in
//            another order);
//   kSwiGlu  y = silu(x w_gate^T) * (x w_up^T) for w = [w_gate; w_up],
//            within ulp_y plus that accumulation error carried through
//            silu(g) * u (|silu'| <= 1.1): a gate and up from other rows or
//            K tiles, or a missing activation, is far beyond it.
// kSwiGlu runs in tiles of 256 or 224 weight rows (gemmSm90SwiGluTileRows);
// both are checked on shapes that take either.
// Also: a CUDA graph replays it bit for bit, y's rows past T are untouched,
// and unsupported shapes are errors. Skips without an sm_90a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemmSm90.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/ElementCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace infer::testing {
namespace {

using cuda::GemmSm90Epilogue;

constexpr double kAccumulation = 0x1p-14;

class GemmSm90Test : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA GEMM tests need a GPU: " << why;
    if (!cuda::gemmSm90Supports(1, 256, 64))
      GTEST_SKIP() << "the Hopper GEMM needs an sm_90a device";
  }

  /// Runs y = x w^T through `epilogue` on fresh operands and checks it, and
  /// that the row after y's last is left as it was.
  void check(int64_t t, int64_t n, int64_t k, GemmSm90Epilogue epilogue) {
    const bool swiglu = epilogue == GemmSm90Epilogue::kSwiGlu;
    const std::string name =
        std::string(swiglu ? "swiglu" : "store") + " T=" + std::to_string(t) +
        " N=" + std::to_string(n) + " K=" + std::to_string(k);
    const std::vector<float> x =
        roundedTo<__nv_bfloat16>(uniform(size_t(t * k), 1.0f, rng_));
    const std::vector<float> w =
        roundedTo<__nv_bfloat16>(uniform(size_t(n * k), 0.1f, rng_));
    DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x)),
        dw(narrowAll<__nv_bfloat16>(w));
    const int64_t cols = swiglu ? n / 2 : n;
    // One row more than y: the store must not reach it.
    auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t((t + 1) * cols));
    const std::vector<__nv_bfloat16> before = y.download();
    ASSERT_EQ(cuda::launchGemmSm90(dx.get(), dw.get(), y.get(), t, n, k,
                                   epilogue, nullptr),
              cudaSuccess)
        << name;
    std::vector<__nv_bfloat16> got = y.download();
    for (int64_t j = 0; j < cols; ++j)
      ASSERT_EQ(std::memcmp(&got[t * cols + j], &before[t * cols + j], 2), 0)
          << name << ": wrote past row T at column " << j;
    got.resize(size_t(t * cols));

    std::vector<float> product(size_t(t * n)), magnitude(product.size());
    cpu::linear(x.data(), t, k, w.data(), n, nullptr, product.data(), pool_);
    std::vector<float> absX(x), absW(w);
    for (float &v : absX)
      v = std::fabs(v);
    for (float &v : absW)
      v = std::fabs(v);
    cpu::linear(absX.data(), t, k, absW.data(), n, nullptr, magnitude.data(),
                pool_);
    std::vector<float> want(size_t(t * cols));
    std::vector<double> slack(want.size());
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t at = size_t(i * cols + j);
        if (!swiglu) {
          want[at] = product[at];
          slack[at] = kAccumulation * magnitude[at];
          continue;
        }
        const float g = product[i * n + j], u = product[i * n + cols + j];
        const float silu = g / (1.0f + std::exp(-g));
        want[at] = silu * u;
        const double dg = kAccumulation * magnitude[i * n + j];
        const double du = kAccumulation * magnitude[i * n + cols + j];
        slack[at] = 1.1 * std::fabs(u) * dg + std::fabs(silu) * du +
                    (std::fabs(u) + std::fabs(silu)) * dg * du +
                    1e-6 * std::fabs(want[at]);
      }
    EXPECT_TRUE(withinBound(got, want, Bound{}, cols, slack)) << name;
  }

  std::mt19937 rng_{11};
  cpu::ThreadPool pool_{4};
};

TEST_F(GemmSm90Test, StoreMatchesTheCpu) {
  const int64_t shapes[][3] = {
      {1, 256, 64},     {5, 512, 512},    {64, 256, 2560},  {128, 768, 1024},
      {129, 256, 1024}, {300, 1536, 256}, {1000, 512, 640},
  };
  for (const auto &s : shapes)
    check(s[0], s[1], s[2], GemmSm90Epilogue::kStore);
}

TEST_F(GemmSm90Test, SwiGluMatchesTheCpu) {
  const int64_t shapes[][3] = {
      {1, 256, 64},     {7, 512, 1024},   {100, 256, 2560}, {128, 1024, 512},
      {257, 768, 1024}, {640, 1536, 256}, {2100, 512, 320},
  };
  for (const auto &s : shapes)
    check(s[0], s[1], s[2], GemmSm90Epilogue::kSwiGlu);
}

/// Restores the per-shape choice of SwiGLU tile rows when it leaves scope.
struct TileRowsScope {
  explicit TileRowsScope(int rows) { cuda::setSwiGluTileRows(rows); }
  ~TileRowsScope() { cuda::setSwiGluTileRows(0); }
};

TEST_F(GemmSm90Test, SwiGluInTilesOf224And256Rows) {
  // N / 2 a multiple of both 112 and 128 (896, 1792): either tile fits.
  const int64_t shapes[][3] = {
      {1, 1792, 64},    {77, 1792, 1024},  {128, 3584, 512},
      {257, 1792, 704}, {4000, 3584, 256},
  };
  for (int rows : {224, 256}) {
    TileRowsScope scope(rows);
    for (const auto &s : shapes) {
      ASSERT_EQ(cuda::gemmSm90SwiGluTileRows(s[0], s[1]), rows);
      check(s[0], s[1], s[2], GemmSm90Epilogue::kSwiGlu);
    }
  }
}

TEST_F(GemmSm90Test, SwiGluTileRowsFollowTheShape) {
  {
    // 224 where N / 2 is not a multiple of 112 stays 256.
    TileRowsScope scope(224);
    EXPECT_EQ(cuda::gemmSm90SwiGluTileRows(256, 512), 256);
    EXPECT_EQ(cuda::gemmSm90SwiGluTileRows(256, 28672), 224);
  }
  EXPECT_EQ(cuda::gemmSm90SwiGluTileRows(256, 512), 256);
  // Llama-3-8B's gate/up (I = 14336 = 128 x 112): on 132 SMs, 256 tokens
  // are 224 tiles of 256 rows (2 waves, 512 rows a CTA) or 256 of 224 (448).
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
      cudaSuccess);
  if (sms == 132) {
    EXPECT_EQ(cuda::gemmSm90SwiGluTileRows(256, 28672), 224);
    EXPECT_EQ(cuda::gemmSm90SwiGluTileRows(4096, 28672), 256);
  }
}

TEST_F(GemmSm90Test, EachCtaRunsSeveralTiles) {
  // 32 token tiles x 8 (4 with kSwiGlu: 16) row tiles, more than any GPU's
  // SMs: the persistent loop carries its barrier phases and reuses its
  // output buffers from tile to tile, and the producer runs ahead into the
  // next tile.
  check(4096, 2048, 512, GemmSm90Epilogue::kStore);
  check(4000, 4096, 256, GemmSm90Epilogue::kSwiGlu);
}

TEST_F(GemmSm90Test, AGraphReplaysTheSameBits) {
  const int64_t t = 300, n = 512, k = 1024;
  const std::vector<float> x = uniform(size_t(t * k), 1.0f, rng_);
  const std::vector<float> w = uniform(size_t(n * k), 0.1f, rng_);
  DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x)),
      dw(narrowAll<__nv_bfloat16>(w));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(t * n / 2));
  EXPECT_TRUE(replaysInGraph(
      [&](cudaStream_t stream) -> Status {
        if (cuda::launchGemmSm90(dx.get(), dw.get(), y.get(), t, n, k,
                                 GemmSm90Epilogue::kSwiGlu,
                                 stream) != cudaSuccess)
          return internalError("launchGemmSm90 failed");
        return Status::ok();
      },
      {{y.get(), size_t(t * n / 2) * 2}}));
}

TEST_F(GemmSm90Test, UnsupportedShapesAreErrors) {
  EXPECT_FALSE(cuda::gemmSm90Supports(0, 256, 64));
  EXPECT_FALSE(cuda::gemmSm90Supports(8, 128, 64));
  EXPECT_FALSE(cuda::gemmSm90Supports(8, 384, 64));
  EXPECT_FALSE(cuda::gemmSm90Supports(8, 256, 96));
  DeviceArray<__nv_bfloat16> x(std::vector<__nv_bfloat16>(64 * 256)),
      w(std::vector<__nv_bfloat16>(384 * 256));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(64 * 384);
  EXPECT_EQ(cuda::launchGemmSm90(x.get(), w.get(), y.get(), 64, 384, 256,
                                 GemmSm90Epilogue::kSwiGlu, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchGemmSm90(x.get(), w.get(), y.get(), 64, 256, 100,
                                 GemmSm90Epilogue::kStore, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

} // namespace
} // namespace infer::testing
