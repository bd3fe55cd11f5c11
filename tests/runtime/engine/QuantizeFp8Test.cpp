//===- QuantizeFp8Test.cpp - FP8 E4M3 weights quantized at load -----------===//
//
// The `quantize_fp8_e4m3` weight transform on its own (scales, rounding,
// diagnostics) and on tiny-pycode-target: every linear and logits weight in
// FP8 E4M3, run on the CPU backend against the golden fp32 logits, with
// greedy tokens checked by DESIGN.md's top-5 rule.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
const std::string kTarget =
    std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
const std::string kGolden =
    std::string(INFER_FIXTURES_DIR) + "/golden/tiny-pycode.json";

/// Adds the transform to every param read as a linear or logits weight.
void quantizeWeights(Artifact &artifact, const std::string &granularity) {
  for (plan::RankPlan &rank : artifact.plan.ranks) {
    std::vector<bool> isWeight(rank.values.size());
    for (const plan::Step &step : rank.steps)
      if (step.op == "linear" || step.op == "logits")
        isWeight[step.operands[1]] = true;
    for (plan::Value &v : rank.values)
      if (isWeight[v.id])
        v.transforms.push_back(
            {"quantize_fp8_e4m3", {{"granularity", granularity}}});
  }
}

/// The id of the first linear step's weight.
int firstLinearWeight(const Artifact &artifact) {
  for (const plan::Step &step : artifact.plan.ranks[0].steps)
    if (step.op == "linear")
      return step.operands[1];
  return -1;
}

float expectedFp8(float x, float scale) {
  return decodeFp8(encodeFp8(x / scale, Fp8Format::kE4M3), Fp8Format::kE4M3) *
         scale;
}

class QuantizeFp8Transform : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    StatusOr<Artifact> a = buildLlamaArtifact(kGqa);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    weight_ = firstLinearWeight(artifact_);
    ASSERT_GE(weight_, 0);
    StatusOr<ParamTable> p = loadParams(artifact_, 0, kGqa);
    ASSERT_TRUE(p.isOk()) << p.status().message();
    original_ = p->at(weight_);
  }

  std::shared_ptr<const HostTensor> loadQuantized(const std::string &g) {
    Artifact a = artifact_;
    quantizeWeights(a, g);
    StatusOr<ParamTable> p = loadParams(a, 0, kGqa);
    EXPECT_TRUE(p.isOk()) << p.status().message();
    return p.isOk() ? p->at(weight_) : nullptr;
  }

  Artifact artifact_;
  int weight_ = -1;
  std::shared_ptr<const HostTensor> original_;
};

TEST_F(QuantizeFp8Transform, PerTensorScaleIsAmaxOver448) {
  std::shared_ptr<const HostTensor> q = loadQuantized("per-tensor");
  ASSERT_TRUE(q);
  ASSERT_EQ(q->shape, original_->shape);
  float amax = 0;
  for (float x : original_->data)
    amax = std::max(amax, std::fabs(x));
  const float scale = amax / kFp8E4M3Max;
  for (size_t i = 0; i < q->data.size(); ++i)
    ASSERT_EQ(q->data[i], expectedFp8(original_->data[i], scale)) << i;
  // The largest weight is kept (up to the scale's rounding); at most 256
  // distinct values remain.
  float qmax = 0;
  for (float x : q->data)
    qmax = std::max(qmax, std::fabs(x));
  EXPECT_NEAR(qmax, amax, amax * 1e-6);
  std::vector<float> distinct = q->data;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_LE(distinct.size(), 256u);
}

TEST_F(QuantizeFp8Transform, PerChannelScalesEachOutputRow) {
  std::shared_ptr<const HostTensor> q = loadQuantized("per-channel");
  ASSERT_TRUE(q);
  ASSERT_EQ(q->shape.size(), 2u);
  const int64_t rows = q->shape[0], cols = q->shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = original_->data.data() + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c)
      amax = std::max(amax, std::fabs(in[c]));
    const float scale = amax / kFp8E4M3Max;
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(q->data[r * cols + c], expectedFp8(in[c], scale))
          << "row " << r << " col " << c;
  }
}

TEST_F(QuantizeFp8Transform, RejectsBadGranularity) {
  Artifact a = artifact_;
  quantizeWeights(a, "per-block");
  StatusOr<ParamTable> p = loadParams(a, 0, kGqa);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("unknown granularity 'per-block'"),
            std::string::npos)
      << p.status().message();

  a = artifact_;
  a.plan.ranks[0].values[weight_].transforms.push_back(
      {"quantize_fp8_e4m3", {{"granularity", int64_t(1)}}});
  p = loadParams(a, 0, kGqa);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("string 'granularity'"),
            std::string::npos)
      << p.status().message();
}

/// Indices of the `k` largest logits of a row, largest first.
std::vector<int32_t> topK(const float *row, int64_t vocab, int k) {
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  idx.resize(k);
  return idx;
}

