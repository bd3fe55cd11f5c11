//===- DependentLaunchTest.cpp - Programmatic dependent launches ---------===//
//
// The decode step's small kernels as programmatic dependent launches
// (kernels/DependentLaunch.cuh) give the bits of plain launches: a chain of
// 48 GEMVs, each reading the rms_norm of the one before (the next kernel may
// start before the last one ends, so a read before its wait would see stale
// or half-written rows), run eagerly and as a captured graph, with the
// launches programmatic and plain. On devices older than sm_90 both runs
// are plain; the test still checks the chain.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace infer::testing {
namespace {

constexpr int kWidth = 1024, kLayers = 48;

bool gpuAvailable(std::string *why) { return cuda::cudaDeviceAvailable(why); }

std::vector<__nv_bfloat16> randomBf16(size_t n, float scale,
                                      std::mt19937 &rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<__nv_bfloat16> v(n);
  for (auto &x : v)
    x = __float2bfloat16_rn(dist(rng));
  return v;
}

struct Chain {
  DeviceArray<__nv_bfloat16> weights, norm, x, y;

  explicit Chain(std::mt19937 &rng)
      : weights(randomBf16(size_t(kLayers) * kWidth * kWidth, 0.05f, rng)),
        norm(randomBf16(kWidth, 1.0f, rng)), x(randomBf16(kWidth, 1.0f, rng)),
        y(std::vector<__nv_bfloat16>(kWidth)) {}

  /// x -> rms_norm(W_l x) for every layer; x ends as the result.
  cudaError_t run(cudaStream_t stream) {
    for (int l = 0; l < kLayers; ++l) {
      cudaError_t status = cuda::launchGemv<__nv_bfloat16, __nv_bfloat16>(
          x.get(), weights.get() + size_t(l) * kWidth * kWidth, nullptr,
          y.get(), 1, kWidth, kWidth, stream);
      if (status == cudaSuccess)
        status = cuda::launchRmsNorm(y.get(), norm.get(), x.get(), 1, kWidth,
                                     1e-5f, stream);
      if (status != cudaSuccess)
        return status;
    }
    return cudaSuccess;
  }
};

/// The chain's result from the same inputs (seed), eagerly or as a graph.
std::vector<__nv_bfloat16> chainResult(bool graph) {
  std::mt19937 rng(5);
  Chain chain(rng);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  if (!graph) {
    EXPECT_EQ(chain.run(stream), cudaSuccess);
  } else {
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    const cudaError_t launched = chain.run(stream);
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
    EXPECT_EQ(launched, cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  return chain.x.download();
}

TEST(CudaDependentLaunchTest, ChainsGiveThePlainLaunchesBits) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  cuda::setDependentLaunches(0);
  const std::vector<__nv_bfloat16> plain = chainResult(false);
  cuda::setDependentLaunches(1);
  const bool on = cuda::dependentLaunchesOn();
  const std::vector<__nv_bfloat16> eager = chainResult(false);
  const std::vector<__nv_bfloat16> graph = chainResult(true);
  cuda::setDependentLaunches(-1);
  ASSERT_EQ(plain.size(), size_t(kWidth));
  bool finite = true;
  for (__nv_bfloat16 v : plain)
    finite = finite && std::isfinite(__bfloat162float(v));
  EXPECT_TRUE(finite) << "the chain overflowed: a test of nothing";
  EXPECT_EQ(std::memcmp(eager.data(), plain.data(), kWidth * 2), 0)
      << "eager programmatic launches differ from plain ones";
  EXPECT_EQ(std::memcmp(graph.data(), plain.data(), kWidth * 2), 0)
      << "a graph of programmatic launches differs from plain ones";
  std::printf("[ pdl      ] %d GEMV + rms_norm launches, programmatic %s: "
              "bit-identical\n",
              2 * kLayers, on ? "on" : "off (device older than sm_90)");
}

} // namespace
} // namespace infer::testing
