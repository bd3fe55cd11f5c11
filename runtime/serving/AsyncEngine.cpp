//===- AsyncEngine.cpp - The engine on its own thread ---------------------===//

#include "runtime/serving/AsyncEngine.h"

#include <algorithm>

namespace infer::serving {

namespace {

const char *reasonName(FinishReason reason) {
  switch (reason) {
  case FinishReason::kStop:
    return "stop";
  case FinishReason::kLength:
    return "length";
  case FinishReason::kAbort:
  case FinishReason::kNone:
    break;
  }
  return "abort";
}

/// The largest prefix of `text` up to `limit` bytes that ends on a UTF-8
/// character boundary.
size_t characterBoundary(const std::string &text, size_t limit) {
  while (limit > 0 && limit < text.size() &&
         (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80)
    --limit;
  return limit;
}

} // namespace

//===----------------------------------------------------------------------===//
// RequestStream
//===----------------------------------------------------------------------===//

std::optional<StreamEvent> RequestStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty() || ended_; });
  if (events_.empty())
    return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

StreamSink RequestStream::sink() {
  return [this](StreamEvent event) {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool last = event.done;
    events_.push_back(std::move(event));
    ended_ |= last;
    ready_.notify_all();
  };
}

//===----------------------------------------------------------------------===//
// AsyncEngine
//===----------------------------------------------------------------------===//

AsyncEngine::AsyncEngine(Engine &engine, AsyncEngineOptions options)
    : engine_(engine), options_(std::move(options)),
      metrics_(options_.modelName) {
  snapshot_.numBlocks = engine_.kvCache().numBlocks();
  snapshot_.numFreeBlocks = engine_.kvCache().numFreeBlocks();
  thread_ = std::thread([this] { run(); });
}

AsyncEngine::~AsyncEngine() { shutdown(0.0); }

StatusOr<AsyncEngine::Handle> AsyncEngine::submit(GenerationRequest request,
                                                  StreamSink sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!health_.isOk())
    return unimplemented("the engine failed: " + health_.message());
  if (!accepting_)
    return unimplemented("the server is shutting down");
  if (options_.maxQueuedRequests >= 0 &&
      numQueued_ >= options_.maxQueuedRequests)
    return resourceExhausted("the request queue is full (" +
                             std::to_string(options_.maxQueuedRequests) +
                             " requests waiting)");
  Command command;
  command.kind = Command::kAdd;
  command.handle = nextHandle_++;
  command.request = std::move(request);
  command.sink = std::move(sink);
  command.arrival = Clock::now();
  const Handle handle = command.handle;
  inbox_.push_back(std::move(command));
  ++numInFlight_;
  ++numQueued_;
  wake_.notify_one();
  return handle;
}

StatusOr<std::shared_ptr<RequestStream>>
AsyncEngine::submit(GenerationRequest request) {
  auto stream = std::make_shared<RequestStream>();
  // The sink holds the stream alive until its last event.
  StreamSink sink = [stream, feed = stream->sink()](StreamEvent event) {
    feed(std::move(event));
  };
  INFER_ASSIGN_OR_RETURN(Handle handle,
                         submit(std::move(request), std::move(sink)));
  (void)handle;
  return stream;
}

void AsyncEngine::abort(Handle handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  Command command;
  command.kind = Command::kAbort;
  command.handle = handle;
  inbox_.push_back(std::move(command));
  wake_.notify_one();
}

void AsyncEngine::shutdown(double timeoutSeconds) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    accepting_ = false;
    idle_.wait_for(lock,
                   std::chrono::duration<double>(std::max(timeoutSeconds, 0.0)),
                   [&] { return numInFlight_ == 0; });
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
}

int64_t AsyncEngine::numInFlight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return numInFlight_;
}

int64_t AsyncEngine::numQueued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return numQueued_;
}

Status AsyncEngine::health() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return health_;
}

EngineSnapshot AsyncEngine::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return snapshot_;
}

