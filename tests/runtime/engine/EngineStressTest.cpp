//===- EngineStressTest.cpp - Randomized differential test of the engine --===//
//
// For each seed of a fixed list, draws an engine configuration and a
// workload at random, runs them on the CPU backend, and checks what must hold
// whatever the batch:
//
//   configuration  block size, a KV pool from a few blocks (preemption, and
//                  requests the pool cannot hold whole) to plenty, token
//                  budget (chunked prefill), max_num_seqs, chunking on/off,
//                  prefix caching on/off, FCFS or priority, prefill ratio,
//                  asynchronous scheduling, speculative decoding (n-gram, or
//                  the tiny-pycode draft model) with k drafts, a short
//                  context (max_model_len) now and then
//   workload       prompts sharing prefixes (or equal), greedy and seeded
//                  sampling, penalties, logprobs, n > 1, forks (some with
//                  fewer new tokens or a stop token of their own, some
//                  aborted), stop tokens, stop strings (pieces of the
//                  request's text alone, often across token boundaries, of
//                  its prompt's, or none it makes), EOS, no new tokens,
//                  arrivals (and arrival times out of order), aborts of
//                  running and waiting requests
//
//   - every completion that is not aborted ends exactly as the same request
//     run alone on a fresh engine with a large pool (the CPU backend is
//     exact whatever else is in a batch): its tokens, finish reason, text
//     and log-probabilities, cut where the pool or the context cannot hold
//     it even alone (FinishReason::kLength, Scheduler.h). Stop strings and
//     the cut change no token before it: the request runs alone without its
//     stop strings, and a StopChecker replaying its tokens says where it
//     ends and what its text is then;
//   - an aborted one ends with kAbort and a prefix of that, then is silent;
//   - every step returns no error; every output extends the one before, its
//     text too but for what a stop string takes back (no more than the
//     longest one's bytes less one), and no text holds a stop string; each
//     block's reference count is the number of block tables holding it; a
//     forward call writes only blocks that one sequence holds unpublished;
//   - at the end every block is free, no table is left, and the engine's
//     counters agree with what came out.
//
// A failure prints its seed and scenario. INFER_STRESS_SEEDS=first[:count]
// runs other seeds (many, to hunt; one, to replay).
//
//===----------------------------------------------------------------------===//

#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "runtime/spec/Speculator.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "tests/runtime/support/FixtureCases.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

/// splitmix64 with its own integer and real draws: the same scenario from a
/// seed on every platform (the standard distributions are not portable).
class Rng {
public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    return lo +
           static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double real(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  bool chance(double p) { return real(0.0, 1.0) < p; }

private:
  uint64_t state_;
};

int64_t blocksFor(int64_t tokens, int64_t blockSize) {
  return (tokens + blockSize - 1) / blockSize;
}

enum class Drafter { kNone, kNgram, kDraftModel };

/// One request of a scenario and what is done to it while it runs.
struct PlannedRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t priority = 0;
  int64_t arrivalStep = 0;
  /// The arrival time given to addRequest (none: the order of the calls),
  /// which orders FCFS scheduling whatever the order of the calls.
  std::optional<double> arrivalTime;
  /// Aborts completion `abortIndex` at this step (-1: never).
  int64_t abortStep = -1;
  int64_t abortIndex = 0;
  /// Forks completion 0 with its own sampling parameters at this step, if
  /// it is decoding then (-1: never).
  int64_t forkStep = -1;
  /// The fork's parameters: completion 0's, or those with fewer new tokens
  /// or a stop token of its output, which may end it inside the output it
  /// inherits (then inside Engine::fork).
  SamplingParams forkSampling;
  /// Aborts the fork at this step, if it is live then (-1: never).
  int64_t forkAbortStep = -1;
};

struct Scenario {
  uint64_t seed = 0;
  EngineConfig config;
  int64_t numBlocks = 0;
  Drafter drafter = Drafter::kNone;
  int64_t ngramMin = 1, ngramMax = 3;
  int64_t draftBlockSize = 16, draftBlocks = 0;
  /// Speculation whose k follows the acceptance and the load (none: k
  /// drafts whenever they fit).
  std::optional<spec::AdaptiveOptions> adaptive;
  std::vector<PlannedRequest> requests;
  /// A prompt longer than the pool (empty: none), added first: addRequest
  /// refuses it.
  std::vector<int32_t> oversized;
};

/// A stop string in C-like quotes, bytes outside printable ASCII escaped.
std::string escaped(const std::string &text) {
  std::ostringstream os;
  os << '"';
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\')
      os << '\\' << ch;
    else if (ch >= 0x20 && ch < 0x7f)
      os << ch;
    else
      os << "\\x"
         << "0123456789abcdef"[ch >> 4] << "0123456789abcdef"[ch & 15];
  }
  os << '"';
  return os.str();
}

std::string describe(const Scenario &s) {
  const EngineConfig &c = s.config;
  std::ostringstream os;
  os << "scenario of seed " << s.seed << ": block_size " << c.blockSize << ", "
     << s.numBlocks << " blocks, max_num_seqs " << c.scheduler.maxNumSeqs
     << ", max_num_batched_tokens " << c.scheduler.maxNumBatchedTokens
     << ", chunked prefill " << c.scheduler.enableChunkedPrefill
     << ", prefix caching " << c.enablePrefixCaching << ", policy "
     << (c.scheduler.policy == SchedulingPolicy::kPriority ? "priority"
                                                           : "fcfs")
     << ", prefill ratio " << c.scheduler.prefillRatio << ", max_model_len "
     << c.maxModelLen << ", async " << c.asyncScheduling << ", eos {";
  for (int32_t t : c.eosTokenIds)
    os << " " << t;
  os << " }, speculation k=" << c.numSpeculativeTokens;
  if (s.drafter == Drafter::kNgram)
    os << " ngram [" << s.ngramMin << ", " << s.ngramMax << "]";
  if (s.drafter == Drafter::kDraftModel)
    os << " draft model (" << s.draftBlocks << " blocks of " << s.draftBlockSize
       << ")";
  if (s.adaptive)
    os << " adaptive (max k " << s.adaptive->maxK << ", initial acceptance "
       << s.adaptive->initialAcceptance << ", per-token cost "
       << s.adaptive->perTokenCost << ", token budget "
       << s.adaptive->tokenBudget << ")";
  if (!s.oversized.empty())
    os << "; oversized prompt of " << s.oversized.size();
  os << "\n";
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const PlannedRequest &r = s.requests[i];
    const SamplingParams &p = r.sampling;
    os << "  request " << i << ": prompt " << r.prompt.size() << " [";
    for (size_t j = 0; j < std::min<size_t>(r.prompt.size(), 6); ++j)
      os << (j ? " " : "") << r.prompt[j];
    os << (r.prompt.size() > 6 ? " ...]" : "]") << ", max_new "
       << p.maxNewTokens << ", T " << p.temperature;
    if (!p.greedy())
      os << " seed " << p.seed << " top_k " << p.topK << " top_p " << p.topP
         << " min_p " << p.minP;
    if (p.repetitionPenalty != 1.0 || p.presencePenalty != 0.0 ||
        p.frequencyPenalty != 0.0)
      os << ", penalties " << p.repetitionPenalty << "/" << p.presencePenalty
         << "/" << p.frequencyPenalty;
    if (p.logprobs)
      os << ", logprobs " << p.logprobs;
    if (p.ignoreEos)
      os << ", ignore_eos";
    for (int32_t t : p.stopTokenIds)
      os << ", stop " << t;
    for (const std::string &stop : p.stopStrings)
      os << ", stop " << escaped(stop);
    if (p.n > 1)
      os << ", n " << p.n;
    os << ", priority " << r.priority << ", arrives at step " << r.arrivalStep;
    if (r.arrivalTime)
      os << " (time " << *r.arrivalTime << ")";
    if (r.abortStep >= 0)
      os << ", abort of completion " << r.abortIndex << " at step "
         << r.abortStep;
    if (r.forkStep >= 0) {
      os << ", fork at step " << r.forkStep << " (max_new_tokens "
         << r.forkSampling.maxNewTokens;
      for (int32_t t : r.forkSampling.stopTokenIds)
        os << ", stop " << t;
      os << ")";
    }
    if (r.forkAbortStep >= 0)
      os << ", abort of the fork at step " << r.forkAbortStep;
    os << "\n";
  }
  return os.str();
}

