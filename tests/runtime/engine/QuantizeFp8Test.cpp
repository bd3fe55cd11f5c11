//===- QuantizeFp8Test.cpp - FP8 weights and KV cache
//----------------------===//
//
// The `quantize_fp8_e4m3` weight transform on its own (scales, rounding,
// diagnostics) and tiny-pycode-target with FP8 E4M3 linear and logits
// weights and/or an FP8 (E5M2, E4M3) KV cache, run on the CPU backend
// against the golden fp32 logits, with greedy tokens checked by DESIGN.md's
// top-5 rule.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/WeightFixtures.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
const std::string kTarget =
    std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
const std::string kGolden =
    std::string(INFER_FIXTURES_DIR) + "/golden/tiny-pycode.json";

/// The id of the first linear step's weight.
int firstLinearWeight(const Artifact &artifact) {
  for (const plan::Step &step : artifact.plan.ranks[0].steps)
    if (step.op == "linear")
      return step.operands[1];
  return -1;
}

/// decode(code) * scale of every element of an fp8 param.
std::vector<float> dequantize(const HostTensor &t) {
  const size_t cols = static_cast<size_t>(t.shape.back());
  std::vector<float> out(t.fp8Codes.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = decodeFp8(t.fp8Codes[i], Fp8Format::kE4M3) * t.rowScales[i / cols];
  return out;
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
  // One byte per element and a scale per row; no fp32 copy.
  EXPECT_TRUE(q->data.empty());
  ASSERT_EQ(q->fp8Codes.size(), original_->data.size());
  ASSERT_EQ(q->rowScales.size(), static_cast<size_t>(q->shape[0]));
  float amax = 0;
  for (float x : original_->data)
    amax = std::max(amax, std::fabs(x));
  const float scale = amax / kFp8E4M3Max;
  for (float rowScale : q->rowScales)
    ASSERT_EQ(rowScale, scale);
  const std::vector<float> values = dequantize(*q);
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(values[i], expectedFp8(original_->data[i], scale)) << i;
  // The largest weight is kept (up to the scale's rounding); at most 256
  // distinct values remain.
  float qmax = 0;
  for (float x : values)
    qmax = std::max(qmax, std::fabs(x));
  EXPECT_NEAR(qmax, amax, amax * 1e-6);
  std::vector<float> distinct = values;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_LE(distinct.size(), 256u);
}

TEST_F(QuantizeFp8Transform, PerChannelScalesEachOutputRow) {
  std::shared_ptr<const HostTensor> q = loadQuantized("per-channel");
  ASSERT_TRUE(q);
  ASSERT_EQ(q->shape.size(), 2u);
  const int64_t rows = q->shape[0], cols = q->shape[1];
  const std::vector<float> values = dequantize(*q);
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = original_->data.data() + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c)
      amax = std::max(amax, std::fabs(in[c]));
    const float scale = amax / kFp8E4M3Max;
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(values[r * cols + c], expectedFp8(in[c], scale))
          << "row " << r << " col " << c;
  }
}

