//===- StreamedParamsGpuTest.cpp - Deferred params uploaded to the GPU ----===//
//
// The unpacked load path of the CUDA backend (ParamUpload.h): every
// LoaderCase's deferred params, gathered, cast or quantized on their way to
// the device, copied back and compared byte for byte with the packed file
// (what the host loader writes), and packing with the device quantizer
// writes the host-packed file. A NaN in a weight quantized on the device
// is an error naming the param, and a backend made from deferred params
// computes the logits of one made from the packed file, bit for bit.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/ParamUpload.h"
#include "runtime/engine/PackedWeights.h"
#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/WeightFixtures.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

std::string testDir(const std::string &name) {
  return ::testing::TempDir() + "/streamed_gpu_" + name + "_" +
         std::to_string(::getpid());
}

/// The distinct deferred params of rank 0 in plan order, with their ids.
std::vector<std::pair<int, cuda::ParamToUpload>>
toUpload(const Artifact &artifact, const ParamTable &params) {
  std::vector<std::pair<int, cuda::ParamToUpload>> out;
  std::set<const HostTensor *> seen;
  for (const auto &[id, tensor] : params)
    if (seen.insert(tensor.get()).second)
      out.push_back(
          {id, {artifact.plan.ranks[0].values[id].name, tensor->source.get()}});
  return out;
}

