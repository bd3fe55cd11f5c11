//===- Engine.cpp - Continuous-batching generation engine -----------------===//

#include "runtime/engine/Engine.h"
#include "runtime/backend/FiniteLogits.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace infer {

namespace {
using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
/// a + b for a >= 0, b >= 0, capped at INT64_MAX (max_new_tokens may be
/// "as many as fit").
int64_t saturatingAdd(int64_t a, int64_t b) {
  return b > INT64_MAX - a ? INT64_MAX : a + b;
}
} // namespace

EngineConfig engineConfigFor(const Artifact &artifact) {
  EngineConfig config;
  config.blockSize = artifact.plan.kvCache.blockSize;
  config.maxModelLen = artifact.manifest.model.maxPositionEmbeddings;
  config.vocabSize = artifact.manifest.model.vocabSize;
  for (int64_t id : artifact.manifest.model.eosTokenIds)
    config.eosTokenIds.push_back(static_cast<int32_t>(id));
  const plan::KVCacheLayout &kv = artifact.plan.kvCache;
  if (kv.isStreaming()) {
    config.streaming = {kv.sinkTokens, kv.window};
    config.maxModelLen = 0;
    config.enablePrefixCaching = false;
  }
  return config;
}

Engine::Engine(Backend &backend, EngineConfig config)
    : backend_(backend), config_(std::move(config)),
      kvCache_(backend.numBlocks(), config_.blockSize,
               config_.enablePrefixCaching, config_.streaming),
      scheduler_(config_.scheduler, kvCache_) {}

Engine::~Engine() = default;

void Engine::setOutputCallback(OutputCallback callback) {
  callback_ = std::move(callback);
}

void Engine::setProposer(std::unique_ptr<Proposer> proposer) {
  proposer_ = std::move(proposer);
}

StatusOr<RequestId> Engine::addRequest(std::vector<int32_t> promptTokenIds,
                                       const SamplingParams &sampling,
                                       int64_t priority,
                                       std::optional<double> arrivalTime) {
  const int64_t length = static_cast<int64_t>(promptTokenIds.size());
  if (length == 0)
    return invalidArgument("the prompt has no tokens");
  INFER_RETURN_IF_ERROR(sampling.validate());
  if (!sampling.stopStrings.empty() && !config_.tokenizer)
    return invalidArgument("stop strings need the model's tokenizer");
  for (int32_t id : promptTokenIds)
    if (id < 0 || (config_.vocabSize > 0 && id >= config_.vocabSize))
      return outOfRange("token id " + std::to_string(id) +
                        " is outside the vocabulary of " +
                        std::to_string(config_.vocabSize) + " tokens");
  if (config_.maxModelLen > 0 && length > config_.maxModelLen)
    return outOfRange("the prompt has " + std::to_string(length) +
                      " tokens, more than max_position_embeddings (" +
                      std::to_string(config_.maxModelLen) + ")");
  // A streaming cache holds a prompt chunk plus the sinks and the window.
  if (!config_.streaming.enabled() &&
      kvCache_.blocksFor(length) > kvCache_.numBlocks())
    return resourceExhausted("the prompt has " + std::to_string(length) +
                             " tokens, more than the KV cache holds (" +
                             std::to_string(kvCache_.numBlocks()) +
                             " blocks of " + std::to_string(config_.blockSize) +
                             " tokens)");

  const RequestId id = nextId_++;
  Entry &entry = requests_[id];
  Request &r = entry.request;
  r.id = id;
  r.numPromptTokens = length;
  r.tokens = std::move(promptTokenIds);
  r.sampling = sampling;
  r.priority = priority;
  r.arrivalTime = arrivalTime ? *arrivalTime : static_cast<double>(id);
  r.maxTotalTokens = saturatingAdd(length, sampling.maxNewTokens);
  if (config_.maxModelLen > 0)
    r.maxTotalTokens = std::min(r.maxTotalTokens, config_.maxModelLen);
  // Completion 0 of an n > 1 request; the others branch off when its
  // prompt is computed (spawnCompletions).
  r.sampling = completionParams(sampling, 0);
  entry.parentId = id;
  entry.baseSampling = sampling;
  entry.numPendingCompletions = sampling.n - 1;
  entry.sampler =
      std::make_unique<Sampler>(r.sampling, config_.eosTokenIds, r.tokens);
  entry.stop = std::make_unique<StopChecker>(r.sampling, config_.eosTokenIds,
                                             config_.tokenizer, r.tokens);
  entry.deviceSamplable = deviceSamplable(entry);
  track(entry, +1);
  if (sampling.maxNewTokens == 0) {
    r.status = RequestStatus::kFinished;
    r.finishReason = FinishReason::kLength;
    emit(entry, {}, {}, pending_);
    // Its other completions are as empty and end with it: each under its
    // own id, as spawnCompletions would have made it.
    for (int64_t index = 1; index < sampling.n; ++index) {
      RequestOutput out = pending_.back();
      out.id = nextId_++;
      out.index = index;
      if (callback_)
        callback_(out);
      pending_.push_back(std::move(out));
    }
    track(entry, -1);
    requests_.erase(id);
    return id;
  }
  scheduler_.addRequest(&r);
  return id;
}

