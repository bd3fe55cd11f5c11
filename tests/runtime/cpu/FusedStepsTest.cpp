//===- FusedStepsTest.cpp - the fused steps of infer-fuse vs references ---===//
//
// Hand-built plans run the steps infer-fuse produces (split, add_rms_norm,
// silu_mul, fused, linear_residual, linear_swiglu) on the CPU backend; naive
// loops compute the same thing.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/FusedBody.h"
#include "runtime/support/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

namespace infer::testing {
namespace {

constexpr int64_t kVocab = 6, kWidth = 8, kHalf = 4;

plan::Value makeValue(int id, plan::ValueKind kind, std::string name,
                      std::vector<plan::Dim> shape,
                      plan::DType dtype = plan::DType::kF32) {
  plan::Value v;
  v.id = id;
  v.kind = kind;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::move(shape);
  if (kind == plan::ValueKind::kParam) {
    v.sourceFile = "model.safetensors";
    v.sourceTensor = v.name;
  }
  return v;
}

std::shared_ptr<const HostTensor> makeParam(std::vector<int64_t> shape,
                                            float seed) {
  auto tensor = std::make_shared<HostTensor>();
  tensor->shape = shape;
  int64_t n = 1;
  for (int64_t size : shape)
    n *= size;
  for (int64_t i = 0; i < n; ++i)
    tensor->data.push_back(std::sin(seed + 0.37f * static_cast<float>(i)));
  return tensor;
}

/// x = embedding(table, ids); a, b = split(x); s, y = add_rms_norm(a, b, w);
/// g = silu_mul(s, y); r0, r1 = fused(g, a, y) { gelu_tanh(g) * a + y,
/// silu(that) }; out = add(r0, r1).
plan::Plan buildPlan() {
  using plan::Dim;
  using plan::ValueKind;
  const Dim t = Dim::dynamic("T");
  plan::RankPlan rank;
  rank.values = {
      makeValue(0, ValueKind::kInput, "token_ids", {t}, plan::DType::kI32),
      makeValue(1, ValueKind::kParam, "table",
                {Dim::fixed(kVocab), Dim::fixed(kWidth)}),
      makeValue(2, ValueKind::kParam, "norm", {Dim::fixed(kHalf)}),
  };
  for (int id = 3; id <= 12; ++id)
    rank.values.push_back(makeValue(id, ValueKind::kActivation,
                                    "%" + std::to_string(id),
                                    {t, Dim::fixed(id == 3 ? kWidth : kHalf)}));
  plan::Step split{"split", {3}, {4, 5}, {}};
  split.attrs["sizes"] = std::vector<int64_t>{kHalf, kHalf};
  plan::Step addNorm{"add_rms_norm", {4, 5, 2}, {6, 7}, {}};
  addNorm.attrs["epsilon"] = 1e-5;
  plan::Step fused{"fused", {8, 4, 7}, {9, 10}, {}};
  plan::FusedBody body;
  body.numInputs = 3;
  body.instructions = {{plan::ElementwiseOp::kGeluTanh, {0}},
                       {plan::ElementwiseOp::kMul, {3, 1}},
                       {plan::ElementwiseOp::kAdd, {4, 2}},
                       {plan::ElementwiseOp::kSilu, {5}}};
  body.yields = {5, 6};
  plan::setFusedBody(body, fused);
  rank.steps = {
      {"embedding", {1, 0}, {3}, {}}, split, addNorm,
      {"silu_mul", {6, 7}, {8}, {}},  fused, {"add", {9, 10}, {11}, {}},
  };
  rank.values.pop_back();
  rank.outputs = {11};
  plan::Plan p;
  p.kvCache.numLayers = 1;
  p.kvCache.numKVHeads = 1;
  p.kvCache.headDim = 4;
  p.kvCache.blockSize = 16;
  p.ranks.push_back(std::move(rank));
  return p;
}

float silu(float x) {
  return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
}

float geluTanh(float x) {
  const double v = x;
  return static_cast<float>(
      0.5 * v *
      (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
}

/// The plan of buildPlan computed row by row with plain loops.
std::vector<float> reference(const std::vector<int32_t> &ids,
                             const HostTensor &table, const HostTensor &w) {
  std::vector<float> out;
  for (int32_t id : ids) {
    const float *x = table.data.data() + id * kWidth;
    float s[kHalf], y[kHalf];
    double squares = 0;
    for (int64_t i = 0; i < kHalf; ++i) {
      s[i] = x[i] + x[kHalf + i];
      squares += static_cast<double>(s[i]) * s[i];
    }
    const float inv = static_cast<float>(
        1.0 /
        std::sqrt(static_cast<double>(static_cast<float>(squares / kHalf)) +
                  1e-5));
    for (int64_t i = 0; i < kHalf; ++i)
      y[i] = w.data[i] * (s[i] * inv);
    for (int64_t i = 0; i < kHalf; ++i) {
      const float g = silu(s[i]) * y[i];
      const float r0 = geluTanh(g) * x[i] + y[i];
      out.push_back(r0 + silu(r0));
    }
  }
  return out;
}

TEST(FusedSteps, MatchNaiveReference) {
  plan::Plan p = buildPlan();
  std::string json = plan::planToJson(p);
  StatusOr<plan::Plan> parsed = plan::parsePlanJson(json);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(*parsed, p);

  ParamTable params;
  params[1] = makeParam({kVocab, kWidth}, 0.1f);
  params[2] = makeParam({kHalf}, 1.3f);
  cpu::CpuBackendOptions options;
  options.numBlocks = 1;
  options.numThreads = 1;
  StatusOr<std::unique_ptr<Backend>> backend =
      cpu::createCpuBackend(*parsed, 0, params, options);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();

  Batch batch;
  batch.tokenIds = {3, 0, 5};
  batch.positions = {0, 1, 2};
  batch.slotMapping = {0, 1, 2};
  batch.queryStartLoc = {0, 3};
  batch.contextLens = {3};
  batch.blockTables = {0};
  batch.maxBlocksPerSeq = 1;
  batch.logitsIndices = {2};
  StatusOr<Logits> logits = (*backend)->forward(batch);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  ASSERT_EQ(logits->rows, 3);
  ASSERT_EQ(logits->vocab, kHalf);
  std::vector<float> expected =
      reference(batch.tokenIds, *params[1], *params[2]);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(logits->data[i], expected[i], 1e-6 * std::abs(expected[i]))
        << "element " << i;
}

/// One linear_residual step: y = x w^T (+ b) + r for activations of `dtype`,
/// x and r looked up from tables by the token ids, y cast to f32.
struct LinearResidualCase {
  plan::DType dtype;
  bool bias;
};

class LinearResidualTest : public ::testing::TestWithParam<LinearResidualCase> {
};

constexpr int64_t kRows = 6, kIn = 40, kOut = 24;

float roundTo(plan::DType dtype, float x) {
  switch (dtype) {
  case plan::DType::kBF16:
    return roundToBf16(x);
  case plan::DType::kF16:
    return roundToF16(x);
  default:
    return x;
  }
}

/// Half a unit in the last place of `x` in `dtype` (f32: a few ulps of
/// summation order).
float halfUlp(plan::DType dtype, float x) {
  const int bits = dtype == plan::DType::kBF16  ? 8
                   : dtype == plan::DType::kF16 ? 11
                                                : 21;
  const float magnitude = std::max(std::abs(x), 1e-3f);
  return std::ldexp(1.0f, std::ilogb(magnitude) - bits);
}

/// One sequence of kRows tokens in one block, logits of every row.
Batch rowsBatch() {
  Batch batch;
  batch.tokenIds = {3, 0, 5, 1, 4, 2};
  for (int32_t i = 0; i < kRows; ++i) {
    batch.positions.push_back(i);
    batch.slotMapping.push_back(i);
    batch.logitsIndices.push_back(i);
  }
  batch.queryStartLoc = {0, static_cast<int32_t>(kRows)};
  batch.contextLens = {static_cast<int32_t>(kRows)};
  batch.blockTables = {0};
  batch.maxBlocksPerSeq = 1;
  return batch;
}

/// `p` on the CPU backend (one block, two threads) over `batch`.
StatusOr<Logits> runRows(const plan::Plan &p, const ParamTable &params,
                         const Batch &batch) {
  cpu::CpuBackendOptions options;
  options.numBlocks = 1;
  options.numThreads = 2;
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                         cpu::createCpuBackend(p, 0, params, options));
  return backend->forward(batch);
}

/// token ids -> x = embedding(x_table), r = embedding(r_table) ->
/// y = linear_residual(x, w, r, b?) -> cast to f32. The residual's width
/// and dtype may be made wrong.
plan::Plan linearResidualPlan(plan::DType dtype, bool bias,
                              int64_t residualWidth = kOut,
                              std::optional<plan::DType> residualDtype = {}) {
  using plan::Dim;
  using plan::ValueKind;
  const Dim t = Dim::dynamic("T");
  const plan::DType rDtype = residualDtype.value_or(dtype);
  plan::RankPlan rank;
  rank.values = {
      makeValue(0, ValueKind::kInput, "token_ids", {t}, plan::DType::kI32),
      makeValue(1, ValueKind::kParam, "x_table",
                {Dim::fixed(kVocab), Dim::fixed(kIn)}),
      makeValue(2, ValueKind::kParam, "r_table",
                {Dim::fixed(kVocab), Dim::fixed(residualWidth)}),
      makeValue(3, ValueKind::kParam, "w", {Dim::fixed(kOut), Dim::fixed(kIn)}),
      makeValue(4, ValueKind::kParam, "b", {Dim::fixed(kOut)}),
      makeValue(5, ValueKind::kActivation, "%x", {t, Dim::fixed(kIn)}, dtype),
      makeValue(6, ValueKind::kActivation, "%r", {t, Dim::fixed(residualWidth)},
                rDtype),
      makeValue(7, ValueKind::kActivation, "%y", {t, Dim::fixed(kOut)}, dtype),
      makeValue(8, ValueKind::kActivation, "%out", {t, Dim::fixed(kOut)}),
  };
  plan::Step linear{"linear_residual", {5, 3, 6}, {7}, {}};
  if (bias)
    linear.operands.push_back(4);
  rank.steps = {{"embedding", {1, 0}, {5}, {}},
                {"embedding", {2, 0}, {6}, {}},
                linear,
                {"cast", {7}, {8}, {}}};
  rank.outputs = {8};
  plan::Plan p;
  p.kvCache.numLayers = 1;
  p.kvCache.numKVHeads = 1;
  p.kvCache.headDim = 4;
  p.kvCache.blockSize = 16;
  p.ranks.push_back(std::move(rank));
  return p;
}

TEST_P(LinearResidualTest, RoundsOnceAfterTheResidual) {
  const LinearResidualCase c = GetParam();
  plan::Plan p = linearResidualPlan(c.dtype, c.bias);
  StatusOr<plan::Plan> parsed = plan::parsePlanJson(plan::planToJson(p));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();

  // f32 params (the weight and bias of a bf16 linear may be of another
  // type), the tables' values representable in the activation dtype, so
  // the reference reads what the backend reads; residuals as large as the
  // products, where a rounding of the product before the addition shows.
  ParamTable params;
  params[1] = makeParam({kVocab, kIn}, 0.1f);
  params[2] = makeParam({kVocab, kOut}, 0.7f);
  params[3] = makeParam({kOut, kIn}, 1.9f);
  params[4] = makeParam({kOut}, 2.3f);
  for (int id = 1; id <= 2; ++id) {
    auto rounded = std::make_shared<HostTensor>(*params[id]);
    for (float &v : rounded->data)
      v = roundTo(c.dtype, id == 2 ? 4.0f * v : v);
    params[id] = rounded;
  }
  const Batch batch = rowsBatch();
  StatusOr<Logits> out = runRows(*parsed, params, batch);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  ASSERT_EQ(out->rows, kRows);
  ASSERT_EQ(out->vocab, kOut);

  // linear + add in fp32, rounded once; and the same rounded twice (the
  // product, then the sum), which the fused step must not be.
  int roundedTwiceDiffers = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    const int32_t id = batch.tokenIds[i];
    for (int64_t j = 0; j < kOut; ++j) {
      float product = 0.0f;
      for (int64_t k = 0; k < kIn; ++k)
        product += params[1]->data[id * kIn + k] * params[3]->data[j * kIn + k];
      if (c.bias)
        product += params[4]->data[j];
      const float residual = params[2]->data[id * kOut + j];
      const float once = roundTo(c.dtype, product + residual);
      const float twice =
          roundTo(c.dtype, roundTo(c.dtype, product) + residual);
      const float got = out->data[i * kOut + j];
      EXPECT_LE(std::abs(got - once), halfUlp(c.dtype, once))
          << "row " << i << ", column " << j << ": " << got << " vs " << once;
      if (std::abs(twice - once) > halfUlp(c.dtype, once))
        ++roundedTwiceDiffers;
    }
  }
  if (c.dtype != plan::DType::kF32)
    EXPECT_GT(roundedTwiceDiffers, 0)
        << "no element tells one rounding from two";
}

INSTANTIATE_TEST_SUITE_P(
    DTypes, LinearResidualTest,
    ::testing::Values(LinearResidualCase{plan::DType::kF32, false},
                      LinearResidualCase{plan::DType::kF32, true},
                      LinearResidualCase{plan::DType::kBF16, false},
                      LinearResidualCase{plan::DType::kBF16, true},
                      LinearResidualCase{plan::DType::kF16, false},
                      LinearResidualCase{plan::DType::kF16, true}),
    [](const ::testing::TestParamInfo<LinearResidualCase> &info) {
      return std::string(plan::dtypeName(info.param.dtype)) +
             (info.param.bias ? "Bias" : "");
    });

TEST(FusedSteps, LinearResidualRejectsAMismatchedResidual) {
  Status status = plan::verifyPlan(
      linearResidualPlan(plan::DType::kF32, false, /*residualWidth=*/kIn));
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the residual must be 2-D [T, N] with the "
                                  "result's width"),
            std::string::npos)
      << status.message();
  status = plan::verifyPlan(
      linearResidualPlan(plan::DType::kF32, true, kOut, plan::DType::kBF16));
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the residual's dtype (bf16) differs from "
                                  "the result's (f32)"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(
      plan::verifyPlan(linearResidualPlan(plan::DType::kF32, true)).isOk());
}