/// How a request ends.
struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  /// RequestOutput::text ("" without a tokenizer).
  std::string text;
  /// The log-probabilities of every token (SamplingParams::logprobs > 0).
  std::vector<TokenLogprobs> logprobs;
};

/// How many new tokens the request may have in a pool of `capacity` token
/// slots and a context of `maxModelLen` (0: none): it gains its last token
/// when its first `capacity` tokens are computed (Scheduler.h), and at
/// least one token whatever the context.
int64_t roomFor(int64_t promptLength, int64_t capacity, int64_t maxModelLen) {
  int64_t room = capacity + 1 - promptLength;
  if (maxModelLen > 0)
    room = std::min(room, std::max<int64_t>(maxModelLen - promptLength, 1));
  return room;
}

/// The features the scenarios of one test reached, summed: each must be
/// reached at least once, or the ranges drawn from are wrong.
struct Coverage {
  int64_t scenarios = 0;
  int64_t preemptions = 0;
  int64_t cachedTokens = 0;
  int64_t blockCopies = 0;
  int64_t chunkedPrefills = 0;
  int64_t cutByPool = 0;
  int64_t stoppedEarly = 0;
  int64_t abortsRunning = 0;
  int64_t abortsWaiting = 0;
  int64_t forks = 0;
  int64_t forksEndedAtOnce = 0;
  int64_t forkAborts = 0;
  int64_t completions = 0;
  int64_t asyncSteps = 0;
  int64_t draftTokens = 0;
  int64_t acceptedTokens = 0;
  int64_t refused = 0;
  int64_t cutByContext = 0;
  int64_t stopStrings = 0;
  int64_t zeroTokenRequests = 0;
  int64_t zeroTokenCompletions = 0;

  void print(std::ostream &os) const {
    os << "[ stress   ] " << scenarios << " scenarios: " << preemptions
       << " preemptions, " << cachedTokens << " prefix-cached tokens, "
       << blockCopies << " block copies, " << chunkedPrefills
       << " half-computed prompts seen, " << cutByPool
       << " cut by the pool or context, " << stoppedEarly
       << " stopped by EOS or a stop token, " << abortsRunning << " + "
       << abortsWaiting << " aborts (running + waiting), " << forks
       << " forks (" << forksEndedAtOnce << " ended by their own parameters "
       << "inside what they inherit, " << forkAborts << " aborted), "
       << completions << " extra completions, " << asyncSteps
       << " async steps, " << acceptedTokens << "/" << draftTokens
       << " drafts accepted, " << refused << " prompts refused, "
       << cutByContext << " cut by the context, " << stopStrings
       << " stopped by a stop string, " << zeroTokenRequests
       << " requests of no new tokens (" << zeroTokenCompletions
       << " more completions)\n";
  }
};

/// The CPU backend of one scenario, checking the batch contract of each
/// forward call against the engine's block pool: a call writes only slots
/// of blocks that the writing sequence alone holds and that are not
/// published in the prefix cache (a block others read must never change).
class CheckedBackend : public Backend {
public:
  CheckedBackend(std::unique_ptr<Backend> inner, int64_t blockSize)
      : inner_(std::move(inner)), blockSize_(blockSize) {}

  void watch(const Engine *engine) { engine_ = engine; }

  std::string_view name() const override { return inner_->name(); }
  int64_t numBlocks() const override { return inner_->numBlocks(); }
  StatusOr<Logits> forward(const Batch &batch) override {
    check(batch);
    return inner_->forward(batch);
  }
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override {
    check(batch);
    return inner_->forwardSample(batch, sampling);
  }
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    numCopies += static_cast<int64_t>(copies.size());
    if (engine_)
      for (const auto &[from, to] : copies)
        EXPECT_EQ(engine_->kvCache().pool().refCount(to), 1)
            << "copy-on-write into block " << to << ", which others hold";
    return inner_->copyBlocks(copies);
  }

  int64_t numCopies = 0;

private:
  void check(const Batch &batch) {
    EXPECT_TRUE(batch.validate(numBlocks(), blockSize_).isOk());
    if (!engine_)
      return;
    const BlockPool &pool = engine_->kvCache().pool();
    std::set<int64_t> slots;
    for (int64_t slot : batch.slotMapping) {
      EXPECT_TRUE(slots.insert(slot).second)
          << "slot " << slot << " written twice in one forward call";
      const BlockId block = static_cast<BlockId>(slot / blockSize_);
      EXPECT_EQ(pool.refCount(block), 1)
          << "a forward call writes block " << block << ", which "
          << pool.refCount(block) << " sequences hold";
      EXPECT_FALSE(pool.isCached(block))
          << "a forward call writes block " << block
          << ", published in the prefix cache";
    }
  }

  std::unique_ptr<Backend> inner_;
  int64_t blockSize_;
  const Engine *engine_ = nullptr;
};

/// What the test has seen of one completion.
struct Seen {
  size_t request = 0;
  int64_t index = 0;
  bool isFork = false;
  std::vector<int32_t> streamed;
  bool finished = false;
  RequestOutput final;
  /// abort() was called on it (and returned ok).
  bool aborted = false;
  int64_t preemptions = 0;
  /// The text of the last output, and the log-probabilities streamed.
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  /// Output tokens a fork inherited (streamed to its parent).
  size_t inherited = 0;
};

/// Bytes at the end of a streamed text that a later stop string may still
/// take back: one less than the longest stop string's (serving's
/// AsyncEngine holds them back from its clients).
size_t holdBack(const SamplingParams &params) {
  size_t longest = 0;
  for (const std::string &stop : params.stopStrings)
    longest = std::max(longest, stop.size());
  return longest ? longest - 1 : 0;
}

/// `before` without its last `held` bytes is a prefix of `text`.
bool extends(const std::string &text, const std::string &before, size_t held) {
  const size_t keep = before.size() > held ? before.size() - held : 0;
  return text.compare(0, keep, before, 0, keep) == 0 && text.size() >= keep;
}

bool sameLogprobs(const TokenLogprobs &a, const TokenLogprobs &b) {
  return a.token == b.token && a.logprob == b.logprob && a.top == b.top;
}

