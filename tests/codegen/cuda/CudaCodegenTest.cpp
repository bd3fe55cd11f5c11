//===- CudaCodegenTest.cpp - Emitting and compiling fused kernels ---------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/Nvrtc.h"

#include <gtest/gtest.h>

namespace infer::compiler {
namespace {

/// A `fused` step of `inputs` operands computing `body`.
plan::Step fusedStep(int inputs, const std::string &body,
                     std::vector<int64_t> yields) {
  plan::Step step;
  step.op = "fused";
  for (int i = 0; i < inputs; ++i)
    step.operands.push_back(i);
  for (size_t r = 0; r < yields.size(); ++r)
    step.results.push_back(inputs + static_cast<int>(r));
  step.attrs["body"] = body;
  step.attrs["yields"] = std::move(yields);
  return step;
}

TEST(CudaEmitter, EqualBodiesShareAKernel) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan::RankPlan &rank = plan.ranks[0];
  rank.steps.push_back(fusedStep(2, "silu(0); mul(2, 1)", {3}));
  rank.steps.push_back(plan::Step{"add", {0, 1}, {2}, {}});
  rank.steps.push_back(fusedStep(3, "add(0, 1); add(3, 2)", {4}));
  rank.steps.push_back(fusedStep(2, "silu(0); mul(2, 1)", {3}));

  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk()) << kernels.status().message();
  ASSERT_EQ(kernels->size(), 2u);
  EXPECT_EQ((*kernels)[0].name, "fused_0");
  EXPECT_EQ((*kernels)[0].users,
            (std::vector<std::string>{"rank 0 step 0", "rank 0 step 3"}));
  EXPECT_EQ(rank.steps[0].getString("kernel", ""), "fused_0");
  EXPECT_EQ(rank.steps[1].attrs.count("kernel"), 0u);
  EXPECT_EQ(rank.steps[2].getString("kernel", ""), "fused_1");
  EXPECT_EQ(rank.steps[3].getString("kernel", ""), "fused_0");
}

TEST(CudaEmitter, BadBodyNamesTheStep) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan.ranks[0].steps.push_back(fusedStep(1, "tanh(0)", {1}));
  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_FALSE(kernels.isOk());
  EXPECT_NE(kernels.status().message().find("rank 0 step 0"), std::string::npos)
      << kernels.status().message();
  EXPECT_NE(kernels.status().message().find("unknown op 'tanh'"),
            std::string::npos);
}

class NvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!nvrtcAvailable(&why))
      GTEST_SKIP() << why;
  }
};

TEST_F(NvrtcTest, CompilesACubinAndPtx) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan.ranks[0].steps.push_back(
      fusedStep(2, "gelu_tanh(0); silu_mul(2, 1); add(3, 0)", {4, 2}));
  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk());
  StatusOr<CudaBinaries> binaries =
      compileCuda(emitCudaUnit(*kernels), "fused.cu", "sm_90a", "compute_90");
  ASSERT_TRUE(binaries.isOk()) << binaries.status().message();
  ASSERT_GT(binaries->cubin.size(), 4u);
  EXPECT_EQ(binaries->cubin.substr(0, 4), "\x7f"
                                          "ELF");
  EXPECT_NE(binaries->ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(binaries->ptx.find(".entry fused_0("), std::string::npos);
  EXPECT_EQ(binaries->ptx.find('\0'), std::string::npos);
}

TEST_F(NvrtcTest, CompileErrorCarriesTheLog) {
  StatusOr<CudaBinaries> binaries =
      compileCuda("extern \"C\" __global__ void k() { undefined_name(); }\n",
                  "broken.cu", "sm_90a", "compute_90");
  ASSERT_FALSE(binaries.isOk());
  EXPECT_EQ(binaries.status().code(), StatusCode::kInvalidArgument);
  const std::string &message = binaries.status().message();
  EXPECT_NE(message.find("NVRTC could not compile broken.cu for sm_90a"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("undefined_name"), std::string::npos) << message;
}

TEST_F(NvrtcTest, RejectsArchitecturesOfTheWrongKind) {
  EXPECT_FALSE(compileCuda("", "x.cu", "compute_90", "compute_90").isOk());
  EXPECT_FALSE(compileCuda("", "x.cu", "sm_90a", "sm_90").isOk());
}

} // namespace
} // namespace infer::compiler
