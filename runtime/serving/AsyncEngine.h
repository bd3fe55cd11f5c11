//===- AsyncEngine.h - The engine on its own thread -------------*- C++ -*-===//
//
// The Engine is single-threaded: addRequest, abort and step mutate it
// without locks. AsyncEngine owns it on one thread and gives any number of
// other threads (an HTTP server's io threads) a thread-safe surface:
//
//   submit ──▶ inbox (mutex) ──▶ engine thread: drain inbox, step(), emit
//   abort  ──▶                                   │
//                                                ▼
//              sink(StreamEvent) per request: the tokens and text that are
//              new since the last event, never the whole history
//
// The engine thread drains the inbox between steps and sleeps on a
// condition variable when there is nothing to run (no spinning). A bounded
// queue (requests submitted but not yet running) refuses submits when full;
// shutdown stops accepting, lets in-flight requests finish within a timeout
// and aborts the rest.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_ASYNCENGINE_H
#define INFER_RUNTIME_SERVING_ASYNCENGINE_H

#include "runtime/engine/Engine.h"
#include "runtime/serving/Metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace infer::serving {

struct GenerationRequest {
  std::vector<int32_t> promptTokenIds;
  SamplingParams sampling;
  /// Lower runs first under SchedulingPolicy::kPriority.
  int64_t priority = 0;
};

/// What one step added to one completion of a request.
struct CompletionDelta {
  /// Which completion (0 .. n-1).
  int64_t index = 0;
  std::vector<int32_t> tokenIds;
  /// Text that became final with these tokens. With stop strings the last
  /// (longest stop string - 1) bytes are held back until the completion
  /// ends, so no prefix of a stop string is ever sent.
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  bool finished = false;
  FinishReason finishReason = FinishReason::kNone;
};

/// One event of a request's stream, delivered in order.
struct StreamEvent {
  /// An error ends the stream (the engine failed, or rejected the request).
  Status status;
  CompletionDelta delta;
  int64_t numPromptTokens = 0;
  /// Prompt tokens whose keys and values came from the prefix cache.
  int64_t numCachedTokens = 0;
  /// The last event of the request: every completion has finished.
  bool done = false;
};

/// Receives a request's events on the engine thread; must return quickly
/// (post the work elsewhere) and may call AsyncEngine::abort.
using StreamSink = std::function<void(StreamEvent)>;

/// A request's events for a blocking consumer (tests, simple clients).
class RequestStream {
public:
  /// The next event, blocking; nullopt after the last one.
  std::optional<StreamEvent> next();
  /// The sink that feeds this stream.
  StreamSink sink();

private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  bool ended_ = false;
};

struct AsyncEngineOptions {
  /// Requests submitted but not yet running that submit accepts; more are
  /// refused with kResourceExhausted (HTTP 429). Negative: unbounded.
  int64_t maxQueuedRequests = -1;
  /// The model name that labels every metric.
  std::string modelName = "model";
};

/// A point-in-time view of the engine for /metrics and /health.
struct EngineSnapshot {
  int64_t numRunning = 0;
  int64_t numWaiting = 0;
  int64_t numBlocks = 0;
  int64_t numFreeBlocks = 0;
  EngineStats stats;
};

class AsyncEngine {
public:
  using Handle = uint64_t;

  /// Starts the engine thread; `engine` (and its backend) must outlive
  /// this object's shutdown.
  AsyncEngine(Engine &engine, AsyncEngineOptions options = {});
  /// Shuts down with no grace period.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine &) = delete;
  AsyncEngine &operator=(const AsyncEngine &) = delete;

  /// Queues a request; its events go to `sink`. Fails with
  /// kResourceExhausted when the queue is full and kUnimplemented once
  /// shutting down or after the engine failed.
  StatusOr<Handle> submit(GenerationRequest request, StreamSink sink);
  /// The same, read through a blocking stream.
  StatusOr<std::shared_ptr<RequestStream>> submit(GenerationRequest request);

  /// Finishes a request now (a client went away): its blocks return to the
  /// pool and its sink gets no more events. Unknown or finished handles
  /// are ignored.
  void abort(Handle handle);

  /// Stops accepting requests, waits up to `timeoutSeconds` for the
  /// in-flight ones to finish, aborts the rest (their sinks get a final
  /// kAbort event) and stops the engine thread. Idempotent.
  void shutdown(double timeoutSeconds);

  /// Requests submitted and not yet done.
  int64_t numInFlight() const;
  /// Requests submitted and not yet running.
  int64_t numQueued() const;
  /// Ok until a step fails; then every request got the error and submit
  /// refuses new ones.
  Status health() const;
  EngineSnapshot snapshot() const;
  ServingMetrics &metrics() { return metrics_; }
  const ServingMetrics &metrics() const { return metrics_; }

private:
  using Clock = std::chrono::steady_clock;

  struct Completion {
    size_t sentTextBytes = 0;
    bool finished = false;
    double lastTokenTime = -1.0;
  };
  struct Tracked {
    StreamSink sink;
    RequestId parentId = 0;
    int64_t numCompletions = 1;
    int64_t numFinished = 0;
    int64_t numPromptTokens = 0;
    size_t holdBackBytes = 0;
    std::unordered_map<RequestId, Completion> completions;
    Clock::time_point arrival;
    bool started = false;
    bool sawFirstToken = false;
  };
  struct Command {
    enum Kind { kAdd, kAbort } kind = kAdd;
    Handle handle = 0;
    GenerationRequest request;
    StreamSink sink;
    Clock::time_point arrival;
  };

  void run();
  void add(Command &command);
  void abortNow(Handle handle);
  void deliver(const RequestOutput &output);
  void failAll(const Status &status);
  /// Marks requests that left the waiting queue and refreshes the gauges.
  void observeScheduling();
  /// The request left the queue: it runs (or ran) in the engine.
  void markStarted(Tracked &tracked);
  void finishTracked(Handle handle, Tracked &tracked);
  double secondsSince(Clock::time_point t) const;

  Engine &engine_;
  AsyncEngineOptions options_;
  ServingMetrics metrics_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<Command> inbox_;
  bool accepting_ = true;
  bool stopping_ = false;
  Status health_;
  Handle nextHandle_ = 1;
  int64_t numInFlight_ = 0;
  int64_t numQueued_ = 0;
  EngineSnapshot snapshot_;

  // Engine-thread state.
  std::unordered_map<Handle, Tracked> tracked_;
  std::unordered_map<RequestId, Handle> handleOf_;
  EngineStats lastStats_;

  std::thread thread_;
};

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_ASYNCENGINE_H
