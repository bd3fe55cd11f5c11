//===- TypedKernelsTest.cpp - generated kernels of 16-bit values on a GPU -===//
//
// Runs generated `fused` kernels over bf16, f16 and mixed operands and
// results on the GPU (NVRTC's PTX, loaded with cudaLibraryLoadData, so
// nothing of the CUDA backend is involved) against the CPU backend's fp32 ops:
// the inputs are exact 16-bit values, and each result must be the reference
// rounded to its element type, within half an ulp of that type plus the fp32
// error of the body. A kernel that truncated instead of rounding, or read its
// operands as another type, is off by up to a whole ulp or more. Skips
// without a GPU or NVRTC (label gpu).
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/Nvrtc.h"
#include "runtime/cpu/Kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace infer::compiler {
namespace {

/// The float value of a 16-bit or 32-bit element.
float decode(plan::DType dtype, uint32_t bits) {
  if (dtype == plan::DType::kBF16) {
    bits <<= 16;
  } else if (dtype == plan::DType::kF16) {
    const uint32_t sign = (bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1f;
    const uint32_t mantissa = bits & 0x3ff;
    if (exponent == 0) {
      float value = std::ldexp(static_cast<float>(mantissa), -24);
      return sign ? -value : value;
    }
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// Half an ulp of `dtype` at `value`.
double halfUlp(plan::DType dtype, double value) {
  const int mantissaBits = dtype == plan::DType::kBF16  ? 7
                           : dtype == plan::DType::kF16 ? 10
                                                        : 23;
  const int minExponent = dtype == plan::DType::kF16 ? -14 : -126;
  int exponent = value == 0.0 ? minExponent : std::ilogb(value);
  if (exponent < minExponent)
    exponent = minExponent;
  return std::ldexp(0.5, exponent - mantissaBits);
}

/// An array of n elements of `dtype` on the device and its bits on the host.
struct Operand {
  plan::DType dtype;
  std::vector<uint32_t> bits;
  void *device = nullptr;
};

size_t bytesOf(plan::DType dtype) {
  return static_cast<size_t>(plan::dtypeSize(dtype));
}

/// Random exact values of `dtype` in +-[1/8, 4).
std::vector<uint32_t> randomBits(plan::DType dtype, int64_t n,
                                 std::mt19937 &rng) {
  std::uniform_int_distribution<uint32_t> sign(0, 1), exponent(0, 4);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7fffff);
  std::vector<uint32_t> bits(n);
  for (uint32_t &b : bits) {
    const uint32_t s = sign(rng), e = exponent(rng) + 124, m = mantissa(rng);
    const uint32_t f32 = (s << 31) | (e << 23) | m;
    if (dtype == plan::DType::kBF16)
      b = f32 >> 16;
    else if (dtype == plan::DType::kF16)
      b = (s << 15) | ((e - 112) << 10) | (m >> 13);
    else
      b = f32;
  }
  return bits;
}

/// The CPU backend's ops on the decoded inputs, in fp32: the yields, and per
/// element the largest magnitude among the body's values (what the fp32
/// error of the body scales with).
struct Reference {
  std::vector<std::vector<float>> outputs;
  std::vector<float> magnitude;
};

Reference reference(const plan::FusedBody &body,
                    const std::vector<std::vector<float>> &inputs) {
  std::vector<std::vector<float>> regs(inputs);
  const size_t n = inputs.front().size();
  for (const plan::FusedInstruction &instr : body.instructions) {
    std::vector<float> y(n);
    const std::vector<float> &a = regs[instr.args[0]];
    const std::vector<float> &b =
        instr.args.size() > 1 ? regs[instr.args[1]] : a;
    for (size_t j = 0; j < n; ++j) {
      switch (instr.op) {
      case plan::ElementwiseOp::kAdd:
        y[j] = a[j] + b[j];
        break;
      case plan::ElementwiseOp::kMul:
        y[j] = a[j] * b[j];
        break;
      case plan::ElementwiseOp::kSilu:
        y[j] = cpu::siluScalar(a[j]);
        break;
      case plan::ElementwiseOp::kGeluTanh:
        y[j] = cpu::geluTanhScalar(a[j]);
        break;
      case plan::ElementwiseOp::kSiluMul:
        y[j] = cpu::siluScalar(a[j]) * b[j];
        break;
      case plan::ElementwiseOp::kGelu:
        y[j] = cpu::geluScalar(a[j]);
        break;
      }
    }
    regs.push_back(std::move(y));
  }
  Reference result;
  for (int r : body.yields)
    result.outputs.push_back(regs[r]);
  result.magnitude.assign(n, 0.0f);
  for (const std::vector<float> &reg : regs)
    for (size_t j = 0; j < n; ++j)
      result.magnitude[j] = std::max(result.magnitude[j], std::fabs(reg[j]));
  return result;
}

class TypedKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!nvrtcAvailable(&why))
      GTEST_SKIP() << why;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
      GTEST_SKIP() << "typed generated-kernel tests need a GPU";
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    cc = std::to_string(prop.major) + std::to_string(prop.minor);
  }