/// token ids -> x = embedding(x_table) -> y = linear_swiglu(x, w[2 kOut,
/// kIn]) (`width` wide) -> cast to f32.
plan::Plan linearSwiGluPlan(plan::DType dtype, int64_t width = kOut) {
  using plan::Dim;
  using plan::ValueKind;
  const Dim t = Dim::dynamic("T");
  plan::RankPlan rank;
  rank.values = {
      makeValue(0, ValueKind::kInput, "token_ids", {t}, plan::DType::kI32),
      makeValue(1, ValueKind::kParam, "x_table",
                {Dim::fixed(kVocab), Dim::fixed(kIn)}),
      makeValue(2, ValueKind::kParam, "w",
                {Dim::fixed(2 * kOut), Dim::fixed(kIn)}),
      makeValue(3, ValueKind::kActivation, "%x", {t, Dim::fixed(kIn)}, dtype),
      makeValue(4, ValueKind::kActivation, "%y", {t, Dim::fixed(width)}, dtype),
      makeValue(5, ValueKind::kActivation, "%out", {t, Dim::fixed(width)}),
  };
  rank.steps = {{"embedding", {1, 0}, {3}, {}},
                {"linear_swiglu", {3, 2}, {4}, {}},
                {"cast", {4}, {5}, {}}};
  rank.outputs = {5};
  plan::Plan p;
  p.kvCache.numLayers = 1;
  p.kvCache.numKVHeads = 1;
  p.kvCache.headDim = 4;
  p.kvCache.blockSize = 16;
  p.ranks.push_back(std::move(rank));
  return p;
}

