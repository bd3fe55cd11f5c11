//===- AsyncSchedulingTest.cpp - Steps launched before the last tokens ----===//
//
// EngineConfig::asyncScheduling launches step k before step k-1's tokens
// are on the host (the backend feeds them to step k): the tokens, texts and
// finish reasons must be those of the synchronous engine, whatever
// arrives, stops, preempts, aborts, forks or fails meanwhile. The CPU
// backend runs the default Backend::launchSample, so this is the engine's
// logic end to end; the CUDA backend's own launch is tested in
// tests/runtime/cuda.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Tokenizer.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/TinyPycode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace infer::testing {
namespace {

/// Everything a request produced, as the engine's caller sees it.
struct Seen {
  std::vector<int32_t> streamed;
  RequestOutput last;
  int64_t numLogprobs = 0;
};

/// By request (the order they were added) and completion index.
using SeenMap = std::map<std::pair<size_t, int64_t>, Seen>;

class AsyncScheduling : public TinyPycodeTest {
protected:
  void SetUp() override {
    TinyPycodeTest::SetUp();
    if (!IsSkipped() && !HasFatalFailure())
      useTokenizer();
  }

  /// Adds `requests[i]` at step `arrival[i]` and steps until every request
  /// ended; what each request produced, in request order.
  SeenMap serve(Engine &engine, const std::vector<PromptRequest> &requests,
                const std::vector<int64_t> &arrival) {
    std::map<RequestId, size_t> index;
    SeenMap seen;
    engine.setOutputCallback([&](const RequestOutput &out) {
      Seen &s = seen[{index.at(out.parentId), out.index}];
      s.streamed.insert(s.streamed.end(), out.newTokenIds.begin(),
                        out.newTokenIds.end());
      EXPECT_FALSE(s.last.finished) << "an output after the final one";
      s.last = out;
      s.numLogprobs += static_cast<int64_t>(out.logprobs.size());
    });
    size_t next = 0;
    for (int64_t step = 0;
         (next < requests.size() || engine.hasUnfinished()) && step < 10000;
         ++step) {
      while (next < requests.size() && arrival[next] <= step) {
        StatusOr<RequestId> id = engine.addRequest(
            requests[next].promptTokenIds, requests[next].sampling);
        EXPECT_TRUE(id.isOk()) << id.status().message();
        index[*id] = next++;
      }
      StatusOr<std::vector<RequestOutput>> out = engine.step();
      EXPECT_TRUE(out.isOk()) << out.status().message();
      if (!out.isOk())
        break;
    }
    EXPECT_FALSE(engine.hasUnfinished());
    return seen;
  }

  /// serve() on a fresh engine and backend, synchronous or not.
  SeenMap run(EngineConfig config, bool async, int64_t blocks,
              const std::vector<PromptRequest> &requests,
              const std::vector<int64_t> &arrival,
              EngineStats *stats = nullptr) {
    config.asyncScheduling = async;
    std::unique_ptr<Backend> b = backend(blocks);
    Engine engine(*b, config);
    SeenMap seen = serve(engine, requests, arrival);
    EXPECT_EQ(engine.kvCache().numFreeBlocks(), blocks) << "a block leaked";
    if (stats)
      *stats = engine.stats();
    return seen;
  }

  static void expectSame(const SeenMap &asyncSeen, const SeenMap &syncSeen) {
    ASSERT_EQ(asyncSeen.size(), syncSeen.size());
    for (const auto &[key, seen] : syncSeen) {
      SCOPED_TRACE("request " + std::to_string(key.first) + " completion " +
                   std::to_string(key.second));
      ASSERT_TRUE(asyncSeen.count(key));
      const Seen &async = asyncSeen.at(key);
      const RequestOutput &a = async.last;
      const RequestOutput &s = seen.last;
      EXPECT_TRUE(a.finished);
      EXPECT_EQ(a.outputTokenIds, s.outputTokenIds);
      EXPECT_EQ(a.finishReason, s.finishReason);
      EXPECT_EQ(a.text, s.text);
      EXPECT_EQ(a.error, s.error);
      EXPECT_EQ(async.streamed, a.outputTokenIds)
          << "the stream carries every token once";
      EXPECT_EQ(async.numLogprobs, seen.numLogprobs);
      EXPECT_EQ(std::count(a.outputTokenIds.begin(), a.outputTokenIds.end(),
                           Request::kPendingToken),
                0);
    }
  }

