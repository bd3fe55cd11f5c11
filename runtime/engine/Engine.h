//===- Engine.h - Continuous-batching generation engine ---------*- C++ -*-===//
//
// The C++ API of the runtime: requests come in with addRequest, every step()
// runs one scheduler step = one backend forward call, and tokens come out
// through a callback and step()'s return value.
//
//   addRequest ─▶ Scheduler ──SchedulerOutput──▶ Batch ──▶ Backend::forward
//                    ▲  KVCacheManager (blocks, prefix cache)        │ logits
//                    └──── setComputed ◀── Sampler / Proposer ◀──────┘
//
// Sampling happens in one place (Engine::sampleToken): each request owns a
// Sampler built from its SamplingParams, the model's EOS ids and its prompt,
// called with the logits row of the request's next token. After each token
// the request's StopChecker (EOS unless ignore_eos, stop token ids, stop
// strings, max_new_tokens) and the model's context decide whether it ends.
// Speculative decoding plugs in as a Proposer (Proposer.h).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_ENGINE_H
#define INFER_RUNTIME_ENGINE_ENGINE_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/engine/KVCacheManager.h"
#include "runtime/engine/Proposer.h"
#include "runtime/engine/Request.h"
#include "runtime/engine/Sampler.h"
#include "runtime/engine/Scheduler.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace infer {

struct EngineConfig {
  int64_t blockSize = 16;
  /// Positions the model supports (0 = no limit).
  int64_t maxModelLen = 0;
  /// Token ids must be below this (0 = unchecked).
  int64_t vocabSize = 0;
  std::vector<int32_t> eosTokenIds;
  /// Detokenizes outputs for stop strings and RequestOutput::text; may be
  /// null (then requests with stop strings are rejected). Not owned.
  const Tokenizer *tokenizer = nullptr;
  bool enablePrefixCaching = true;
  /// StreamingLLM attention sinks + rolling window (off by default): the
  /// KV cache of a request stays bounded and positions are indices in its
  /// cache, so generation goes on past maxModelLen (set it to 0). Turns
  /// prefix caching off.
  StreamingPolicy streaming;
  SchedulerConfig scheduler;
  /// Draft tokens asked of the proposer per step (0 = no speculation).
  int64_t numSpeculativeTokens = 0;
  /// Asynchronous scheduling (vLLM's --async-scheduling): a step launches
  /// its forward call (Backend::launchSample) and, while the device runs it,
  /// collects the previous step's tokens and does that step's host work
  /// (stop checks, detokenization, outputs) and the next step's scheduling
  /// and packing. Decoding requests are scheduled before their last token
  /// is known (Request::pendingRow); the device feeds it to the next step.
  /// The outputs of a step come out of the next step() call. Steps that
  /// need the logits on the host (logprobs, penalties, n > 1, speculative
  /// decoding) run synchronously; the tokens are the same either way.
  bool asyncScheduling = false;
};

/// The model limits of an artifact with default scheduling; a streaming
/// artifact gets its policy and no length limit.
EngineConfig engineConfigFor(const Artifact &artifact);

/// What one step produced for one request.
struct RequestOutput {
  /// The completion: for n > 1 (SamplingParams::n), completion 0 has the id
  /// addRequest returned and the others new ids.
  RequestId id = 0;
  /// The id addRequest returned, shared by all completions of a request,
  /// and which completion this is.
  RequestId parentId = 0;
  int64_t index = 0;
  /// Tokens generated this step (several with speculative decoding).
  std::vector<int32_t> newTokenIds;
  /// Every token generated so far.
  std::vector<int32_t> outputTokenIds;
  /// The text of the output so far, cut before a stop string ("" without a
  /// tokenizer).
  std::string text;
  /// Log-probabilities of newTokenIds when SamplingParams::logprobs > 0
  /// (tokens accepted by speculative verification carry none).
  std::vector<TokenLogprobs> logprobs;
  /// Prompt tokens whose keys and values came from the prefix cache.
  int64_t numCachedTokens = 0;
  bool finished = false;
  FinishReason finishReason = FinishReason::kNone;
  /// Why the request failed (FinishReason::kError), for its client.
  std::string error;
};