  void TearDown() override {
    if (library)
      cudaLibraryUnload(library);
  }

  /// Compiles `kernels` to PTX for this GPU and loads it.
  void load(const std::vector<FusedKernel> &kernels) {
    StatusOr<CudaBinaries> binaries = compileCuda(
        emitCudaUnit(kernels), "fused.cu", "sm_" + cc, "compute_" + cc);
    ASSERT_TRUE(binaries.isOk()) << binaries.status().message();
    ASSERT_EQ(cudaLibraryLoadData(&library, binaries->ptx.c_str(), nullptr,
                                  nullptr, 0, nullptr, nullptr, 0),
              cudaSuccess);
  }

  /// Runs `kernel` on n random elements placed `offset` elements into their
  /// buffers; returns the largest error in units of the results' half ulp
  /// (at most 1 when every result is the rounded reference).
  double run(const FusedKernel &kernel, int64_t n, int64_t offset,
             std::mt19937 &rng) {
    cudaKernel_t function = nullptr;
    EXPECT_EQ(cudaLibraryGetKernel(&function, library, kernel.name.c_str()),
              cudaSuccess);
    std::vector<Operand> inputs, outputs;
    std::vector<std::vector<float>> decoded;
    std::vector<void *> args;
    auto allocate = [&](Operand &operand) {
      const size_t bytes = (n + offset) * bytesOf(operand.dtype);
      void *base = nullptr;
      EXPECT_EQ(cudaMalloc(&base, bytes), cudaSuccess);
      EXPECT_EQ(cudaMemset(base, 0xff, bytes), cudaSuccess);
      operand.device =
          static_cast<char *>(base) + offset * bytesOf(operand.dtype);
    };
    auto upload = [&](Operand &operand) {
      const size_t size = bytesOf(operand.dtype);
      std::vector<char> host(n * size);
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(host.data() + j * size, &operand.bits[j], size);
      EXPECT_EQ(cudaMemcpy(operand.device, host.data(), host.size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    };
    for (plan::DType dtype : kernel.inputTypes) {
      Operand operand{dtype, randomBits(dtype, n, rng)};
      allocate(operand);
      upload(operand);
      std::vector<float> values(n);
      for (int64_t j = 0; j < n; ++j)
        values[j] = decode(dtype, operand.bits[j]);
      decoded.push_back(std::move(values));
      inputs.push_back(std::move(operand));
    }
    for (plan::DType dtype : kernel.outputTypes) {
      Operand operand{dtype, {}};
      allocate(operand);
      outputs.push_back(std::move(operand));
    }
    for (Operand &operand : inputs)
      args.push_back(&operand.device);
    for (Operand &operand : outputs)
      args.push_back(&operand.device);
    long long count = n;
    args.push_back(&count);
    EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void *>(function),
                               dim3(64), dim3(kFusedKernelThreads), args.data(),
                               0, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    Reference want = reference(kernel.body, decoded);
    double worst = 0.0;
    for (size_t r = 0; r < outputs.size(); ++r) {
      const plan::DType dtype = outputs[r].dtype;
      const size_t size = bytesOf(dtype);
      std::vector<char> host(n * size);
      EXPECT_EQ(cudaMemcpy(host.data(), outputs[r].device, host.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int64_t j = 0; j < n; ++j) {
        uint32_t bits = 0;
        std::memcpy(&bits, host.data() + j * size, size);
        const double got = decode(dtype, bits), expected = want.outputs[r][j];
        // The body's fp32 error (the CUDA math library against the CPU's
        // double-precision ops, of the largest value in the body where a sum
        // cancels) may push a value across a rounding midpoint: allow a few
        // fp32 ulps of it on top of the half ulp.
        const double allowed =
            halfUlp(dtype, std::fabs(expected)) +
            32 * halfUlp(plan::DType::kF32, want.magnitude[j]);
        worst = std::max(worst, std::isfinite(got)
                                    ? std::fabs(got - expected) / allowed
                                    : INFINITY);
      }
    }
    for (std::vector<Operand> *operands : {&inputs, &outputs})
      for (Operand &operand : *operands)
        cudaFree(static_cast<char *>(operand.device) -
                 offset * bytesOf(operand.dtype));
    return worst;
  }

  std::string cc;
  cudaLibrary_t library = nullptr;
};

TEST_F(TypedKernelsTest, ResultsAreTheReferenceRoundedToTheirTypes) {
  using plan::DType;
  struct Case {
    const char *body;
    std::vector<int64_t> yields;
    std::vector<DType> inputs, outputs;
  };
  const std::vector<Case> cases = {
      {"add(0, 1)", {2}, {DType::kBF16, DType::kBF16}, {DType::kBF16}},
      {"mul(0, 1)", {2}, {DType::kF16, DType::kF16}, {DType::kF16}},
      {"silu_mul(0, 1)", {2}, {DType::kBF16, DType::kBF16}, {DType::kBF16}},
      {"gelu_tanh(0); mul(2, 1); add(3, 1)",
       {4},
       {DType::kF16, DType::kF16},
       {DType::kF16}},
      // Mixed: bf16 in, an f32 and an f16 result; f32 in, bf16 out.
      {"silu(0); add(2, 1)",
       {3, 2},
       {DType::kBF16, DType::kBF16},
       {DType::kF32, DType::kF16}},
      {"gelu_tanh(0); silu_mul(2, 1)",
       {3},
       {DType::kF32, DType::kF32},
       {DType::kBF16}},
      {"gelu(0); mul(2, 1)", {3}, {DType::kBF16, DType::kBF16}, {DType::kBF16}},
  };
  plan::Plan plan;
  plan::RankPlan &rank = plan.ranks.emplace_back();
  for (const Case &c : cases) {
    plan::Step step;
    step.op = "fused";
    auto addValue = [&](DType dtype) {
      plan::Value value;
      value.id = static_cast<int>(rank.values.size());
      value.dtype = dtype;
      rank.values.push_back(value);
      return value.id;
    };
    for (DType dtype : c.inputs)
      step.operands.push_back(addValue(dtype));
    for (DType dtype : c.outputs)
      step.results.push_back(addValue(dtype));
    step.attrs["body"] = std::string(c.body);
    step.attrs["yields"] = c.yields;
    rank.steps.push_back(std::move(step));
  }
  StatusOr<std::vector<FusedKernel>> kernels = assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk()) << kernels.status().message();
  ASSERT_EQ(kernels->size(), cases.size());
  load(*kernels);
  std::mt19937 rng(11);
  for (const FusedKernel &kernel : *kernels)
    // The vector path (aligned, n % 4 == 0), scalar tails and a misaligned
    // start (scalar path).
    for (auto [n, offset] : std::vector<std::pair<int64_t, int64_t>>{
             {4096, 0}, {1001, 0}, {3, 0}, {4096, 1}})
      EXPECT_LE(run(kernel, n, offset, rng), 1.0)
          << kernel.name << " (" << kernel.users[0] << ") n=" << n
          << " offset=" << offset << "\n"
          << emitFusedKernel(kernel);
}

} // namespace
} // namespace infer::compiler
