//===- BenchCliTest.cpp - infer bench, end to end -------------------------===//

#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <sys/wait.h>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// stdout of `infer ARGS` (stderr dropped) and its exit status.
std::pair<int, std::string> runInfer(const std::string &args) {
  FILE *pipe = ::popen(
      (std::string(INFER_TOOL_PATH) + " " + args + " 2>/dev/null").c_str(),
      "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0)
    out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(InferBench, ReportsThroughputAndLatencies) {
  const std::string model = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!fs::exists(model + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  StatusOr<Artifact> a = buildLlamaArtifact(model);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  const std::string dir = ::testing::TempDir() + "/infer_bench_llama_gqa";
  fs::remove_all(dir);
  ASSERT_TRUE(writeTestArtifact(*a, dir).isOk());

  for (const char *extra : {"", " --max-num-seqs 1", " --request-rate 200"}) {
    auto [code, out] = runInfer("bench " + dir +
                                " --input-len 9 --output-len 5 "
                                "--num-prompts 4 --seed 3 --json" +
                                extra);
    ASSERT_EQ(code, 0) << extra;
    json j = json::parse(out);
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
  }
  auto [code, out] = runInfer("bench " + dir +
                              " --input-len 4 --output-len 3 "
                              "--num-prompts 2");
  ASSERT_EQ(code, 0);
  EXPECT_NE(out.find("req/s"), std::string::npos) << out;
  EXPECT_NE(out.find("TTFT"), std::string::npos);
  EXPECT_NE(runInfer("bench " + dir + " --num-prompts 0").first, 0);
}

} // namespace
} // namespace infer::testing
