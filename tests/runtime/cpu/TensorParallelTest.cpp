//===- TensorParallelTest.cpp - Ranks of a plan on threads ----------------===//
//
// A vocabulary-parallel embedding and LM head on 2 and 4 ranks against the
// same computation on one rank:
//
//   ids ─ embedding (vocab slice) ─ all_reduce ─ gather_rows ─ logits (vocab
//   slice) ─ all_gather(dim 1)
//
// and a row-parallel linear with a bias, added once after the sum:
//
//   ids ─ embedding (column slice) ─ linear (weight column slice, no bias) ─
//   all_reduce ─ bias_add ─ gather_rows
//
// The tables are small integers, so every rank count gives exactly the same
// logits. A bad token id fails every rank; the backend then still runs.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "tests/runtime/support/Batches.h"

#include <gtest/gtest.h>

namespace infer::cpu {
namespace {

constexpr int64_t kVocab = 8;
constexpr int64_t kHidden = 3;

std::shared_ptr<const HostTensor> tableRows(int64_t begin, int64_t rows,
                                            int salt) {
  auto t = std::make_shared<HostTensor>();
  t->shape = {rows, kHidden};
  for (int64_t r = begin; r < begin + rows; ++r)
    for (int64_t c = 0; c < kHidden; ++c)
      t->data.push_back(static_cast<float>((r * 3 + c * 5 + salt) % 7 - 3));
  return t;
}

/// Appends a value to `rank` (params read from model.safetensors under
/// their name, inputs i32) and returns its id.
int addValue(plan::RankPlan &rank, plan::ValueKind kind, std::string name,
             std::vector<plan::Dim> shape) {
  plan::Value v;
  v.id = static_cast<int>(rank.values.size());
  v.kind = kind;
  v.name = std::move(name);
  v.shape = std::move(shape);
  if (kind == plan::ValueKind::kParam) {
    v.sourceFile = "model.safetensors";
    v.sourceTensor = v.name;
  }
  if (kind == plan::ValueKind::kInput)
    v.dtype = plan::DType::kI32;
  rank.values.push_back(v);
  return v.id;
}

/// The plan of `numRanks` ranks and their parameter slices.
std::pair<plan::Plan, std::vector<ParamTable>> buildPlan(int numRanks) {
  const int64_t rows = kVocab / numRanks;
  plan::Plan p;
  p.numRanks = numRanks;
  p.kvCache.numLayers = 0;
  std::vector<ParamTable> params;
  for (int r = 0; r < numRanks; ++r) {
    plan::RankPlan rank;
    rank.rank = r;
    auto value = [&](plan::ValueKind kind, std::string name,
                     std::vector<plan::Dim> shape) {
      return addValue(rank, kind, std::move(name), std::move(shape));
    };
    using plan::Dim;
    int ids = value(plan::ValueKind::kInput, "token_ids", {Dim::dynamic("T")});
    int rowsIn =
        value(plan::ValueKind::kInput, "logits_indices", {Dim::dynamic("S")});
    int table = value(plan::ValueKind::kParam, "embed",
                      {Dim::fixed(rows), Dim::fixed(kHidden)});
    int head = value(plan::ValueKind::kParam, "head",
                     {Dim::fixed(rows), Dim::fixed(kHidden)});
    auto act = [&](const char *name, Dim cols) {
      return value(plan::ValueKind::kActivation, name,
                   {Dim::dynamic("T"), cols});
    };
    int looked = act("looked", Dim::fixed(kHidden));
    int summed = act("summed", Dim::fixed(kHidden));
    int picked = act("picked", Dim::fixed(kHidden));
    int part = act("part", Dim::fixed(rows));
    int logits = act("logits", Dim::fixed(kVocab));
    plan::Step embedding{"embedding", {table, ids}, {looked}, {}};
    if (numRanks > 1) {
      embedding.attrs["vocab_offset"] = r * rows;
      embedding.attrs["vocab_size"] = kVocab;
    }
    rank.steps.push_back(embedding);
    rank.steps.push_back({"all_reduce", {looked}, {summed}, {}});
    rank.steps.push_back({"gather_rows", {summed, rowsIn}, {picked}, {}});
    rank.steps.push_back({"logits", {picked, head}, {part}, {}});
    rank.steps.push_back(
        {"all_gather", {part}, {logits}, {{"dim", int64_t{1}}}});
    rank.outputs = {logits};
    p.ranks.push_back(rank);
    params.push_back({{table, tableRows(r * rows, rows, 0)},
                      {head, tableRows(r * rows, rows, 1)}});
  }
  return {p, params};
}

/// A prompt in block 0 (the plans here have one block per sequence), with
/// the logits of every token.
Batch batchOf(const std::vector<int32_t> &tokens) {
  return testing::oneSequenceBatch(tokens, 0, /*blockSize=*/0,
                                   /*maxBlocks=*/1,
                                   /*allLogits=*/true);
}

/// A one-rank plan runs in a group of one, whose collectives are the
/// identity.
StatusOr<std::unique_ptr<Backend>> create(int numRanks) {
  auto [plan, params] = buildPlan(numRanks);
  CpuBackendOptions options;
  options.numBlocks = 1;
  options.numThreads = numRanks;
  return createCpuTensorParallelBackend(plan, std::move(params), options);
}

class TensorParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelTest, MatchesOneRankExactly) {
  StatusOr<std::unique_ptr<Backend>> reference = create(1);
  ASSERT_TRUE(reference.isOk()) << reference.status().message();
  StatusOr<std::unique_ptr<Backend>> split = create(GetParam());
  ASSERT_TRUE(split.isOk()) << split.status().message();
  const Batch batch = batchOf({0, 7, 3, 4, 5, 1});
  for (int round = 0; round < 3; ++round) {
    StatusOr<Logits> expected = (*reference)->forward(batch);
    StatusOr<Logits> actual = (*split)->forward(batch);
    ASSERT_TRUE(expected.isOk()) << expected.status().message();
    ASSERT_TRUE(actual.isOk()) << actual.status().message();
    EXPECT_EQ(actual->rows, 6);
    EXPECT_EQ(actual->vocab, kVocab);
    EXPECT_EQ(actual->data, expected->data);
  }
}

TEST_P(TensorParallelTest, BadTokenFailsEveryRankAndTheBackendRecovers) {
  StatusOr<std::unique_ptr<Backend>> split = create(GetParam());
  ASSERT_TRUE(split.isOk()) << split.status().message();
  StatusOr<Logits> bad = (*split)->forward(batchOf({1, int32_t{kVocab}}));
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("outside the vocabulary of 8"),
            std::string::npos)
      << bad.status().message();
  StatusOr<Logits> good = (*split)->forward(batchOf({1, 2}));
  EXPECT_TRUE(good.isOk()) << good.status().message();
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelTest, ::testing::Values(2, 4));