/// The target (and draft) model of the scenarios, with the token runs that
/// prompts are built from.
struct StressModel {
  std::string dir;
  std::string draftDir;
  std::vector<std::vector<int32_t>> phrases;
  /// Detokenizes outputs (EngineConfig::tokenizer; null: no stop strings).
  const Tokenizer *tokenizer = nullptr;
};

class EngineStress : public ::testing::Test {
protected:
  /// The seeds to run: `first`..`first + count - 1`, or those of
  /// INFER_STRESS_SEEDS ("first" or "first:count").
  static std::vector<uint64_t> seeds(uint64_t first, uint64_t count) {
    if (const char *env = std::getenv("INFER_STRESS_SEEDS")) {
      const std::string spec(env);
      const size_t colon = spec.find(':');
      first = std::stoull(spec.substr(0, colon));
      count =
          colon == std::string::npos ? 1 : std::stoull(spec.substr(colon + 1));
    }
    std::vector<uint64_t> out;
    for (uint64_t i = 0; i < count; ++i)
      out.push_back(first + i);
    return out;
  }

  const Artifact &artifact(const std::string &dir, int64_t blockSize) {
    auto key = std::make_pair(dir, blockSize);
    auto it = artifacts_.find(key);
    if (it == artifacts_.end()) {
      StatusOr<Artifact> a = buildLlamaArtifact(dir, blockSize);
      EXPECT_TRUE(a.isOk()) << a.status().message();
      it = artifacts_.emplace(key, std::move(a).value()).first;
    }
    return it->second;
  }

  /// The request alone on a fresh engine with a pool that holds it whole,
  /// with the model's defaults (block size 16, no speculation) and `eos`.
  const Outcome &alone(const StressModel &model,
                       const std::vector<int32_t> &eos,
                       const std::vector<int32_t> &prompt,
                       const SamplingParams &sampling) {
    std::ostringstream key;
    key.precision(17);
    key << model.dir << "|";
    for (int32_t t : eos)
      key << t << ",";
    key << "|";
    for (int32_t t : prompt)
      key << t << ",";
    key << "|" << sampling.maxNewTokens << "," << sampling.temperature << ","
        << sampling.topK << "," << sampling.topP << "," << sampling.minP << ","
        << sampling.repetitionPenalty << "," << sampling.presencePenalty << ","
        << sampling.frequencyPenalty << "," << sampling.seed << ","
        << sampling.ignoreEos << "," << sampling.logprobs << "|";
    for (int32_t t : sampling.stopTokenIds)
      key << t << ",";
    key << "|";
    for (const std::string &stop : sampling.stopStrings)
      key << stop.size() << ":" << stop;
    auto it = references_.find(key.str());
    if (it != references_.end())
      return it->second;
    const Artifact &a = artifact(model.dir, 16);
    EngineConfig config = engineConfigFor(a);
    config.eosTokenIds = eos;
    config.tokenizer = model.tokenizer;
    const int64_t blocks = blocksFor(
        static_cast<int64_t>(prompt.size()) + sampling.maxNewTokens + 1, 16);
    auto &backend = referenceBackends_[model.dir];
    if (!backend || backend->numBlocks() < blocks) {
      StatusOr<std::unique_ptr<Backend>> b =
          createTestBackend(a, std::max<int64_t>(blocks, 64), 2);
      EXPECT_TRUE(b.isOk()) << b.status().message();
      backend = std::move(b).value();
    }
    Outcome outcome;
    Engine engine(*backend, config);
    engine.setOutputCallback([&](const RequestOutput &out) {
      outcome.logprobs.insert(outcome.logprobs.end(), out.logprobs.begin(),
                              out.logprobs.end());
    });
    auto out = runToCompletion(engine, {{prompt, sampling}});
    EXPECT_TRUE(out.isOk()) << out.status().message();
    if (out.isOk()) {
      outcome.tokens = (*out)[0].outputTokenIds;
      outcome.reason = (*out)[0].finishReason;
      outcome.text = (*out)[0].text;
    }
    return references_.emplace(key.str(), std::move(outcome)).first->second;
  }

  /// What a request must produce when it may have `room` new tokens (see
  /// roomFor): the request alone without its stop strings (which change no
  /// token), cut where its stop checker ends it, stop strings and `room`
  /// included. The cut keeps a prefix of the tokens and log-probabilities;
  /// the text is the checker's.
  Outcome expectedOf(const StressModel &model, const std::vector<int32_t> &eos,
                     const std::vector<int32_t> &prompt,
                     const SamplingParams &params, int64_t room) {
    SamplingParams free = params;
    free.stopStrings.clear();
    const Outcome &whole = alone(model, eos, prompt, free);
    if (params.stopStrings.empty() &&
        static_cast<int64_t>(whole.tokens.size()) <= room)
      return whole;
    SamplingParams cut = params;
    cut.maxNewTokens = std::min(params.maxNewTokens, room);
    StopChecker stop(cut, eos, model.tokenizer, prompt);
    Outcome out;
    out.reason = whole.reason;
    for (int32_t token : whole.tokens) {
      out.tokens.push_back(token);
      const StopReason reason = stop.append(token);
      if (reason != StopReason::kNone) {
        out.reason = reason == StopReason::kLength ? FinishReason::kLength
                                                   : FinishReason::kStop;
        break;
      }
    }
    out.text = stop.text();
    out.logprobs.assign(whole.logprobs.begin(),
                        whole.logprobs.begin() +
                            std::min(whole.logprobs.size(), out.tokens.size()));
    return out;
  }

  Scenario draw(const StressModel &model, uint64_t seed);
  /// Runs the scenario; false when a check failed.
  bool run(const StressModel &model, const Scenario &s, Coverage &coverage);
  /// Runs the scenario of each seed on model `seed % models.size()`.
  void runSeeds(const std::vector<StressModel> &models,
                const std::vector<uint64_t> &seeds, Coverage &coverage);

  std::map<std::pair<std::string, int64_t>, Artifact> artifacts_;
  std::map<std::string, std::unique_ptr<Backend>> referenceBackends_;
  std::map<std::string, Outcome> references_;
};

/// A stop string for a request whose output alone is `free`: now and then
/// one that never matches, else a piece of that output (often across a
/// token boundary, or its very end) or of the prompt's text, which it may
/// or may not produce.
std::string drawStopString(Rng &rng, const StressModel &model,
                           const std::vector<int32_t> &prompt,
                           const Outcome &free) {
  // Where each token's text ends in the output's text.
  SamplingParams plain;
  plain.maxNewTokens = INT64_MAX;
  plain.ignoreEos = true;
  StopChecker detokenizer(plain, {}, model.tokenizer, prompt);
  std::vector<int64_t> ends;
  for (int32_t t : free.tokens) {
    (void)detokenizer.append(t);
    ends.push_back(static_cast<int64_t>(detokenizer.text().size()));
  }
  const std::string &text = detokenizer.text();
  const int64_t length = static_cast<int64_t>(text.size());
  auto piece = [&](const std::string &from, int64_t at, int64_t size) {
    at = std::clamp<int64_t>(at, 0, static_cast<int64_t>(from.size()) - 1);
    return from.substr(at, size);
  };
  const double kind = rng.real(0.0, 1.0);
  if (length > 1 && kind < 0.35) {
    // Across the end of a token's text.
    std::vector<int64_t> inner;
    for (int64_t e : ends)
      if (e > 0 && e < length)
        inner.push_back(e);
    if (!inner.empty()) {
      const int64_t e = inner[rng.range(0, inner.size() - 1)];
      const int64_t from = rng.range(std::max<int64_t>(e - 4, 0), e - 1);
      return text.substr(from,
                         rng.range(e + 1, std::min(e + 4, length)) - from);
    }
  }
  if (length > 0 && kind < 0.6)
    return piece(text, rng.range(0, length - 1), rng.range(1, 6));
  if (length > 0 && kind < 0.7)
    return text.substr(std::max<int64_t>(length - rng.range(1, 8), 0));
  const std::string promptText = model.tokenizer->decode(prompt, true);
  if (!promptText.empty() && kind < 0.85)
    return piece(promptText, rng.range(0, promptText.size() - 1),
                 rng.range(2, 6));
  std::string never = "\x01";
  for (int64_t n = rng.range(1, 4); n > 0; --n)
    never.push_back(static_cast<char>('a' + rng.range(0, 25)));
  return never;
}