StatusOr<RequestId> Engine::fork(RequestId parentId,
                                 const SamplingParams &sampling) {
  INFER_RETURN_IF_ERROR(sampling.validate());
  if (sampling.n != 1)
    return invalidArgument("a fork is one completion: n must be 1, not " +
                           std::to_string(sampling.n));
  if (!sampling.stopStrings.empty() && !config_.tokenizer)
    return invalidArgument("stop strings need the model's tokenizer");
  // The child copies the parent's tokens: the last must be known.
  if (inflight_)
    collectInFlight(pending_);
  auto it = requests_.find(parentId);
  if (it == requests_.end() ||
      it->second.request.status != RequestStatus::kRunning)
    return invalidArgument("request " + std::to_string(parentId) +
                           " is not running");
  const Request &parent = it->second.request;
  if (parent.numTokens() - parent.numComputedTokens != 1)
    return invalidArgument("request " + std::to_string(parentId) +
                           " has not finished its prompt");
  const RequestId id = nextId_++;
  Entry &entry = requests_[id];
  Request &r = entry.request;
  r = parent;
  r.id = id;
  r.sampling = sampling;
  r.maxTotalTokens =
      saturatingAdd(parent.numPromptTokens, sampling.maxNewTokens);
  if (config_.maxModelLen > 0)
    r.maxTotalTokens = std::min(r.maxTotalTokens, config_.maxModelLen);
  r.numPreemptions = 0;
  r.finishReason = FinishReason::kNone;
  entry.parentId = id;
  entry.baseSampling = sampling;
  const std::vector<int32_t> prompt(r.tokens.begin(),
                                    r.tokens.begin() + r.numPromptTokens);
  entry.sampler =
      std::make_unique<Sampler>(sampling, config_.eosTokenIds, prompt);
  entry.stop = std::make_unique<StopChecker>(sampling, config_.eosTokenIds,
                                             config_.tokenizer, prompt);
  entry.deviceSamplable = deviceSamplable(entry);
  track(entry, +1);
  // The child's sampler and stop checker see the output it inherits, under
  // its own parameters, as appendTokens would have seen it: a stop token or
  // string, or a max_new_tokens already reached, ends the child there, at
  // once, its output cut after that token (a fork of max_new_tokens 0 has
  // none).
  const std::vector<int32_t> inherited(r.tokens.begin() + r.numPromptTokens,
                                       r.tokens.end());
  r.tokens.resize(r.numPromptTokens);
  const bool spent = r.numTokens() >= r.maxTotalTokens;
  if (spent)
    r.finishReason = FinishReason::kLength;
  else
    appendTokens(entry, inherited);
  for (int64_t i = r.numPromptTokens; i < r.numTokens(); ++i)
    entry.sampler->record(r.tokens[i]);
  if (r.finishReason != FinishReason::kNone) {
    r.status = RequestStatus::kFinished;
    emit(entry, {}, {}, pending_);
    track(entry, -1);
    requests_.erase(id);
    return id;
  }
  kvCache_.fork(parentId, id);
  scheduler_.addRunning(&r);
  return id;
}

