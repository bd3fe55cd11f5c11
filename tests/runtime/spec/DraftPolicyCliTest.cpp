//===- DraftPolicyCliTest.cpp - The draft's KV cache under pressure -------===//
//
// The draft model's cache follows the target's policy (issue 17): windowed
// for a streaming target, so speculation runs past the draft's pool, and
// given back under memory pressure, so bench with a small pool preempts
// instead of failing the run.
//
//===----------------------------------------------------------------------===//

#include "tests/runtime/support/InferTool.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = std::string(INFER_FIXTURES_DIR) + "/models/";

ToolRun runInfer(const std::vector<std::string> &args) {
  return runTool(INFER_TOOL_PATH, args);
}

class DraftPolicy : public ::testing::Test {
protected:
  void SetUp() override {
#ifndef INFER_HAS_COMPILER
    GTEST_SKIP() << "needs infer compile (streaming artifacts)";
#endif
    if (!fs::exists(kModels + "tiny-pycode-draft/config.json"))
      GTEST_SKIP() << "tiny-pycode fixtures not found";
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = ::testing::TempDir() + "/draft_policy_" + info->name();
    fs::remove_all(root_);
    draft_ = compile("tiny-pycode-draft", "draft", {});
  }
  void TearDown() override {
    if (!root_.empty())
      fs::remove_all(root_);
  }

  std::string compile(const std::string &model, const std::string &name,
                      const std::vector<std::string> &options) {
    std::vector<std::string> args = {"compile", kModels + model, "-o",
                                     root_ + "/" + name};
    args.insert(args.end(), options.begin(), options.end());
    ToolRun run = runInfer(args);
    EXPECT_EQ(run.exitCode, 0) << run.err;
    return root_ + "/" + name;
  }

  std::string root_;
  std::string draft_;
};

std::vector<int32_t> outputIds(const ToolRun &run) {
  EXPECT_EQ(run.exitCode, 0) << run.err;
  std::vector<json> lines = jsonLines(run.out);
  if (lines.size() != 1)
    return {};
  return lines[0]["output_token_ids"].get<std::vector<int32_t>>();
}

TEST_F(DraftPolicy, StreamingTargetWithDraftRunsPastThePool) {
  const std::string target = compile("tiny-pycode-target", "stream",
                                     {"--window", "64", "--sink-tokens", "4"});
  // generate sizes both pools for the streaming bound (10 blocks of 16):
  // the draft used to fail after ~150 tokens.
  const std::vector<std::string> args = {
      "generate",         target, "--token-ids", "1,2,3,4,5",
      "--max-new-tokens", "1200", "--json",      "--ignore-eos"};
  const std::vector<int32_t> plain = outputIds(runInfer(args));
  std::vector<std::string> speculative = args;
  speculative.insert(speculative.end(), {"--draft", draft_});
  ToolRun run = runInfer(speculative);
  EXPECT_EQ(outputIds(run), plain);
  ASSERT_EQ(plain.size(), 1200u);
  EXPECT_NE(run.err.find("acceptance rate"), std::string::npos) << run.err;
}

TEST_F(DraftPolicy, BenchWithADraftPreemptsInASmallPool) {
  const std::string target = compile("tiny-pycode-target", "target", {});
  // 8 requests of 128 tokens (8 blocks each) running at once in 24 blocks.
  ToolRun run =
      runInfer({"bench", target, "--draft", draft_, "--input-len", "64",
                "--output-len", "64", "--num-prompts", "8", "--num-blocks",
                "24", "--max-num-seqs", "8", "--json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  json j = json::parse(run.out);
  EXPECT_EQ(j["num_prompts"], 8);
  EXPECT_GT(j["num_preemptions"].get<int64_t>(), 0);
  EXPECT_GT(j["acceptance_rate"].get<double>(), 0.0);
}

} // namespace
} // namespace infer::testing
