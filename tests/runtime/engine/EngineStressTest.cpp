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
//                  the tiny-pycode draft model) with k drafts
//   workload       prompts sharing prefixes (or equal), greedy and seeded
//                  sampling, penalties, logprobs, n > 1, forks, stop tokens,
//                  EOS, arrivals, aborts of running and waiting requests
//
//   - every completion that is not aborted ends exactly as the same request
//     run alone on a fresh engine with a large pool (the CPU backend is
//     exact whatever else is in a batch), cut where the pool cannot hold it
//     even alone (FinishReason::kLength, Scheduler.h);
//   - an aborted one ends with kAbort and a prefix of that, then is silent;
//   - every step returns no error; every output extends the one before; each
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
  /// Aborts completion `abortIndex` at this step (-1: never).
  int64_t abortStep = -1;
  int64_t abortIndex = 0;
  /// Forks completion 0 with its own sampling parameters at this step, if
  /// it is decoding then (-1: never).
  int64_t forkStep = -1;
};

struct Scenario {
  uint64_t seed = 0;
  EngineConfig config;
  int64_t numBlocks = 0;
  Drafter drafter = Drafter::kNone;
  int64_t ngramMin = 1, ngramMax = 3;
  int64_t draftBlockSize = 16, draftBlocks = 0;
  std::vector<PlannedRequest> requests;
  /// A prompt longer than the pool (empty: none), added first: addRequest
  /// refuses it.
  std::vector<int32_t> oversized;
};

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
     << ", prefill ratio " << c.scheduler.prefillRatio << ", async "
     << c.asyncScheduling << ", eos {";
  for (int32_t t : c.eosTokenIds)
    os << " " << t;
  os << " }, speculation k=" << c.numSpeculativeTokens;
  if (s.drafter == Drafter::kNgram)
    os << " ngram [" << s.ngramMin << ", " << s.ngramMax << "]";
  if (s.drafter == Drafter::kDraftModel)
    os << " draft model (" << s.draftBlocks << " blocks of " << s.draftBlockSize
       << ")";
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
    if (p.n > 1)
      os << ", n " << p.n;
    os << ", priority " << r.priority << ", arrives at step " << r.arrivalStep;
    if (r.abortStep >= 0)
      os << ", abort of completion " << r.abortIndex << " at step "
         << r.abortStep;
    if (r.forkStep >= 0)
      os << ", fork at step " << r.forkStep;
    os << "\n";
  }
  return os.str();
}

/// How a request ends.
struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

