//===- SkinnyGemmSm90Test.cpp - The Hopper skinny GEMM against the CPU ----===//
//
// launchSkinnyGemmSm90 (kernels/SkinnyGemmSm90.cu) on fresh random bf16
// operands over T = 1 .. 256 (one and two token halves, rows past T in a
// half), N of 1-5 CTAs of 128 rows, K of 1-40 tiles of 64, one split and
// several (uneven K ranges, the partial sums added by the second kernel),
// clusters of 1, 2 and 4 CTAs sharing x by multicast, with and without a
// bias and a residual, against cpu::linear on the same
// values. The bound is Bf16GemmTest's: ulp_y(cpu) + 2^-14 sum_i |x_i w_ji|
// (y's one rounding plus fp32 accumulation in another order); a dropped,
// repeated or misplaced K tile, token or row, or a missing bias or
// residual (drawn as large as y) is far beyond it. Also: a CUDA graph
// replays it bit for bit, and unsupported shapes and short workspaces are
// errors. Skips without an sm_90a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/GemvKernels.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/ElementCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace infer::testing {
namespace {

constexpr double kAccumulation = 0x1p-14;

class SkinnyGemmSm90Test : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA GEMM tests need a GPU: " << why;
    if (!cuda::skinnyGemmSm90Supports(1, 128, 64))
      GTEST_SKIP() << "the Hopper skinny GEMM needs an sm_90a device";
  }

  struct Case {
    int64_t t, n, k, splits;
    bool bias, residual;
    int64_t cluster = 1;
  };

  /// Runs one case on fresh operands and checks it against the CPU.
  void check(const Case &c) {
    const std::string name =
        "T=" + std::to_string(c.t) + " N=" + std::to_string(c.n) +
        " K=" + std::to_string(c.k) + " splits=" + std::to_string(c.splits) +
        " cluster=" + std::to_string(c.cluster) + (c.bias ? " bias" : "") +
        (c.residual ? " residual" : "");
    const std::vector<float> x =
        roundedTo<__nv_bfloat16>(uniform(size_t(c.t * c.k), 1.0f, rng_));
    const std::vector<float> w =
        roundedTo<__nv_bfloat16>(uniform(size_t(c.n * c.k), 0.1f, rng_));
    const float large = 0.05f * std::sqrt(float(c.k));
    const std::vector<float> bias =
        roundedTo<__nv_bfloat16>(uniform(size_t(c.n), large, rng_));
    const std::vector<float> residual =
        roundedTo<__nv_bfloat16>(uniform(size_t(c.t * c.n), large, rng_));
    DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x)),
        dw(narrowAll<__nv_bfloat16>(w)), dBias(narrowAll<__nv_bfloat16>(bias)),
        dResidual(narrowAll<__nv_bfloat16>(residual));
    auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(c.t * c.n));
    const size_t workspaceBytes =
        cuda::skinnyGemmSm90WorkspaceBytes(c.t, c.n, c.splits);
    auto workspace =
        DeviceArray<float>::poisoned(std::max<size_t>(workspaceBytes / 4, 1));
    ASSERT_EQ(cuda::launchSkinnyGemmSm90(
                  dx.get(), dw.get(), c.bias ? dBias.get() : nullptr,
                  c.residual ? dResidual.get() : nullptr, y.get(), c.t, c.n,
                  c.k, c.splits, c.cluster, workspace.get(), workspaceBytes,
                  nullptr),
              cudaSuccess)
        << name;
    const std::vector<__nv_bfloat16> got = y.download();

    std::vector<float> want(size_t(c.t * c.n)), magnitude(want.size());
    cpu::linear(x.data(), c.t, c.k, w.data(), c.n,
                c.bias ? bias.data() : nullptr, want.data(), pool_);
    std::vector<float> absX(x), absW(w);
    for (float &v : absX)
      v = std::fabs(v);
    for (float &v : absW)
      v = std::fabs(v);
    cpu::linear(absX.data(), c.t, c.k, absW.data(), c.n, nullptr,
                magnitude.data(), pool_);
    std::vector<double> slack(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (c.residual)
        want[i] += residual[i];
      slack[i] = kAccumulation * magnitude[i];
    }
    EXPECT_TRUE(withinBound(got, want, Bound{}, c.n, slack)) << name;
  }

  std::mt19937 rng_{7};
  cpu::ThreadPool pool_{4};
};