Status Engine::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return notFound("no unfinished request " + std::to_string(id));
  finish(it->second, FinishReason::kAbort);
  emit(it->second, {}, {}, pending_);
  track(it->second, -1);
  requests_.erase(it);
  return Status::ok();
}

bool Engine::hasUnfinished() const {
  return scheduler_.hasUnfinished() || !pending_.empty() ||
         inflight_.has_value();
}

const Request *Engine::request(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second.request;
}

int32_t Engine::sampleToken(Entry &entry, const float *row, int64_t vocab,
                            std::vector<TokenLogprobs> &logprobs) {
  if (entry.request.sampling.logprobs <= 0)
    return entry.sampler->sample(row, vocab);
  // The log-probabilities under the history before this token.
  const Sampler before = *entry.sampler;
  const int32_t token = entry.sampler->sample(row, vocab);
  logprobs.push_back(before.logprobs(row, vocab, token));
  return token;
}

void Engine::emit(Entry &entry, std::vector<int32_t> newTokens,
                  std::vector<TokenLogprobs> logprobs,
                  std::vector<RequestOutput> &outputs) {
  const Request &r = entry.request;
  RequestOutput out;
  out.id = r.id;
  out.parentId = entry.parentId;
  out.index = entry.index;
  out.newTokenIds = std::move(newTokens);
  // A token still in flight is not part of the output yet.
  out.outputTokenIds.assign(r.tokens.begin() + r.numPromptTokens,
                            r.tokens.end() - (r.hasPendingToken() ? 1 : 0));
  out.text = entry.stop->text();
  out.logprobs = std::move(logprobs);
  out.numCachedTokens = std::max<int64_t>(r.numCachedPromptTokens, 0);
  out.finished = r.status == RequestStatus::kFinished;
  out.finishReason = r.finishReason;
  out.error = r.error;
  if (callback_)
    callback_(out);
  outputs.push_back(std::move(out));
}

void Engine::finish(Entry &entry, FinishReason reason) {
  scheduler_.finish(entry.request, reason);
  if (proposer_)
    proposer_->onFinished(entry.request.id);
}

size_t Engine::appendTokens(Entry &entry, const std::vector<int32_t> &tokens) {
  Request &r = entry.request;
  for (size_t i = 0; i < tokens.size(); ++i) {
    r.tokens.push_back(tokens[i]);
    const StopReason reason = entry.stop->append(tokens[i]);
    if (reason != StopReason::kNone) {
      r.finishReason = reason == StopReason::kLength ? FinishReason::kLength
                                                     : FinishReason::kStop;
      return i + 1;
    }
    if (r.numTokens() >= r.maxTotalTokens) {
      r.finishReason = FinishReason::kLength;
      return i + 1;
    }
  }
  return tokens.size();
}

void Engine::propose() {
  if (!proposer_ || config_.numSpeculativeTokens <= 0)
    return;
  for (Request *r : scheduler_.running()) {
    r->draftTokens.clear();
    if (r->numTokens() - r->numComputedTokens != 1)
      continue;
    // Every accepted draft plus the target's token must still fit.
    const int64_t room = r->maxTotalTokens - r->numTokens() - 1;
    const int64_t k = std::min(config_.numSpeculativeTokens, room);
    if (k <= 0)
      continue;
    r->draftTokens = proposer_->propose(*r, k);
    if (static_cast<int64_t>(r->draftTokens.size()) > k)
      r->draftTokens.resize(k);
  }
}

bool Engine::deviceSamplable(const Entry &entry) {
  return entry.request.sampling.logprobs == 0 &&
         entry.sampler->backendSamplable();
}

void Engine::track(const Entry &entry, int delta) {
  if (!entry.deviceSamplable || entry.numPendingCompletions > 0)
    numSyncOnly_ += delta;
}

