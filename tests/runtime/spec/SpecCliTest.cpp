//===- SpecCliTest.cpp - infer generate/bench with speculative decoding ---===//
//
// The CLI on hand-built tiny-pycode artifacts: --draft and
// --ngram-speculation print the non-speculative greedy tokens plus an
// "acceptance_rate" per line; bench reports the acceptance rate; bad
// combinations of options are errors.
//
//===----------------------------------------------------------------------===//

#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

ToolRun runInfer(const std::vector<std::string> &args) {
  return runTool(INFER_TOOL_PATH, args);
}

class SpecCli : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(kModels + "tiny-pycode-draft/config.json"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    target_ = write("tiny-pycode-target");
    draft_ = write("tiny-pycode-draft");
    std::ifstream in(std::string(INFER_FIXTURES_DIR) +
                     "/golden/tiny-pycode.json");
    json golden = json::parse(in)["tiny-pycode-target"];
    for (size_t i = 0; i < 2; ++i) {
      std::string ids;
      for (int32_t id : golden[i]["input_ids"].get<std::vector<int32_t>>())
        ids += (ids.empty() ? "" : ",") + std::to_string(id);
      prompts_.push_back(ids);
      greedy_.push_back(golden[i]["greedy_fp32"].get<std::vector<int32_t>>());
    }
  }

  std::string write(const std::string &model) {
    StatusOr<Artifact> a = buildLlamaArtifact(kModels + model);
    EXPECT_TRUE(a.isOk()) << a.status().message();
    const std::string dir = ::testing::TempDir() + "/spec_cli_" + model + "." +
                            std::to_string(::getpid());
    fs::remove_all(dir);
    Status s = writeTestArtifact(*a, dir);
    EXPECT_TRUE(s.isOk()) << s.message();
    return dir;
  }

  void TearDown() override {
    for (const std::string &dir : {target_, draft_})
      if (!dir.empty())
        fs::remove_all(dir);
  }

  std::vector<std::string> generateArgs() const {
    return {"generate",     target_,     "--token-ids",      prompts_[0],
            "--token-ids",  prompts_[1], "--max-new-tokens", "48",
            "--ignore-eos", "--json"};
  }

  void expectGoldenWithAcceptance(const ToolRun &run, double minRate) {
    ASSERT_EQ(run.exitCode, 0);
    const std::vector<json> lines = jsonLines(run.out);
    ASSERT_EQ(lines.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(lines[i]["output_token_ids"].get<std::vector<int32_t>>(),
                greedy_[i]);
      ASSERT_TRUE(lines[i].contains("acceptance_rate"));
      const double rate = lines[i]["acceptance_rate"].get<double>();
      EXPECT_GE(rate, minRate);
      EXPECT_LE(rate, 1.0);
    }
  }

  std::string target_, draft_;
  std::vector<std::string> prompts_;
  std::vector<std::vector<int32_t>> greedy_;
};

TEST_F(SpecCli, DraftModelGreedyOutputAndAcceptanceRate) {
  std::vector<std::string> args = generateArgs();
  args.insert(args.end(), {"--draft", draft_, "--num-speculative-tokens", "3"});
  expectGoldenWithAcceptance(runInfer(args), 0.5);
}

TEST_F(SpecCli, NgramGreedyOutputAndAcceptanceRate) {
  std::vector<std::string> args = generateArgs();
  args.insert(args.end(),
              {"--ngram-speculation", "--ngram-max", "3", "--ngram-min", "1"});
  expectGoldenWithAcceptance(runInfer(args), 0.3);
}

TEST_F(SpecCli, WithoutSpeculationThereIsNoAcceptanceRate) {
  const ToolRun run = runInfer(generateArgs());
  ASSERT_EQ(run.exitCode, 0);
  for (const json &line : jsonLines(run.out))
    EXPECT_FALSE(line.contains("acceptance_rate"));
}

TEST_F(SpecCli, BenchReportsTheAcceptanceRate) {
  const ToolRun run =
      runInfer({"bench", target_, "--input-len", "8", "--output-len", "8",
                "--num-prompts", "2", "--draft", draft_, "--json"});
  ASSERT_EQ(run.exitCode, 0);
  const std::vector<json> lines = jsonLines(run.out);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(lines[0]["acceptance_rate"].is_number());
  EXPECT_EQ(lines[0]["num_speculative_tokens"], 4);
}

TEST_F(SpecCli, BadSpeculationOptionsAreErrors) {
  for (const std::vector<std::string> &extra :
       std::vector<std::vector<std::string>>{
           {"--draft", "X", "--ngram-speculation"},
           {"--num-speculative-tokens", "3"},
           {"--ngram-speculation", "--num-speculative-tokens", "0"},
           {"--ngram-speculation", "--ngram-min", "3", "--ngram-max", "2"},
           {"--draft", "/nonexistent"}}) {
    std::vector<std::string> args = generateArgs();
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(runInfer(args).exitCode, 1) << extra[0] << " " << extra[1];
  }
}

} // namespace
} // namespace infer::testing