TEST_F(SkinnyGemmSm90Test, MatchesTheCpuOverTokensRowsAndSplits) {
  const Case cases[] = {
      {1, 128, 64, 1, false, false},
      {5, 256, 512, 1, true, false},
      {64, 384, 1024, 1, false, true},
      {128, 128, 2560, 1, true, true},
      {129, 256, 1024, 1, true, true},
      {200, 640, 768, 1, false, false},
      {256, 384, 1024, 1, true, true},
      {16, 256, 2560, 3, false, false},
      {77, 128, 2560, 7, true, true},
      {128, 384, 1024, 2, true, false},
      {130, 256, 2048, 4, false, true},
      {256, 256, 2560, 3, true, true},
      {256, 128, 64 * 7, 7, true, true},
      // Clusters sharing x by multicast (row tiles a multiple of the
      // cluster): one x box or several a CTA, one split and several.
      {1, 256, 512, 1, true, true, 2},
      {64, 256, 1024, 1, false, true, 2},
      {100, 512, 1024, 3, true, false, 2},
      {129, 256, 1024, 1, true, true, 2},
      {256, 768, 2560, 2, true, true, 2},
      {40, 512, 1024, 1, true, true, 4},
      {200, 512, 2560, 5, false, true, 4},
      {256, 1024, 1024, 2, true, true, 4},
  };
  for (const Case &c : cases)
    check(c);
}

TEST_F(SkinnyGemmSm90Test, TheSplitsThatFillTheDeviceAreRight) {
  // Llama-3-8B's o_proj at batch 96 and 256: the split count the tuner
  // offers for it, alone and in clusters.
  for (int64_t t : {96, 256}) {
    const int64_t splits = cuda::skinnyGemmSm90Splits(t, 4096, 4096);
    EXPECT_GE(splits, 1);
    EXPECT_LE(splits, 4096 / 64 / 8);
    for (int64_t cluster : {1, 4})
      check({t, 4096, 4096, splits, true, true, cluster});
  }
}

TEST_F(SkinnyGemmSm90Test, AGraphReplaysTheSameBits) {
  const int64_t t = 200, n = 256, k = 1024, splits = 2, cluster = 2;
  const std::vector<float> x = uniform(size_t(t * k), 1.0f, rng_);
  const std::vector<float> w = uniform(size_t(n * k), 0.1f, rng_);
  DeviceArray<__nv_bfloat16> dx(narrowAll<__nv_bfloat16>(x)),
      dw(narrowAll<__nv_bfloat16>(w));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(size_t(t * n));
  const size_t bytes = cuda::skinnyGemmSm90WorkspaceBytes(t, n, splits);
  auto workspace = DeviceArray<float>::poisoned(bytes / 4);
  EXPECT_TRUE(replaysInGraph(
      [&](cudaStream_t stream) -> Status {
        if (cuda::launchSkinnyGemmSm90(
                dx.get(), dw.get(), nullptr, nullptr, y.get(), t, n, k, splits,
                cluster, workspace.get(), bytes, stream) != cudaSuccess)
          return internalError("launchSkinnyGemmSm90 failed");
        return Status::ok();
      },
      {{y.get(), size_t(t * n) * 2}}));
}

TEST_F(SkinnyGemmSm90Test, UnsupportedShapesAndShortWorkspacesAreErrors) {
  EXPECT_FALSE(cuda::skinnyGemmSm90Supports(257, 128, 64));
  EXPECT_FALSE(cuda::skinnyGemmSm90Supports(8, 100, 64));
  EXPECT_FALSE(cuda::skinnyGemmSm90Supports(8, 128, 96));
  DeviceArray<__nv_bfloat16> x(std::vector<__nv_bfloat16>(64 * 256)),
      w(std::vector<__nv_bfloat16>(256 * 256));
  auto y = DeviceArray<__nv_bfloat16>::poisoned(64 * 256);
  auto workspace = DeviceArray<float>::poisoned(64 * 256);
  EXPECT_EQ(cuda::launchSkinnyGemmSm90(x.get(), w.get(), nullptr, nullptr,
                                       y.get(), 64, 200, 256, 1, 1, nullptr, 0,
                                       nullptr),
            cudaErrorInvalidValue);
  // Clusters must divide the row tiles (256 rows: 2) and be 1, 2 or 4.
  for (int64_t cluster : {3, 4, 8})
    EXPECT_EQ(cuda::launchSkinnyGemmSm90(x.get(), w.get(), nullptr, nullptr,
                                         y.get(), 64, 256, 256, 1, cluster,
                                         nullptr, 0, nullptr),
              cudaErrorInvalidValue);
  // Two splits of 64 x 256 fp32 partial sums need 128 KiB.
  EXPECT_EQ(cuda::launchSkinnyGemmSm90(x.get(), w.get(), nullptr, nullptr,
                                       y.get(), 64, 256, 256, 2, 1,
                                       workspace.get(), 64 * 256 * 4, nullptr),
            cudaErrorInvalidValue);
  // More splits than K tiles.
  EXPECT_EQ(cuda::launchSkinnyGemmSm90(x.get(), w.get(), nullptr, nullptr,
                                       y.get(), 64, 256, 256, 5, 1,
                                       workspace.get(), 64 * 256 * 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

} // namespace
} // namespace infer::testing