class LinearSwiGluTest : public ::testing::TestWithParam<plan::DType> {};

TEST_P(LinearSwiGluTest, RoundsOnceAfterTheActivation) {
  const plan::DType dtype = GetParam();
  StatusOr<plan::Plan> parsed =
      plan::parsePlanJson(plan::planToJson(linearSwiGluPlan(dtype)));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  ParamTable params;
  params[1] = makeParam({kVocab, kIn}, 0.1f);
  params[2] = makeParam({2 * kOut, kIn}, 1.9f);
  auto rounded = std::make_shared<HostTensor>(*params[1]);
  for (float &v : rounded->data)
    v = roundTo(dtype, v);
  params[1] = rounded;
  const Batch batch = rowsBatch();
  StatusOr<Logits> out = runRows(*parsed, params, batch);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  ASSERT_EQ(out->rows, kRows);
  ASSERT_EQ(out->vocab, kOut);

  // silu(gate) * up of the fp32 products, rounded once; and the same with
  // gate and up rounded first (linear, split, silu_mul), which the fused
  // step must not be. The bound: half an ulp of the result plus the fp32
  // sums' error (another summation order) carried through silu(g) * u.
  int roundedTwiceDiffers = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    const int32_t id = batch.tokenIds[i];
    for (int64_t j = 0; j < kOut; ++j) {
      float gate = 0.0f, up = 0.0f, gateSize = 0.0f, upSize = 0.0f;
      for (int64_t k = 0; k < kIn; ++k) {
        const float x = params[1]->data[id * kIn + k];
        const float wg = params[2]->data[j * kIn + k];
        const float wu = params[2]->data[(kOut + j) * kIn + k];
        gate += x * wg;
        up += x * wu;
        gateSize += std::abs(x * wg);
        upSize += std::abs(x * wu);
      }
      const float once = roundTo(dtype, silu(gate) * up);
      const float twice =
          roundTo(dtype, silu(roundTo(dtype, gate)) * roundTo(dtype, up));
      const float sums = 0x1p-20f * (1.1f * std::abs(up) * gateSize +
                                     std::abs(silu(gate)) * upSize);
      const float got = out->data[i * kOut + j], exact = silu(gate) * up;
      EXPECT_LE(std::abs(got - exact), halfUlp(dtype, once) + sums)
          << "row " << i << ", column " << j << ": " << got << " vs " << once;
      if (std::abs(twice - once) > halfUlp(dtype, once))
        ++roundedTwiceDiffers;
    }
  }
  if (dtype != plan::DType::kF32)
    EXPECT_GT(roundedTwiceDiffers, 0)
        << "no element tells one rounding from two";
}