Scenario EngineStress::draw(const StressModel &model, uint64_t seed) {
  Rng rng(seed);
  Scenario s;
  s.seed = seed;
  const bool hasDraft = !model.draftDir.empty();
  const std::vector<int64_t> blockSizes = {1, 2, 4, 8, 16, 32};
  const int64_t bs = blockSizes[rng.range(
      rng.chance(0.1) ? 0 : 1, static_cast<int64_t>(blockSizes.size()) - 1)];
  s.config = engineConfigFor(artifact(model.dir, bs));
  EngineConfig &c = s.config;
  c.tokenizer = model.tokenizer;
  const int64_t vocab = c.vocabSize;

  // Speculation first: its requests stay greedy (seeded speculative
  // sampling draws once per judged draft, so its tokens depend on how many
  // drafts ride along, which the token budget decides).
  if (rng.chance(hasDraft ? 0.85 : 0.3)) {
    c.numSpeculativeTokens = rng.range(1, 5);
    s.drafter =
        hasDraft && rng.chance(0.8) ? Drafter::kDraftModel : Drafter::kNgram;
    s.ngramMin = rng.range(1, 2);
    s.ngramMax = rng.range(s.ngramMin, 4);
    s.draftBlockSize = blockSizes[rng.range(1, 5)];
    if (rng.chance(0.25)) {
      spec::AdaptiveOptions a;
      a.maxK = rng.range(1, 5);
      a.initialAcceptance = rng.real(0.0, 1.0);
      a.perTokenCost = rng.real(0.0, 0.1);
      s.adaptive = a;
    }
  }
  const bool speculative = s.drafter != Drafter::kNone;

  // Requests: prompts from a few shared prefixes (full blocks of them hit the
  // prefix cache), some equal to an earlier prompt.
  std::vector<std::vector<int32_t>> prefixes;
  for (int64_t i = rng.range(1, 3); i > 0; --i) {
    std::vector<int32_t> prefix;
    if (!model.phrases.empty() && rng.chance(0.7))
      prefix = model.phrases[rng.range(0, model.phrases.size() - 1)];
    for (int64_t n = rng.range(0, 3 * bs + 4); n > 0; --n)
      prefix.push_back(static_cast<int32_t>(rng.range(0, vocab - 1)));
    if (prefix.empty())
      prefix.push_back(static_cast<int32_t>(rng.range(0, vocab - 1)));
    prefixes.push_back(prefix);
  }
  if (rng.chance(0.3)) {
    c.eosTokenIds.clear();
    for (int64_t k = rng.range(1, 2); k > 0; --k)
      c.eosTokenIds.push_back(static_cast<int32_t>(rng.range(0, vocab - 1)));
  }
  const bool priority = rng.chance(0.25);
  const bool arrivalTimes = rng.chance(0.2);
  const int64_t maxNew = hasDraft ? 20 : 40;
  const int64_t numRequests = rng.range(1, hasDraft ? 6 : 10);
  for (int64_t i = 0; i < numRequests; ++i) {
    PlannedRequest r;
    if (i > 0 && rng.chance(0.1)) {
      r.prompt = s.requests[rng.range(0, i - 1)].prompt;
    } else {
      if (rng.chance(0.7)) {
        const std::vector<int32_t> &prefix =
            prefixes[rng.range(0, prefixes.size() - 1)];
        r.prompt.assign(prefix.begin(),
                        prefix.begin() + rng.range(1, prefix.size()));
      }
      for (int64_t n = rng.range(r.prompt.empty() ? 1 : 0, 24); n > 0; --n)
        r.prompt.push_back(static_cast<int32_t>(rng.range(0, vocab - 1)));
    }
    SamplingParams &p = r.sampling;
    p.maxNewTokens = rng.chance(0.05) ? 0 : rng.range(1, maxNew);
    p.ignoreEos = rng.chance(0.5);
    if (!speculative && rng.chance(0.35)) {
      p.temperature = rng.real(0.3, 1.5);
      p.seed = rng.next();
      if (rng.chance(0.4))
        p.topK = rng.range(1, 40);
      if (rng.chance(0.3))
        p.topP = rng.real(0.3, 1.0);
      if (rng.chance(0.2))
        p.minP = rng.real(0.0, 0.2);
    }
    if (rng.chance(0.15)) {
      p.repetitionPenalty = rng.real(1.0, 1.6);
      p.presencePenalty = rng.real(0.0, 0.5);
      p.frequencyPenalty = rng.real(0.0, 0.5);
    }
    if (rng.chance(0.1))
      p.logprobs = rng.range(1, 4);
    if (p.maxNewTokens > 1 && rng.chance(0.2)) {
      // A token the request would produce, so that it stops there.
      const Outcome &free = alone(model, c.eosTokenIds, r.prompt, p);
      if (!free.tokens.empty())
        p.stopTokenIds.push_back(
            free.tokens[rng.range(0, free.tokens.size() - 1)]);
    }
    if (model.tokenizer && rng.chance(0.35)) {
      const Outcome &free = alone(model, c.eosTokenIds, r.prompt, p);
      for (int64_t k = rng.range(1, 3); k > 0; --k)
        p.stopStrings.push_back(drawStopString(rng, model, r.prompt, free));
    }
    // A request of no new tokens ends all its completions in addRequest.
    if (rng.chance(p.maxNewTokens == 0 ? 0.5 : 0.15))
      p.n = rng.range(2, 3);
    r.priority = priority ? rng.range(0, 3) : 0;
    r.arrivalStep = rng.chance(0.4) ? 0 : rng.range(0, 40);
    if (arrivalTimes)
      r.arrivalTime = rng.real(0.0, 60.0);
    if (rng.chance(0.2)) {
      r.abortStep = r.arrivalStep + rng.range(0, 30);
      r.abortIndex = rng.range(0, p.n - 1);
    }
    // A greedy fork continues as its parent would alone, under its own
    // parameters: now and then fewer new tokens or a stop token of that
    // output, so that it ends sooner, maybe inside what it inherits.
    if (p.greedy() && rng.chance(0.1)) {
      r.forkStep = r.arrivalStep + rng.range(1, 30);
      r.forkSampling = completionParams(p, 0);
      SamplingParams &f = r.forkSampling;
      if (rng.chance(0.3))
        f.maxNewTokens = rng.range(0, p.maxNewTokens);
      if (p.maxNewTokens > 1 && rng.chance(0.3)) {
        SamplingParams free = completionParams(p, 0);
        free.stopStrings.clear();
        const Outcome &out = alone(model, c.eosTokenIds, r.prompt, free);
        if (!out.tokens.empty())
          f.stopTokenIds.push_back(
              out.tokens[rng.range(0, out.tokens.size() - 1)]);
      }
      if (rng.chance(0.25))
        r.forkAbortStep = r.forkStep + rng.range(1, 20);
    }
    s.requests.push_back(std::move(r));
  }

  // The pool: at least the longest prompt; below what the longest request
  // needs whole now and then (it is cut), near it (preemption), or plenty.
  int64_t longestPrompt = 0, longestRequest = 0, all = 0, longestTokens = 0;
  for (const PlannedRequest &r : s.requests) {
    const int64_t prompt = static_cast<int64_t>(r.prompt.size());
    longestTokens = std::max(longestTokens, prompt);
    const int64_t whole = blocksFor(prompt + r.sampling.maxNewTokens, bs);
    longestPrompt = std::max(longestPrompt, blocksFor(prompt, bs));
    longestRequest = std::max(longestRequest, whole);
    all += whole * (r.sampling.n + (r.forkStep >= 0));
  }
  const double size = rng.real(0.0, 1.0);
  if (size < 0.15)
    s.numBlocks = rng.range(longestPrompt, longestRequest);
  else if (size < 0.65)
    s.numBlocks = rng.range(longestRequest, longestRequest + 3);
  else
    s.numBlocks = rng.range(longestRequest, all + 4);
  // A context that cuts requests now and then (kLength), the longest prompt
  // at least (a prompt as long as the context still gains one token).
  if (rng.chance(0.1))
    c.maxModelLen = rng.range(longestTokens, longestTokens + maxNew / 2);
  if (rng.chance(0.15))
    s.oversized.resize(s.numBlocks * bs + rng.range(1, bs),
                       static_cast<int32_t>(rng.range(0, vocab - 1)));

  c.enablePrefixCaching = rng.chance(0.6);
  c.scheduler.maxNumSeqs = rng.range(1, 12);
  const double budget = rng.real(0.0, 1.0);
  c.scheduler.maxNumBatchedTokens = budget < 0.4   ? rng.range(1, 16)
                                    : budget < 0.8 ? rng.range(17, 128)
                                                   : 2048;
  c.scheduler.enableChunkedPrefill = rng.chance(0.85);
  c.scheduler.policy =
      priority ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  if (rng.chance(0.2))
    c.scheduler.prefillRatio = rng.real(0.5, 3.0);
  c.asyncScheduling = rng.chance(0.3);
  s.draftBlocks = rng.range(1, 2 * all + 8);
  if (s.adaptive && rng.chance(0.5))
    s.adaptive->tokenBudget = c.scheduler.maxNumBatchedTokens;
  return s;
}