  /// Every golden prompt, a long one made of them, and repeats (prefix
  /// cache), under greedy and seeded sampling, stop tokens and stop strings.
  std::vector<PromptRequest> mixedRequests() {
    std::vector<int32_t> longPrompt;
    for (const auto &q : prompts_)
      longPrompt.insert(longPrompt.end(), q.begin(), q.end());
    // A stop token and a stop string that occur in the middle of the first
    // prompt's greedy output.
    std::unique_ptr<Backend> b = backend(16);
    auto alone = generate(*b, config_, {{prompts_[0], greedy(24)}});
    EXPECT_TRUE(alone.isOk());
    const std::vector<int32_t> expected =
        alone.isOk() ? (*alone)[0].outputTokenIds : std::vector<int32_t>(24);
    const std::string text = tokenizer_->decode(expected, true);

    std::vector<PromptRequest> requests;
    for (size_t k = 0; k < prompts_.size(); ++k)
      requests.push_back({prompts_[k], greedy(8 + 3 * k)});
    requests.push_back({longPrompt, greedy(10)});
    requests.push_back({longPrompt, greedy(14)});
    SamplingParams seeded = greedy(16);
    seeded.temperature = 0.8;
    seeded.topP = 0.9;
    seeded.seed = 3;
    requests.push_back({prompts_[2], seeded});
    seeded.seed = 4;
    seeded.topK = 5;
    requests.push_back({prompts_[3], seeded});
    SamplingParams stopToken = greedy(24);
    stopToken.stopTokenIds = {expected[6]};
    requests.push_back({prompts_[0], stopToken});
    SamplingParams stopText = greedy(24);
    stopText.stopStrings = {text.substr(text.size() / 2, 3)};
    requests.push_back({prompts_[0], stopText});
    SamplingParams eos = greedy(24);
    eos.ignoreEos = false;
    requests.push_back({prompts_[5], eos});
    return requests;
  }
};

TEST_F(AsyncScheduling, MixedArrivalsGiveTheSynchronousOutputs) {
  const std::vector<PromptRequest> requests = mixedRequests();
  std::vector<int64_t> arrival;
  for (size_t k = 0; k < requests.size(); ++k)
    arrival.push_back(static_cast<int64_t>(2 * k));
  EngineConfig config = config_;
  // A small budget chunks the long prompts between the others' decodes.
  config.scheduler.maxNumBatchedTokens = 12;
  EngineStats stats;
  const SeenMap sync = run(config, false, 96, requests, arrival);
  const SeenMap async = run(config, true, 96, requests, arrival, &stats);
  expectSame(async, sync);
  EXPECT_GT(stats.numAsyncSteps, stats.numSteps / 2)
      << "most steps launched before the previous tokens were known";
  EXPECT_GT(stats.numDiscardedRows, 0)
      << "a stop token's request was in the next step already";
  EXPECT_GT(stats.numCachedTokens, 0) << "the repeated prompt hit the cache";
  EXPECT_EQ(sync.at({requests.size() - 3, 0}).last.finishReason,
            FinishReason::kStop);
  EXPECT_EQ(sync.at({requests.size() - 2, 0}).last.finishReason,
            FinishReason::kStop);

  // All at once, with the default budget.
  const std::vector<int64_t> atOnce(requests.size(), 0);
  expectSame(run(config_, true, 96, requests, atOnce),
             run(config_, false, 96, requests, atOnce));
}

TEST_F(AsyncScheduling, PreemptionKeepsTheTokens) {
  // Each request needs 4 blocks to finish: 6 requests in 8 blocks.
  std::vector<PromptRequest> requests;
  for (const auto &p : prompts_)
    requests.push_back({p, greedy(40)});
  const std::vector<int64_t> atOnce(requests.size(), 0);
  EngineStats stats;
  expectSame(run(config_, true, 8, requests, atOnce, &stats),
             run(config_, false, 8, requests, atOnce));
  EXPECT_GT(stats.numPreemptions, 0);
  EXPECT_GT(stats.numAsyncSteps, 0);
}

TEST_F(AsyncScheduling, LogprobsAndCompletionsRunSynchronously) {
  std::vector<PromptRequest> requests = mixedRequests();
  requests[1].sampling.logprobs = 2;
  SamplingParams n2 = greedy(6);
  n2.n = 2;
  n2.temperature = 0.7;
  n2.seed = 9;
  requests.push_back({prompts_[4], n2});
  std::vector<int64_t> arrival;
  for (size_t k = 0; k < requests.size(); ++k)
    arrival.push_back(static_cast<int64_t>(3 * k));
  EngineStats stats;
  const SeenMap async = run(config_, true, 96, requests, arrival, &stats);
  expectSame(async, run(config_, false, 96, requests, arrival));
  const Seen &withLogprobs = async.at({1, 0});
  EXPECT_EQ(withLogprobs.numLogprobs,
            static_cast<int64_t>(withLogprobs.last.outputTokenIds.size()));
  EXPECT_TRUE(async.count({requests.size() - 1, 1})) << "the second completion";
  EXPECT_GT(stats.numAsyncSteps, 0) << "async again once they ended";
}

TEST_F(AsyncScheduling, AbortAndForkWithAStepInFlight) {
  const std::vector<int32_t> prompt = prompts_[4];
  std::unique_ptr<Backend> ref = backend(16);
  auto alone = generate(*ref, config_, {{prompt, greedy(10)}});
  ASSERT_TRUE(alone.isOk());
  const std::vector<int32_t> expected = (*alone)[0].outputTokenIds;

  EngineConfig config = config_;
  config.asyncScheduling = true;
  std::unique_ptr<Backend> b = backend(16);
  Engine engine(*b, config);
  std::map<RequestId, RequestOutput> last;
  engine.setOutputCallback([&](const RequestOutput &o) { last[o.id] = o; });
  const RequestId parent = *engine.addRequest(prompt, greedy(10));
  const RequestId doomed = *engine.addRequest(prompts_[0], greedy(30));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(engine.step().isOk());
  // Three launches, two collected: the third token is in flight.
  ASSERT_NE(engine.request(doomed), nullptr);
  EXPECT_TRUE(engine.request(doomed)->hasPendingToken());
  EXPECT_EQ(last[doomed].outputTokenIds.size(), 2u);
  ASSERT_TRUE(engine.abort(doomed).isOk());
  EXPECT_TRUE(last[doomed].finished);
  EXPECT_EQ(last[doomed].finishReason, FinishReason::kAbort);
  EXPECT_EQ(last[doomed].outputTokenIds.size(), 2u)
      << "the token in flight is not part of an aborted output";

  // A fork takes the parent's last token: fork() collects it first.
  StatusOr<RequestId> child = engine.fork(parent, greedy(10));
  ASSERT_TRUE(child.isOk()) << child.status().message();
  EXPECT_EQ(last[parent].outputTokenIds.size(), 3u);
  while (engine.hasUnfinished())
    ASSERT_TRUE(engine.step().isOk());
  EXPECT_EQ(last[parent].outputTokenIds, expected);
  EXPECT_EQ(last[*child].outputTokenIds, expected);
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 16);
  EXPECT_GT(engine.stats().numDiscardedRows, 0) << "the aborted row";
}