TEST(TensorParallel, RankWithoutItsCommunicatorIsRejected) {
  auto [plan, params] = buildPlan(2);
  CpuBackendOptions options;
  options.numBlocks = 1;
  StatusOr<std::unique_ptr<Backend>> rank =
      createCpuBackend(plan, 0, params[0], options);
  ASSERT_FALSE(rank.isOk());
  EXPECT_NE(rank.status().message().find("needs that rank's communicator"),
            std::string::npos)
      << rank.status().message();
}

constexpr int64_t kInFeatures = 4;
constexpr int64_t kOutFeatures = 3;
constexpr float kBias[kOutFeatures] = {10, -20, 30};

/// Columns begin .. begin+cols of a [rows, kInFeatures] integer table.
std::shared_ptr<const HostTensor> columns(int64_t rows, int64_t begin,
                                          int64_t cols, int salt) {
  auto t = std::make_shared<HostTensor>();
  t->shape = {rows, cols};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = begin; c < begin + cols; ++c)
      t->data.push_back(static_cast<float>((r * 5 + c * 3 + salt) % 7 - 3));
  return t;
}

/// `y = x w^T + b` with x the embedding of the tokens: one rank adds the
/// bias in the linear; `numRanks` ranks each hold a column slice of x and w,
/// and add the bias after the all_reduce.
std::pair<plan::Plan, std::vector<ParamTable>>
buildRowParallelPlan(int numRanks) {
  const int64_t cols = kInFeatures / numRanks;
  plan::Plan p;
  p.numRanks = numRanks;
  p.kvCache.numLayers = 0;
  std::vector<ParamTable> params;
  for (int r = 0; r < numRanks; ++r) {
    plan::RankPlan rank;
    rank.rank = r;
    auto value = [&](plan::ValueKind kind, std::string name,
                     std::vector<plan::Dim> shape) {
      return addValue(rank, kind, std::move(name), std::move(shape));
    };
    using plan::Dim;
    using plan::ValueKind;
    int ids = value(ValueKind::kInput, "token_ids", {Dim::dynamic("T")});
    int rowsIn =
        value(ValueKind::kInput, "logits_indices", {Dim::dynamic("S")});
    int table = value(ValueKind::kParam, "embed",
                      {Dim::fixed(kVocab), Dim::fixed(cols)});
    int weight = value(ValueKind::kParam, "o_proj.weight",
                       {Dim::fixed(kOutFeatures), Dim::fixed(cols)});
    int bias =
        value(ValueKind::kParam, "o_proj.bias", {Dim::fixed(kOutFeatures)});
    auto act = [&](const char *name, int64_t width) {
      return value(ValueKind::kActivation, name,
                   {Dim::dynamic("T"), Dim::fixed(width)});
    };
    int x = act("x", cols);
    int projected = act("projected", kOutFeatures);
    int picked = act("picked", kOutFeatures);
    rank.steps.push_back({"embedding", {table, ids}, {x}, {}});
    if (numRanks == 1) {
      rank.steps.push_back({"linear", {x, weight, bias}, {projected}, {}});
    } else {
      int partial = act("partial", kOutFeatures);
      int summed = act("summed", kOutFeatures);
      rank.steps.push_back({"linear", {x, weight}, {partial}, {}});
      rank.steps.push_back({"all_reduce", {partial}, {summed}, {}});
      rank.steps.push_back({"bias_add", {summed, bias}, {projected}, {}});
    }
    rank.steps.push_back({"gather_rows", {projected, rowsIn}, {picked}, {}});
    rank.outputs = {picked};
    p.ranks.push_back(rank);
    auto biasData = std::make_shared<HostTensor>();
    biasData->shape = {kOutFeatures};
    biasData->data.assign(std::begin(kBias), std::end(kBias));
    params.push_back({{table, columns(kVocab, r * cols, cols, 0)},
                      {weight, columns(kOutFeatures, r * cols, cols, 1)},
                      {bias, biasData}});
  }
  return {p, params};
}