struct EngineStats {
  int64_t numSteps = 0;
  /// Tokens run through the model (prompt, recomputed, decoded, drafts).
  int64_t numComputedTokens = 0;
  int64_t numGeneratedTokens = 0;
  /// Tokens whose keys and values came from the prefix cache.
  int64_t numCachedTokens = 0;
  int64_t numPreemptions = 0;
  int64_t numDraftTokens = 0;
  int64_t numAcceptedTokens = 0;
  /// Wall time inside step(), and the part of it inside the backend's
  /// forward calls and block copies: the rest is host work (scheduling,
  /// batch packing, sampling on the host, detokenization, stop checks)
  /// during which a synchronous backend's device waits.
  double stepSeconds = 0.0;
  double backendSeconds = 0.0;
  /// The backend's measure of its device's idle time between forward
  /// calls (Backend::deviceIdleSeconds; negative where not measured).
  double deviceIdleSeconds = -1.0;
  /// Steps launched before the previous step's tokens were known, and the
  /// rows they computed for requests that had finished meanwhile.
  int64_t numAsyncSteps = 0;
  int64_t numDiscardedRows = 0;

  /// Accepted / proposed draft tokens (0 without speculation).
  double acceptanceRate() const {
    return numDraftTokens ? static_cast<double>(numAcceptedTokens) /
                                static_cast<double>(numDraftTokens)
                          : 0.0;
  }
};

using OutputCallback = std::function<void(const RequestOutput &)>;

class Engine {
public:
  /// Runs on `backend`'s whole KV-cache pool; the backend outlives it.
  Engine(Backend &backend, EngineConfig config);
  ~Engine();

  /// Queues a request; SamplingParams::n > 1 makes n completions that share
  /// the prompt's blocks (see RequestOutput::parentId). An invalid one (empty,
  /// a token outside the vocabulary, longer than the model's context or than
  /// the whole pool) is an error for that request alone. `arrivalTime` orders
  /// FCFS scheduling (default: the order of the calls); lower `priority` runs
  /// first under SchedulingPolicy::kPriority.
  StatusOr<RequestId> addRequest(std::vector<int32_t> promptTokenIds,
                                 const SamplingParams &sampling,
                                 int64_t priority = 0,
                                 std::optional<double> arrivalTime = {});

  /// A copy of a decoding request that shares its blocks (copy-on-write)
  /// and continues with its own sampling parameters (n > 1 completions).
  /// Those parameters apply to the output it inherits too: where one of its
  /// stop tokens or strings is in that output, or its max_new_tokens is
  /// already reached, the fork ends at once, its output cut after that
  /// token (the finished output comes with the next step). `sampling` must
  /// be valid, with n 1.
  StatusOr<RequestId> fork(RequestId parent, const SamplingParams &sampling);

  /// Called with every RequestOutput as it is produced.
  void setOutputCallback(OutputCallback callback);
  void setProposer(std::unique_ptr<Proposer> proposer);

  /// Finishes a request now and frees its blocks.
  Status abort(RequestId id);

  /// One scheduler step and at most one forward call; the outputs of the
  /// requests that produced tokens or finished (with asynchronous
  /// scheduling, those of the step before). When the backend fails,
  /// the step's requests finish with FinishReason::kError (their blocks
  /// freed) and the others go on.
  StatusOr<std::vector<RequestOutput>> step();

  bool hasUnfinished() const;
  const EngineStats &stats() const { return stats_; }
  const EngineConfig &config() const { return config_; }
  const KVCacheManager &kvCache() const { return kvCache_; }
  /// A live request, or null once its final output was returned. While a
  /// step is in flight its last token may be Request::kPendingToken.
  const Request *request(RequestId id) const;

private:
  struct Entry {
    Request request;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<StopChecker> stop;
    RequestId parentId = 0;
    int64_t index = 0;
    /// Completions still to branch off when the prompt is computed.
    int64_t numPendingCompletions = 0;
    SamplingParams baseSampling;
    /// The backend can choose its tokens (deviceSamplable): fixed with
    /// the request's sampling parameters.
    bool deviceSamplable = false;
  };

  /// No logprobs and a sampler the backend can run (Sampler::
  /// backendSamplable): what asynchronous scheduling needs of a request.
  static bool deviceSamplable(const Entry &entry);

  /// A step launched and not yet collected (asynchronous scheduling): each
  /// sampled row's request, and what the step computed for it.
  struct InFlight {
    struct Row {
      RequestId id = 0;
      int32_t row = 0;
    };
    std::vector<Row> rows;
  };

