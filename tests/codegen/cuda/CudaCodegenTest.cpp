//===- CudaCodegenTest.cpp - Emitting and compiling fused kernels ---------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/Nvrtc.h"

#include <gtest/gtest.h>

namespace infer::compiler {
namespace {

/// Appends an activation of `dtype` to `rank` and returns its id.
int addValue(plan::RankPlan &rank, plan::DType dtype) {
  plan::Value value;
  value.id = static_cast<int>(rank.values.size());
  value.dtype = dtype;
  rank.values.push_back(value);
  return value.id;
}

/// A `fused` step of `rank` computing `body` from `inputs` new values of
/// `dtype` into one new value of `dtype` per yield.
plan::Step fusedStep(plan::RankPlan &rank, int inputs, const std::string &body,
                     std::vector<int64_t> yields,
                     plan::DType dtype = plan::DType::kF32) {
  plan::Step step;
  step.op = "fused";
  for (int i = 0; i < inputs; ++i)
    step.operands.push_back(addValue(rank, dtype));
  for (size_t r = 0; r < yields.size(); ++r)
    step.results.push_back(addValue(rank, dtype));
  step.attrs["body"] = body;
  step.attrs["yields"] = std::move(yields);
  return step;
}

TEST(CudaEmitter, EqualBodiesShareAKernel) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan::RankPlan &rank = plan.ranks[0];
  rank.steps.push_back(fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}));
  rank.steps.push_back(plan::Step{"add", {0, 1}, {2}, {}});
  rank.steps.push_back(fusedStep(rank, 3, "add(0, 1); add(3, 2)", {4}));
  rank.steps.push_back(fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}));

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
  EXPECT_EQ((*kernels)[0].inputTypes,
            (std::vector<plan::DType>{plan::DType::kF32, plan::DType::kF32}));
  EXPECT_EQ((*kernels)[0].outputTypes,
            (std::vector<plan::DType>{plan::DType::kF32}));
}

TEST(CudaEmitter, ElementTypesSeparateKernels) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan::RankPlan &rank = plan.ranks[0];
  rank.steps.push_back(fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}));
  rank.steps.push_back(
      fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}, plan::DType::kBF16));
  rank.steps.push_back(
      fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}, plan::DType::kBF16));
  // bf16 operands, an f32 result.
  plan::Step mixed =
      fusedStep(rank, 2, "silu(0); mul(2, 1)", {3}, plan::DType::kBF16);
  rank.values[mixed.results[0]].dtype = plan::DType::kF32;
  rank.steps.push_back(mixed);

  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk()) << kernels.status().message();
  ASSERT_EQ(kernels->size(), 3u);
  EXPECT_EQ(rank.steps[1].getString("kernel", ""), "fused_1");
  EXPECT_EQ(rank.steps[2].getString("kernel", ""), "fused_1");
  EXPECT_EQ(rank.steps[3].getString("kernel", ""), "fused_2");
  EXPECT_EQ((*kernels)[1].inputTypes,
            (std::vector<plan::DType>{plan::DType::kBF16, plan::DType::kBF16}));
  EXPECT_EQ((*kernels)[2].outputTypes,
            (std::vector<plan::DType>{plan::DType::kF32}));
  const std::string source = emitFusedKernel((*kernels)[2]);
  EXPECT_NE(source.find("fused_2(const __nv_bfloat16 *__restrict__ x0, const "
                        "__nv_bfloat16 *__restrict__ x1, float *__restrict__ "
                        "y0, long long n)"),
            std::string::npos)
      << source;
}

TEST(CudaEmitter, NonFloatValuesAreErrors) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan::RankPlan &rank = plan.ranks[0];
  rank.steps.push_back(
      fusedStep(rank, 1, "silu(0)", {1}, plan::DType::kF8E4M3));
  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_FALSE(kernels.isOk());
  EXPECT_EQ(kernels.status().message(),
            "rank 0 step 0: operand 0 has dtype f8e4m3; a generated kernel "
            "reads and writes f32, bf16 or f16");

  rank.values.clear();
  kernels = assignFusedKernels(plan);
  ASSERT_FALSE(kernels.isOk());
  EXPECT_EQ(kernels.status().message(),
            "rank 0 step 0: operand 0 is not a value of the rank");
}

TEST(CudaEmitter, BadBodyNamesTheStep) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan.ranks[0].steps.push_back(fusedStep(plan.ranks[0], 1, "tanh(0)", {1}));
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
  plan.ranks[0].steps.push_back(fusedStep(
      plan.ranks[0], 2, "gelu_tanh(0); silu_mul(2, 1); add(3, 0)", {4, 2}));
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

// bf16 and f16 kernels include the toolkit's cuda_bf16.h and cuda_fp16.h,
// which NVRTC finds through the include path of the build's toolkit.
TEST_F(NvrtcTest, CompilesSixteenBitKernels) {
  plan::Plan plan;
  plan.ranks.resize(1);
  plan::RankPlan &rank = plan.ranks[0];
  rank.steps.push_back(
      fusedStep(rank, 2, "gelu_tanh(0); mul(2, 1)", {3}, plan::DType::kBF16));
  rank.steps.push_back(
      fusedStep(rank, 2, "silu_mul(0, 1)", {2}, plan::DType::kF16));
  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk()) << kernels.status().message();
  const std::string source = emitCudaUnit(*kernels);
  ASSERT_NE(source.find("#include <cuda_bf16.h>"), std::string::npos);
  ASSERT_NE(source.find("#include <cuda_fp16.h>"), std::string::npos);
  StatusOr<CudaBinaries> binaries =
      compileCuda(source, "fused.cu", "sm_90a", "compute_90");
  ASSERT_TRUE(binaries.isOk()) << binaries.status().message();
  EXPECT_NE(binaries->ptx.find(".entry fused_0("), std::string::npos);
  EXPECT_NE(binaries->ptx.find(".entry fused_1("), std::string::npos);
  // The bf16 stores round: cvt.rn.bf16x2.f32 (or cvt.rn.bf16.f32).
  EXPECT_NE(binaries->ptx.find("cvt.rn.bf16"), std::string::npos);
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
