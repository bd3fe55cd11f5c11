//===- GeneratedKernelsTest.cpp - Generated fused kernels on the GPU ------===//
//
// The kernels `infer compile --target cuda` generates for `fused` steps
// (codegen/cuda/CudaEmitter.h), run on the GPU and compared with the CPU
// backend's interpreter of the same register program (the kernels of
// runtime/cpu/Kernels.h it calls, instruction by instruction):
//
// - bodies of every op and random bodies (more inputs, instructions and
//   results than the interpreter kernel takes), emitted and compiled with
//   NVRTC here, loaded from the cubin and, separately, JIT-compiled from the
//   PTX; element counts that take the float4 path, the scalar path, and a
//   misaligned pointer;
// - every fused step of the artifacts in INFER_CUDA_ARTIFACTS that carry
//   kernels/ (made by `infer compile --target cuda`, see gpu_check.sh);
// - llama-gqa-gelu end to end: the CUDA backend with generated kernels gives
//   the CPU backend's logits (bf16 tolerance) and its decode steps replayed
//   as CUDA graphs equal eager ones.
//
// Tolerance: the generated code and the CPU interpreter both compute in fp32
// except that the CPU's silu and gelu round a double result, the GPU's expf
// and tanhf are within 2 ulp, and the GPU may contract a*b+c into an FMA: a
// few ulp per op. Errors are judged against 1e-5 of the largest magnitude in
// the result (cancellation in an add leaves an error of that scale); a wrong
// op, register or index gives O(1) errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GeneratedKernels.h"
#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/Nvrtc.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/engine/Artifact.h"
#include "runtime/support/Half.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/support/Batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <tuple>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using compiler::FusedKernel;

constexpr double kTolerance = 1e-5;
/// bf16 results: one bf16 rounding step (2^-8 relative) of an element.
constexpr double kBf16Tolerance = 1.0 / 256;

/// The CPU backend's interpreter of `body` (CpuBackend::runFused): each
/// instruction is one call of the CPU kernel of its op over all n elements.
std::vector<std::vector<float>>
interpret(const plan::FusedBody &body,
          const std::vector<std::vector<float>> &inputs, int64_t n) {
  std::vector<std::vector<float>> regs(inputs);
  for (const plan::FusedInstruction &instr : body.instructions) {
    std::vector<float> y(n);
    const float *a = regs[instr.args[0]].data();
    const float *b = instr.args.size() > 1 ? regs[instr.args[1]].data() : a;
    switch (instr.op) {
    case plan::ElementwiseOp::kAdd:
      for (int64_t j = 0; j < n; ++j)
        y[j] = a[j] + b[j];
      break;
    case plan::ElementwiseOp::kMul:
      for (int64_t j = 0; j < n; ++j)
        y[j] = a[j] * b[j];
      break;
    case plan::ElementwiseOp::kSilu:
      cpu::silu(a, y.data(), n);
      break;
    case plan::ElementwiseOp::kGeluTanh:
      cpu::geluTanh(a, y.data(), n);
      break;
    case plan::ElementwiseOp::kSiluMul:
      cpu::siluMul(a, b, y.data(), n);
      break;
    case plan::ElementwiseOp::kGelu:
      cpu::gelu(a, y.data(), n);
      break;
    }
    regs.push_back(std::move(y));
  }
  std::vector<std::vector<float>> outputs;
  for (int r : body.yields)
    outputs.push_back(regs[r]);
  return outputs;
}

std::vector<float> randomVector(int64_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// Max |got - want| / (1 + max |want|) over one result.
double relativeError(const std::vector<float> &got,
                     const std::vector<float> &want) {
  double scale = 1.0, err = 0.0;
  for (float w : want)
    scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i)
    err = std::max(err, std::isfinite(got[i])
                            ? std::fabs(double(got[i]) - want[i])
                            : INFINITY);
  return err / scale;
}