TEST(QuantizeFp8Threads, LargeTensorsMatchARowByRowQuantization) {
  // 1024 x 4096 (4M elements) is quantized on several threads where the
  // machine has them; every code and scale must be what one pass gives.
  const int64_t rows = 1024, cols = 4096;
  HostTensor source;
  source.shape = {rows, cols};
  source.data.resize(static_cast<size_t>(rows * cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float &x : source.data)
    x = normal(rng);
  source.data[12345] = 0.75f; // one outlier sets the per-tensor scale
  for (int64_t c = 0; c < cols; ++c) // an all-zero row keeps scale 0
    source.data[static_cast<size_t>(5 * cols + c)] = 0.0f;
  for (const std::string granularity : {"per-tensor", "per-channel"}) {
    plan::WeightTransform transform;
    transform.kind = "quantize_fp8_e4m3";
    transform.attrs["granularity"] = granularity;
    if (granularity == "per-tensor")
      transform.attrs["parts"] = std::vector<int64_t>{512, 256, 256};
    HostTensor q = source;
    ASSERT_TRUE(applyQuantizeFp8(transform, q).isOk()) << granularity;
    ASSERT_EQ(q.fp8Codes.size(), source.data.size());
    ASSERT_EQ(q.rowScales.size(), static_cast<size_t>(rows));
    EXPECT_TRUE(q.data.empty());
    // The reference: each group's amax in one pass, then each element.
    const std::vector<int64_t> groups =
        granularity == "per-tensor" ? std::vector<int64_t>{512, 256, 256}
                                    : std::vector<int64_t>(rows, 1);
    int64_t row = 0;
    for (int64_t groupRows : groups) {
      float amax = 0.0f;
      for (int64_t i = row * cols; i < (row + groupRows) * cols; ++i)
        amax = std::max(amax, std::fabs(source.data[static_cast<size_t>(i)]));
      const float scale = amax / kFp8E4M3Max;
      for (int64_t r = row; r < row + groupRows; ++r) {
        ASSERT_EQ(q.rowScales[static_cast<size_t>(r)], scale)
            << granularity << " row " << r;
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          const uint8_t expected =
              scale == 0.0f
                  ? 0
                  : encodeFp8(source.data[i] / scale, Fp8Format::kE4M3);
          ASSERT_EQ(q.fp8Codes[i], expected)
              << granularity << " row " << r << " col " << c;
        }
      }
      row += groupRows;
    }
  }
  // A NaN anywhere is an error (not a scale that drops it).
  for (const float bad : {NAN, INFINITY}) {
    plan::WeightTransform transform;
    transform.kind = "quantize_fp8_e4m3";
    transform.attrs["granularity"] = std::string("per-tensor");
    HostTensor q = source;
    q.data[static_cast<size_t>(700 * cols + 3)] = bad;
    const Status status = applyQuantizeFp8(transform, q);
    EXPECT_FALSE(status.isOk()) << bad;
    EXPECT_NE(status.message().find("inf or NaN"), std::string::npos)
        << status.message();
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

TEST_F(QuantizeFp8Transform, PartsHaveTheirOwnScale) {
  // A q/k/v merge: per-tensor scales of each concatenated part.
  Artifact a = artifact_;
  plan::Value &v = a.plan.ranks[0].values[weight_];
  const int64_t rows = original_->shape[0], cols = original_->shape[1];
  const int64_t first = rows / 4;
  v.dtype = plan::DType::kF8E4M3;
  v.transforms.push_back(
      {"quantize_fp8_e4m3",
       {{"granularity", std::string("per-tensor")},
        {"parts", std::vector<int64_t>{first, rows - first}}}});
  StatusOr<ParamTable> p = loadParams(a, 0, kGqa);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  const HostTensor &q = *p->at(weight_);
  for (auto [begin, end] : {std::pair{int64_t(0), first}, {first, rows}}) {
    float amax = 0;
    for (int64_t i = begin * cols; i < end * cols; ++i)
      amax = std::max(amax, std::fabs(original_->data[i]));
    for (int64_t r = begin; r < end; ++r)
      ASSERT_EQ(q.rowScales[r], amax / kFp8E4M3Max) << "row " << r;
  }

  v.transforms.back().attrs["parts"] = std::vector<int64_t>{first, rows};
  p = loadParams(a, 0, kGqa);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("parts must be positive row counts"),
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

/// What is quantized: weights with a granularity ("" for none) and the KV
/// cache's dtype.
struct Fp8Config {
  const char *name;
  std::string weights;
  plan::DType kvCache;
};

class QuantizeFp8Numerics : public ::testing::TestWithParam<Fp8Config> {};

TEST_P(QuantizeFp8Numerics, TinyPycodeFollowsTopFiveRule) {
  if (!fs::exists(kGolden) || !fs::exists(kTarget + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixtures missing";
  std::ifstream in(kGolden);
  nlohmann::json cases = nlohmann::json::parse(in)["tiny-pycode-target"];

  StatusOr<Artifact> fp32 = buildLlamaArtifact(kTarget);
  ASSERT_TRUE(fp32.isOk()) << fp32.status().message();
  Artifact fp8 = *fp32;
  const Fp8Config &config8 = GetParam();
  if (!config8.weights.empty())
    quantizeWeights(fp8, config8.weights);
  fp8.plan.kvCache.dtype = config8.kvCache;
  fp8.manifest.kvCache.dtype = config8.kvCache;
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
    std::cout << "[ fp8      ] " << config8.name << " input " << k
              << ": max |logit err| / max |logit| " << relErr << " (max |err| "
              << absErr << ", max |logit| " << maxAbsLogit << "), greedy "
              << matching << "/" << tokens.size()
              << " tokens equal to fp32 golden\n";
    EXPECT_LT(relErr, 0.1) << "input " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fp8, QuantizeFp8Numerics,
    ::testing::Values(
        Fp8Config{"WeightsPerTensor", "per-tensor", plan::DType::kF32},
        Fp8Config{"WeightsPerChannel", "per-channel", plan::DType::kF32},
        Fp8Config{"KVCacheE5M2", "", plan::DType::kF8E5M2},
        Fp8Config{"KVCacheE4M3", "", plan::DType::kF8E4M3},
        Fp8Config{"WeightsPerChannelKVCacheE5M2", "per-channel",
                  plan::DType::kF8E5M2},
        Fp8Config{"WeightsPerChannelKVCacheE4M3", "per-channel",
                  plan::DType::kF8E4M3}),
    [](const ::testing::TestParamInfo<Fp8Config> &i) { return i.param.name; });

} // namespace
} // namespace infer::testing
