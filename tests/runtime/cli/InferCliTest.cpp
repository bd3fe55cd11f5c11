//===- InferCliTest.cpp - The infer tool's interface, end to end ----------===//
//
// Runs the built `infer` binary on artifacts written from hand-built plans
// (no compiler needed) and checks its outputs and error behaviour.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ToolRun runInfer(const std::vector<std::string> &args) {
  return runTool(INFER_TOOL_PATH, args);
}

std::string join(const std::vector<int32_t> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

class InferCli : public ::testing::Test {
protected:
  /// Writes (once per test) the artifact of a fixture model.
  std::string artifactFor(const std::string &modelDir) {
    if (!fs::exists(modelDir + "/config.json"))
      return "";
    StatusOr<Artifact> a = buildLlamaArtifact(modelDir);
    EXPECT_TRUE(a.isOk()) << a.status().message();
    const std::string dir = ::testing::TempDir() + "/infer_cli_" +
                            fs::path(modelDir).filename().string();
    fs::remove_all(dir);
    Status s = writeTestArtifact(*a, dir);
    EXPECT_TRUE(s.isOk()) << s.message();
    return dir;
  }
};

const std::string kRand = std::string(INFER_FIXTURES_DIR) + "/rand/";

TEST_F(InferCli, GenerateBatchMatchesHfGreedy) {
  const std::string artifact = artifactFor(kRand + "llama-gqa");
  if (artifact.empty())
    GTEST_SKIP() << "fixture missing";
  std::ifstream in(kRand + "llama-gqa/expected.json");
  json expected = json::parse(in);
  std::vector<std::string> args = {
      "generate",      artifact, "--max-new-tokens", "24",
      "--temperature", "0",      "--ignore-eos",     "--json"};
  for (const json &input : expected["inputs"]) {
    args.push_back("--token-ids");
    args.push_back(join(input.get<std::vector<int32_t>>()));
  }
  ToolRun run = runInfer(args);
  ASSERT_EQ(run.exitCode, 0) << run.err;
  std::vector<json> lines = jsonLines(run.out);
  ASSERT_EQ(lines.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(lines[k]["prompt_token_ids"], expected["inputs"][k]);
    EXPECT_EQ(lines[k]["output_token_ids"], expected["greedy"][k]);
    EXPECT_EQ(lines[k]["text"], "") << "no tokenizer in this artifact";
  }
  // Plain mode without a tokenizer prints the ids.
  run = runInfer({"generate", artifact, "--token-ids", "175",
                  "--max-new-tokens", "3", "--ignore-eos"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, "391 471 305\n");
}

TEST_F(InferCli, LogitsWritesAllPositions) {
  const std::string artifact = artifactFor(kRand + "mistral-swa");
  if (artifact.empty())
    GTEST_SKIP() << "fixture missing";
  std::ifstream in(kRand + "mistral-swa/expected.json");
  json expected = json::parse(in);
  const std::string out =
      ::testing::TempDir() + "/infer_cli_logits.safetensors";
  ToolRun run = runInfer(
      {"logits", artifact, "--token-ids",
       join(expected["inputs"][2].get<std::vector<int32_t>>()), "-o", out});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  auto ours = safetensors::File::open(out);
  auto ref = safetensors::File::open(kRand +
                                     "mistral-swa/expected_logits.safetensors");
  ASSERT_TRUE(ours.isOk() && ref.isOk());
  EXPECT_EQ((*ours)->header().find("logits")->shape,
            (std::vector<int64_t>{33, 512}));
  auto a = (*ours)->readAsF32("logits");
  auto b = (*ref)->readAsF32("logits_2");
  EXPECT_LT(
      maxRelativeError(a->data(), b->data(), static_cast<int64_t>(b->size())),
      1e-4);
}

TEST_F(InferCli, TextPromptsUseTheTokenizer) {
  const std::string model =
      std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
  const std::string artifact = artifactFor(model);
  if (artifact.empty())
    GTEST_SKIP() << "fixture missing";
  std::ifstream in(std::string(INFER_FIXTURES_DIR) +
                   "/golden/tiny-pycode.json");
  json golden = json::parse(in)["tiny-pycode-target"];
  ToolRun run = runInfer({"generate", artifact, "--prompt", golden[0]["prompt"],
                          "--prompt", golden[1]["prompt"], "--max-new-tokens",
                          "48", "--json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  std::vector<json> lines = jsonLines(run.out);
  ASSERT_EQ(lines.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(lines[k]["prompt_token_ids"], golden[k]["input_ids"]);
    std::vector<int32_t> ours = lines[k]["output_token_ids"];
    std::vector<int32_t> ref = golden[k]["greedy_fp32"];
    EXPECT_EQ(ours, ref);
    EXPECT_EQ(lines[k]["text"], golden[k]["text_fp32"]);
  }

  run =
      runInfer({"tokenize", artifact, "--text", golden[0]["prompt"], "--json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["ids"], golden[0]["input_ids"]);
  run = runInfer({"tokenize", model, "--decode",
                  join(golden[0]["greedy_fp32"].get<std::vector<int32_t>>())});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, golden[0]["text_fp32"].get<std::string>() + "\n");
}

TEST_F(InferCli, InspectShowsManifestAndProgram) {
  const std::string artifact = artifactFor(kRand + "llama-gqa");
  if (artifact.empty())
    GTEST_SKIP() << "fixture missing";
  ToolRun run = runInfer({"inspect", artifact});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("LlamaForCausalLM"), std::string::npos);
  EXPECT_NE(run.out.find("block_size 16"), std::string::npos);
  EXPECT_NE(run.out.find("paged_attention x3"), std::string::npos);
  EXPECT_NE(run.out.find("// hand-built test plan"), std::string::npos);
}

TEST_F(InferCli, ErrorsAreMessagesWithExitOne) {
  const std::string artifact = artifactFor(kRand + "llama-gqa");
  if (artifact.empty())
    GTEST_SKIP() << "fixture missing";
  auto expectError = [](const std::vector<std::string> &args,
                        const std::string &needle) {
    ToolRun run = runInfer(args);
    EXPECT_EQ(run.exitCode, 1) << args[0];
    EXPECT_NE(run.err.find(needle), std::string::npos) << run.err;
    EXPECT_EQ(run.err.find("internal error"), std::string::npos) << run.err;
  };
  expectError({"generate", "/nonexistent", "--token-ids", "1"},
              "not a directory");
  // Built without CUDA, or no GPU here: a message; with a GPU it runs.
  ToolRun cuda =
      runInfer({"generate", artifact, "--token-ids", "1", "--backend", "cuda"});
  if (cuda.exitCode != 0)
    EXPECT_NE(cuda.err.find("CUDA"), std::string::npos) << cuda.err;
  expectError({"generate", artifact, "--token-ids", "1,x"}, "bad token id");
  expectError({"generate", artifact, "--prompt", "hi"}, "no tokenizer");
  expectError({"generate", artifact}, "--prompt or --token-ids");
  expectError(
      {"generate", artifact, "--token-ids", "1", "--max-new-tokens", "ten"},
      "expects an integer");
  expectError({"generate", artifact, "--token-ids", "600"},
              "outside the vocabulary");
  expectError({"generate", artifact, "--bogus"}, "unknown option '--bogus'");
  expectError({"logits", artifact, "--token-ids", "1"}, "-o");
  expectError({"frobnicate"}, "unknown command");
#ifndef INFER_HAS_COMPILER
  expectError(
      {"compile", kRand + "llama-gqa", "-o", "/tmp/x"},
      "infer was built without the compiler (INFER_ENABLE_COMPILER=OFF)");
  expectError({"import", kRand + "llama-gqa"},
              "infer was built without the compiler");
  expectError({"generate", kRand + "llama-gqa", "--token-ids", "1"},
              "infer was built without the compiler");
#endif

  // A manifest pointing at weights with another header.
  const std::string moved = ::testing::TempDir() + "/infer_cli_moved";
  fs::remove_all(moved);
  fs::create_directories(moved);
  fs::copy_file(kRand + "llama-mha-tied/model.safetensors",
                moved + "/model.safetensors");
  expectError({"generate", artifact, "--token-ids", "1", "--weights", moved},
              "the artifact was compiled against");
}

TEST_F(InferCli, HelpExitsZero) {
  ToolRun run = runInfer({"--help"});
  EXPECT_EQ(run.exitCode, 0);
  EXPECT_NE(run.out.find("generate"), std::string::npos);
  for (const char *cmd :
       {"import", "compile", "generate", "logits", "tokenize", "inspect"}) {
    run = runInfer({cmd, "--help"});
    EXPECT_EQ(run.exitCode, 0) << cmd;
    EXPECT_NE(run.out.find(std::string("usage: infer ") + cmd),
              std::string::npos);
  }
}

} // namespace
} // namespace infer::testing
