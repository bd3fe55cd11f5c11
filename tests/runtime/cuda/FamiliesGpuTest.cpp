//===- FamiliesGpuTest.cpp - The model-family fixtures on the CUDA backend ===//
//
// The Qwen3, Gemma 2/3 and Phi-3 fixtures and the rope / activation variants
// (tests/fixtures/families) have no hand-built plan: the compiler is what
// knows them. Each runs from the artifact `infer compile --target cuda` made
// of it (INFER_CUDA_ARTIFACTS/NAME, listed in artifacts.txt; the test skips
// without one) and is checked as FixturesTest checks the Llama-family
// fixtures:
//
// - against the CPU backend running the same bf16 plan (kGpuCpuTol, max
//   |gpu - cpu| / max |cpu| of the logits);
// - against Hugging Face by DESIGN.md's bf16 rule: the RMS error of the
//   logits against HF fp32 no larger than HF's own bf16 run's
//   (tests/fixtures/bf16/NAME), the max error within kBf16MaxFactor of HF's;
// - decode steps (prefill, then one token at a time, past Gemma's sliding
//   window of 8) against the CPU backend fed the same tokens: kGpuCpuTol,
//   or kDecodeShareOfBf16 of HF's own bf16 error where that is larger. Over
//   24 steps the two caches collect different bf16 rounding flips, and how
//   far a flip carries is the model's: the Gemma 2 fixture (std-0.2
//   weights, sqrt(hidden)-scaled embeddings, soft-caps) turns HF's own bf16
//   rounding into 0.33 of its largest logit (its CPU bf16 plan: 0.26 of the
//   fp32 plan's over 57 positions), 4 to 25 times the other fixtures', and
//   its decode steps differ by 0.025 (the prompt logits: 0.008), where the
//   attention kernel it runs (head_dim 32: the fp32 kernel) is within 1e-6
//   of the CPU's on its shapes
//   (CudaKernelsTest.PagedAttentionSoftcapOnTheFp32Kernel).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

/// As FixturesTest: max |gpu - cpu| / max |cpu| of one bf16 plan's logits.
constexpr double kGpuCpuTol = 2e-2;
/// How far above HF's own bf16 max logit error the GPU's may be.
constexpr double kBf16MaxFactor = 2.0;
/// The share of HF's own bf16 max logit error that decode steps may differ
/// from the CPU's by, where it is above kGpuCpuTol.
constexpr double kDecodeShareOfBf16 = 0.25;

/// RMS of the differences over RMS of the reference, and max |diff| over
/// max |ref|, pooled over several arrays.
class ErrorStats {
public:
  void add(const float *actual, const float *expected, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(actual[i]) - expected[i];
      sumDiff2_ += d * d;
      sumRef2_ += static_cast<double>(expected[i]) * expected[i];
      maxDiff_ = std::max(maxDiff_, std::fabs(d));
      maxRef_ = std::max(maxRef_, std::fabs(static_cast<double>(expected[i])));
    }
  }
  double rms() const { return std::sqrt(sumDiff2_ / sumRef2_); }
  double max() const { return maxDiff_ / maxRef_; }

private:
  double sumDiff2_ = 0, sumRef2_ = 0, maxDiff_ = 0, maxRef_ = 0;
};

std::vector<float>
readReference(const std::pair<std::string, std::string> &ref) {
  auto file = safetensors::File::open(ref.first);
  EXPECT_TRUE(file.isOk()) << file.status().message();
  if (!file.isOk())
    return {};
  StatusOr<std::vector<float>> values = (*file)->readAsF32(ref.second);
  EXPECT_TRUE(values.isOk()) << values.status().message();
  return values.isOk() ? std::move(values).value() : std::vector<float>();
}

class CudaFamiliesTest : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA family tests need a GPU: " << why;
    for (FixtureCase &c : loadFamilyCases(INFER_PROJECT_FIXTURES_DIR))
      if (c.name == GetParam())
        case_ = c;
    if (case_.name.empty())
      GTEST_SKIP() << "fixture " << GetParam() << " not found";
    const char *compiled = std::getenv("INFER_CUDA_ARTIFACTS");
    const std::string dir =
        compiled ? std::string(compiled) + "/" + case_.name : "";
    if (dir.empty() || !fs::is_directory(dir))
      GTEST_SKIP() << "INFER_CUDA_ARTIFACTS has no artifact of " << case_.name
                   << " (tests/runtime/cuda/gpu_check.sh prepare makes it)";
    StatusOr<Artifact> artifact = loadArtifact(dir);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(artifact).value();
    StatusOr<ParamTable> params = loadParams(artifact_, 0, case_.modelDir);
    ASSERT_TRUE(params.isOk()) << params.status().message();
    params_ = std::move(params).value();
    blockSize_ = artifact_.plan.kvCache.blockSize;
  }

  StatusOr<std::unique_ptr<Backend>> gpuBackend(int64_t blocks) {
    cuda::CudaBackendOptions options;
    options.numBlocks = blocks;
    INFER_ASSIGN_OR_RETURN(
        options.kernels,
        cuda::readKernelImages(artifact_.dir, artifact_.manifest.kernels));
    return cuda::createCudaBackend(artifact_.plan, 0, params_, options);
  }
  std::unique_ptr<Backend> cpuBackend(int64_t blocks) {
    cpu::CpuBackendOptions options;
    options.numBlocks = blocks;
    auto b = cpu::createCpuBackend(artifact_.plan, 0, params_, options);
    EXPECT_TRUE(b.isOk()) << b.status().message();
    return b.isOk() ? std::move(b).value() : nullptr;
  }
  int64_t blocksFor(int64_t tokens) const {
    return (tokens + blockSize_ - 1) / blockSize_;
  }
  Logits promptLogits(Backend &backend, const std::vector<int32_t> &tokens) {
    StatusOr<Logits> l = backend.forward(oneSequenceBatch(
        tokens, 0, blockSize_, blocksFor(tokens.size()), /*allLogits=*/true));
    EXPECT_TRUE(l.isOk()) << l.status().message();
    return l.isOk() ? std::move(l).value() : Logits();
  }
  FixtureCase case_;
  Artifact artifact_;
  ParamTable params_;
  int64_t blockSize_ = 16;
};

