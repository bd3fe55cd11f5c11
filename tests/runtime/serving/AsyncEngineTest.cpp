//===- AsyncEngineTest.cpp - The engine on its own thread -----------------===//
//
// tiny-pycode-target behind AsyncEngine: requests submitted from several
// threads stream the tokens the engine gives them alone, aborts return
// their blocks, the queue bound refuses work, and shutdown finishes or
// aborts what is in flight.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/AsyncEngine.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/TinyPycode.h"

#include <gtest/gtest.h>

#include <thread>

namespace infer::testing {
namespace {

using serving::AsyncEngine;
using serving::GenerationRequest;
using serving::RequestStream;
using serving::StreamEvent;

/// Everything a stream delivered, concatenated per completion.
struct Collected {
  Status status;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> text;
  std::vector<FinishReason> reasons;
  int64_t numEvents = 0;
};

Collected collect(RequestStream &stream, int64_t n = 1) {
  Collected c;
  c.tokens.resize(static_cast<size_t>(n));
  c.text.resize(static_cast<size_t>(n));
  c.reasons.resize(static_cast<size_t>(n), FinishReason::kNone);
  while (std::optional<StreamEvent> event = stream.next()) {
    ++c.numEvents;
    if (!event->status.isOk()) {
      c.status = event->status;
      break;
    }
    const size_t i = static_cast<size_t>(event->delta.index);
    c.tokens[i].insert(c.tokens[i].end(), event->delta.tokenIds.begin(),
                       event->delta.tokenIds.end());
    c.text[i] += event->delta.text;
    if (event->delta.finished)
      c.reasons[i] = event->delta.finishReason;
  }
  return c;
}

class AsyncEngineTest : public TinyPycodeTest {
protected:
  void SetUp() override {
    TinyPycodeTest::SetUp();
    if (!IsSkipped() && !HasFatalFailure())
      useTokenizer();
  }
};

TEST_F(AsyncEngineTest, ConcurrentSubmitsStreamWhatTheEngineGivesAlone) {
  std::vector<PromptRequest> requests;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    SamplingParams p = greedy(12);
    if (i % 2) {
      p.temperature = 0.8;
      p.seed = 7 + i;
    }
    requests.push_back({prompts_[i], p});
  }
  std::unique_ptr<Backend> reference = backend(64);
  StatusOr<std::vector<RequestOutput>> expected =
      generate(*reference, config_, requests);
  ASSERT_TRUE(expected.isOk()) << expected.status().message();

  std::unique_ptr<Backend> b = backend(64);
  Engine engine(*b, config_);
  AsyncEngine async(engine);
  std::vector<Collected> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i)
    clients.emplace_back([&, i] {
      StatusOr<std::shared_ptr<RequestStream>> stream =
          async.submit({requests[i].promptTokenIds, requests[i].sampling});
      ASSERT_TRUE(stream.isOk()) << stream.status().message();
      got[i] = collect(**stream);
    });
  for (std::thread &t : clients)
    t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(got[i].status.isOk()) << got[i].status.message();
    EXPECT_EQ(got[i].tokens[0], (*expected)[i].outputTokenIds) << i;
    EXPECT_EQ(got[i].text[0], (*expected)[i].text) << i;
    EXPECT_EQ(got[i].reasons[0], FinishReason::kLength);
    // A delta per step, not one event with everything.
    EXPECT_GE(got[i].numEvents, 12);
  }
  EXPECT_EQ(async.numInFlight(), 0);
  async.shutdown(1.0);
}

TEST_F(AsyncEngineTest, CompletionsAndStopStringsStreamAsDeltas) {
  std::unique_ptr<Backend> reference = backend(64);
  SamplingParams p = greedy(24);
  p.n = 2;
  p.temperature = 1.0;
  p.seed = 3;
  StatusOr<std::vector<RequestOutput>> whole =
      generate(*reference, config_, {{prompts_[0], p}});
  ASSERT_TRUE(whole.isOk()) << whole.status().message();
  // A stop string from the middle of completion 0's text.
  const std::string text0 = (*whole)[0].text;
  ASSERT_GE(text0.size(), 8u);
  p.stopStrings = {text0.substr(text0.size() / 2, 3)};

  std::unique_ptr<Backend> b = backend(64);
  Engine engine(*b, config_);
  AsyncEngine async(engine);
  StatusOr<std::shared_ptr<RequestStream>> stream =
      async.submit({prompts_[0], p});
  ASSERT_TRUE(stream.isOk()) << stream.status().message();
  Collected c = collect(**stream, 2);
  ASSERT_TRUE(c.status.isOk()) << c.status.message();
  EXPECT_EQ(c.reasons[0], FinishReason::kStop);
  EXPECT_EQ(c.text[0], text0.substr(0, text0.find(p.stopStrings[0])));
  for (const std::string &text : c.text)
    EXPECT_EQ(text.find(p.stopStrings[0]), std::string::npos) << text;
  EXPECT_FALSE(c.tokens[1].empty());
}