void Engine::emitFinished(const std::vector<RequestId> &finished,
                          std::vector<RequestOutput> &outputs) {
  for (RequestId id : finished) {
    auto it = requests_.find(id);
    if (it == requests_.end())
      continue;
    if (proposer_)
      proposer_->onFinished(id);
    emit(it->second, {}, {}, outputs);
    track(it->second, -1);
    requests_.erase(it);
  }
}

void Engine::endStep(const std::vector<RequestId> &finished,
                     std::vector<RequestOutput> &outputs) {
  if (inflight_)
    collectInFlight(outputs);
  emitFinished(finished, outputs);
}

void Engine::collectInFlight(std::vector<RequestOutput> &outputs) {
  const InFlight done = std::move(*inflight_);
  inflight_.reset();
  const Clock::time_point start = Clock::now();
  StatusOr<std::vector<int32_t>> sampled = backend_.collectSample();
  stats_.backendSeconds += secondsSince(start);
  for (const InFlight::Row &row : done.rows) {
    auto it = requests_.find(row.id);
    if (it == requests_.end()) {
      // Ended while the step ran (a stop token of the step before, an
      // abort): the row is dropped.
      ++stats_.numDiscardedRows;
      continue;
    }
    Entry &entry = it->second;
    Request &r = entry.request;
    if (r.pendingRow == row.row) {
      r.tokens.pop_back();
      r.pendingRow = -1;
    }
    if (!sampled.isOk()) {
      fail(entry, "the backend failed: " + sampled.status().message(), outputs);
      continue;
    }
    const int32_t token = sampled.value()[row.row];
    if (token == kNonFiniteLogitsToken) {
      fail(entry,
           "the logits at position " + std::to_string(r.numTokens() - 1) +
               " are not finite (NaN or +infinity): the model's "
               "weights or activations overflowed",
           outputs);
      continue;
    }
    entry.sampler->record(token);
    std::vector<int32_t> tokens{token};
    tokens.resize(appendTokens(entry, tokens));
    stats_.numGeneratedTokens += static_cast<int64_t>(tokens.size());
    // The scheduler may have ended it meanwhile (no room to grow).
    const bool done = r.finishReason != FinishReason::kNone ||
                      r.status == RequestStatus::kFinished;
    if (done && r.status != RequestStatus::kFinished)
      finish(entry, r.finishReason);
    emit(entry, std::move(tokens), {}, outputs);
    if (done) {
      track(entry, -1);
      requests_.erase(it);
    }
  }
}

