//===- PackedWeightsTest.cpp - Packed weight files of an artifact ---------===//
//
// Packs hand-built llama-gqa artifacts (f32, bf16, fp8 weights) and checks
// that the mapped params are the loader's, byte for byte, aligned, and that
// a damaged file is an error naming it.
//
//===----------------------------------------------------------------------===//

#include "runtime/engine/PackedWeights.h"
#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/WeightFixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

/// A temporary directory of this test alone: ctest runs the instances of a
/// parameterized test (and each test) as concurrent processes.
std::string testDir(const std::string &prefix) {
  const ::testing::TestInfo *info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return ::testing::TempDir() + "/" + prefix + "_" + name + "_" +
         std::to_string(::getpid());
}

class PackedWeights : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    if (!fs::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    const std::string kind = GetParam();
    StatusOr<Artifact> built = buildLlamaArtifact(
        kGqa, 16, kind == "bf16" ? plan::DType::kBF16 : plan::DType::kF32);
    ASSERT_TRUE(built.isOk()) << built.status().message();
    if (kind == "fp8")
      quantizeWeights(*built);
    dir_ = testDir("packed_weights");
    fs::remove_all(dir_);
    ASSERT_TRUE(writeTestArtifact(*built, dir_).isOk());
    Status packed = packArtifact(dir_, PackOptions{});
    ASSERT_TRUE(packed.isOk()) << packed.message();
    StatusOr<Artifact> artifact = loadArtifact(dir_);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(*artifact);
    ASSERT_EQ(artifact_.manifest.packedWeights.size(), 1u);
    file_ = artifact_.path(artifact_.manifest.packedWeights[0].file);
  }

  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  StatusOr<ParamTable> loadPacked(bool verifyHash = true) {
    WeightLoadOptions options;
    options.verifyHash = verifyHash;
    return loadRankParams(artifact_, 0, options);
  }

  std::string dir_;
  Artifact artifact_;
  std::string file_;
};

TEST_P(PackedWeights, MappedParamsAreTheLoadersBytes) {
  StatusOr<ParamTable> unpacked = loadParams(artifact_, 0, kGqa);
  ASSERT_TRUE(unpacked.isOk()) << unpacked.status().message();
  StatusOr<ParamTable> packed = loadPacked();
  ASSERT_TRUE(packed.isOk()) << packed.status().message();
  ASSERT_EQ(packed->size(), unpacked->size());
  for (const auto &[id, tensor] : *unpacked) {
    const HostTensor &mapped = *packed->at(id);
    EXPECT_TRUE(mapped.isMapped());
    EXPECT_TRUE(mapped.consistent());
    EXPECT_EQ(mapped.dtype, tensor->dtype);
    EXPECT_EQ(mapped.shape, tensor->shape);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mapped.mappedElements) %
                  kPackedTensorAlignment,
              0u);
    EXPECT_TRUE(paramBytes(mapped) == paramBytes(*tensor))
        << artifact_.plan.ranks[0].values[id].name;
  }
  // Values that load one tensor share it (the loader's sharing, kept).
  std::set<const HostTensor *> distinctPacked, distinctUnpacked;
  for (const auto &[id, tensor] : *packed)
    distinctPacked.insert(tensor.get());
  for (const auto &[id, tensor] : *unpacked)
    distinctUnpacked.insert(tensor.get());
  EXPECT_EQ(distinctPacked.size(), distinctUnpacked.size());
}

TEST_P(PackedWeights, FileIsValidSafetensorsWithTheManifestsHash) {
  StatusOr<std::unique_ptr<safetensors::File>> file =
      safetensors::File::open(file_);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_EQ((8 + (*file)->header().headerSize) % kPackedDataAlignment, 0u);
  EXPECT_EQ((*file)->header().metadata.at("rank"), "0");
  // Hole-free: each tensor starts where the one before ends.
  uint64_t end = 0;
  for (const safetensors::TensorInfo &t : (*file)->header().tensors) {
    EXPECT_EQ(t.begin, end) << t.name;
    end = t.end;
  }
  EXPECT_EQ(8 + (*file)->header().headerSize + end, (*file)->fileSize());
  const plan::PackedWeightFile &entry = artifact_.manifest.packedWeights[0];
  EXPECT_EQ((*file)->fileSize(), entry.size);
  EXPECT_EQ(packedFileHash((*file)->bytes()), entry.hash);
  EXPECT_EQ(entry.hash.rfind("xxh3-64/64MiB:", 0), 0u) << entry.hash;
}