INSTANTIATE_TEST_SUITE_P(DTypes, LinearSwiGluTest,
                         ::testing::Values(plan::DType::kF32,
                                           plan::DType::kBF16,
                                           plan::DType::kF16),
                         [](const ::testing::TestParamInfo<plan::DType> &info) {
                           return std::string(plan::dtypeName(info.param));
                         });

TEST(FusedSteps, LinearSwiGluRejectsAWrongWidth) {
  const Status status =
      plan::verifyPlan(linearSwiGluPlan(plan::DType::kF32, 2 * kOut));
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the result width must be half the "
                                  "weight's rows"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(plan::verifyPlan(linearSwiGluPlan(plan::DType::kF32)).isOk());
}

TEST(FusedSteps, RejectsMalformedBodies) {
  plan::Step step{"fused", {0, 1}, {2}, {}};
  step.attrs["yields"] = std::vector<int64_t>{2};
  auto expectError = [&](const std::string &body, const std::string &needle) {
    step.attrs["body"] = body;
    StatusOr<plan::FusedBody> parsed = plan::getFusedBody(step);
    ASSERT_FALSE(parsed.isOk()) << body;
    EXPECT_NE(parsed.status().message().find(needle), std::string::npos)
        << parsed.status().message();
  };
  expectError("frobnicate(0)", "unknown op 'frobnicate'");
  expectError("add(0)", "'add' takes 2 arguments");
  expectError("silu(2)", "reads a register that is not defined before it");
  expectError("add(0, 1) mul(2, 2)", "expected ';' between instructions");
  expectError("", "no instructions");
  step.attrs["body"] = std::string("add(0, 1)");
  step.attrs["yields"] = std::vector<int64_t>{3};
  EXPECT_FALSE(plan::getFusedBody(step).isOk());
  step.attrs["yields"] = std::vector<int64_t>{2};
  StatusOr<plan::FusedBody> ok = plan::getFusedBody(step);
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  EXPECT_EQ(ok->instructions.size(), 1u);
}

} // namespace
} // namespace infer::testing