StatusOr<std::vector<RequestOutput>> Engine::step() {
  const Clock::time_point stepStart = Clock::now();
  struct StepTimer {
    EngineStats &stats;
    Backend &backend;
    Clock::time_point start;
    ~StepTimer() {
      stats.stepSeconds += secondsSince(start);
      stats.deviceIdleSeconds = backend.deviceIdleSeconds();
    }
  } timer{stats_, backend_, stepStart};
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  const bool async = config_.asyncScheduling && !proposer_ && numSyncOnly_ == 0;
  // A synchronous step needs every token on the host first.
  if (inflight_ && !async)
    collectInFlight(outputs);
  propose();
  SchedulerOutput scheduled = scheduler_.schedule();
  outputs.reserve(outputs.size() + scheduled.finished.size() +
                  scheduled.scheduled.size());
  stats_.numPreemptions = scheduler_.numPreemptions();
  stats_.numCachedTokens = scheduler_.numCachedTokens();
  // Requests the scheduler ended are emitted once the step in flight (which
  // may hold their last token) is collected.
  std::vector<RequestId> finished;
  for (Request *r : scheduled.finished)
    finished.push_back(r->id);
  if (!inflight_) {
    emitFinished(finished, outputs);
    finished.clear();
  }
  if (scheduled.scheduled.empty()) {
    endStep(finished, outputs);
    return outputs;
  }

  const Clock::time_point copyStart = Clock::now();
  if (!scheduled.blockCopies.empty()) {
    Status copied = backend_.copyBlocks(scheduled.blockCopies);
    if (!copied.isOk()) {
      failScheduled(scheduled, copied, outputs);
      endStep(finished, outputs);
      return outputs;
    }
  }
  stats_.backendSeconds += secondsSince(copyStart);

  // The batch contract (Backend.h), one sequence per scheduled request.
  Batch batch;
  batch.queryStartLoc.push_back(0);
  for (const ScheduledRequest &s : scheduled.scheduled)
    batch.maxBlocksPerSeq = std::max<int64_t>(
        batch.maxBlocksPerSeq,
        static_cast<int64_t>(kvCache_.blockTable(s.request->id).size()));
  const int64_t bs = config_.blockSize;
  batch.tokenIds.reserve(scheduled.numScheduledTokens);
  batch.positions.reserve(scheduled.numScheduledTokens);
  batch.slotMapping.reserve(scheduled.numScheduledTokens);
  batch.blockTables.reserve(scheduled.scheduled.size() * batch.maxBlocksPerSeq);
  std::vector<int64_t> firstRow(scheduled.scheduled.size(), -1);
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    const ScheduledRequest &s = scheduled.scheduled[i];
    const Request &r = *s.request;
    const std::vector<BlockId> &table = kvCache_.blockTable(r.id);
    const int64_t start = r.numComputedTokens;
    const int64_t numKnown = s.numTokens - s.numDraftTokens;
    // Streaming: positions and slots are indices in the request's cache.
    const int64_t evicted = kvCache_.numEvictedTokens(r.id);
    for (int64_t j = 0; j < s.numTokens; ++j) {
      const int64_t p = start + j;
      const int64_t c = p - evicted;
      if (j < numKnown && r.hasPendingToken() && p == r.numTokens() - 1) {
        // The step in flight samples this token: the device feeds it.
        batch.sampledTokens.push_back(
            {static_cast<int32_t>(batch.tokenIds.size()), r.pendingRow});
        batch.tokenIds.push_back(0);
      } else {
        batch.tokenIds.push_back(j < numKnown ? r.tokens[p]
                                              : r.draftTokens[j - numKnown]);
      }
      batch.positions.push_back(static_cast<int32_t>(c));
      batch.slotMapping.push_back(static_cast<int64_t>(table[c / bs]) * bs +
                                  c % bs);
    }
    // Logits only where the request reaches its last known token: a
    // prompt chunk short of it samples nothing.
    if (start + numKnown == r.numTokens()) {
      firstRow[i] = static_cast<int64_t>(batch.logitsIndices.size());
      const int32_t end = static_cast<int32_t>(batch.tokenIds.size());
      for (int64_t j = s.numDraftTokens; j >= 0; --j)
        batch.logitsIndices.push_back(end - 1 - static_cast<int32_t>(j));
    }
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(
        static_cast<int32_t>(start + s.numTokens - evicted));
    batch.blockTables.insert(batch.blockTables.end(), table.begin(),
                             table.end());
    batch.blockTables.resize(
        batch.blockTables.size() + batch.maxBlocksPerSeq - table.size(), -1);
  }
  // The backend chooses the tokens itself, and only they come back, when
  // every row is one request's plain next token: no draft to verify (that
  // needs the probabilities), no logprobs, no penalties, no completions to
  // branch off the row.
  bool onBackend = !batch.logitsIndices.empty();
  for (size_t i = 0; i < scheduled.scheduled.size() && onBackend; ++i) {
    const Entry &entry = requests_.at(scheduled.scheduled[i].request->id);
    onBackend = firstRow[i] < 0 ||
                (scheduled.scheduled[i].numDraftTokens == 0 &&
                 entry.request.draftTokens.empty() &&
                 entry.request.sampling.logprobs == 0 &&
                 entry.numPendingCompletions == 0 &&
                 entry.sampler->backendSamplable());
  }
  SamplingBatch sampling;
  if (onBackend)
    for (size_t i = 0; i < scheduled.scheduled.size(); ++i)
      if (firstRow[i] >= 0)
        sampling.rows.push_back(requests_.at(scheduled.scheduled[i].request->id)
                                    .sampler->nextRowSampling());

  if (async && onBackend) {
    // Launch this step, then do the previous step's host work while the
    // device runs it.
    const Clock::time_point launchStart = Clock::now();
    Status launched = backend_.launchSample(batch, sampling);
    stats_.backendSeconds += secondsSince(launchStart);
    if (!launched.isOk()) {
      failScheduled(scheduled, launched, outputs);
      endStep(finished, outputs);
      return outputs;
    }
    ++stats_.numSteps;
    stats_.numAsyncSteps += inflight_.has_value();
    stats_.numComputedTokens += scheduled.numScheduledTokens;
    struct Launched {
      RequestId id;
      int64_t numComputed;
      int64_t row;
    };
    std::vector<Launched> launchedRows;
    launchedRows.reserve(scheduled.scheduled.size());
    InFlight next;
    for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
      const ScheduledRequest &s = scheduled.scheduled[i];
      launchedRows.push_back({s.request->id,
                              s.request->numComputedTokens + s.numTokens,
                              firstRow[i]});
      if (firstRow[i] >= 0)
        next.rows.push_back({s.request->id, static_cast<int32_t>(firstRow[i])});
    }
    endStep(finished, outputs);
    // The previous step's tokens are in: this step's computed tokens are
    // all known (its blocks may be published), and each sampled row leaves
    // a placeholder for its token.
    for (const Launched &l : launchedRows) {
      auto it = requests_.find(l.id);
      if (it == requests_.end())
        continue;
      Request &r = it->second.request;
      scheduler_.setComputed(r, l.numComputed);
      if (l.row >= 0) {
        r.tokens.push_back(Request::kPendingToken);
        r.pendingRow = static_cast<int32_t>(l.row);
      }
    }
    inflight_ = std::move(next);
    return outputs;
  }
  // A synchronous step: no token of this batch is pending (a pending token
  // makes a sampled row, which an async-ready engine launches above); the
  // step in flight, if any, is collected after it.
  runSynchronous(scheduled, batch, sampling, firstRow, onBackend, outputs);
  endStep(finished, outputs);
  return outputs;
}