TEST_P(PackedWeights, TamperedFileIsAnErrorNamingIt) {
  {
    std::fstream f(file_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(-3, std::ios::end);
    f.write(&c, 1);
  }
  StatusOr<ParamTable> params = loadPacked();
  ASSERT_FALSE(params.isOk());
  EXPECT_NE(params.status().message().find(file_), std::string::npos)
      << params.status().message();
  EXPECT_NE(params.status().message().find("content hash"), std::string::npos)
      << params.status().message();
  // Trusted storage: the hash is not checked; the layout still is.
  EXPECT_TRUE(loadPacked(/*verifyHash=*/false).isOk());
}

TEST_P(PackedWeights, TruncatedOrMissingFileIsAnErrorNamingIt) {
  fs::resize_file(file_, fs::file_size(file_) - 100);
  StatusOr<ParamTable> params = loadPacked(/*verifyHash=*/false);
  ASSERT_FALSE(params.isOk());
  EXPECT_NE(params.status().message().find(file_), std::string::npos);
  EXPECT_NE(params.status().message().find("truncated"), std::string::npos)
      << params.status().message();
  fs::remove(file_);
  params = loadPacked();
  ASSERT_FALSE(params.isOk());
  EXPECT_NE(params.status().message().find(file_ + " is missing"),
            std::string::npos)
      << params.status().message();
}

TEST_P(PackedWeights, AnotherArtifactsFileIsRejected) {
  // The same model packed with other weight dtypes: a file of another size
  // or, when the sizes agree, another hash.
  for (const std::string other : {"f32", "bf16", "fp8"}) {
    if (other == GetParam())
      continue;
    Artifact swapped = artifact_;
    const std::string otherDir = testDir("packed_weights_swap_" + other);
    fs::remove_all(otherDir);
    StatusOr<Artifact> built = buildLlamaArtifact(
        kGqa, 16, other == "bf16" ? plan::DType::kBF16 : plan::DType::kF32);
    ASSERT_TRUE(built.isOk());
    if (other == "fp8")
      quantizeWeights(*built);
    ASSERT_TRUE(writeTestArtifact(*built, otherDir).isOk());
    ASSERT_TRUE(packArtifact(otherDir, PackOptions{}).isOk());
    fs::copy_file(otherDir + "/weights/rank0.safetensors", file_,
                  fs::copy_options::overwrite_existing);
    fs::remove_all(otherDir);
    StatusOr<ParamTable> params = loadPacked();
    ASSERT_FALSE(params.isOk()) << other;
    EXPECT_NE(params.status().message().find(file_), std::string::npos)
        << params.status().message();
  }
}

TEST_P(PackedWeights, WeightsOverrideReadsTheCheckpoint) {
  fs::remove(file_);
  WeightLoadOptions options;
  options.weightsDirOverride = kGqa;
  StatusOr<ParamTable> params = loadRankParams(artifact_, 0, options);
  ASSERT_TRUE(params.isOk()) << params.status().message();
  EXPECT_FALSE(params->begin()->second->isMapped());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PackedWeights,
                         ::testing::Values("f32", "bf16", "fp8"));

TEST(PackedTensorNames, DistinctLoadsOfOneTensorGetDistinctNames) {
  plan::RankPlan rank;
  auto param = [&](int id, const std::string &name, plan::DType dtype,
                   std::vector<plan::WeightTransform> transforms) {
    plan::Value v;
    v.id = id;
    v.kind = plan::ValueKind::kParam;
    v.name = name;
    v.dtype = dtype;
    v.shape = {plan::Dim::fixed(4), plan::Dim::fixed(8)};
    v.sourceFile = "model.safetensors";
    v.sourceTensor = name;
    v.transforms = std::move(transforms);
    rank.values.push_back(v);
  };
  // A tied table: the embedding plain, the LM head quantized; then a
  // second plain read that shares the first.
  param(0, "model.embed_tokens.weight", plan::DType::kF32, {});
  param(1, "model.embed_tokens.weight", plan::DType::kF8E4M3,
        {{"quantize_fp8_e4m3", {{"granularity", "per-tensor"}}}});
  param(2, "model.embed_tokens.weight", plan::DType::kF32, {});
  const std::map<int, std::string> names = packedTensorNames(rank);
  EXPECT_EQ(names.at(0), "model.embed_tokens.weight");
  EXPECT_EQ(names.at(1), "model.embed_tokens.weight@1");
  EXPECT_EQ(names.at(2), names.at(0));
}

} // namespace
} // namespace infer::testing