TEST_P(CudaFamiliesTest, LogitsFollowTheCpuAndTransformersInBf16) {
  ErrorStats gpu, hfBf16, cpu;
  for (size_t k = 0; k < case_.inputs.size(); ++k) {
    const std::vector<int32_t> &input = case_.inputs[k];
    StatusOr<std::unique_ptr<Backend>> g = gpuBackend(blocksFor(input.size()));
    ASSERT_TRUE(g.isOk()) << g.status().message();
    std::unique_ptr<Backend> c = cpuBackend(blocksFor(input.size()));
    ASSERT_TRUE(c);
    Logits got = promptLogits(**g, input), ref = promptLogits(*c, input);
    const std::vector<float> hf = readReference(case_.logits[k]);
    const int64_t n = got.rows * got.vocab;
    ASSERT_EQ(static_cast<int64_t>(hf.size()), n);
    ASSERT_EQ(static_cast<int64_t>(ref.data.size()), n);
    gpu.add(got.data.data(), hf.data(), n);
    cpu.add(got.data.data(), ref.data.data(), n);
    if (!case_.bf16Logits.empty()) {
      const std::vector<float> own = readReference(case_.bf16Logits[k]);
      ASSERT_EQ(static_cast<int64_t>(own.size()), n);
      hfBf16.add(own.data(), hf.data(), n);
    }
  }
  std::cout << "[ family   ] " << case_.name << " bf16 logits: vs CPU bf16 "
            << cpu.max() << " max; vs HF fp32 rms " << gpu.rms() << " max "
            << gpu.max();
  if (!case_.bf16Logits.empty())
    std::cout << " (HF's own bf16 run: rms " << hfBf16.rms() << " max "
              << hfBf16.max() << ")";
  std::cout << "\n";
  EXPECT_LT(cpu.max(), kGpuCpuTol) << case_.name;
  if (case_.bf16Logits.empty())
    return;
  EXPECT_LE(gpu.rms(), hfBf16.rms()) << case_.name;
  EXPECT_LE(gpu.max(), kBf16MaxFactor * hfBf16.max()) << case_.name;
}

TEST_P(CudaFamiliesTest, DecodeStepsFollowTheCpu) {
  // Both backends take the GPU's greedy token at every step, so they see the
  // same sequence however close a choice is.
  constexpr int64_t kSteps = 24;
  ErrorStats cpu, hfBf16;
  for (size_t k = 0; k < case_.bf16Logits.size(); ++k) {
    const std::vector<float> hf = readReference(case_.logits[k]);
    const std::vector<float> own = readReference(case_.bf16Logits[k]);
    ASSERT_EQ(hf.size(), own.size());
    hfBf16.add(own.data(), hf.data(), static_cast<int64_t>(hf.size()));
  }
  const double tol =
      case_.bf16Logits.empty()
          ? kGpuCpuTol
          : std::max(kGpuCpuTol, kDecodeShareOfBf16 * hfBf16.max());
  for (const std::vector<int32_t> &prompt : case_.inputs) {
    const int64_t maxBlocks = blocksFor(prompt.size() + kSteps);
    StatusOr<std::unique_ptr<Backend>> g = gpuBackend(maxBlocks);
    ASSERT_TRUE(g.isOk()) << g.status().message();
    std::unique_ptr<Backend> c = cpuBackend(maxBlocks);
    ASSERT_TRUE(c);
    std::vector<int32_t> tokens = prompt;
    int64_t cached = 0;
    for (int64_t step = 0; step < kSteps; ++step) {
      const Batch batch =
          oneSequenceBatch(tokens, cached, blockSize_, maxBlocks, false);
      StatusOr<Logits> got = (*g)->forward(batch);
      ASSERT_TRUE(got.isOk()) << got.status().message();
      StatusOr<Logits> ref = c->forward(batch);
      ASSERT_TRUE(ref.isOk()) << ref.status().message();
      ASSERT_EQ(got->data.size(), ref->data.size());
      cpu.add(got->data.data(), ref->data.data(),
              static_cast<int64_t>(got->data.size()));
      cached = static_cast<int64_t>(tokens.size());
      tokens.push_back(static_cast<int32_t>(
          std::max_element(got->data.begin(), got->data.end()) -
          got->data.begin()));
    }
  }
  std::cout << "[ family   ] " << case_.name << " decode steps: vs CPU bf16 "
            << cpu.max() << " max (bound " << tol << ")\n";
  EXPECT_LT(cpu.max(), tol) << case_.name;
}

std::vector<std::string> familyNames() {
  std::vector<std::string> names;
  for (const FixtureCase &c : loadFamilyCases(INFER_PROJECT_FIXTURES_DIR))
    names.push_back(c.name);
  if (names.empty())
    names.push_back("missing");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Families, CudaFamiliesTest,
                         ::testing::ValuesIn(familyNames()),
                         [](const auto &info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

} // namespace
} // namespace infer::testing