class QuantizeFp8Numerics : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizeFp8Numerics, TinyPycodeFollowsTopFiveRule) {
  if (!fs::exists(kGolden) || !fs::exists(kTarget + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixtures missing";
  std::ifstream in(kGolden);
  nlohmann::json cases = nlohmann::json::parse(in)["tiny-pycode-target"];

  StatusOr<Artifact> fp32 = buildLlamaArtifact(kTarget);
  ASSERT_TRUE(fp32.isOk()) << fp32.status().message();
  Artifact fp8 = *fp32;
  quantizeWeights(fp8, GetParam());
  EngineConfig config = engineConfigFor(fp8);

  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string ref = std::string(INFER_FIXTURES_DIR) +
                            "/golden/tiny-pycode-target-logits-" +
                            std::to_string(k) + ".safetensors";
    if (!fs::exists(ref))
      continue;
    const auto input = cases[k]["input_ids"].get<std::vector<int32_t>>();
    const auto golden = cases[k]["greedy_fp32"].get<std::vector<int32_t>>();

    // Prompt logits against the golden fp32 (transformers) logits.
    StatusOr<std::unique_ptr<Backend>> b = createTestBackend(fp8, 64);
    ASSERT_TRUE(b.isOk()) << b.status().message();
    StatusOr<Logits> logits = promptLogits(**b, config.blockSize, input);
    ASSERT_TRUE(logits.isOk()) << logits.status().message();
    auto file = safetensors::File::open(ref);
    ASSERT_TRUE(file.isOk()) << file.status().message();
    StatusOr<std::vector<float>> expected = (*file)->readAsF32("logits");
    ASSERT_TRUE(expected.isOk()) << expected.status().message();
    const int64_t n = logits->rows * logits->vocab;
    ASSERT_EQ(static_cast<int64_t>(expected->size()), n);
    const double relErr =
        maxRelativeError(logits->data.data(), expected->data(), n);
    double maxAbsLogit = 0, absErr = 0;
    for (int64_t i = 0; i < n; ++i) {
      maxAbsLogit = std::max(maxAbsLogit, std::fabs((double)(*expected)[i]));
      absErr = std::max(
          absErr, std::fabs((double)logits->data[i] - (double)(*expected)[i]));
    }

    // Greedy fp8 tokens, judged against the fp32 model's logits at each
    // generated position (teacher-forced on the fp8 tokens): equal to the
    // fp32 argmax until its top-2 come within the fp8 logit error, in its
    // top-5 everywhere.
    PromptRequest request;
    request.promptTokenIds = input;
    request.sampling.maxNewTokens = static_cast<int64_t>(golden.size());
    request.sampling.ignoreEos = true;
    StatusOr<std::unique_ptr<Backend>> gen =
        createTestBackend(fp8, blocksForAll({request}, config));
    ASSERT_TRUE(gen.isOk()) << gen.status().message();
    StatusOr<std::vector<RequestOutput>> out =
        generate(**gen, config, {request});
    ASSERT_TRUE(out.isOk()) << out.status().message();
    std::vector<int32_t> tokens = (*out)[0].outputTokenIds;
    tokens.resize(std::min(tokens.size(), golden.size()));

    std::vector<int32_t> all = input;
    all.insert(all.end(), tokens.begin(), tokens.end());
    StatusOr<std::unique_ptr<Backend>> refBackend =
        createTestBackend(*fp32, blocksForAll({request}, config) + 1);
    ASSERT_TRUE(refBackend.isOk()) << refBackend.status().message();
    StatusOr<Logits> refLogits =
        promptLogits(**refBackend, config.blockSize, all);
    ASSERT_TRUE(refLogits.isOk()) << refLogits.status().message();
    bool diverged = false;
    size_t matching = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const float *row = refLogits->row(input.size() - 1 + i);
      std::vector<int32_t> top = topK(row, refLogits->vocab, 5);
      diverged = diverged || row[top[0]] - row[top[1]] <= absErr;
      if (!diverged)
        EXPECT_EQ(tokens[i], top[0]) << "input " << k << " token " << i;
      EXPECT_NE(std::find(top.begin(), top.end(), tokens[i]), top.end())
          << "input " << k << " token " << i << " not in the fp32 top-5";
      matching += tokens[i] == golden[i];
    }
    std::cout << "[ fp8      ] weights e4m3 " << GetParam() << " input " << k
              << ": max |logit err| / max |logit| " << relErr << " (max |err| "
              << absErr << ", max |logit| " << maxAbsLogit << "), greedy "
              << matching << "/" << tokens.size()
              << " tokens equal to fp32 golden\n";
    EXPECT_LT(relErr, 0.1) << "input " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Granularity, QuantizeFp8Numerics,
                         ::testing::Values("per-tensor", "per-channel"),
                         [](const ::testing::TestParamInfo<std::string> &i) {
                           return i.param == "per-tensor" ? "PerTensor"
                                                          : "PerChannel";
                         });

} // namespace
} // namespace infer::testing
