//===- StreamingTest.cpp - StreamingLLM attention sinks, end to end -------===//
//
// Compiles a small Llama with `infer compile --sink-tokens 4 --window 32
// --block-size 8` (its max_position_embeddings lowered to 64), generates 4x
// the window through the Engine on the CPU backend, and checks it against a
// plain re-implementation of StreamingLLM written here from the safetensors
// weights: each token's unrotated keys and values per layer, the same block
// eviction, and attention over sinks + window with keys and queries rotated
// at their index in the cache.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSinkTokens = 4;
constexpr int64_t kWindow = 32;
constexpr int64_t kBlockSize = 8;
constexpr int64_t kMaxPositions = 64;

/// A Llama forward step by step, in double, with StreamingLLM's cache.
class StreamingReference {
public:
  static StatusOr<StreamingReference> load(const std::string &modelDir) {
    StreamingReference ref;
    std::ifstream in(modelDir + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    ref.hidden_ = config["hidden_size"];
    ref.numLayers_ = config["num_hidden_layers"];
    ref.numHeads_ = config["num_attention_heads"];
    ref.numKVHeads_ = config["num_key_value_heads"];
    ref.headDim_ = config["head_dim"];
    ref.vocab_ = config["vocab_size"];
    ref.eps_ = config["rms_norm_eps"];
    ref.theta_ = config["rope_parameters"]["rope_theta"];
    INFER_ASSIGN_OR_RETURN(
        std::unique_ptr<safetensors::File> file,
        safetensors::File::open(modelDir + "/model.safetensors"));
    for (const safetensors::TensorInfo &tensor : file->header().tensors) {
      INFER_ASSIGN_OR_RETURN(std::vector<float> data,
                             file->readAsF32(tensor.name));
      ref.weights_[tensor.name].assign(data.begin(), data.end());
    }
    ref.layers_.resize(ref.numLayers_);
    return ref;
  }

  /// Evicts, then runs one token; returns its logits.
  std::vector<double> step(int32_t token) {
    const int64_t sinkKeep =
        (kSinkTokens + kBlockSize - 1) / kBlockSize * kBlockSize;
    while (cached() > sinkKeep && cached() - sinkKeep >= kWindow + kBlockSize)
      for (Layer &layer : layers_) {
        layer.keys.erase(layer.keys.begin() + sinkKeep,
                         layer.keys.begin() + sinkKeep + kBlockSize);
        layer.values.erase(layer.values.begin() + sinkKeep,
                           layer.values.begin() + sinkKeep + kBlockSize);
      }
    const int64_t position = cached();
    const std::vector<double> &table = weights_.at("model.embed_tokens.weight");
    std::vector<double> x(table.begin() + token * hidden_,
                          table.begin() + (token + 1) * hidden_);
    for (int64_t l = 0; l < numLayers_; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<double> h = rmsNorm(x, p + "input_layernorm.weight");
      std::vector<double> q = linear(h, p + "self_attn.q_proj.weight");
      Layer &layer = layers_[l];
      layer.keys.push_back(linear(h, p + "self_attn.k_proj.weight"));
      layer.values.push_back(linear(h, p + "self_attn.v_proj.weight"));
      rotate(q, numHeads_, position);
      std::vector<std::vector<double>> keys = layer.keys;
      for (size_t j = 0; j < keys.size(); ++j)
        rotate(keys[j], numKVHeads_, static_cast<int64_t>(j));
      std::vector<double> attended(numHeads_ * headDim_, 0.0);
      for (int64_t head = 0; head < numHeads_; ++head) {
        const int64_t kvHead = head / (numHeads_ / numKVHeads_);
        std::vector<double> scores(keys.size());
        for (size_t j = 0; j < keys.size(); ++j) {
          double dot = 0;
          for (int64_t e = 0; e < headDim_; ++e)
            dot += q[head * headDim_ + e] * keys[j][kvHead * headDim_ + e];
          scores[j] = dot / std::sqrt(static_cast<double>(headDim_));
        }
        const double top = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double &s : scores)
          sum += s = std::exp(s - top);
        for (size_t j = 0; j < keys.size(); ++j)
          for (int64_t e = 0; e < headDim_; ++e)
            attended[head * headDim_ + e] +=
                scores[j] / sum * layer.values[j][kvHead * headDim_ + e];
      }
      add(x, linear(attended, p + "self_attn.o_proj.weight"));
      h = rmsNorm(x, p + "post_attention_layernorm.weight");
      std::vector<double> gate = linear(h, p + "mlp.gate_proj.weight");
      const std::vector<double> up = linear(h, p + "mlp.up_proj.weight");
      for (size_t i = 0; i < gate.size(); ++i)
        gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      add(x, linear(gate, p + "mlp.down_proj.weight"));
    }
    return linear(rmsNorm(x, "model.norm.weight"), "lm_head.weight");
  }

  int64_t cached() const {
    return static_cast<int64_t>(layers_.front().keys.size());
  }
  int64_t vocab() const { return vocab_; }

private:
  struct Layer {
    std::vector<std::vector<double>> keys, values;
  };