void Engine::runSynchronous(const SchedulerOutput &scheduled,
                            const Batch &batch, const SamplingBatch &sampling,
                            const std::vector<int64_t> &firstRow,
                            bool onBackend,
                            std::vector<RequestOutput> &outputs) {
  Logits logits;
  std::vector<int32_t> sampled;
  const Clock::time_point forwardStart = Clock::now();
  Status forwarded;
  if (onBackend) {
    StatusOr<std::vector<int32_t>> tokens =
        backend_.forwardSample(batch, sampling);
    forwarded = tokens.status();
    if (tokens.isOk())
      sampled = std::move(tokens).value();
  } else {
    StatusOr<Logits> rows = backend_.forward(batch);
    forwarded = rows.status();
    if (rows.isOk())
      logits = std::move(rows).value();
  }
  if (!forwarded.isOk()) {
    // The batch's requests end with the backend's error (their caches may
    // be half written); the engine goes on serving the others.
    failScheduled(scheduled, forwarded, outputs);
    return;
  }
  stats_.backendSeconds += secondsSince(forwardStart);
  ++stats_.numSteps;
  stats_.numComputedTokens += scheduled.numScheduledTokens;

  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    const ScheduledRequest &s = scheduled.scheduled[i];
    Entry &entry = requests_.at(s.request->id);
    Request &r = entry.request;
    const int64_t start = r.numComputedTokens;
    if (firstRow[i] < 0) {
      scheduler_.setComputed(r, start + s.numTokens);
      continue;
    }
    // A NaN or infinite logit (a broken checkpoint) fails this request
    // alone instead of silently choosing token 0 or the last id.
    const bool finite = onBackend
                            ? sampled[firstRow[i]] != kNonFiniteLogitsToken
                            : allFinite(logits.row(firstRow[i]),
                                        logits.vocab * (s.numDraftTokens + 1));
    if (!finite) {
      fail(entry,
           "the logits at position " + std::to_string(start + s.numTokens - 1) +
               " are not finite (NaN or +infinity): the model's "
               "weights or activations overflowed",
           outputs);
      continue;
    }
    const std::vector<int32_t> draft = r.draftTokens;
    // The other completions of an n > 1 request branch off here, sampling
    // their first tokens from the same row. They share the prompt, not the
    // drafts after it (a prompt whose last chunk is its last token decodes
    // with drafts).
    if (entry.numPendingCompletions > 0)
      spawnCompletions(entry, start + s.numTokens - s.numDraftTokens,
                       logits.row(firstRow[i]), logits.vocab, outputs);
    std::vector<int32_t> accepted;
    std::vector<TokenLogprobs> logprobs;
    if (onBackend) {
      accepted.push_back(sampled[firstRow[i]]);
      entry.sampler->record(accepted.back());
    } else if (draft.empty()) {
      accepted.push_back(
          sampleToken(entry, logits.row(firstRow[i]), logits.vocab, logprobs));
    } else {
      accepted =
          proposer_->verify(r, draft, logits, firstRow[i], *entry.sampler);
    }
    const int64_t numAccepted = static_cast<int64_t>(accepted.size()) - 1;
    stats_.numDraftTokens += static_cast<int64_t>(draft.size());
    stats_.numAcceptedTokens += numAccepted;
    // The keys and values of the rejected drafts are rolled back.
    const int64_t numRejected =
        static_cast<int64_t>(draft.size()) - numAccepted;
    r.draftTokens.clear();
    if (proposer_ && !draft.empty())
      proposer_->onVerified(r, static_cast<int64_t>(draft.size()), numAccepted);
    commit(entry, std::move(accepted), std::move(logprobs),
           start + s.numTokens - numRejected, outputs);
  }
}