/// Failed assertions of the running test so far.
int64_t numFailures() {
  const ::testing::TestResult &result =
      *::testing::UnitTest::GetInstance()->current_test_info()->result();
  int64_t n = 0;
  for (int i = 0; i < result.total_part_count(); ++i)
    n += result.GetTestPartResult(i).failed();
  return n;
}

bool EngineStress::run(const StressModel &model, const Scenario &s,
                       Coverage &coverage) {
  const int64_t failuresBefore = numFailures();
  // A scenario stops at its first broken structure (the checks after it
  // would only repeat it).
  auto broken = [&] { return numFailures() > failuresBefore; };
  const EngineConfig &config = s.config;
  const int64_t bs = config.blockSize;
  const int64_t capacity = s.numBlocks * bs;

  // What each completion must produce: the request alone, cut by the pool;
  // a fork, the request alone under the fork's parameters.
  std::vector<std::vector<Outcome>> expected;
  std::vector<Outcome> forkExpected;
  for (const PlannedRequest &r : s.requests) {
    const int64_t room = roomFor(static_cast<int64_t>(r.prompt.size()),
                                 capacity, config.maxModelLen);
    std::vector<Outcome> completions;
    for (int64_t i = 0; i < r.sampling.n; ++i)
      completions.push_back(expectedOf(model, config.eosTokenIds, r.prompt,
                                       completionParams(r.sampling, i), room));
    expected.push_back(std::move(completions));
    forkExpected.push_back(r.forkStep >= 0
                               ? expectedOf(model, config.eosTokenIds, r.prompt,
                                            r.forkSampling, room)
                               : Outcome());
  }
  if (broken())
    return false;

  StatusOr<std::unique_ptr<Backend>> inner =
      createTestBackend(artifact(model.dir, bs), s.numBlocks, 2);
  EXPECT_TRUE(inner.isOk()) << inner.status().message();
  if (!inner.isOk())
    return false;
  CheckedBackend backend(std::move(inner).value(), bs);
  Engine engine(backend, config);
  backend.watch(&engine);
  if (s.drafter != Drafter::kNone) {
    std::unique_ptr<spec::Proposer> drafter;
    if (s.drafter == Drafter::kNgram) {
      drafter = std::make_unique<spec::NgramProposer>(s.ngramMin, s.ngramMax);
    } else {
      StatusOr<std::unique_ptr<Backend>> draft = createTestBackend(
          artifact(model.draftDir, s.draftBlockSize), s.draftBlocks, 2);
      EXPECT_TRUE(draft.isOk()) << draft.status().message();
      if (!draft.isOk())
        return false;
      drafter = std::make_unique<spec::DraftModelProposer>(
          std::move(draft).value(), s.draftBlockSize);
    }
    engine.setProposer(std::make_unique<spec::Speculator>(
        std::move(drafter), config.eosTokenIds, s.adaptive));
  }

  if (!s.oversized.empty()) {
    StatusOr<RequestId> refused = engine.addRequest(s.oversized, {});
    EXPECT_FALSE(refused.isOk());
    const bool tooLong =
        config.maxModelLen > 0 &&
        static_cast<int64_t>(s.oversized.size()) > config.maxModelLen;
    EXPECT_EQ(refused.status().code(), tooLong ? StatusCode::kOutOfRange
                                               : StatusCode::kResourceExhausted)
        << refused.status().message();
    ++coverage.refused;
  }

  std::map<RequestId, Seen> seen;
  /// (request, completion index) -> id, once the completion has appeared.
  std::map<std::pair<size_t, int64_t>, RequestId> ids;
  /// request -> its fork's id, once forked.
  std::map<size_t, RequestId> forkIds;
  std::map<RequestId, size_t> requestOf;
  /// The request being added: a request of max_new_tokens 0 ends inside
  /// addRequest, before its id is returned. The request being forked: a
  /// fork its own parameters end at once ends inside Engine::fork.
  std::optional<size_t> adding, forking;
  std::vector<RequestOutput> delivered;
  int64_t generated = 0;
  // Everything the callback sees, checked as it comes.
  engine.setOutputCallback([&](const RequestOutput &out) {
    delivered.push_back(out);
    generated += static_cast<int64_t>(out.newTokenIds.size());
    auto it = seen.find(out.id);
    if (it == seen.end() && adding && out.parentId == out.id) {
      Seen &c = seen[out.id];
      c.request = *adding;
      requestOf[out.id] = *adding;
      ids[{*adding, 0}] = out.id;
      it = seen.find(out.id);
    }
    if (it == seen.end() && forking && out.parentId == out.id) {
      // A fork ended by its own parameters: its final output, the part of
      // its parent's output it keeps and no new tokens.
      EXPECT_TRUE(out.finished && out.newTokenIds.empty())
          << "fork " << out.id << " of request " << *forking;
      Seen &c = seen[out.id];
      c.request = *forking;
      c.isFork = true;
      c.streamed = out.outputTokenIds;
      c.inherited = c.streamed.size();
      requestOf[out.id] = *forking;
      it = seen.find(out.id);
      ++coverage.forksEndedAtOnce;
    }
    if (it == seen.end()) {
      // A completion branching off its request (index > 0).
      auto parent = requestOf.find(out.parentId);
      ASSERT_NE(parent, requestOf.end())
          << "an output of unknown request " << out.id;
      ASSERT_GT(out.index, 0);
      ASSERT_LT(out.index, s.requests[parent->second].sampling.n);
      ASSERT_EQ(ids.count({parent->second, out.index}), 0u);
      ids[{parent->second, out.index}] = out.id;
      Seen &child = seen[out.id];
      child.request = parent->second;
      child.index = out.index;
      it = seen.find(out.id);
      ++coverage.completions;
    }
    Seen &c = it->second;
    ASSERT_FALSE(c.finished)
        << "request " << out.id << " has an output after its final one";
    if (!c.isFork) {
      EXPECT_EQ(out.index, c.index);
      EXPECT_EQ(requestOf.at(out.parentId), c.request);
    }
    c.streamed.insert(c.streamed.end(), out.newTokenIds.begin(),
                      out.newTokenIds.end());
    ASSERT_EQ(out.outputTokenIds, c.streamed)
        << "request " << out.id << ": the output is not the tokens streamed";
    // The text grows but for what a stop string takes back, and never
    // holds one.
    const SamplingParams &params = s.requests[c.request].sampling;
    if (!model.tokenizer)
      EXPECT_EQ(out.text, "");
    EXPECT_TRUE(extends(out.text, c.text, holdBack(params)))
        << "request " << out.id << ": text " << escaped(out.text) << " after "
        << escaped(c.text);
    for (const std::string &stop : params.stopStrings)
      EXPECT_EQ(out.text.find(stop), std::string::npos)
          << "request " << out.id << ": text " << escaped(out.text)
          << " holds stop string " << escaped(stop);
    c.text = out.text;
    // Log-probabilities of each new token; with speculative decoding the
    // accepted drafts carry none.
    EXPECT_LE(out.logprobs.size(), out.newTokenIds.size());
    if (config.numSpeculativeTokens == 0)
      EXPECT_EQ(out.logprobs.size(),
                params.logprobs > 0 ? out.newTokenIds.size() : 0u);
    for (size_t k = 0;
         k < std::min(out.logprobs.size(), out.newTokenIds.size()); ++k) {
      EXPECT_EQ(static_cast<int64_t>(out.logprobs[k].top.size()),
                params.logprobs);
      if (config.numSpeculativeTokens == 0)
        EXPECT_EQ(out.logprobs[k].token, out.newTokenIds[k]);
    }
    c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(),
                      out.logprobs.end());
    // Whole blocks of the prompt, its last token always computed.
    EXPECT_EQ(out.numCachedTokens % bs, 0);
    EXPECT_LT(out.numCachedTokens,
              static_cast<int64_t>(s.requests[c.request].prompt.size()));
    if (!config.enablePrefixCaching)
      EXPECT_EQ(out.numCachedTokens, 0);
    // The request is forgotten after its final output: its count is read
    // here too (it may be preempted and end in one step).
    if (const Request *r = engine.request(out.id)) {
      EXPECT_GE(r->numPreemptions, c.preemptions);
      c.preemptions = r->numPreemptions;
    }
    if (out.finished) {
      c.finished = true;
      c.final = out;
      EXPECT_NE(out.finishReason, FinishReason::kNone);
      EXPECT_NE(out.finishReason, FinishReason::kError) << out.error;
      EXPECT_EQ(out.finishReason == FinishReason::kAbort, c.aborted)
          << "request " << out.id;
    }
  });

  /// Each block's references are those of the live block tables, and the
  /// live requests' tables cover what they computed.
  auto checkPool = [&](int64_t step) {
    const KVCacheManager &kv = engine.kvCache();
    const BlockPool &pool = kv.pool();
    std::vector<int32_t> holders(pool.numBlocks(), 0);
    for (auto &[id, c] : seen) {
      const Request *r = engine.request(id);
      const std::vector<BlockId> &table = kv.blockTable(id);
      if (c.finished) {
        EXPECT_EQ(r, nullptr) << "finished request " << id << " is live";
        EXPECT_TRUE(table.empty())
            << "finished request " << id << " holds blocks";
        continue;
      }
      if (!r) {
        ADD_FAILURE() << "request " << id << " vanished without its final "
                      << "output (step " << step << ")";
        continue;
      }
      for (BlockId b : table)
        ++holders[b];
      if (r->status == RequestStatus::kWaiting) {
        EXPECT_TRUE(table.empty()) << "waiting request " << id
                                   << " holds blocks (step " << step << ")";
        EXPECT_EQ(r->numComputedTokens, 0);
      } else if (r->status == RequestStatus::kRunning) {
        EXPECT_EQ(static_cast<int64_t>(table.size()),
                  blocksFor(r->numComputedTokens, bs))
            << "request " << id << " holds " << table.size() << " blocks for "
            << r->numComputedTokens << " computed tokens (step " << step << ")";
        coverage.chunkedPrefills += r->numComputedTokens > 0 &&
                                    r->numComputedTokens < r->numPromptTokens;
      }
      EXPECT_GE(r->numPreemptions, c.preemptions);
      c.preemptions = r->numPreemptions;
    }
    int64_t free = 0;
    for (BlockId b = 0; b < pool.numBlocks(); ++b) {
      EXPECT_EQ(pool.refCount(b), holders[b])
          << "block " << b << " (step " << step << ")";
      free += pool.refCount(b) == 0;
    }
    EXPECT_EQ(pool.numFreeBlocks(), free) << "step " << step;
  };

  auto isLive = [&](RequestId id) { return !seen.at(id).finished; };
  size_t numAdded = 0;
  size_t reported = 0;
  constexpr int64_t kMaxSteps = 20000;
  int64_t step = 0;
  for (;; ++step) {
    for (size_t i = 0; i < s.requests.size(); ++i) {
      const PlannedRequest &r = s.requests[i];
      if (r.arrivalStep != step)
        continue;
      adding = i;
      StatusOr<RequestId> id =
          engine.addRequest(r.prompt, r.sampling, r.priority, r.arrivalTime);
      adding.reset();
      EXPECT_TRUE(id.isOk()) << id.status().message();
      if (!id.isOk())
        return false;
      seen[*id].request = i;
      requestOf[*id] = i;
      ids[{i, 0}] = *id;
      ++numAdded;
    }
    for (size_t i = 0; i < s.requests.size(); ++i) {
      const PlannedRequest &r = s.requests[i];
      if (r.abortStep == step && ids.count({i, r.abortIndex})) {
        const RequestId id = ids.at({i, r.abortIndex});
        const Request *live = engine.request(id);
        const bool running = live && live->status == RequestStatus::kRunning;
        seen[id].aborted = isLive(id);
        const Status aborted = engine.abort(id);
        EXPECT_EQ(aborted.isOk(), seen[id].aborted)
            << "abort of request " << id << ": " << aborted.message();
        if (!aborted.isOk())
          EXPECT_EQ(aborted.code(), StatusCode::kNotFound);
        else
          ++(running ? coverage.abortsRunning : coverage.abortsWaiting);
        EXPECT_TRUE(seen[id].finished) << "abort emits the final output";
      }
      if (r.forkAbortStep == step && forkIds.count(i)) {
        const RequestId id = forkIds.at(i);
        seen[id].aborted = isLive(id);
        const Status aborted = engine.abort(id);
        EXPECT_EQ(aborted.isOk(), seen[id].aborted)
            << "abort of fork " << id << ": " << aborted.message();
        if (!aborted.isOk())
          EXPECT_EQ(aborted.code(), StatusCode::kNotFound);
        else
          ++coverage.forkAborts;
        EXPECT_TRUE(seen[id].finished) << "abort emits the final output";
      }
      if (r.forkStep == step) {
        const RequestId parent = ids.at({i, 0});
        const Request *p = engine.request(parent);
        const bool decoding = p && p->status == RequestStatus::kRunning &&
                              p->numTokens() - p->numComputedTokens == 1;
        forking = i;
        StatusOr<RequestId> child = engine.fork(parent, r.forkSampling);
        forking.reset();
        if (!config.asyncScheduling || config.numSpeculativeTokens > 0)
          EXPECT_EQ(child.isOk(), decoding) << child.status().message();
        if (child.isOk())
          forkIds[i] = *child;
        if (!child.isOk()) {
          EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
        } else if (const Request *forked = engine.request(*child)) {
          Seen &c = seen[*child];
          EXPECT_FALSE(c.finished) << "fork " << *child << " is live";
          c.request = i;
          c.isFork = true;
          // It starts with its parent's output, streamed to the parent.
          c.streamed.assign(forked->tokens.begin() + forked->numPromptTokens,
                            forked->tokens.end());
          c.inherited = c.streamed.size();
          requestOf[*child] = i;
          ++coverage.forks;
        } else {
          EXPECT_TRUE(seen.count(*child) && seen[*child].finished)
              << "fork " << *child << " is neither live nor finished";
          ++coverage.forks;
        }
      }
    }
    checkPool(step);
    if (broken())
      return false;
    if (numAdded == s.requests.size() && !engine.hasUnfinished())
      break;
    if (step == kMaxSteps) {
      ADD_FAILURE() << "still unfinished after " << kMaxSteps << " steps";
      return false;
    }
    StatusOr<std::vector<RequestOutput>> outputs = engine.step();
    EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
    if (!outputs.isOk())
      return false;
    // step() returns what the callback received since the step before (the
    // outputs of aborts included), in the same order.
    EXPECT_EQ(outputs->size(), delivered.size() - reported);
    for (size_t k = 0; k < outputs->size() && reported + k < delivered.size();
         ++k) {
      const RequestOutput &a = (*outputs)[k], &b = delivered[reported + k];
      EXPECT_TRUE(a.id == b.id && a.newTokenIds == b.newTokenIds &&
                  a.finished == b.finished)
          << "step() returned other outputs than the callback received";
    }
    reported = delivered.size();
    checkPool(step);
    if (broken())
      return false;
  }

  // Every completion ends as expected; an aborted one with a prefix of it.
  for (const auto &[id, c] : seen) {
    const PlannedRequest &r = s.requests[c.request];
    EXPECT_TRUE(c.finished) << "request " << id << " never finished";
    const Outcome &want =
        c.isFork ? forkExpected[c.request] : expected[c.request][c.index];
    const std::vector<int32_t> &got = c.final.outputTokenIds;
    const SamplingParams params =
        c.isFork ? r.forkSampling : completionParams(r.sampling, c.index);
    // A fork's inherited log-probabilities went to its parent.
    const size_t from = std::min(c.inherited, want.logprobs.size());
    const bool logprobsMatch =
        c.logprobs.size() <= want.logprobs.size() - from &&
        std::equal(c.logprobs.begin(), c.logprobs.end(),
                   want.logprobs.begin() + from, sameLogprobs);
    if (c.aborted) {
      EXPECT_EQ(c.final.finishReason, FinishReason::kAbort);
      EXPECT_LE(got.size(), want.tokens.size()) << "aborted request " << id;
      EXPECT_TRUE(std::equal(
          got.begin(), got.begin() + std::min(got.size(), want.tokens.size()),
          want.tokens.begin()))
          << "aborted request " << id << " (request " << c.request
          << ", completion " << c.index << ") strays from its tokens alone";
      EXPECT_TRUE(extends(want.text, c.final.text, holdBack(params)))
          << "aborted request " << id << ": text " << escaped(c.final.text)
          << " strays from " << escaped(want.text) << " alone";
      if (config.numSpeculativeTokens == 0)
        EXPECT_TRUE(logprobsMatch)
            << "aborted request " << id << ": log-probabilities";
      continue;
    }
    EXPECT_EQ(got, want.tokens)
        << "request " << id << " (request " << c.request << ", completion "
        << c.index << (c.isFork ? ", fork" : "") << ")";
    EXPECT_EQ(c.final.finishReason, want.reason) << "request " << id;
    EXPECT_EQ(c.final.text, want.text)
        << "request " << id << ": text " << escaped(c.final.text) << " against "
        << escaped(want.text) << " alone";
    if (config.numSpeculativeTokens == 0)
      EXPECT_TRUE(logprobsMatch &&
                  c.logprobs.size() + from == want.logprobs.size())
          << "request " << id << ": " << c.logprobs.size()
          << " log-probabilities against " << want.logprobs.size()
          << " alone, or other values";
    const Outcome uncut =
        expectedOf(model, config.eosTokenIds, r.prompt, params, INT64_MAX);
    const int64_t promptLength = static_cast<int64_t>(r.prompt.size());
    if (want.tokens.size() < uncut.tokens.size()) {
      ++coverage.cutByPool;
      coverage.cutByContext +=
          config.maxModelLen > 0 &&
          static_cast<int64_t>(want.tokens.size()) ==
              std::max<int64_t>(config.maxModelLen - promptLength, 1);
    }
    coverage.stoppedEarly += want.reason == FinishReason::kStop;
    // Stopped by a stop string: its last token is none of the others.
    if (want.reason == FinishReason::kStop && !params.stopStrings.empty() &&
        !want.tokens.empty()) {
      const int32_t last = want.tokens.back();
      const auto &stops = params.stopTokenIds;
      coverage.stopStrings +=
          std::find(stops.begin(), stops.end(), last) == stops.end() &&
          (params.ignoreEos ||
           std::find(config.eosTokenIds.begin(), config.eosTokenIds.end(),
                     last) == config.eosTokenIds.end());
    }
    if (!config.enablePrefixCaching)
      EXPECT_EQ(c.final.numCachedTokens, 0);
  }
  // Every completion of a request appears, unless completion 0 was aborted
  // before its prompt was computed (the others branch off there). A request
  // of max_new_tokens 0 ends all its completions in addRequest.
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const Seen &first = seen.at(ids.at({i, 0}));
    const bool cutShort = first.aborted && first.final.outputTokenIds.empty();
    const SamplingParams &p = s.requests[i].sampling;
    coverage.zeroTokenRequests += p.maxNewTokens == 0;
    coverage.zeroTokenCompletions += p.maxNewTokens == 0 ? p.n - 1 : 0;
    for (int64_t k = 1; k < p.n; ++k)
      if (!cutShort)
        EXPECT_EQ(ids.count({i, k}), 1u)
            << "completion " << k << " of request " << i << " never appeared";
  }

  // Nothing is left behind, and the counters agree with the outputs.
  const KVCacheManager &kv = engine.kvCache();
  EXPECT_EQ(kv.numFreeBlocks(), s.numBlocks) << "every block is free";
  for (BlockId b = 0; b < kv.pool().numBlocks(); ++b)
    EXPECT_EQ(kv.pool().refCount(b), 0) << "block " << b;
  const EngineStats &stats = engine.stats();
  EXPECT_EQ(stats.numGeneratedTokens, generated);
  EXPECT_LE(stats.numAcceptedTokens, stats.numDraftTokens);
  if (config.numSpeculativeTokens == 0)
    EXPECT_EQ(stats.numDraftTokens, 0);
  if (!config.enablePrefixCaching)
    EXPECT_EQ(stats.numCachedTokens, 0);
  int64_t preemptions = 0;
  for (const auto &[id, c] : seen)
    preemptions += c.preemptions;
  EXPECT_EQ(stats.numPreemptions, preemptions)
      << "the engine's count against the requests'";
  int64_t whole = 0;
  for (const PlannedRequest &r : s.requests)
    whole += blocksFor(static_cast<int64_t>(r.prompt.size()) +
                           r.sampling.maxNewTokens,
                       bs) *
             (r.sampling.n + (r.forkStep >= 0));
  if (whole <= s.numBlocks)
    EXPECT_EQ(stats.numPreemptions, 0) << "every request fits at once";

  ++coverage.scenarios;
  coverage.preemptions += stats.numPreemptions;
  coverage.cachedTokens += stats.numCachedTokens;
  coverage.blockCopies += backend.numCopies;
  coverage.asyncSteps += stats.numAsyncSteps;
  coverage.draftTokens += stats.numDraftTokens;
  coverage.acceptedTokens += stats.numAcceptedTokens;
  return !broken();
}

