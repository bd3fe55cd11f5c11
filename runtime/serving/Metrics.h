//===- Metrics.h - Serving metrics in Prometheus text format ----*- C++ -*-===//
//
// The counters, gauges and histograms `infer serve` exposes at /metrics,
// named as vLLM names the same quantities with the prefix `infer:` and
// labelled with model_name. The exposition is Prometheus' text format
// (version 0.0.4), written here: the format is a few lines per metric, and
// prometheus-cpp would add a dependency (and its own HTTP exposer) for it.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_METRICS_H
#define INFER_RUNTIME_SERVING_METRICS_H

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace infer::serving {

/// Cumulative buckets (upper bounds, +Inf implied), a sum and a count.
class Histogram {
public:
  explicit Histogram(std::vector<double> upperBounds);
  void observe(double value);
  /// `name`_bucket{le=...}, _sum and _count lines with `labels`.
  void render(std::string &out, const std::string &name,
              const std::string &labels) const;
  int64_t count() const { return count_; }

private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0.0;
  int64_t count_ = 0;
};

/// Gauges read from the engine when /metrics is scraped.
struct EngineGauges {
  int64_t numRunning = 0;
  int64_t numWaiting = 0;
  /// Used KV blocks / all blocks, 0..1.
  double kvCacheUsage = 0.0;
  int64_t numPreemptions = 0;
  int64_t numDraftTokens = 0;
  int64_t numAcceptedTokens = 0;
  /// Forward calls so far, and the device's idle time between them
  /// (EngineStats::deviceIdleSeconds; negative: the backend does not
  /// measure it, and the counter is left out).
  int64_t numSteps = 0;
  double deviceIdleSeconds = -1.0;
};

/// Every serving metric; thread-safe.
class ServingMetrics {
public:
  explicit ServingMetrics(std::string modelName);

  void observeTimeToFirstToken(double seconds);
  void observeInterTokenLatency(double seconds);
  void observeQueueTime(double seconds);
  /// A finished request: its latency, token counts and finish reason
  /// ("stop", "length" or "abort").
  void observeFinished(double e2eSeconds, int64_t promptTokens,
                       int64_t generationTokens, const std::string &reason);
  void addPrefixCacheQuery(int64_t queriedTokens, int64_t hitTokens);
  void addGeneratedTokens(int64_t tokens);
  void addPromptTokens(int64_t tokens);
  /// An HTTP response, by status code (infer:http_requests_total).
  void countHttpResponse(int status);

  /// The whole exposition.
  std::string render(const EngineGauges &gauges) const;

private:
  std::string labels_;
  mutable std::mutex mutex_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram queueTime_;
  Histogram promptTokensPerRequest_;
  Histogram generationTokensPerRequest_;
  int64_t promptTokens_ = 0;
  int64_t generationTokens_ = 0;
  int64_t prefixQueries_ = 0;
  int64_t prefixHits_ = 0;
  std::map<std::string, int64_t> finished_;
  std::map<int, int64_t> httpResponses_;
};

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_METRICS_H