double AsyncEngine::secondsSince(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void AsyncEngine::run() {
  while (true) {
    std::vector<Command> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Sleeps until there is a command, work in the engine, or shutdown.
      wake_.wait(lock, [&] {
        return !inbox_.empty() || stopping_ ||
               (health_.isOk() && engine_.hasUnfinished());
      });
      commands.swap(inbox_);
      stopping = stopping_;
    }
    for (Command &command : commands) {
      if (command.kind == Command::kAbort) {
        abortNow(command.handle);
      } else if (stopping || !health().isOk()) {
        StreamEvent event;
        event.status =
            stopping ? unimplemented("the server is shutting down") : health();
        event.done = true;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          --numInFlight_;
          --numQueued_;
          idle_.notify_all();
        }
        command.sink(std::move(event));
      } else {
        add(command);
      }
    }
    if (stopping) {
      // Whatever is left past the grace period ends as aborted.
      std::vector<Handle> handles;
      for (const auto &[handle, tracked] : tracked_)
        handles.push_back(handle);
      for (Handle handle : handles) {
        Tracked &tracked = tracked_.at(handle);
        StreamEvent event;
        event.delta.finished = true;
        event.delta.finishReason = FinishReason::kAbort;
        event.numPromptTokens = tracked.numPromptTokens;
        event.done = true;
        StreamSink sink = tracked.sink;
        abortNow(handle);
        sink(std::move(event));
      }
      return;
    }
    if (!health().isOk() || !engine_.hasUnfinished())
      continue;
    StatusOr<std::vector<RequestOutput>> outputs = engine_.step();
    if (!outputs.isOk()) {
      failAll(outputs.status().withContext("engine step"));
      continue;
    }
    for (const RequestOutput &output : *outputs)
      deliver(output);
    observeScheduling();
  }
}

void AsyncEngine::add(Command &command) {
  const GenerationRequest &request = command.request;
  StatusOr<RequestId> id = engine_.addRequest(
      request.promptTokenIds, request.sampling, request.priority);
  if (!id.isOk()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --numInFlight_;
      --numQueued_;
      idle_.notify_all();
    }
    StreamEvent event;
    event.status = id.status();
    event.done = true;
    command.sink(std::move(event));
    return;
  }
  Tracked &tracked = tracked_[command.handle];
  tracked.sink = std::move(command.sink);
  tracked.parentId = *id;
  // Every completion ends with its own output, those of a request for no
  // new tokens included (Engine::addRequest ends all n at once).
  tracked.numCompletions = request.sampling.n;
  tracked.numPromptTokens = static_cast<int64_t>(request.promptTokenIds.size());
  tracked.arrival = command.arrival;
  size_t longestStop = 0;
  for (const std::string &stop : request.sampling.stopStrings)
    longestStop = std::max(longestStop, stop.size());
  tracked.holdBackBytes = longestStop ? longestStop - 1 : 0;
  handleOf_[*id] = command.handle;
  metrics_.addPromptTokens(tracked.numPromptTokens);
}

void AsyncEngine::abortNow(Handle handle) {
  auto it = tracked_.find(handle);
  if (it == tracked_.end())
    return;
  Tracked &tracked = it->second;
  // The parent and every completion that branched off it.
  std::vector<RequestId> ids{tracked.parentId};
  for (const auto &[id, completion] : tracked.completions)
    if (id != tracked.parentId && !completion.finished)
      ids.push_back(id);
  for (RequestId id : ids)
    if (engine_.request(id))
      (void)engine_.abort(id);
  metrics_.observeFinished(secondsSince(tracked.arrival),
                           tracked.numPromptTokens, 0, "abort");
  finishTracked(handle, tracked);
}

void AsyncEngine::finishTracked(Handle handle, Tracked &tracked) {
  const bool wasQueued = !tracked.started;
  handleOf_.erase(tracked.parentId);
  tracked_.erase(handle);
  std::lock_guard<std::mutex> lock(mutex_);
  --numInFlight_;
  if (wasQueued)
    --numQueued_;
  idle_.notify_all();
}