TEST_F(AsyncEngineTest, NoNewTokensEndsTheStreamAfterEveryCompletion) {
  std::unique_ptr<Backend> b = backend(16);
  Engine engine(*b, config_);
  AsyncEngine async(engine);
  SamplingParams p = greedy(0);
  p.n = 3;
  StatusOr<std::shared_ptr<RequestStream>> stream =
      async.submit({prompts_[0], p});
  ASSERT_TRUE(stream.isOk()) << stream.status().message();
  Collected c = collect(**stream, 3);
  ASSERT_TRUE(c.status.isOk()) << c.status.message();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c.reasons[i], FinishReason::kLength) << "completion " << i;
    EXPECT_TRUE(c.tokens[i].empty()) << "completion " << i;
  }
  EXPECT_EQ(async.numInFlight(), 0);
  async.shutdown(1.0);
}

TEST_F(AsyncEngineTest, AbortReturnsBlocksAndTheEngineSleepsWhenIdle) {
  std::unique_ptr<Backend> b = backend(16);
  Engine engine(*b, config_);
  AsyncEngine async(engine);
  std::mutex mutex;
  std::condition_variable cv;
  int64_t events = 0;
  StatusOr<AsyncEngine::Handle> handle =
      async.submit({prompts_[0], greedy(1000)}, [&](StreamEvent) {
        std::lock_guard<std::mutex> lock(mutex);
        ++events;
        cv.notify_all();
      });
  ASSERT_TRUE(handle.isOk()) << handle.status().message();
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return events >= 3; });
  }
  EXPECT_LT(async.snapshot().numFreeBlocks, async.snapshot().numBlocks);
  async.abort(*handle);
  for (int i = 0;
       i < 200 && (async.numInFlight() > 0 || async.snapshot().numFreeBlocks !=
                                                  async.snapshot().numBlocks);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(async.numInFlight(), 0);
  EXPECT_EQ(async.snapshot().numFreeBlocks, async.snapshot().numBlocks);
  const int64_t steps = async.snapshot().stats.numSteps;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(async.snapshot().stats.numSteps, steps);
  EXPECT_EQ(engine.stats().numSteps, steps);
}

TEST_F(AsyncEngineTest, AFullQueueRefusesAndABadRequestFailsAlone) {
  config_.scheduler.maxNumSeqs = 1;
  std::unique_ptr<Backend> b = backend(64);
  Engine engine(*b, config_);
  serving::AsyncEngineOptions options;
  options.maxQueuedRequests = 1;
  AsyncEngine async(engine, options);
  StatusOr<std::shared_ptr<RequestStream>> running =
      async.submit({prompts_[0], greedy(40)});
  ASSERT_TRUE(running.isOk());
  std::optional<StreamEvent> first = (*running)->next();
  ASSERT_TRUE(first && first->status.isOk());
  StatusOr<std::shared_ptr<RequestStream>> queued =
      async.submit({prompts_[1], greedy(4)});
  ASSERT_TRUE(queued.isOk());
  StatusOr<std::shared_ptr<RequestStream>> refused =
      async.submit({prompts_[2], greedy(4)});
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(collect(**running).status.isOk());
  EXPECT_TRUE(collect(**queued).status.isOk());

  StatusOr<std::shared_ptr<RequestStream>> bad =
      async.submit({{1, 2, 999999}, greedy(4)});
  ASSERT_TRUE(bad.isOk());
  Collected c = collect(**bad);
  EXPECT_EQ(c.status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(c.status.message().find("999999"), std::string::npos);
  EXPECT_TRUE(async.health().isOk());
  EXPECT_EQ(async.numQueued(), 0);
}

TEST_F(AsyncEngineTest, ShutdownFinishesInFlightOrAbortsAfterTheTimeout) {
  std::unique_ptr<Backend> b = backend(64);
  Engine engine(*b, config_);
  {
    AsyncEngine async(engine);
    StatusOr<std::shared_ptr<RequestStream>> s1 =
        async.submit({prompts_[0], greedy(8)});
    StatusOr<std::shared_ptr<RequestStream>> s2 =
        async.submit({prompts_[1], greedy(8)});
    ASSERT_TRUE(s1.isOk() && s2.isOk());
    async.shutdown(60.0);
    EXPECT_FALSE(async.submit({prompts_[0], greedy(8)}).isOk());
    for (auto *s : {&s1, &s2}) {
      Collected c = collect(***s);
      EXPECT_TRUE(c.status.isOk());
      EXPECT_EQ(c.tokens[0].size(), 8u);
      EXPECT_EQ(c.reasons[0], FinishReason::kLength);
    }
  }
  std::unique_ptr<Backend> b2 = backend(64);
  Engine engine2(*b2, config_);
  AsyncEngine async(engine2);
  StatusOr<std::shared_ptr<RequestStream>> s =
      async.submit({prompts_[0], greedy(100000)});
  ASSERT_TRUE(s.isOk());
  ASSERT_TRUE((*s)->next().has_value());
  async.shutdown(0.05);
  Collected c = collect(**s);
  EXPECT_EQ(c.reasons[0], FinishReason::kAbort);
  EXPECT_EQ(engine2.kvCache().numFreeBlocks(), engine2.kvCache().numBlocks());
}

} // namespace
} // namespace infer::testing