void Engine::commit(Entry &entry, std::vector<int32_t> tokens,
                    std::vector<TokenLogprobs> logprobs,
                    int64_t numComputedTokens,
                    std::vector<RequestOutput> &outputs) {
  Request &r = entry.request;
  tokens.resize(appendTokens(entry, tokens));
  logprobs.resize(std::min(logprobs.size(), tokens.size()));
  stats_.numGeneratedTokens += static_cast<int64_t>(tokens.size());
  scheduler_.setComputed(r, numComputedTokens);
  const bool done = r.finishReason != FinishReason::kNone;
  if (done)
    finish(entry, r.finishReason);
  emit(entry, std::move(tokens), std::move(logprobs), outputs);
  if (done) {
    track(entry, -1);
    requests_.erase(r.id);
  }
}

void Engine::failScheduled(const SchedulerOutput &scheduled,
                           const Status &error,
                           std::vector<RequestOutput> &outputs) {
  for (const ScheduledRequest &s : scheduled.scheduled)
    fail(requests_.at(s.request->id), "the backend failed: " + error.message(),
         outputs);
}

void Engine::fail(Entry &entry, std::string error,
                  std::vector<RequestOutput> &outputs) {
  Request &r = entry.request;
  r.draftTokens.clear();
  r.error = std::move(error);
  finish(entry, FinishReason::kError);
  emit(entry, {}, {}, outputs);
  track(entry, -1);
  requests_.erase(r.id);
}

void Engine::spawnCompletions(Entry &parent, int64_t numComputedTokens,
                              const float *row, int64_t vocab,
                              std::vector<RequestOutput> &outputs) {
  const Request &p = parent.request;
  for (int64_t index = 1; index <= parent.numPendingCompletions; ++index) {
    const RequestId id = nextId_++;
    Entry &child = requests_[id];
    child.parentId = parent.parentId;
    child.index = index;
    Request &r = child.request;
    r = p;
    r.id = id;
    r.sampling = completionParams(parent.baseSampling, index);
    // The prompt's preemptions were the parent's (as for fork()).
    r.numPreemptions = 0;
    child.sampler =
        std::make_unique<Sampler>(r.sampling, config_.eosTokenIds, r.tokens);
    child.stop = std::make_unique<StopChecker>(r.sampling, config_.eosTokenIds,
                                               config_.tokenizer, r.tokens);
    child.deviceSamplable = deviceSamplable(child);
    track(child, +1);
    // The prompt's blocks are shared; the first write into the partial last
    // block copies it.
    kvCache_.fork(p.id, id);
    scheduler_.addRunning(&r);
    std::vector<TokenLogprobs> logprobs;
    std::vector<int32_t> tokens{sampleToken(child, row, vocab, logprobs)};
    commit(child, std::move(tokens), std::move(logprobs), numComputedTokens,
           outputs);
  }
  track(parent, -1);
  parent.numPendingCompletions = 0;
  track(parent, +1);
}