/// Fails launch number `failingCall` (counted from 1) through the default
/// launchSample: the error comes back from collectSample.
class FailingBackend final : public Backend {
public:
  FailingBackend(std::unique_ptr<Backend> inner, int64_t failingCall)
      : inner_(std::move(inner)), failingCall_(failingCall) {}
  std::string_view name() const override { return "failing"; }
  int64_t numBlocks() const override { return inner_->numBlocks(); }
  StatusOr<Logits> forward(const Batch &batch) override {
    return inner_->forward(batch);
  }
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override {
    if (++calls_ == failingCall_)
      return internalError("injected fault in call " + std::to_string(calls_));
    return inner_->forwardSample(batch, sampling);
  }

private:
  std::unique_ptr<Backend> inner_;
  int64_t failingCall_;
  int64_t calls_ = 0;
};

TEST_F(AsyncScheduling, AFailedLaunchEndsItsRequestsAndServesTheRest) {
  std::vector<PromptRequest> requests;
  for (const auto &p : prompts_)
    requests.push_back({p, greedy(6)});
  EngineConfig config = config_;
  config.scheduler.maxNumSeqs = 2;
  const std::vector<int64_t> atOnce(requests.size(), 0);
  const SeenMap sync = run(config, false, 32, requests, atOnce);
  config.asyncScheduling = true;
  for (int64_t failingCall : {1, 2, 4, 7}) {
    SCOPED_TRACE("failing call " + std::to_string(failingCall));
    FailingBackend failing(backend(32), failingCall);
    Engine engine(failing, config);
    SeenMap seen = serve(engine, requests, atOnce);
    int64_t failed = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const RequestOutput &out = seen[{i, 0}].last;
      ASSERT_TRUE(out.finished) << "request " << i;
      if (out.finishReason == FinishReason::kError) {
        ++failed;
        EXPECT_NE(out.error.find("injected fault"), std::string::npos)
            << out.error;
        continue;
      }
      EXPECT_EQ(out.outputTokenIds, sync.at({i, 0}).last.outputTokenIds)
          << "request " << i;
    }
    EXPECT_GE(failed, 1);
    EXPECT_LE(failed, config.scheduler.maxNumSeqs);
    EXPECT_EQ(engine.kvCache().numFreeBlocks(), 32);
  }
}