/// A device param's bytes as paramBytes gives a host one's.
std::string deviceBytes(const cuda::DeviceParam &param) {
  std::string bytes(param.elements.bytes() + param.rowScales.bytes(), '\0');
  if (param.elements.bytes())
    EXPECT_EQ(cudaMemcpy(bytes.data(), param.elements.get(),
                         param.elements.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
  if (param.rowScales.bytes())
    EXPECT_EQ(cudaMemcpy(bytes.data() + param.elements.bytes(),
                         param.rowScales.get(), param.rowScales.bytes(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  return bytes;
}

class StreamedParamsGpu : public ::testing::TestWithParam<LoaderCase> {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "no CUDA device: " << why;
    if (!fs::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    dir_ = testDir(GetParam().name);
    StatusOr<Artifact> artifact = writeLoaderCase(GetParam(), kGqa, dir_);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(*artifact);
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  std::string dir_;
  Artifact artifact_;
};

TEST_P(StreamedParamsGpu, UploadedParamsAreThePackedBytes) {
  StatusOr<ParamTable> packed = loadRankParams(artifact_, 0, {});
  ASSERT_TRUE(packed.isOk()) << packed.status().message();
  StatusOr<ParamTable> deferred =
      loadDeferredParams(artifact_, 0, weightsDirOf(artifact_, ""));
  ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
  const auto params = toUpload(artifact_, *deferred);
  std::vector<cuda::ParamToUpload> sources;
  for (const auto &[id, p] : params)
    sources.push_back(p);
  uint64_t progressed = 0;
  StatusOr<std::vector<cuda::DeviceParam>> uploaded = cuda::uploadParamSources(
      sources, [&](uint64_t bytes) { progressed += bytes; });
  ASSERT_TRUE(uploaded.isOk()) << uploaded.status().message();
  ASSERT_EQ(uploaded->size(), params.size());
  uint64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string expected = paramBytes(*packed->at(params[i].first));
    total += expected.size();
    EXPECT_TRUE(deviceBytes((*uploaded)[i]) == expected)
        << params[i].second.name;
  }
  EXPECT_EQ(progressed, total);
}

/// `infer pack --gpu`: packing with fp8 quantized on the device writes the
/// host-packed file, byte for byte (the manifest's content hash).
TEST_P(StreamedParamsGpu, PackingOnTheDeviceWritesTheHostsFile) {
  const std::string copy = dir_ + "/device-packed";
  fs::copy(artifact_.dir, copy, fs::copy_options::recursive);
  PackOptions options;
  options.materialize = [](const plan::Value &v, const ParamSource &source) {
    return cuda::materializeOnDevice(v.name, source);
  };
  Status packed = packArtifact(copy, options);
  ASSERT_TRUE(packed.isOk()) << packed.message();
  StatusOr<Artifact> artifact = loadArtifact(copy);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  ASSERT_EQ(artifact->manifest.packedWeights.size(), 1u);
  EXPECT_EQ(artifact->manifest.packedWeights[0].hash,
            artifact_.manifest.packedWeights[0].hash);
  EXPECT_EQ(artifact->manifest.packedWeights[0].size,
            artifact_.manifest.packedWeights[0].size);
}

INSTANTIATE_TEST_SUITE_P(Cases, StreamedParamsGpu,
                         ::testing::ValuesIn(loaderCases()),
                         [](const ::testing::TestParamInfo<LoaderCase> &info) {
                           return info.param.name;
                         });

/// A bf16 checkpoint whose layer-0 q_proj holds a NaN, quantized per
/// channel on the device: the upload fails naming the param.
TEST(StreamedParamsGpuErrors, NaNWeightQuantizedOnTheDeviceNamesTheParam) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "no CUDA device: " << why;
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << kGqa;
  const std::string dir = testDir("nan");
  fs::remove_all(dir);
  ASSERT_TRUE(writeBf16Checkpoint(kGqa, dir).isOk());
  {
    StatusOr<std::unique_ptr<safetensors::File>> file =
        safetensors::File::open(dir + "/model.safetensors");
    ASSERT_TRUE(file.isOk()) << file.status().message();
    const safetensors::TensorInfo *info =
        (*file)->header().find("model.layers.0.self_attn.q_proj.weight");
    ASSERT_NE(info, nullptr);
    const uint64_t offset = 8 + (*file)->header().headerSize + info->begin;
    file->reset();
    std::fstream f(dir + "/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + 2 * 300));
    const char nan[2] = {'\xc0', '\x7f'}; // bf16 0x7fc0
    f.write(nan, 2);
  }
  StatusOr<Artifact> artifact = buildLlamaArtifact(dir, 16, plan::DType::kBF16);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  quantizeWeights(*artifact, "per-channel");
  StatusOr<ParamTable> deferred = loadDeferredParams(*artifact, 0, dir);
  ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
  std::vector<cuda::ParamToUpload> sources;
  for (const auto &[id, p] : toUpload(*artifact, *deferred))
    sources.push_back(p);
  StatusOr<std::vector<cuda::DeviceParam>> uploaded =
      cuda::uploadParamSources(sources);
  fs::remove_all(dir);
  ASSERT_FALSE(uploaded.isOk());
  EXPECT_NE(uploaded.status().message().find(
                "model.layers.0.self_attn.q_proj.weight"),
            std::string::npos)
      << uploaded.status().message();
  EXPECT_NE(uploaded.status().message().find("inf or NaN"), std::string::npos)
      << uploaded.status().message();
}

/// Backends made from the packed file and from the deferred params give
/// the same logits, bit for bit.
TEST(StreamedParamsGpuBackend, DeferredParamsGiveThePackedLogits) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "no CUDA device: " << why;
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << kGqa;
  for (const std::string &quantize :
       {std::string(), std::string("per-tensor")}) {
    const LoaderCase c{"backend_" + (quantize.empty() ? std::string("bf16")
                                                      : std::string("fp8")),
                       true, plan::DType::kBF16, quantize, false};
    const std::string dir = testDir(c.name);
    StatusOr<Artifact> artifact = writeLoaderCase(c, kGqa, dir);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    StatusOr<ParamTable> packed = loadRankParams(*artifact, 0, {});
    ASSERT_TRUE(packed.isOk()) << packed.status().message();
    WeightLoadOptions options;
    options.weightsDirOverride = weightsDirOf(*artifact, "");
    options.deferTransforms = true;
    StatusOr<ParamTable> deferred = loadRankParams(*artifact, 0, options);
    ASSERT_TRUE(deferred.isOk()) << deferred.status().message();
    ASSERT_TRUE(deferred->begin()->second->isDeferred());
    std::vector<float> logits[2];
    int i = 0;
    for (const ParamTable *params : {&*packed, &*deferred}) {
      cuda::CudaBackendOptions backendOptions;
      backendOptions.numBlocks = 8;
      StatusOr<std::unique_ptr<Backend>> backend =
          cuda::createCudaBackend(artifact->plan, 0, *params, backendOptions);
      ASSERT_TRUE(backend.isOk()) << backend.status().message();
      StatusOr<Logits> out = (*backend)->forward(
          oneSequenceBatch({1, 5, 17, 42, 99, 7}, 0, 16, 0, true));
      ASSERT_TRUE(out.isOk()) << out.status().message();
      logits[i++] = out->data;
    }
    fs::remove_all(dir);
    ASSERT_FALSE(logits[0].empty());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(),
                          logits[0].size() * sizeof(float)),
              0)
        << c.name;
  }
}

} // namespace
} // namespace infer::testing