StatusOr<Logits> promptLogits(Backend &backend, int64_t blockSize,
                              const std::vector<int32_t> &tokens) {
  const int64_t t = static_cast<int64_t>(tokens.size());
  if (t == 0)
    return invalidArgument("the prompt has no tokens");
  const int64_t blocks = (t + blockSize - 1) / blockSize;
  if (blocks > backend.numBlocks())
    return resourceExhausted("the KV cache is full: " + std::to_string(t) +
                             " tokens do not fit in the pool of " +
                             std::to_string(backend.numBlocks()) +
                             " blocks of " + std::to_string(blockSize) +
                             " tokens");
  Batch batch;
  batch.queryStartLoc = {0, static_cast<int32_t>(t)};
  batch.contextLens = {static_cast<int32_t>(t)};
  batch.maxBlocksPerSeq = blocks;
  for (int64_t b = 0; b < blocks; ++b)
    batch.blockTables.push_back(static_cast<int32_t>(b));
  for (int64_t p = 0; p < t; ++p) {
    batch.tokenIds.push_back(tokens[p]);
    batch.positions.push_back(static_cast<int32_t>(p));
    batch.slotMapping.push_back(p);
    batch.logitsIndices.push_back(static_cast<int32_t>(p));
  }
  return backend.forward(batch);
}

int64_t streamingBlockBound(const StreamingPolicy &streaming,
                            int64_t blockSize, int64_t maxStepTokens) {
  auto blocksFor = [blockSize](int64_t tokens) {
    return (tokens + blockSize - 1) / blockSize;
  };
  return blocksFor(streaming.sinkTokens) +
         blocksFor(streaming.window + blockSize - 1 + maxStepTokens);
}

StatusOr<Logits> streamingLogits(Backend &backend, int64_t blockSize,
                                 const StreamingPolicy &streaming,
                                 const std::vector<int32_t> &tokens) {
  if (tokens.empty())
    return invalidArgument("the prompt has no tokens");
  KVCacheManager kvCache(backend.numBlocks(), blockSize,
                         /*enablePrefixCaching=*/false, streaming);
  constexpr RequestId kId = 0;
  Logits logits;
  for (int64_t p = 0; p < static_cast<int64_t>(tokens.size()); ++p) {
    std::vector<BlockCopy> copies;
    if (!kvCache.allocateSlots(kId, p, 1, nullptr, copies))
      return resourceExhausted(
          "the KV cache is full: the sinks and window of " +
          std::to_string(streaming.window) + " tokens do not fit in the pool "
          "of " + std::to_string(backend.numBlocks()) + " blocks");
    const std::vector<BlockId> &table = kvCache.blockTable(kId);
    const int64_t c = p - kvCache.numEvictedTokens(kId);
    Batch batch;
    batch.tokenIds = {tokens[p]};
    batch.positions = {static_cast<int32_t>(c)};
    batch.queryStartLoc = {0, 1};
    batch.contextLens = {static_cast<int32_t>(c + 1)};
    batch.blockTables.assign(table.begin(), table.end());
    batch.maxBlocksPerSeq = static_cast<int64_t>(table.size());
    batch.slotMapping = {static_cast<int64_t>(table[c / blockSize]) *
                             blockSize +
                         c % blockSize};
    batch.logitsIndices = {0};
    INFER_ASSIGN_OR_RETURN(Logits row, backend.forward(batch));
    logits.vocab = row.vocab;
    logits.data.insert(logits.data.end(), row.data.begin(), row.data.end());
    ++logits.rows;
  }
  return logits;
}

} // namespace infer
