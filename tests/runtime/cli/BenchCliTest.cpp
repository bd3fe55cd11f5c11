//===- BenchCliTest.cpp - infer bench, end to end -------------------------===//

#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(InferBench, ReportsThroughputAndLatencies) {
  const std::string model = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!fs::exists(model + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  StatusOr<Artifact> a = buildLlamaArtifact(model);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  const std::string dir = ::testing::TempDir() + "/infer_bench_llama_gqa";
  fs::remove_all(dir);
  ASSERT_TRUE(writeTestArtifact(*a, dir).isOk());

  const std::vector<std::vector<std::string>> extras = {
      {}, {"--max-num-seqs", "1"}, {"--request-rate", "200"}};
  for (const std::vector<std::string> &extra : extras) {
    std::vector<std::string> args = {"bench",        dir, "--input-len",   "9",
                                     "--output-len", "5", "--num-prompts", "4",
                                     "--seed",       "3", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    ToolRun run = runTool(INFER_TOOL_PATH, args);
    ASSERT_EQ(run.exitCode, 0) << run.err;
    json j = json::parse(run.out);
    EXPECT_EQ(j["num_prompts"], 4);
    EXPECT_GT(j["request_throughput"].get<double>(), 0.0);
    EXPECT_GT(j["output_throughput"].get<double>(), 0.0);
    EXPECT_GE(j["ttft_ms"]["p99"].get<double>(),
              j["ttft_ms"]["p50"].get<double>());
    EXPECT_TRUE(j["tpot_ms"].contains("p50"));
    EXPECT_TRUE(j["itl_ms"].contains("p99"));
    // 4 prompts of 9 tokens, then 4 decodes of each.
    EXPECT_EQ(j["num_computed_tokens"], 4 * 9 + 4 * 4);
    EXPECT_TRUE(j["acceptance_rate"].is_null());
    // auto: the cpu's budget (cuda's is 8192, or 16384 offline on a GPU of
    // 70 GiB or more: autoMaxNumBatchedTokens).
    EXPECT_EQ(j["max_num_batched_tokens"], 2048);
  }
  ToolRun run =
      runTool(INFER_TOOL_PATH, {"bench", dir, "--input-len", "4",
                                "--output-len", "3", "--num-prompts", "2"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("req/s"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("TTFT"), std::string::npos);
  run = runTool(INFER_TOOL_PATH, {"bench", dir, "--num-prompts", "0"});
  EXPECT_EQ(run.exitCode, 1);
  EXPECT_NE(run.err.find("error"), std::string::npos) << run.err;
  // The step profile is the one-GPU cuda backend's.
  run = runTool(INFER_TOOL_PATH, {"bench", dir, "--num-prompts", "1",
                                  "--backend", "cpu", "--profile"});
  EXPECT_EQ(run.exitCode, 1);
  EXPECT_NE(run.err.find("--profile times the steps of the one-GPU cuda"),
            std::string::npos)
      << run.err;
}

} // namespace
} // namespace infer::testing