void AsyncEngine::deliver(const RequestOutput &output) {
  auto h = handleOf_.find(output.parentId);
  if (h == handleOf_.end())
    return; // Aborted: its client is gone.
  const Handle handle = h->second;
  Tracked &tracked = tracked_.at(handle);
  Completion &completion = tracked.completions[output.id];
  const double now = secondsSince(tracked.arrival);

  StreamEvent event;
  event.numPromptTokens = tracked.numPromptTokens;
  event.numCachedTokens = output.numCachedTokens;
  CompletionDelta &delta = event.delta;
  delta.index = output.index;
  delta.tokenIds = output.newTokenIds;
  delta.logprobs = output.logprobs;
  delta.finished = output.finished;
  delta.finishReason = output.finishReason;
  const std::string &text = output.text;
  size_t limit = text.size();
  if (!output.finished)
    limit = characterBoundary(text, text.size() > tracked.holdBackBytes
                                        ? text.size() - tracked.holdBackBytes
                                        : 0);
  if (limit > completion.sentTextBytes) {
    delta.text =
        text.substr(completion.sentTextBytes, limit - completion.sentTextBytes);
    completion.sentTextBytes = limit;
  }

  if (!output.newTokenIds.empty()) {
    if (!tracked.sawFirstToken) {
      tracked.sawFirstToken = true;
      metrics_.observeTimeToFirstToken(now);
      metrics_.addPrefixCacheQuery(tracked.numPromptTokens,
                                   output.numCachedTokens);
    } else if (completion.lastTokenTime >= 0) {
      metrics_.observeInterTokenLatency(now - completion.lastTokenTime);
    }
    completion.lastTokenTime = now;
    metrics_.addGeneratedTokens(
        static_cast<int64_t>(output.newTokenIds.size()));
  }
  if (output.finished && !completion.finished) {
    completion.finished = true;
    ++tracked.numFinished;
    metrics_.observeFinished(now, tracked.numPromptTokens,
                             static_cast<int64_t>(output.outputTokenIds.size()),
                             reasonName(output.finishReason));
  }
  event.done = tracked.numFinished >= tracked.numCompletions;
  StreamSink sink = tracked.sink;
  markStarted(tracked);
  if (event.done)
    finishTracked(handle, tracked);
  sink(std::move(event));
}

void AsyncEngine::failAll(const Status &status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    health_ = status;
  }
  std::vector<Handle> handles;
  for (const auto &[handle, tracked] : tracked_)
    handles.push_back(handle);
  for (Handle handle : handles) {
    Tracked &tracked = tracked_.at(handle);
    StreamSink sink = tracked.sink;
    abortNow(handle);
    StreamEvent event;
    event.status = status;
    event.done = true;
    sink(std::move(event));
  }
}

void AsyncEngine::markStarted(Tracked &tracked) {
  if (tracked.started)
    return;
  tracked.started = true;
  metrics_.observeQueueTime(secondsSince(tracked.arrival));
  std::lock_guard<std::mutex> lock(mutex_);
  --numQueued_;
}

void AsyncEngine::observeScheduling() {
  int64_t running = 0, waiting = 0;
  for (auto &[handle, tracked] : tracked_) {
    const Request *r = engine_.request(tracked.parentId);
    const bool isWaiting = r && r->status == RequestStatus::kWaiting;
    if (!(isWaiting && r->numComputedTokens == 0))
      markStarted(tracked);
    if (isWaiting)
      ++waiting;
    else
      running +=
          std::max<int64_t>(1, tracked.numCompletions - tracked.numFinished);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_.numRunning = running;
  snapshot_.numWaiting = waiting;
  snapshot_.numBlocks = engine_.kvCache().numBlocks();
  snapshot_.numFreeBlocks = engine_.kvCache().numFreeBlocks();
  snapshot_.stats = engine_.stats();
}

} // namespace infer::serving