/// The outcome of a request run alone, cut where a pool of `capacity` token
/// slots cannot hold it: it gains its last token when its first `capacity`
/// tokens are computed, and ends there (Scheduler.h).
Outcome cutToPool(Outcome alone, int64_t promptLength, int64_t capacity) {
  const int64_t room = capacity + 1 - promptLength;
  if (static_cast<int64_t>(alone.tokens.size()) > room) {
    alone.tokens.resize(room);
    alone.reason = FinishReason::kLength;
  }
  return alone;
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
  int64_t completions = 0;
  int64_t asyncSteps = 0;
  int64_t draftTokens = 0;
  int64_t acceptedTokens = 0;
  int64_t refused = 0;

  void print(std::ostream &os) const {
    os << "[ stress   ] " << scenarios << " scenarios: " << preemptions
       << " preemptions, " << cachedTokens << " prefix-cached tokens, "
       << blockCopies << " block copies, " << chunkedPrefills
       << " half-computed prompts seen, " << cutByPool << " cut by the pool, "
       << stoppedEarly << " stopped by EOS or a stop token, " << abortsRunning
       << " + " << abortsWaiting << " aborts (running + waiting), " << forks
       << " forks, " << completions << " extra completions, " << asyncSteps
       << " async steps, " << acceptedTokens << "/" << draftTokens
       << " drafts accepted, " << refused << " prompts refused\n";
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
};

/// The target (and draft) model of the scenarios, with the token runs that
/// prompts are built from.
struct StressModel {
  std::string dir;
  std::string draftDir;
  std::vector<std::vector<int32_t>> phrases;
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
    auto it = references_.find(key.str());
    if (it != references_.end())
      return it->second;
    const Artifact &a = artifact(model.dir, 16);
    EngineConfig config = engineConfigFor(a);
    config.eosTokenIds = eos;
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
    auto out = generate(*backend, config, {{prompt, sampling}});
    EXPECT_TRUE(out.isOk()) << out.status().message();
    if (out.isOk()) {
      outcome.tokens = (*out)[0].outputTokenIds;
      outcome.reason = (*out)[0].finishReason;
    }
    return references_.emplace(key.str(), std::move(outcome)).first->second;
  }

  Scenario draw(const StressModel &model, uint64_t seed);
  /// Runs the scenario; false when a check failed.
  bool run(const StressModel &model, const Scenario &s, Coverage &coverage);
  void runSeeds(const StressModel &model, const std::vector<uint64_t> &seeds,
                Coverage &coverage);

  std::map<std::pair<std::string, int64_t>, Artifact> artifacts_;
  std::map<std::string, std::unique_ptr<Backend>> referenceBackends_;
  std::map<std::string, Outcome> references_;
};

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
  if (rng.chance(0.3))
    c.eosTokenIds = {static_cast<int32_t>(rng.range(0, vocab - 1))};
  const bool priority = rng.chance(0.25);
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
    if (rng.chance(0.15))
      p.n = rng.range(2, 3);
    r.priority = priority ? rng.range(0, 3) : 0;
    r.arrivalStep = rng.chance(0.4) ? 0 : rng.range(0, 40);
    if (rng.chance(0.2)) {
      r.abortStep = r.arrivalStep + rng.range(0, 30);
      r.abortIndex = rng.range(0, p.n - 1);
    }
    // A greedy fork continues as its parent would alone.
    if (p.greedy() && rng.chance(0.1))
      r.forkStep = r.arrivalStep + rng.range(1, 30);
    s.requests.push_back(std::move(r));
  }

  // The pool: at least the longest prompt; below what the longest request
  // needs whole now and then (it is cut), near it (preemption), or plenty.
  int64_t longestPrompt = 0, longestRequest = 0, all = 0;
  for (const PlannedRequest &r : s.requests) {
    const int64_t prompt = static_cast<int64_t>(r.prompt.size());
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

  // What each completion must produce: the request alone, cut by the pool.
  std::vector<std::vector<Outcome>> expected;
  for (const PlannedRequest &r : s.requests) {
    std::vector<Outcome> completions;
    for (int64_t i = 0; i < r.sampling.n; ++i)
      completions.push_back(cutToPool(alone(model, config.eosTokenIds, r.prompt,
                                            completionParams(r.sampling, i)),
                                      static_cast<int64_t>(r.prompt.size()),
                                      capacity));
    expected.push_back(std::move(completions));
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
    engine.setProposer(std::make_unique<spec::Speculator>(std::move(drafter),
                                                          config.eosTokenIds));
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
  std::map<RequestId, size_t> requestOf;
  /// The request being added: a request of max_new_tokens 0 ends inside
  /// addRequest, before its id is returned.
  std::optional<size_t> adding;
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
          engine.addRequest(r.prompt, r.sampling, r.priority);
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
      if (r.forkStep == step) {
        const RequestId parent = ids.at({i, 0});
        const Request *p = engine.request(parent);
        const bool decoding = p && p->status == RequestStatus::kRunning &&
                              p->numTokens() - p->numComputedTokens == 1;
        StatusOr<RequestId> child =
            engine.fork(parent, completionParams(r.sampling, 0));
        if (!config.asyncScheduling || config.numSpeculativeTokens > 0)
          EXPECT_EQ(child.isOk(), decoding) << child.status().message();
        if (!child.isOk()) {
          EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
        } else {
          Seen &c = seen[*child];
          c.request = i;
          c.isFork = true;
          // It starts with its parent's output, streamed to the parent.
          const Request *forked = engine.request(*child);
          c.streamed.assign(forked->tokens.begin() + forked->numPromptTokens,
                            forked->tokens.end());
          requestOf[*child] = i;
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
        c.isFork ? expected[c.request][0] : expected[c.request][c.index];
    const std::vector<int32_t> &got = c.final.outputTokenIds;
    if (c.aborted) {
      EXPECT_EQ(c.final.finishReason, FinishReason::kAbort);
      EXPECT_LE(got.size(), want.tokens.size()) << "aborted request " << id;
      EXPECT_TRUE(std::equal(
          got.begin(), got.begin() + std::min(got.size(), want.tokens.size()),
          want.tokens.begin()))
          << "aborted request " << id << " (request " << c.request
          << ", completion " << c.index << ") strays from its tokens alone";
      continue;
    }
    EXPECT_EQ(got, want.tokens)
        << "request " << id << " (request " << c.request << ", completion "
        << c.index << (c.isFork ? ", fork" : "") << ")";
    EXPECT_EQ(c.final.finishReason, want.reason) << "request " << id;
    const Outcome &uncut =
        alone(model, config.eosTokenIds, r.prompt,
              completionParams(r.sampling, c.isFork ? 0 : c.index));
    coverage.cutByPool += want.tokens.size() < uncut.tokens.size();
    coverage.stoppedEarly += want.reason == FinishReason::kStop;
    if (!config.enablePrefixCaching)
      EXPECT_EQ(c.final.numCachedTokens, 0);
  }
  // Every completion of a request appears, unless completion 0 was aborted
  // before its prompt was computed (the others branch off there). A request
  // of max_new_tokens 0 ends in addRequest as one completion (which
  // serving's AsyncEngine counts on).
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const Seen &first = seen.at(ids.at({i, 0}));
    const bool cutShort = first.aborted && first.final.outputTokenIds.empty();
    const SamplingParams &p = s.requests[i].sampling;
    for (int64_t k = 1; k < (p.maxNewTokens == 0 ? 1 : p.n); ++k)
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

void EngineStress::runSeeds(const StressModel &model,
                            const std::vector<uint64_t> &seeds,
                            Coverage &coverage) {
  int64_t failed = 0;
  for (uint64_t seed : seeds) {
    const Scenario s = draw(model, seed);
    SCOPED_TRACE("seed " + std::to_string(seed) +
                 " (INFER_STRESS_SEEDS=" + std::to_string(seed) + ")");
    if (!run(model, s, coverage)) {
      std::cout << describe(s);
      // A few failing scenarios say enough.
      if (++failed == 300)
        break;
    }
  }
  coverage.print(std::cout);
}

/// The ranges drawn from reach every feature over the default seeds (a
/// replay of chosen seeds need not).
void expectCovered(const Coverage &c, bool speculative) {
  if (std::getenv("INFER_STRESS_SEEDS"))
    return;
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
}

TEST_F(EngineStress, RandomModel) {
  const std::string dir = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!fs::exists(dir + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << dir;
  Coverage coverage;
  runSeeds({dir, "", {}}, seeds(1, 200), coverage);
  expectCovered(coverage, /*speculative=*/false);
}

TEST_F(EngineStress, TinyPycodeWithDraftModel) {
  const std::string models = std::string(INFER_FIXTURES_DIR) + "/models/";
  StressModel model{
      models + "tiny-pycode-target", models + "tiny-pycode-draft", {}};
  for (const GreedyCase &c :
       loadTinyPycodeGreedy(INFER_FIXTURES_DIR, "tiny-pycode-target"))
    model.phrases.push_back(c.inputIds);
  if (model.phrases.empty() || !fs::exists(model.draftDir + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixtures missing";
  Coverage coverage;
  runSeeds(model, seeds(1001, 16), coverage);
  expectCovered(coverage, /*speculative=*/true);
}

} // namespace
} // namespace infer::testing
