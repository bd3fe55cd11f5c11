//===- FusedStepsTest.cpp - the fused steps of infer-fuse vs references ---===//
//
// Hand-built plans run the steps infer-fuse produces (split, add_rms_norm,
// silu_mul, fused) on the CPU backend; naive loops compute the same thing.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/FusedBody.h"

#include <gtest/gtest.h>

#include <cmath>

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
