//===- MetricsTest.cpp - Prometheus text exposition -----------------------===//

#include "runtime/serving/Metrics.h"
#include "runtime/serving/HttpServer.h"
#include "runtime/serving/OpenAiServer.h"

#include <gtest/gtest.h>

#include <sstream>

namespace infer::serving {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndCumulativeHistograms) {
  ServingMetrics m("my \"model\"");
  m.observeTimeToFirstToken(0.003);
  m.observeTimeToFirstToken(0.2);
  m.observeFinished(1.5, 10, 4, "stop");
  m.observeFinished(0.1, 3, 0, "abort");
  m.addPromptTokens(13);
  m.addGeneratedTokens(4);
  m.addPrefixCacheQuery(13, 8);
  m.countHttpResponse(200);
  m.countHttpResponse(429);
  EngineGauges g;
  g.numRunning = 2;
  g.numWaiting = 1;
  g.kvCacheUsage = 0.25;
  g.numSteps = 7;
  g.deviceIdleSeconds = 0.5;
  const std::string text = m.render(g);
  const std::string labels = "{model_name=\"my \\\"model\\\"\"}";
  for (const std::string &line : std::vector<std::string>{
           "# TYPE infer:num_requests_running gauge",
           "infer:num_requests_running" + labels + " 2",
           "infer:num_requests_waiting" + labels + " 1",
           "infer:kv_cache_usage_perc" + labels + " 0.25",
           "infer:engine_steps_total" + labels + " 7",
           "infer:device_idle_seconds_total" + labels + " 0.5",
           "infer:prompt_tokens_total" + labels + " 13",
           "infer:generation_tokens_total" + labels + " 4",
           "infer:prefix_cache_queries_total" + labels + " 13",
           "infer:prefix_cache_hits_total" + labels + " 8",
           std::string("infer:request_success_total{model_name=\"my "
                       "\\\"model\\\"\",finished_reason=\"stop\"} 1"),
           std::string("infer:request_success_total{model_name=\"my "
                       "\\\"model\\\"\",finished_reason=\"length\"} 0"),
           "# TYPE infer:time_to_first_token_seconds histogram",
           std::string("infer:time_to_first_token_seconds_bucket{model_name="
                       "\"my \\\"model\\\"\",le=\"0.001\"} 0"),
           std::string("infer:time_to_first_token_seconds_bucket{model_name="
                       "\"my \\\"model\\\"\",le=\"0.005\"} 1"),
           std::string("infer:time_to_first_token_seconds_bucket{model_name="
                       "\"my \\\"model\\\"\",le=\"0.25\"} 2"),
           std::string("infer:time_to_first_token_seconds_bucket{model_name="
                       "\"my \\\"model\\\"\",le=\"+Inf\"} 2"),
           "infer:time_to_first_token_seconds_count" + labels + " 2",
           "infer:e2e_request_latency_seconds_sum" + labels + " 1.6",
           std::string("infer:http_requests_total{model_name=\"my "
                       "\\\"model\\\"\",status=\"429\"} 1"),
       })
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line;
  // Every sample line is NAME[{labels}] VALUE.
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    EXPECT_EQ(line.rfind("infer:", 0), 0u) << line;
    EXPECT_NE(line.rfind(' '), std::string::npos) << line;
  }
}

TEST(MetricsTest, DeviceIdleOnlyWhereTheBackendMeasuresIt) {
  ServingMetrics m("m");
  EngineGauges g; // deviceIdleSeconds < 0: a backend without a device clock
  const std::string text = m.render(g);
  EXPECT_EQ(text.find("infer:device_idle_seconds_total"), std::string::npos);
  EXPECT_NE(text.find("infer:engine_steps_total{model_name=\"m\"} 0\n"),
            std::string::npos);
}

TEST(MetricsTest, ApiKeysCompareWithoutShortcuts) {
  EXPECT_TRUE(constantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(constantTimeEquals("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(constantTimeEquals("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(constantTimeEquals("", "Bearer abc"));
  EXPECT_TRUE(constantTimeEquals("", ""));
}

} // namespace
} // namespace infer::serving