StatusOr<std::unique_ptr<Backend>> createRowParallel(int numRanks) {
  auto [plan, params] = buildRowParallelPlan(numRanks);
  CpuBackendOptions options;
  options.numBlocks = 1;
  options.numThreads = numRanks;
  return createCpuTensorParallelBackend(plan, std::move(params), options);
}

TEST_P(TensorParallelTest, RowParallelBiasIsAddedOnce) {
  StatusOr<std::unique_ptr<Backend>> reference = createRowParallel(1);
  ASSERT_TRUE(reference.isOk()) << reference.status().message();
  StatusOr<std::unique_ptr<Backend>> split = createRowParallel(GetParam());
  ASSERT_TRUE(split.isOk()) << split.status().message();
  const Batch batch = batchOf({0, 7, 3, 4, 5});
  StatusOr<Logits> expected = (*reference)->forward(batch);
  StatusOr<Logits> actual = (*split)->forward(batch);
  ASSERT_TRUE(expected.isOk()) << expected.status().message();
  ASSERT_TRUE(actual.isOk()) << actual.status().message();
  EXPECT_EQ(actual->rows, 5);
  EXPECT_EQ(actual->vocab, kOutFeatures);
  EXPECT_EQ(actual->data, expected->data);
}

TEST(TensorParallel, BiasAddOfTheWrongWidthIsAnError) {
  auto [plan, params] = buildRowParallelPlan(2);
  for (plan::RankPlan &rank : plan.ranks)
    for (plan::Value &v : rank.values)
      if (v.name == "o_proj.bias")
        v.shape = {plan::Dim::fixed(kOutFeatures - 1)};
  for (ParamTable &table : params)
    for (auto &[id, tensor] : table)
      if (tensor->shape.size() == 1) {
        auto shorter = std::make_shared<HostTensor>(*tensor);
        shorter->shape = {kOutFeatures - 1};
        shorter->data.pop_back();
        tensor = shorter;
      }
  CpuBackendOptions options;
  options.numBlocks = 1;
  options.numThreads = 2;
  // The plan verifier rejects the plan before any rank runs it.
  StatusOr<std::unique_ptr<Backend>> backend =
      createCpuTensorParallelBackend(plan, std::move(params), options);
  ASSERT_FALSE(backend.isOk());
  EXPECT_NE(backend.status().message().find(
                "step 3 ('bias_add'): the operands' or result's widths differ"),
            std::string::npos)
      << backend.status().message();
}

} // namespace
} // namespace infer::cpu