TEST_F(AsyncScheduling, TheDefaultLaunchFeedsSampledTokens) {
  std::unique_ptr<Backend> b = backend(8);
  const std::vector<int32_t> &prompt = prompts_[1];
  const int32_t t = static_cast<int32_t>(prompt.size());
  Batch prefill;
  prefill.tokenIds = prompt;
  prefill.queryStartLoc = {0, t};
  prefill.contextLens = {t};
  prefill.maxBlocksPerSeq = 4;
  prefill.blockTables = {0, 1, 2, 3};
  for (int32_t p = 0; p < t; ++p) {
    prefill.positions.push_back(p);
    prefill.slotMapping.push_back(p);
  }
  prefill.logitsIndices = {t - 1};
  SamplingBatch one;
  one.rows.resize(1);
  auto decode = [&](int32_t position) {
    Batch d;
    d.tokenIds = {0};
    d.positions = {position};
    d.queryStartLoc = {0, 1};
    d.contextLens = {position + 1};
    d.maxBlocksPerSeq = 4;
    d.blockTables = {0, 1, 2, 3};
    d.slotMapping = {position};
    d.logitsIndices = {0};
    d.sampledTokens = {{0, 0}};
    return d;
  };

  EXPECT_FALSE(b->collectSample().isOk()) << "nothing launched";
  EXPECT_FALSE(b->launchSample(decode(t), one).isOk())
      << "no earlier launch to feed from";
  EXPECT_FALSE(b->forward(decode(t)).isOk())
      << "forward() resolves no sampled tokens";

  // Three tokens by launches that feed each other, two in flight at once.
  ASSERT_TRUE(b->launchSample(prefill, one).isOk());
  ASSERT_TRUE(b->launchSample(decode(t), one).isOk());
  EXPECT_FALSE(b->launchSample(decode(t + 1), one).isOk()) << "a third";
  StatusOr<std::vector<int32_t>> first = b->collectSample();
  ASSERT_TRUE(first.isOk()) << first.status().message();
  ASSERT_TRUE(b->launchSample(decode(t + 1), one).isOk());
  StatusOr<std::vector<int32_t>> second = b->collectSample();
  StatusOr<std::vector<int32_t>> third = b->collectSample();
  ASSERT_TRUE(second.isOk() && third.isOk());

  std::unique_ptr<Backend> ref = backend(8);
  auto out = generate(*ref, config_, {{prompt, greedy(3)}});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ((std::vector<int32_t>{(*first)[0], (*second)[0], (*third)[0]}),
            (*out)[0].outputTokenIds);

  // Rows the earlier launch does not have, and a token named twice.
  ASSERT_TRUE(b->launchSample(prefill, one).isOk());
  Batch bad = decode(t);
  bad.sampledTokens = {{0, 1}};
  EXPECT_FALSE(b->launchSample(bad, one).isOk());
  bad.sampledTokens = {{0, 0}, {0, 0}};
  EXPECT_FALSE(bad.validate(8, config_.blockSize).isOk());
  bad.sampledTokens = {{1, 0}};
  EXPECT_FALSE(bad.validate(8, config_.blockSize).isOk());
  ASSERT_TRUE(b->collectSample().isOk());
}

} // namespace
} // namespace infer::testing
