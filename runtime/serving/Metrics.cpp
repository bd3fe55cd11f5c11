//===- Metrics.cpp - Serving metrics in Prometheus text format ------------===//

#include "runtime/serving/Metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace infer::serving {

namespace {

std::string number(double value) {
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  // The shortest text that reads back as the same double (0.005, not
  // 0.0050000000000000001).
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}

/// `{a="x",b="y"}` from a label list that may be empty.
std::string braces(const std::string &labels, const std::string &extra = "") {
  std::string inner = labels;
  if (!extra.empty())
    inner += (inner.empty() ? "" : ",") + extra;
  return inner.empty() ? "" : "{" + inner + "}";
}

/// Label values escape backslash, quote and newline.
std::string escapeLabel(const std::string &value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string &out, const std::string &name, const char *type,
            const char *help) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

void sample(std::string &out, const std::string &name,
            const std::string &labels, double value) {
  out += name + labels + " " + number(value) + "\n";
}

// vLLM's buckets for the same histograms.
const std::vector<double> kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenBuckets = {
    1,   2,    5,    10,   20,    50,    100,   200,
    500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

} // namespace

Histogram::Histogram(std::vector<double> upperBounds)
    : bounds_(std::move(upperBounds)), counts_(bounds_.size(), 0) {}

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (value <= bounds_[i])
      ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string &out, const std::string &name,
                       const std::string &labels) const {
  for (size_t i = 0; i < bounds_.size(); ++i)
    sample(out, name + "_bucket",
           braces(labels, "le=\"" + number(bounds_[i]) + "\""),
           static_cast<double>(counts_[i]));
  sample(out, name + "_bucket", braces(labels, "le=\"+Inf\""),
         static_cast<double>(count_));
  sample(out, name + "_sum", braces(labels), sum_);
  sample(out, name + "_count", braces(labels), static_cast<double>(count_));
}

ServingMetrics::ServingMetrics(std::string modelName)
    : labels_("model_name=\"" + escapeLabel(modelName) + "\""),
      ttft_(kTtftBuckets), itl_(kItlBuckets), e2e_(kLatencyBuckets),
      queueTime_(kLatencyBuckets), promptTokensPerRequest_(kTokenBuckets),
      generationTokensPerRequest_(kTokenBuckets) {
  for (const char *reason : {"stop", "length", "abort"})
    finished_[reason] = 0;
}

void ServingMetrics::observeTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServingMetrics::observeInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.observe(seconds);
}

void ServingMetrics::observeQueueTime(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  queueTime_.observe(seconds);
}

void ServingMetrics::observeFinished(double e2eSeconds, int64_t promptTokens,
                                     int64_t generationTokens,
                                     const std::string &reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  e2e_.observe(e2eSeconds);
  promptTokensPerRequest_.observe(static_cast<double>(promptTokens));
  generationTokensPerRequest_.observe(static_cast<double>(generationTokens));
  ++finished_[reason];
}

void ServingMetrics::addPrefixCacheQuery(int64_t queriedTokens,
                                         int64_t hitTokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prefixQueries_ += queriedTokens;
  prefixHits_ += hitTokens;
}

void ServingMetrics::addGeneratedTokens(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  generationTokens_ += tokens;
}

void ServingMetrics::addPromptTokens(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  promptTokens_ += tokens;
}

void ServingMetrics::countHttpResponse(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++httpResponses_[status];
}

std::string ServingMetrics::render(const EngineGauges &gauges) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  const std::string labels = braces(labels_);
  auto gauge = [&](const char *name, const char *help, double value) {
    header(out, name, "gauge", help);
    sample(out, name, labels, value);
  };
  auto counter = [&](const char *name, const char *help, double value) {
    header(out, name, "counter", help);
    sample(out, name, labels, value);
  };
  auto histogram = [&](const char *name, const char *help, const Histogram &h) {
    header(out, name, "histogram", help);
    h.render(out, name, labels_);
  };
  gauge("infer:num_requests_running",
        "Number of requests in model execution batches.",
        static_cast<double>(gauges.numRunning));
  gauge("infer:num_requests_waiting", "Number of requests waiting to be run.",
        static_cast<double>(gauges.numWaiting));
  gauge("infer:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.", gauges.kvCacheUsage);
  counter("infer:num_preemptions_total",
          "Cumulative number of preemptions from the engine.",
          static_cast<double>(gauges.numPreemptions));
  counter("infer:engine_steps_total",
          "Cumulative number of engine steps (forward calls).",
          static_cast<double>(gauges.numSteps));
  if (gauges.deviceIdleSeconds >= 0)
    counter("infer:device_idle_seconds_total",
            "Cumulative time the device sat idle between forward calls "
            "(device timestamps).",
            gauges.deviceIdleSeconds);
  counter("infer:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(prefixQueries_));
  counter("infer:prefix_cache_hits_total",
          "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(prefixHits_));
  counter("infer:prompt_tokens_total", "Number of prefill tokens processed.",
          static_cast<double>(promptTokens_));
  counter("infer:generation_tokens_total",
          "Number of generation tokens processed.",
          static_cast<double>(generationTokens_));
  header(out, "infer:request_success_total", "counter",
         "Count of finished requests by finish reason.");
  for (const auto &[reason, count] : finished_)
    sample(out, "infer:request_success_total",
           braces(labels_, "finished_reason=\"" + reason + "\""),
           static_cast<double>(count));
  counter("infer:spec_decode_num_draft_tokens_total",
          "Number of draft tokens proposed.",
          static_cast<double>(gauges.numDraftTokens));
  counter("infer:spec_decode_num_accepted_tokens_total",
          "Number of draft tokens accepted.",
          static_cast<double>(gauges.numAcceptedTokens));
  histogram("infer:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.", ttft_);
  histogram("infer:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.", itl_);
  histogram("infer:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.", e2e_);
  histogram("infer:request_queue_time_seconds",
            "Histogram of time spent waiting in the queue in seconds.",
            queueTime_);
  histogram("infer:request_prompt_tokens",
            "Number of prefill tokens processed per request.",
            promptTokensPerRequest_);
  histogram("infer:request_generation_tokens",
            "Number of generation tokens processed per request.",
            generationTokensPerRequest_);
  header(out, "infer:http_requests_total", "counter",
         "HTTP responses by status code.");
  for (const auto &[status, count] : httpResponses_)
    sample(out, "infer:http_requests_total",
           braces(labels_, "status=\"" + std::to_string(status) + "\""),
           static_cast<double>(count));
  return out;
}

} // namespace infer::serving