  std::vector<double> linear(const std::vector<double> &x,
                             const std::string &name) const {
    const std::vector<double> &w = weights_.at(name);
    const size_t rows = w.size() / x.size();
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < x.size(); ++c)
        y[r] += w[r * x.size() + c] * x[c];
    return y;
  }

  std::vector<double> rmsNorm(const std::vector<double> &x,
                              const std::string &name) const {
    double sumSquares = 0;
    for (double v : x)
      sumSquares += v * v;
    const double inv = 1 / std::sqrt(sumSquares / x.size() + eps_);
    const std::vector<double> &w = weights_.at(name);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = x[i] * inv * w[i];
    return y;
  }

  /// Hugging Face rotate_half rotary embedding of every head at `position`.
  void rotate(std::vector<double> &x, int64_t heads, int64_t position) const {
    const int64_t half = headDim_ / 2;
    for (int64_t head = 0; head < heads; ++head)
      for (int64_t f = 0; f < half; ++f) {
        const double angle =
            position /
            std::pow(theta_, 2.0 * f / static_cast<double>(headDim_));
        double &a = x[head * headDim_ + f], &b = x[head * headDim_ + f + half];
        const double x1 = a, x2 = b;
        a = x1 * std::cos(angle) - x2 * std::sin(angle);
        b = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
  }

  static void add(std::vector<double> &x, const std::vector<double> &y) {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] += y[i];
  }

  int64_t hidden_ = 0, numLayers_ = 0, numHeads_ = 0, numKVHeads_ = 0;
  int64_t headDim_ = 0, vocab_ = 0;
  double eps_ = 0, theta_ = 0;
  std::map<std::string, std::vector<double>> weights_;
  std::vector<Layer> layers_;
};

/// llama-gqa with max_position_embeddings lowered to kMaxPositions.
std::string makeShortContextModel(const std::string &source) {
  const std::string dir = ::testing::TempDir() + "/streaming_llama_gqa";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ifstream in(source + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["max_position_embeddings"] = kMaxPositions;
  std::ofstream(dir + "/config.json") << config.dump(2);
  fs::create_symlink(source + "/model.safetensors", dir + "/model.safetensors");
  return dir;
}

TEST(Streaming, GeneratesFourWindowsPastMaxPositionsLikeTheReference) {
  const std::string source =
      std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!fs::exists(source + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = makeShortContextModel(source);
  const std::string dir = ::testing::TempDir() + "/streaming_artifact";
  fs::remove_all(dir);
  ToolRun compile =
      runTool(INFER_TOOL_PATH, {"compile", model, "-o", dir, "--block-size",
                                std::to_string(kBlockSize), "--sink-tokens",
                                std::to_string(kSinkTokens), "--window",
                                std::to_string(kWindow)});
  ASSERT_EQ(compile.exitCode, 0) << compile.err;
  StatusOr<Artifact> artifact = loadArtifact(dir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  EXPECT_EQ(artifact->manifest.kvCache.window, kWindow);
  EXPECT_EQ(artifact->manifest.kvCache.sinkTokens, kSinkTokens);

  EngineConfig config = engineConfigFor(*artifact);
  ASSERT_TRUE(config.streaming.enabled());
  EXPECT_EQ(config.maxModelLen, 0);
  const int64_t sinkBlocks = 1, decodeBlocks = sinkBlocks + kWindow / 8 + 1;
  StatusOr<std::unique_ptr<Backend>> backend =
      createTestBackend(*artifact, 4 * decodeBlocks);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();

  const std::vector<int32_t> prompt = {1, 57, 300, 12, 9, 411, 77, 5, 250, 64};
  const int64_t numNew = 4 * kWindow;
  SamplingParams sampling;
  sampling.maxNewTokens = numNew;
  sampling.ignoreEos = true;
  Engine engine(**backend, config);
  StatusOr<RequestId> id = engine.addRequest(prompt, sampling);
  ASSERT_TRUE(id.isOk()) << id.status().message();
  std::vector<int32_t> generated;
  int64_t maxBlocksInUse = 0;
  while (engine.hasUnfinished()) {
    StatusOr<std::vector<RequestOutput>> outputs = engine.step();
    ASSERT_TRUE(outputs.isOk()) << outputs.status().message();
    for (const RequestOutput &out : *outputs)
      generated.insert(generated.end(), out.newTokenIds.begin(),
                       out.newTokenIds.end());
    // The sink block, 4 window blocks, one partly filled by the new token.
    const int64_t inUse =
        engine.kvCache().numBlocks() - engine.kvCache().numFreeBlocks();
    ASSERT_LE(inUse, decodeBlocks) << "after step " << engine.stats().numSteps;
    maxBlocksInUse = std::max(maxBlocksInUse, inUse);
  }
  ASSERT_EQ(static_cast<int64_t>(generated.size()), numNew);
  EXPECT_EQ(maxBlocksInUse, decodeBlocks);
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  ASSERT_GT(static_cast<int64_t>(tokens.size()), kMaxPositions);

  // The reference reads the prompt token by token: no eviction happens
  // before 48 tokens, so that is the engine's one-chunk prefill.
  StatusOr<StreamingReference> reference = StreamingReference::load(source);
  ASSERT_TRUE(reference.isOk()) << reference.status().message();
  StatusOr<Logits> logits =
      streamingLogits(**backend, kBlockSize, config.streaming, tokens);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  ASSERT_EQ(logits->rows, static_cast<int64_t>(tokens.size()));
  double worst = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const std::vector<double> expected = reference->step(tokens[p]);
    ASSERT_LE(reference->cached(), sinkBlocks * kBlockSize + kWindow + 8);
    std::vector<float> expectedF(expected.begin(), expected.end());
    const double err =
        maxRelativeError(logits->row(p), expectedF.data(), reference->vocab());
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-4) << "position " << p;
    for (float v :
         std::vector<float>(logits->row(p), logits->row(p) + logits->vocab))
      ASSERT_TRUE(std::isfinite(v)) << "position " << p;
    if (p + 1 >= prompt.size() && p + 1 < tokens.size()) {
      const int32_t greedy = static_cast<int32_t>(
          std::max_element(expected.begin(), expected.end()) -
          expected.begin());
      EXPECT_EQ(tokens[p + 1], greedy) << "generated token " << p + 1;
    }
  }
  RecordProperty("max_rel_err", std::to_string(worst));
}

} // namespace
} // namespace infer::testing