/// Runs `kernel` (the generated kernel of `body`) on random inputs of n
/// elements starting `offset` floats into their buffers; returns the max
/// relative error against the CPU interpreter.
double runAgainstCpu(cudaKernel_t kernel, const plan::FusedBody &body,
                     int64_t n, int64_t offset, std::mt19937 &rng) {
  std::vector<std::vector<float>> inputs;
  std::vector<DeviceArray<float>> deviceInputs, deviceOutputs;
  std::vector<const void *> in;
  std::vector<void *> out;
  for (int i = 0; i < body.numInputs; ++i) {
    inputs.push_back(randomVector(n, rng));
    std::vector<float> padded(offset, 0.0f);
    padded.insert(padded.end(), inputs.back().begin(), inputs.back().end());
    deviceInputs.emplace_back(padded);
    in.push_back(deviceInputs.back().get() + offset);
  }
  for (size_t r = 0; r < body.yields.size(); ++r) {
    deviceOutputs.push_back(DeviceArray<float>::poisoned(n + offset));
    out.push_back(deviceOutputs.back().get() + offset);
  }
  EXPECT_EQ(cuda::launchGeneratedKernel(kernel, in, out, n, nullptr),
            cudaSuccess);
  std::vector<std::vector<float>> want = interpret(body, inputs, n);
  double err = 0.0;
  for (size_t r = 0; r < want.size(); ++r) {
    std::vector<float> got = deviceOutputs[r].download();
    got.erase(got.begin(), got.begin() + offset);
    err = std::max(err, relativeError(got, want[r]));
  }
  return err;
}

/// runAgainstCpu for a kernel of bf16 operands and results: the inputs are
/// bf16 values, and each result must be the CPU interpreter's fp32 result
/// rounded once to bf16 (within a last-bit difference of the fp32 math).
double runAgainstCpuBf16(cudaKernel_t kernel, const plan::FusedBody &body,
                         int64_t n, std::mt19937 &rng) {
  std::vector<std::vector<float>> inputs;
  std::vector<DeviceArray<uint16_t>> deviceInputs, deviceOutputs;
  std::vector<const void *> in;
  std::vector<void *> out;
  for (int i = 0; i < body.numInputs; ++i) {
    std::vector<float> values = randomVector(n, rng);
    std::vector<uint16_t> bits(values.size());
    for (size_t e = 0; e < values.size(); ++e) {
      bits[e] = floatToBf16Bits(values[e]);
      values[e] = bf16BitsToFloat(bits[e]);
    }
    inputs.push_back(std::move(values));
    deviceInputs.emplace_back(bits);
    in.push_back(deviceInputs.back().get());
  }
  for (size_t r = 0; r < body.yields.size(); ++r) {
    deviceOutputs.push_back(DeviceArray<uint16_t>::poisoned(n));
    out.push_back(deviceOutputs.back().get());
  }
  EXPECT_EQ(cuda::launchGeneratedKernel(kernel, in, out, n, nullptr),
            cudaSuccess);
  std::vector<std::vector<float>> want = interpret(body, inputs, n);
  double err = 0.0;
  for (size_t r = 0; r < want.size(); ++r) {
    std::vector<uint16_t> bits = deviceOutputs[r].download();
    std::vector<float> got(bits.size());
    for (size_t e = 0; e < bits.size(); ++e) {
      got[e] = bf16BitsToFloat(bits[e]);
      want[r][e] = roundToBf16(want[r][e]);
    }
    err = std::max(err, relativeError(got, want[r]));
  }
  return err;
}

/// A `fused` step of `body` (its operands and results numbered from 0).
plan::Step stepOf(const plan::FusedBody &body) {
  plan::Step step;
  step.op = "fused";
  for (int i = 0; i < body.numInputs; ++i)
    step.operands.push_back(i);
  for (size_t r = 0; r < body.yields.size(); ++r)
    step.results.push_back(body.numInputs + static_cast<int>(r));
  plan::setFusedBody(body, step);
  return step;
}