void EngineStress::runSeeds(const std::vector<StressModel> &models,
                            const std::vector<uint64_t> &seeds,
                            Coverage &coverage) {
  int64_t failed = 0;
  for (uint64_t seed : seeds) {
    const StressModel &model = models[seed % models.size()];
    const Scenario s = draw(model, seed);
    SCOPED_TRACE("seed " + std::to_string(seed) +
                 " (INFER_STRESS_SEEDS=" + std::to_string(seed) + ")");
    if (!run(model, s, coverage)) {
      std::cout << "model " << fs::path(model.dir).filename().string() << ", "
                << describe(s);
      // A few failing scenarios say enough.
      if (++failed == 300)
        break;
    }
  }
  coverage.print(std::cout);
}

/// The ranges drawn from reach every feature over the default seeds (a
/// replay of chosen seeds need not).
void expectCovered(const Coverage &c, bool speculative, bool stopStrings) {
  if (std::getenv("INFER_STRESS_SEEDS"))
    return;
  if (stopStrings)
    EXPECT_GT(c.stopStrings, 0);
  EXPECT_GT(c.preemptions, 0);
  EXPECT_GT(c.cachedTokens, 0);
  EXPECT_GT(c.blockCopies, 0);
  EXPECT_GT(c.chunkedPrefills, 0);
  EXPECT_GT(c.cutByPool, 0);
  EXPECT_GT(c.stoppedEarly, 0);
  EXPECT_GT(c.abortsRunning, 0);
  EXPECT_GT(c.abortsWaiting, 0);
  EXPECT_GT(c.forks, 0);
  EXPECT_GT(c.completions, 0);
  EXPECT_GT(c.refused, 0);
  if (speculative)
    EXPECT_GT(c.acceptedTokens, 0);
  else
    EXPECT_GT(c.asyncSteps, 0);
  // The many scenarios of the random model reach the rarer features.
  if (!speculative) {
    EXPECT_GT(c.forksEndedAtOnce, 0);
    EXPECT_GT(c.forkAborts, 0);
    EXPECT_GT(c.cutByContext, 0);
    EXPECT_GT(c.zeroTokenCompletions, 0);
  }
}