  void propose();
  /// Counts `entry` in numSyncOnly_ (delta +1 when it is made or stops
  /// being sync-only, -1 before it is forgotten or changes).
  void track(const Entry &entry, int delta);
  /// Waits for the in-flight step's tokens and commits them.
  void collectInFlight(std::vector<RequestOutput> &outputs);
  /// Emits and forgets the requests the scheduler ended (by id: one may
  /// already be gone, ended by its last token).
  void emitFinished(const std::vector<RequestId> &finished,
                    std::vector<RequestOutput> &outputs);
  /// What every step does before it returns: collects the step in flight
  /// and emits the requests the scheduler ended.
  void endStep(const std::vector<RequestId> &finished,
               std::vector<RequestOutput> &outputs);
  /// Runs a scheduled batch with one blocking forward call and commits its
  /// tokens.
  void runSynchronous(const SchedulerOutput &scheduled, const Batch &batch,
                      const SamplingBatch &sampling,
                      const std::vector<int64_t> &firstRow, bool onBackend,
                      std::vector<RequestOutput> &outputs);
  /// The next token from a logits row (with its logprobs when asked).
  int32_t sampleToken(Entry &entry, const float *row, int64_t vocab,
                      std::vector<TokenLogprobs> &logprobs);
  void emit(Entry &entry, std::vector<int32_t> newTokens,
            std::vector<TokenLogprobs> logprobs,
            std::vector<RequestOutput> &outputs);
  /// Appends the tokens a step produced, records the computed tokens, and
  /// emits the output (finishing the request when it stops).
  void commit(Entry &entry, std::vector<int32_t> tokens,
              std::vector<TokenLogprobs> logprobs, int64_t numComputedTokens,
              std::vector<RequestOutput> &outputs);
  void spawnCompletions(Entry &parent, int64_t numComputedTokens,
                        const float *row, int64_t vocab,
                        std::vector<RequestOutput> &outputs);
  /// Appends `tokens` until a stop condition; returns how many were kept.
  size_t appendTokens(Entry &entry, const std::vector<int32_t> &tokens);
  void finish(Entry &entry, FinishReason reason);
  /// Finishes the request with FinishReason::kError and `error`, emits it
  /// and forgets it; the others go on.
  void fail(Entry &entry, std::string error,
            std::vector<RequestOutput> &outputs);
  /// fail() for every request of a step whose backend call failed.
  void failScheduled(const SchedulerOutput &scheduled, const Status &error,
                     std::vector<RequestOutput> &outputs);

  Backend &backend_;
  EngineConfig config_;
  KVCacheManager kvCache_;
  Scheduler scheduler_;
  std::unique_ptr<Proposer> proposer_;
  OutputCallback callback_;
  std::unordered_map<RequestId, Entry> requests_;
  /// Outputs produced outside step() (aborts, zero-token requests).
  std::vector<RequestOutput> pending_;
  std::optional<InFlight> inflight_;
  /// Live requests whose next token needs the logits on the host (logprobs,
  /// penalties, completions still to branch off): while there is one, no
  /// step launches before the previous one's tokens are in (speculative
  /// decoding never does).
  int64_t numSyncOnly_ = 0;
  RequestId nextId_ = 0;
  EngineStats stats_;
};

/// Logits [T, vocab] of every position of `tokens` in one forward call, on
/// the first blocks of `backend`'s pool.
StatusOr<Logits> promptLogits(Backend &backend, int64_t blockSize,
                              const std::vector<int32_t> &tokens);

/// The most KV blocks one request holds under `streaming` when a step
/// computes at most `maxStepTokens` of its tokens (a prompt chunk, or a
/// decode with its drafts): the sink blocks, fewer than window + block_size
/// tokens after them before the step, and the step's tokens.
int64_t streamingBlockBound(const StreamingPolicy &streaming,
                            int64_t blockSize, int64_t maxStepTokens);

/// Logits [T, vocab] of every position of `tokens` under a streaming
/// policy, as decoding sees them: one token per forward call, the cache
/// evicting what falls out of the window before each.
StatusOr<Logits> streamingLogits(Backend &backend, int64_t blockSize,
                                 const StreamingPolicy &streaming,
                                 const std::vector<int32_t> &tokens);

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_ENGINE_H