plan::FusedBody randomBody(std::mt19937 &rng) {
  plan::FusedBody body;
  body.numInputs = std::uniform_int_distribution<int>(1, 10)(rng);
  const int instructions = std::uniform_int_distribution<int>(1, 12)(rng);
  for (int k = 0; k < instructions; ++k) {
    plan::FusedInstruction instr;
    instr.op = static_cast<plan::ElementwiseOp>(
        std::uniform_int_distribution<int>(0, 4)(rng));
    std::uniform_int_distribution<int> reg(0, body.numRegisters() - 1);
    for (int a = 0; a < plan::elementwiseArity(instr.op); ++a)
      instr.args.push_back(reg(rng));
    body.instructions.push_back(std::move(instr));
  }
  const int results = std::uniform_int_distribution<int>(1, 5)(rng);
  std::uniform_int_distribution<int> reg(body.numInputs,
                                         body.numRegisters() - 1);
  for (int r = 0; r < results; ++r)
    body.yields.push_back(reg(rng));
  return body;
}

/// Mean microseconds of `launch` over 20 runs after 3 warm-ups.
template <typename F> double timeLaunches(F launch) {
  for (int i = 0; i < 3; ++i)
    launch();
  cudaEvent_t start, stop;
  EXPECT_EQ(cudaEventCreate(&start), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&stop), cudaSuccess);
  constexpr int kRuns = 20;
  EXPECT_EQ(cudaEventRecord(start), cudaSuccess);
  for (int i = 0; i < kRuns; ++i)
    launch();
  EXPECT_EQ(cudaEventRecord(stop), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  float ms = 0.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0 * ms / kRuns;
}

/// The interpreter kernel's program of `body` (CudaBackend::prepareStep).
cuda::FusedProgram interpreterProgram(const plan::FusedBody &body) {
  cuda::FusedProgram p;
  p.numInputs = body.numInputs;
  p.numInstructions = static_cast<int>(body.instructions.size());
  p.numOutputs = static_cast<int>(body.yields.size());
  for (int i = 0; i < p.numInstructions; ++i) {
    const plan::FusedInstruction &instr = body.instructions[i];
    p.op[i] = static_cast<cuda::FusedOp>(static_cast<int>(instr.op));
    p.arg0[i] = static_cast<int8_t>(instr.args[0]);
    p.arg1[i] = static_cast<int8_t>(instr.args.back());
  }
  for (int r = 0; r < p.numOutputs; ++r)
    p.yields[r] = static_cast<int8_t>(body.yields[r]);
  return p;
}

class GeneratedKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "generated-kernel tests need a GPU: " << why;
  }
};