/// The tiny-pycode tokenizer, or null when its fixture is missing.
std::unique_ptr<Tokenizer> tinyPycodeTokenizer() {
  const std::string path = std::string(INFER_FIXTURES_DIR) +
                           "/models/tiny-pycode-target/tokenizer.json";
  if (!fs::exists(path))
    return nullptr;
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::fromFile(path);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.isOk() ? std::move(t).value() : nullptr;
}

/// The random models take turns: grouped-query attention, multi-head
/// attention with tied embeddings, and sliding-window attention (a window
/// of 16, which prompts, prefix-cached blocks and chunks cross).
TEST_F(EngineStress, RandomModels) {
  // They have no tokenizer: tiny-pycode's, whose vocabulary holds their 512
  // ids (mostly single bytes, so the text is often broken UTF-8),
  // detokenizes their outputs for stop strings.
  const std::unique_ptr<Tokenizer> tokenizer = tinyPycodeTokenizer();
  std::vector<StressModel> models;
  for (const char *name : {"llama-gqa", "llama-mha-tied", "mistral-swa"}) {
    StressModel model;
    model.dir = std::string(INFER_FIXTURES_DIR) + "/rand/" + name;
    model.tokenizer = tokenizer.get();
    if (fs::exists(model.dir + "/config.json"))
      models.push_back(model);
  }
  if (models.empty())
    GTEST_SKIP() << "random model fixtures missing";
  Coverage coverage;
  runSeeds(models, seeds(1, 200), coverage);
  expectCovered(coverage, /*speculative=*/false, tokenizer != nullptr);
}

TEST_F(EngineStress, TinyPycodeWithDraftModel) {
  const std::string models = std::string(INFER_FIXTURES_DIR) + "/models/";
  const std::unique_ptr<Tokenizer> tokenizer = tinyPycodeTokenizer();
  StressModel model;
  model.dir = models + "tiny-pycode-target";
  model.draftDir = models + "tiny-pycode-draft";
  model.tokenizer = tokenizer.get();
  for (const GreedyCase &c :
       loadTinyPycodeGreedy(INFER_FIXTURES_DIR, "tiny-pycode-target"))
    model.phrases.push_back(c.inputIds);
  if (model.phrases.empty() || !tokenizer ||
      !fs::exists(model.draftDir + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixtures missing";
  Coverage coverage;
  runSeeds({model}, seeds(1001, 16), coverage);
  expectCovered(coverage, /*speculative=*/true, /*stopStrings=*/true);
}

} // namespace
} // namespace infer::testing
