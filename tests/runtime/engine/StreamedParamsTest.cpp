//===- StreamedParamsTest.cpp - Deferred params and their gather ----------===//
//
// loadDeferredParams (what the CUDA backend streams from) against the
// loader's transformed params and the packed file, for every LoaderCase:
// the deferred tensors hold no elements, and their gather, done in pieces
// as the device upload does, then cast or quantized, is the loader's bytes.
// The shards are also checked against the checkpoint sliced by hand.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/ParamSource.h"
#include "runtime/engine/PackedWeights.h"
#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/Half.h"
#include "tests/runtime/support/WeightFixtures.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

class StreamedParams : public ::testing::TestWithParam<LoaderCase> {
protected:
  void SetUp() override {
    if (!fs::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    dir_ = ::testing::TempDir() + "/streamed_params_" + GetParam().name + "_" +
           std::to_string(::getpid());
    StatusOr<Artifact> artifact = writeLoaderCase(GetParam(), kGqa, dir_);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(*artifact);
    weightsDir_ = weightsDirOf(artifact_, "");
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  std::string dir_;
  std::string weightsDir_;
  Artifact artifact_;
};

/// The param as the CUDA backend makes it: gathered in pieces of `piece`
/// bytes (at most), then cast or quantized with the host's functions.
HostTensor streamOnHost(const ParamSource &source, const plan::Value &v,
                        uint64_t piece) {
  HostTensor tensor;
  tensor.dtype = source.gatherDType;
  tensor.shape = source.shape;
  std::vector<char> bytes(source.gatheredBytes());
  const uint64_t granule = plan::dtypeSize(source.gatherDType);
  piece = std::max(granule, piece / granule * granule);
  for (uint64_t offset = 0; offset < bytes.size(); offset += piece)
    source.gather(offset, std::min<uint64_t>(piece, bytes.size() - offset),
                  bytes.data() + offset);
  if (tensor.dtype == plan::DType::kF32) {
    tensor.data.resize(bytes.size() / 4);
    std::memcpy(tensor.data.data(), bytes.data(), bytes.size());
  } else {
    tensor.bits16.resize(bytes.size() / 2);
    std::memcpy(tensor.bits16.data(), bytes.data(), bytes.size());
  }
  if (source.quantize) {
    Status status = applyQuantizeFp8(v.transforms.back(), tensor);
    EXPECT_TRUE(status.isOk()) << status.message();
  } else {
    castHostTensor(tensor, source.dtype);
  }
  return tensor;
}

TEST_P(StreamedParams, DeferredParamsHoldNoElements) {
  StatusOr<ParamTable> deferred = loadDeferredParams(artifact_, 0, weightsDir_);
  ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
  StatusOr<ParamTable> loaded = loadParams(artifact_, 0, weightsDir_);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  ASSERT_EQ(deferred->size(), loaded->size());
  std::set<const HostTensor *> distinctDeferred, distinctLoaded;
  for (const auto &[id, tensor] : *deferred) {
    const plan::Value &v = artifact_.plan.ranks[0].values[id];
    ASSERT_TRUE(tensor->isDeferred()) << v.name;
    EXPECT_FALSE(tensor->consistent()) << v.name;
    EXPECT_TRUE(tensor->data.empty() && tensor->bits16.empty() &&
                tensor->fp8Codes.empty() && tensor->rowScales.empty())
        << v.name;
    EXPECT_EQ(tensor->dtype, v.dtype) << v.name;
    EXPECT_EQ(tensor->shape, loaded->at(id)->shape) << v.name;
    EXPECT_EQ(tensor->source->shape, tensor->shape) << v.name;
    distinctDeferred.insert(tensor.get());
    distinctLoaded.insert(loaded->at(id).get());
  }
  // Values that load one tensor share it, as loadParams' do.
  EXPECT_EQ(distinctDeferred.size(), distinctLoaded.size());
}

TEST_P(StreamedParams, GatherInPiecesIsTheLoadersBytes) {
  StatusOr<ParamTable> deferred = loadDeferredParams(artifact_, 0, weightsDir_);
  ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
  StatusOr<ParamTable> loaded = loadParams(artifact_, 0, weightsDir_);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  StatusOr<ParamTable> packed = loadRankParams(artifact_, 0, {});
  ASSERT_TRUE(packed.isOk()) << packed.status().message();
  ASSERT_TRUE(packed->begin()->second->isMapped());
  int final = 0, quantized = 0, cast = 0;
  for (const auto &[id, tensor] : *deferred) {
    const plan::Value &v = artifact_.plan.ranks[0].values[id];
    const ParamSource &source = *tensor->source;
    final += source.gatheredIsFinal();
    quantized += source.quantize;
    cast += !source.gatheredIsFinal() && !source.quantize;
    const std::string expected = paramBytes(*packed->at(id));
    EXPECT_EQ(paramBytes(*loaded->at(id)), expected) << v.name;
    // Pieces that end inside rows, parts and elements of a bf16 pair.
    for (uint64_t piece :
         {uint64_t(4), uint64_t(6 * 7), uint64_t(1000), uint64_t(1) << 20}) {
      const HostTensor streamed = streamOnHost(source, v, piece);
      EXPECT_TRUE(streamed.consistent()) << v.name;
      EXPECT_EQ(streamed.dtype, v.dtype) << v.name;
      EXPECT_TRUE(paramBytes(streamed) == expected)
          << v.name << " in pieces of " << piece;
    }
  }
  const LoaderCase &c = GetParam();
  EXPECT_EQ(final > 0, c.bf16Checkpoint || c.dtype == plan::DType::kF32);
  EXPECT_EQ(quantized > 0, !c.quantize.empty());
  EXPECT_EQ(cast > 0, !c.bf16Checkpoint && c.dtype != plan::DType::kF32);
}

/// Rows [begin, begin + count) and columns [col, col + cols) of a
/// checkpoint tensor of `width` columns, as fp32.
std::vector<float> block(const std::vector<float> &whole, int64_t width,
                         int64_t begin, int64_t count, int64_t col,
                         int64_t cols) {
  std::vector<float> out;
  for (int64_t r = begin; r < begin + count; ++r)
    out.insert(out.end(), whole.begin() + r * width + col,
               whole.begin() + r * width + col + cols);
  return out;
}

/// The unquantized shards of `artifact` (addTensorParallelShards) against
/// its checkpoint sliced and concatenated here.
void expectShardsAreTheCheckpointSlicedByHand(const Artifact &artifact) {
  const std::string weightsDir = weightsDirOf(artifact, "");
  StatusOr<std::unique_ptr<safetensors::File>> file =
      safetensors::File::open(weightsDir + "/model.safetensors");
  ASSERT_TRUE(file.isOk()) << file.status().message();
  auto whole = [&](const std::string &name) {
    StatusOr<std::vector<float>> values = (*file)->readAsF32(name);
    EXPECT_TRUE(values.isOk()) << values.status().message();
    return values.isOk() ? *values : std::vector<float>();
  };
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  auto concat = [](std::vector<std::vector<float>> parts) {
    std::vector<float> out;
    for (const std::vector<float> &p : parts)
      out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<float> q0 = whole(l0 + "self_attn.q_proj.weight");
  const std::vector<float> k0 = whole(l0 + "self_attn.k_proj.weight");
  const std::vector<float> v0 = whole(l0 + "self_attn.v_proj.weight");
  const std::vector<float> q1 = whole(l1 + "self_attn.q_proj.weight");
  const std::vector<float> k1 = whole(l1 + "self_attn.k_proj.weight");
  const std::vector<float> v1 = whole(l1 + "self_attn.v_proj.weight");
  const std::map<std::string, std::vector<float>> expected = {
      {"shard.layers.0.qkv",
       concat({block(q0, 128, 64, 64, 0, 128), block(k0, 128, 16, 16, 0, 128),
               block(v0, 128, 16, 16, 0, 128)})},
      {"shard.layers.0.gate_up",
       concat(
           {block(whole(l0 + "mlp.gate_proj.weight"), 128, 128, 128, 0, 128),
            block(whole(l0 + "mlp.up_proj.weight"), 128, 128, 128, 0, 128)})},
      {"shard.layers.0.o",
       block(whole(l0 + "self_attn.o_proj.weight"), 128, 0, 128, 64, 64)},
      {"shard.layers.0.down",
       block(whole(l0 + "mlp.down_proj.weight"), 256, 0, 128, 128, 128)},
      {"shard.layers.1.qk_rows",
       concat({block(q1, 128, 48, 80, 0, 128), block(k1, 128, 0, 16, 0, 128)})},
      {"shard.layers.1.kv_columns",
       concat({block(k1, 128, 0, 32, 32, 64), block(v1, 128, 0, 32, 32, 64)})},
  };
  StatusOr<ParamTable> deferred = loadDeferredParams(artifact, 0, weightsDir);
  ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
  int checked = 0;
  for (const auto &[id, tensor] : *deferred) {
    const plan::Value &v = artifact.plan.ranks[0].values[id];
    auto it = expected.find(v.name);
    if (it == expected.end())
      continue;
    std::vector<float> want = it->second;
    if (v.dtype == plan::DType::kBF16)
      for (float &x : want)
        x = bf16BitsToFloat(floatToBf16Bits(x));
    const HostTensor streamed = streamOnHost(*tensor->source, v, 1000);
    EXPECT_EQ(streamed.toFloat(), want) << v.name;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(StreamedShards, AreTheCheckpointSlicedByHand) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << kGqa;
  for (const LoaderCase &c : loaderCases()) {
    if (!c.tensorParallel || !c.quantize.empty())
      continue;
    SCOPED_TRACE(c.name);
    const std::string dir = ::testing::TempDir() + "/streamed_shards_" +
                            c.name + "_" + std::to_string(::getpid());
    StatusOr<Artifact> artifact = writeLoaderCase(c, kGqa, dir);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    expectShardsAreTheCheckpointSlicedByHand(*artifact);
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, StreamedParams,
                         ::testing::ValuesIn(loaderCases()),
                         [](const ::testing::TestParamInfo<LoaderCase> &info) {
                           return info.param.name;
                         });

} // namespace
} // namespace infer::testing