TEST_F(GeneratedKernelsTest, BodiesMatchTheCpuInterpreter) {
  std::string why;
  if (!compiler::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  std::mt19937 rng(1234);
  std::vector<plan::FusedBody> bodies;
  // Every op once, a silu*mul chain, gelu*up+residual, two results.
  for (const char *text :
       {"add(0, 1)", "mul(0, 1)", "silu(0)", "gelu_tanh(0)", "gelu(0)",
        "silu_mul(0, 1)", "silu_mul(0, 1); mul(2, 1)",
        "gelu_tanh(0); mul(2, 1); add(3, 1)",
        "silu(0); add(2, 1); silu_mul(3, 2)"}) {
    plan::Step step;
    step.op = "fused";
    step.operands = {0, 1};
    step.attrs["body"] = std::string(text);
    step.attrs["yields"] = std::vector<int64_t>{
        2 + static_cast<int64_t>(std::count(text, text + strlen(text), ';'))};
    step.results = {2};
    StatusOr<plan::FusedBody> body = plan::getFusedBody(step);
    ASSERT_TRUE(body.isOk()) << body.status().message();
    bodies.push_back(*body);
  }
  bodies.back().yields.push_back(2);
  for (int i = 0; i < 24; ++i)
    bodies.push_back(randomBody(rng));

  plan::Plan plan;
  plan.ranks.resize(1);
  for (const plan::FusedBody &body : bodies)
    plan.ranks[0].steps.push_back(stepOf(body));
  // The steps' operands and results are f32 values: the emitter gives each
  // kernel parameter its value's dtype.
  int numValues = 0;
  for (const plan::Step &step : plan.ranks[0].steps)
    for (const std::vector<int> *ids : {&step.operands, &step.results})
      for (int id : *ids)
        numValues = std::max(numValues, id + 1);
  for (int id = 0; id < numValues; ++id) {
    plan::Value value;
    value.id = id;
    value.dtype = plan::DType::kF32;
    plan.ranks[0].values.push_back(value);
  }
  StatusOr<std::vector<FusedKernel>> kernels =
      compiler::assignFusedKernels(plan);
  ASSERT_TRUE(kernels.isOk()) << kernels.status().message();
  StatusOr<compiler::CudaBinaries> binaries = compiler::compileCuda(
      compiler::emitCudaUnit(*kernels), "fused.cu", "sm_90a", "compute_90");
  ASSERT_TRUE(binaries.isOk()) << binaries.status().message();
  std::vector<std::string> names;
  for (const FusedKernel &k : *kernels)
    names.push_back(k.name);

  cuda::KernelImages cubinOnly, ptxOnly;
  cubinOnly.cubins["sm_90a"] = binaries->cubin;
  ptxOnly.ptx = binaries->ptx;
  ptxOnly.ptxArch = "compute_90";
  for (const cuda::KernelImages *images : {&cubinOnly, &ptxOnly}) {
    std::unique_ptr<cuda::GeneratedKernels> loaded =
        cuda::GeneratedKernels::load(*images, names, 0, &why);
    if (!loaded && images == &cubinOnly) {
      std::cout << "[ kernel   ] cubin sm_90a does not fit this GPU: " << why
                << "\n";
      continue;
    }
    ASSERT_TRUE(loaded) << why;
    double worst = 0.0;
    for (const FusedKernel &k : *kernels) {
      cudaKernel_t kernel = loaded->kernel(k.name);
      ASSERT_NE(kernel, nullptr) << k.name;
      // float4 path, scalar tail sizes, a misaligned start (scalar path).
      for (auto [n, offset] :
           std::initializer_list<std::pair<int64_t, int64_t>>{
               {1, 0}, {3, 0}, {4096, 0}, {1001, 0}, {4096, 1}}) {
        const double err = runAgainstCpu(kernel, k.body, n, offset, rng);
        EXPECT_LT(err, kTolerance) << k.name << " (" << k.users[0]
                                   << ") n=" << n << " offset=" << offset;
        worst = std::max(worst, err);
      }
    }
    std::cout << "[ kernel   ] generated fused kernels from "
              << loaded->origin() << ": " << kernels->size()
              << " bodies x 5 sizes, max rel err vs cpu " << worst << "\n";

    // gelu(x0) * x1 + x1 over 16M elements (two arrays read, one written):
    // the generated kernel against the interpreter kernel, same outputs.
    const FusedKernel &chain = (*kernels)[6];
    ASSERT_EQ(chain.body.numInputs, 2);
    const int64_t n = int64_t(1) << 24;
    DeviceArray<float> a(randomVector(n, rng)), b(randomVector(n, rng));
    DeviceArray<float> generatedOut = DeviceArray<float>::poisoned(n);
    DeviceArray<float> interpretedOut = DeviceArray<float>::poisoned(n);
    cudaKernel_t kernel = loaded->kernel(chain.name);
    cuda::FusedProgram program = interpreterProgram(chain.body);
    program.inputs[0] = a.get();
    program.inputs[1] = b.get();
    program.outputs[0] = interpretedOut.get();
    const double generatedUs = timeLaunches([&] {
      cuda::launchGeneratedKernel(kernel, {a.get(), b.get()},
                                  {generatedOut.get()}, n, nullptr);
    });
    const double interpretedUs =
        timeLaunches([&] { cuda::launchFused(program, n, nullptr); });
    EXPECT_LT(relativeError(generatedOut.download(), interpretedOut.download()),
              kTolerance);
    const double bytes = 3.0 * n * sizeof(float);
    std::cout << "[ kernel   ] " << chain.name << " (" << loaded->origin()
              << ") gelu(x0)*x1+x1 n=16M: generated " << generatedUs << " us ("
              << bytes / generatedUs / 1e3 << " GB/s), interpreter "
              << interpretedUs << " us (" << bytes / interpretedUs / 1e3
              << " GB/s)\n";
  }
}

TEST_F(GeneratedKernelsTest, MissingKernelsOrForeignArchitecturesFallBack) {
  cuda::KernelImages foreign;
  foreign.cubins["sm_50"] = "not a cubin";
  foreign.ptx = "not ptx";
  foreign.ptxArch = "compute_200";
  std::string why;
  EXPECT_EQ(cuda::GeneratedKernels::load(foreign, {"fused_0"}, 0, &why),
            nullptr);
  EXPECT_NE(why.find("cubin sm_50: not for compute capability"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("ptx compute_200: not for"), std::string::npos) << why;
}

/// Every artifact directory under INFER_CUDA_ARTIFACTS with kernels/.
std::vector<std::string> artifactsWithKernels() {
  std::vector<std::string> dirs;
  const char *root = std::getenv("INFER_CUDA_ARTIFACTS");
  if (!root || !fs::is_directory(root))
    return dirs;
  for (const auto &entry : fs::directory_iterator(root))
    if (fs::exists(entry.path() / "kernels"))
      dirs.push_back(entry.path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

TEST_F(GeneratedKernelsTest, ArtifactFusedStepsMatchTheCpuInterpreter) {
  std::vector<std::string> dirs = artifactsWithKernels();
  if (dirs.empty())
    GTEST_SKIP() << "INFER_CUDA_ARTIFACTS names no artifact with kernels/";
  std::mt19937 rng(7);
  int checkedSteps = 0;
  for (const std::string &dir : dirs) {
    StatusOr<Artifact> artifact = loadArtifact(dir);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    StatusOr<cuda::KernelImages> images =
        cuda::readKernelImages(dir, artifact->manifest.kernels);
    ASSERT_TRUE(images.isOk()) << images.status().message();
    // (kernel, body, whether its values are bf16: else f32).
    std::vector<std::tuple<std::string, plan::FusedBody, bool>> steps;
    std::vector<std::string> names;
    for (const plan::RankPlan &rank : artifact->plan.ranks)
      for (const plan::Step &step : rank.steps) {
        if (step.op != "fused")
          continue;
        StatusOr<plan::FusedBody> body = plan::getFusedBody(step);
        ASSERT_TRUE(body.isOk()) << body.status().message();
        const std::string kernel = step.getString("kernel", "");
        ASSERT_FALSE(kernel.empty()) << dir << ": a fused step without kernel";
        const plan::DType dtype = rank.values[step.results[0]].dtype;
        ASSERT_TRUE(dtype == plan::DType::kBF16 || dtype == plan::DType::kF32)
            << dir << ": a fused step of " << plan::dtypeName(dtype);
        steps.emplace_back(kernel, *body, dtype == plan::DType::kBF16);
        names.push_back(kernel);
      }
    std::string why;
    std::unique_ptr<cuda::GeneratedKernels> loaded =
        cuda::GeneratedKernels::load(*images, names, 0, &why);
    ASSERT_TRUE(loaded) << dir << ": " << why;
    double worst = 0.0;
    for (const auto &[name, body, bf16] : steps) {
      const int64_t hidden = artifact->manifest.model.hiddenSize;
      // bf16: a last-bit difference of the fp32 math may round the other
      // way, 2^-8 of that element at most.
      const double err =
          bf16 ? runAgainstCpuBf16(loaded->kernel(name), body, 5 * hidden, rng)
               : runAgainstCpu(loaded->kernel(name), body, 5 * hidden, 0, rng);
      EXPECT_LT(err, bf16 ? kBf16Tolerance : kTolerance) << dir << " " << name;
      worst = std::max(worst, err);
      ++checkedSteps;
    }
    std::cout << "[ kernel   ] " << fs::path(dir).filename().string() << ": "
              << steps.size() << " fused steps via " << loaded->origin()
              << ", max rel err vs cpu " << worst << "\n";
  }
  std::cout << "[ kernel   ] " << checkedSteps
            << " artifact fused steps checked\n";
}

double logitsError(const Logits &got, const Logits &want) {
  double scale = 0.0, err = 0.0;
  for (float w : want.data)
    scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.data.size(); ++i)
    err = std::max(err, std::fabs(double(got.data[i]) - want.data[i]));
  return err / scale;
}

TEST_F(GeneratedKernelsTest, GeluModelRunsGeneratedKernelsEndToEnd) {
  const char *root = std::getenv("INFER_CUDA_ARTIFACTS");
  const std::string dir = root ? std::string(root) + "/llama-gqa-gelu" : "";
  const std::string weights =
      std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (dir.empty() || !fs::is_directory(dir) || !fs::is_directory(weights))
    GTEST_SKIP() << "needs INFER_CUDA_ARTIFACTS/llama-gqa-gelu (gpu_check.sh)";
  StatusOr<Artifact> artifact = loadArtifact(dir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  StatusOr<ParamTable> params = loadParams(*artifact, 0, weights);
  ASSERT_TRUE(params.isOk()) << params.status().message();
  const int64_t blockSize = artifact->plan.kvCache.blockSize;

  cpu::CpuBackendOptions cpuOptions;
  cpuOptions.numBlocks = 8;
  auto cpu = cpu::createCpuBackend(artifact->plan, 0, *params, cpuOptions);
  ASSERT_TRUE(cpu.isOk()) << cpu.status().message();
  auto gpuBackend = [&](bool graphs) {
    cuda::CudaBackendOptions options;
    options.numBlocks = 8;
    options.maxGraphTokens = graphs ? 64 : 0;
    StatusOr<cuda::KernelImages> images =
        cuda::readKernelImages(dir, artifact->manifest.kernels);
    EXPECT_TRUE(images.isOk()) << images.status().message();
    if (images.isOk())
      options.kernels = std::move(*images);
    auto b = cuda::createCudaBackend(artifact->plan, 0, *params, options);
    EXPECT_TRUE(b.isOk()) << b.status().message();
    return b.isOk() ? std::move(b).value() : nullptr;
  };
  std::unique_ptr<Backend> graphs = gpuBackend(true), eager = gpuBackend(false);
  ASSERT_TRUE(graphs && eager);
  const std::string report = cuda::fusedKernelsReport(*graphs);
  std::cout << "[ fixture  ] llama-gqa-gelu: " << report << "\n";
  EXPECT_EQ(report.find("0 of"), std::string::npos) << report;
  EXPECT_NE(report.find("fused steps run generated kernels (cubin sm_90a)"),
            std::string::npos)
      << report;

  std::vector<int32_t> tokens = {348, 185, 398, 23, 72, 5, 9};
  double promptErr = 0.0, decodeErr = 0.0, graphDiff = 0.0;
  for (int step = 0; step < 6; ++step) {
    const int64_t cached = step == 0 ? 0 : tokens.size() - 1;
    Batch batch =
        oneSequenceBatch(tokens, cached, blockSize, 0, /*allLogits=*/true);
    StatusOr<Logits> want = (*cpu)->forward(batch);
    StatusOr<Logits> got = graphs->forward(batch);
    StatusOr<Logits> same = eager->forward(batch);
    ASSERT_TRUE(want.isOk() && got.isOk() && same.isOk());
    (step == 0 ? promptErr : decodeErr) =
        std::max(step == 0 ? promptErr : decodeErr, logitsError(*got, *want));
    graphDiff = std::max(graphDiff, logitsError(*got, *same));
    const float *last = want->row(want->rows - 1);
    tokens.push_back(static_cast<int32_t>(
        std::max_element(last, last + want->vocab) - last));
  }
  // bf16 weights and GEMM operands (FixturesTest.cpp: 5e-2 of max |logit|).
  EXPECT_LT(promptErr, 5e-2);
  EXPECT_LT(decodeErr, 5e-2);
  EXPECT_EQ(graphDiff, 0.0) << "graph replays differ from eager runs";
  std::cout << "[ fixture  ] llama-gqa-gelu generated kernels: prompt rel err "
            << promptErr << ", decode " << decodeErr << ", graph vs eager "
            << graphDiff << "\n";
}

} // namespace
} // namespace infer::testing
