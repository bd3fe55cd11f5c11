//===- WeightTransformsTest.cpp - Slices and concatenations at load -------===//
//
// The `slice` and `concat` weight transforms as loadParams applies them to
// llama-gqa's checkpoint: a tensor-parallel merged q/k/v weight is each
// part's slice for the rank, concatenated.
//
//===----------------------------------------------------------------------===//

#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace infer::testing {
namespace {

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
const std::string kLayer0 = "model.layers.0.self_attn.";

class ConcatTransform : public ::testing::Test {
protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    StatusOr<Artifact> a = buildLlamaArtifact(kGqa);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    StatusOr<ParamTable> p = loadParams(artifact_, 0, kGqa);
    ASSERT_TRUE(p.isOk()) << p.status().message();
    for (const plan::Value &v : artifact_.plan.ranks[0].values)
      if (v.kind == plan::ValueKind::kParam)
        whole_[v.sourceTensor] = p->at(v.id);
    for (const char *part : {"q_proj.weight", "k_proj.weight", "v_proj.weight"})
      ASSERT_TRUE(whole_.count(kLayer0 + part)) << part;
  }

  /// Turns the q_proj param into rank 1's merged q/k/v weight of a tp = 2
  /// plan: q rows 64..127, k and v rows kvBegin .. kvBegin+15 (16 for
  /// key/value head 1).
  plan::Value &mergeQkvOfRank1(int64_t kvBegin) {
    for (plan::Value &v : artifact_.plan.ranks[0].values) {
      if (v.kind != plan::ValueKind::kParam ||
          v.sourceTensor != kLayer0 + "q_proj.weight")
        continue;
      v.shape = {plan::Dim::fixed(96), plan::Dim::fixed(128)};
      v.transforms = {{"slice",
                       {{"dim", int64_t(0)},
                        {"begin", int64_t(64)},
                        {"size", int64_t(64)}}}};
      for (const char *part : {"k_proj.weight", "v_proj.weight"})
        v.transforms.push_back({"concat",
                                {{"axis", int64_t(0)},
                                 {"source_file", v.sourceFile},
                                 {"source_tensor", kLayer0 + part},
                                 {"slice_dim", int64_t(0)},
                                 {"slice_begin", kvBegin},
                                 {"slice_size", int64_t(16)}}});
      return v;
    }
    ADD_FAILURE() << "no q_proj param";
    return artifact_.plan.ranks[0].values.front();
  }

  /// Rows begin .. begin+count of the whole tensor `name` (128 columns).
  std::vector<float> rows(const std::string &name, int64_t begin,
                          int64_t count) {
    const std::vector<float> &data = whole_.at(kLayer0 + name)->data;
    return std::vector<float>(data.begin() + begin * 128,
                              data.begin() + (begin + count) * 128);
  }

  Artifact artifact_;
  std::map<std::string, std::shared_ptr<const HostTensor>> whole_;
};

TEST_F(ConcatTransform, SlicesEachPartBeforeConcatenating) {
  const int id = mergeQkvOfRank1(16).id;
  StatusOr<ParamTable> p = loadParams(artifact_, 0, kGqa);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  const HostTensor &merged = *p->at(id);
  ASSERT_EQ(merged.shape, (std::vector<int64_t>{96, 128}));
  std::vector<float> expected = rows("q_proj.weight", 64, 64);
  for (const char *part : {"k_proj.weight", "v_proj.weight"}) {
    std::vector<float> slice = rows(part, 16, 16);
    expected.insert(expected.end(), slice.begin(), slice.end());
  }
  EXPECT_EQ(merged.data, expected);
}

TEST_F(ConcatTransform, RejectsASliceOutsideItsPart) {
  mergeQkvOfRank1(24);
  StatusOr<ParamTable> p = loadParams(artifact_, 0, kGqa);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("slice {dim 0, begin 24, size 16} is "
                                      "outside shape [32,128]"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find(kLayer0 + "k_proj.weight"),
            std::string::npos)
      << p.status().message();
}

} // namespace
} // namespace infer::testing
