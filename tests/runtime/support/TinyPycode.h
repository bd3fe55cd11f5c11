//===- TinyPycode.h - The trained tiny model as a test fixture --*- C++ -*-===//
//
// The trained tiny-pycode target of the shared fixtures (INFER_FIXTURES_DIR)
// with the prompts of its HF golden outputs, built as a Llama plan: the base
// of the tests that run the engine on a real model. Skips when the fixture
// is missing.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_TINYPYCODE_H
#define INFER_TESTS_RUNTIME_SUPPORT_TINYPYCODE_H

#include "runtime/tokenizer/Tokenizer.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace infer::testing {

class TinyPycodeTest : public ::testing::Test {
protected:
  static std::string modelDir() {
    return std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
  }
  static std::string goldenPath() {
    return std::string(INFER_FIXTURES_DIR) + "/golden/tiny-pycode.json";
  }

  void SetUp() override {
    if (!std::filesystem::exists(modelDir() + "/config.json") ||
        !std::filesystem::exists(goldenPath()))
      GTEST_SKIP() << "fixture missing: " << modelDir();
    StatusOr<Artifact> a = buildLlamaArtifact(modelDir());
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    config_ = engineConfigFor(artifact_);
    std::ifstream in(goldenPath());
    const nlohmann::json golden = nlohmann::json::parse(in);
    for (const nlohmann::json &c : golden["tiny-pycode-target"])
      prompts_.push_back(c["input_ids"].get<std::vector<int32_t>>());
  }

  /// Loads the model's tokenizer into `tokenizer_` and the engine config
  /// (stop strings, texts); call from a derived SetUp after this one's.
  void useTokenizer() {
    StatusOr<std::unique_ptr<Tokenizer>> t =
        Tokenizer::fromFile(modelDir() + "/tokenizer.json");
    ASSERT_TRUE(t.isOk()) << t.status().message();
    tokenizer_ = std::move(t).value();
    config_.tokenizer = tokenizer_.get();
  }

  /// A CPU backend of the model with `blocks` KV blocks.
  std::unique_ptr<Backend> backend(int64_t blocks) {
    StatusOr<std::unique_ptr<Backend>> b =
        createTestBackend(artifact_, blocks, 2);
    EXPECT_TRUE(b.isOk()) << b.status().message();
    return b.isOk() ? std::move(b).value() : nullptr;
  }

  /// Greedy, exactly `maxNewTokens` tokens.
  static SamplingParams greedy(int64_t maxNewTokens) {
    SamplingParams p;
    p.maxNewTokens = maxNewTokens;
    p.ignoreEos = true;
    return p;
  }

  Artifact artifact_;
  EngineConfig config_;
  std::vector<std::vector<int32_t>> prompts_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_TINYPYCODE_H
