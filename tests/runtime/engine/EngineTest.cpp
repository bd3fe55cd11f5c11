//===- EngineTest.cpp - The engine on real fixture models -----------------===//
//
// Greedy outputs of tiny-pycode-target through the engine are compared with
// the same requests run alone: batching, chunking, prefix caching,
// preemption and speculation must not change a single token.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Tokenizer.h"
#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"
#include "tests/runtime/support/TinyPycode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

class TinyPycode : public TinyPycodeTest {
protected:
  /// Each prompt's greedy output, run alone on a fresh engine.
  std::vector<std::vector<int32_t>>
  alone(const std::vector<std::vector<int32_t>> &prompts, int64_t maxNew) {
    std::vector<std::vector<int32_t>> outputs;
    for (const std::vector<int32_t> &prompt : prompts) {
      std::unique_ptr<Backend> b = backend(16);
      auto out = generate(*b, config_, {{prompt, greedy(maxNew)}});
      EXPECT_TRUE(out.isOk()) << out.status().message();
      outputs.push_back(out.isOk() ? (*out)[0].outputTokenIds
                                   : std::vector<int32_t>{});
    }
    return outputs;
  }

  /// A prompt of several golden prompts: long enough for full blocks.
  std::vector<int32_t> longPrompt() const {
    std::vector<int32_t> p;
    for (const auto &q : prompts_)
      p.insert(p.end(), q.begin(), q.end());
    return p;
  }
};

TEST_F(TinyPycode, MixedBatchArrivingOverTimeMatchesEachRequestAlone) {
  const int64_t maxNew = 20;
  std::vector<std::vector<int32_t>> prompts = prompts_;
  prompts.push_back(longPrompt());
  const std::vector<std::vector<int32_t>> expected = alone(prompts, maxNew);

  std::unique_ptr<Backend> b = backend(64);
  EngineConfig config = config_;
  // A small budget chunks the long prompts between the others' decodes.
  config.scheduler.maxNumBatchedTokens = 12;
  Engine engine(*b, config);
  std::map<RequestId, size_t> index;
  std::map<RequestId, std::vector<int32_t>> streamed;
  engine.setOutputCallback([&](const RequestOutput &out) {
    auto &s = streamed[out.id];
    s.insert(s.end(), out.newTokenIds.begin(), out.newTokenIds.end());
  });
  std::map<RequestId, std::vector<int32_t>> finished;
  size_t next = 0;
  int64_t steps = 0, mixedSteps = 0;
  while (next < prompts.size() || engine.hasUnfinished()) {
    // A new request every other step.
    if (next < prompts.size() && steps % 2 == 0) {
      StatusOr<RequestId> id = engine.addRequest(prompts[next], greedy(maxNew));
      ASSERT_TRUE(id.isOk()) << id.status().message();
      index[*id] = next++;
    }
    StatusOr<std::vector<RequestOutput>> outputs = engine.step();
    ASSERT_TRUE(outputs.isOk()) << outputs.status().message();
    mixedSteps += outputs->size() > 1;
    for (const RequestOutput &out : *outputs)
      if (out.finished)
        finished[out.id] = out.outputTokenIds;
    ++steps;
  }
  ASSERT_EQ(finished.size(), prompts.size());
  for (const auto &[id, tokens] : finished) {
    EXPECT_EQ(tokens, expected[index[id]]) << "prompt " << index[id];
    EXPECT_EQ(streamed[id], tokens) << "the callback streamed every token";
  }
  EXPECT_GT(mixedSteps, 0);
  EXPECT_EQ(engine.stats().numPreemptions, 0);
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 64) << "every block freed";
}

TEST_F(TinyPycode, RepeatedPromptReusesItsBlocks) {
  const std::vector<int32_t> prompt = longPrompt();
  std::unique_ptr<Backend> b = backend(32);
  Engine engine(*b, config_);
  auto first = runToCompletion(engine, {{prompt, greedy(12)}});
  ASSERT_TRUE(first.isOk()) << first.status().message();
  const int64_t computedFirst = engine.stats().numComputedTokens;
  EXPECT_EQ(engine.stats().numCachedTokens, 0);

  auto second = runToCompletion(engine, {{prompt, greedy(12)}});
  ASSERT_TRUE(second.isOk()) << second.status().message();
  const int64_t computedSecond =
      engine.stats().numComputedTokens - computedFirst;
  const int64_t fullBlocks =
      (static_cast<int64_t>(prompt.size()) - 1) / config_.blockSize;
  EXPECT_EQ(engine.stats().numCachedTokens, fullBlocks * config_.blockSize);
  EXPECT_EQ(computedSecond, computedFirst - fullBlocks * config_.blockSize);
  EXPECT_EQ((*second)[0].outputTokenIds, (*first)[0].outputTokenIds);

  // Without prefix caching nothing is reused.
  EngineConfig off = config_;
  off.enablePrefixCaching = false;
  Engine plain(*b, off);
  auto third =
      runToCompletion(plain, {{prompt, greedy(12)}, {prompt, greedy(12)}});
  ASSERT_TRUE(third.isOk());
  EXPECT_EQ(plain.stats().numCachedTokens, 0);
  EXPECT_EQ((*third)[1].outputTokenIds, (*first)[0].outputTokenIds);
}

TEST_F(TinyPycode, TooSmallAPoolPreemptsAndStillMatches) {
  const int64_t maxNew = 40;
  const std::vector<std::vector<int32_t>> expected = alone(prompts_, maxNew);
  std::vector<PromptRequest> requests;
  for (const auto &p : prompts_)
    requests.push_back({p, greedy(maxNew)});
  // Each request needs 4 blocks to finish: 6 requests in 8 blocks.
  std::unique_ptr<Backend> b = backend(8);
  Engine engine(*b, config_);
  auto out = runToCompletion(engine, requests);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  for (size_t k = 0; k < requests.size(); ++k) {
    EXPECT_EQ((*out)[k].outputTokenIds, expected[k]) << "prompt " << k;
    EXPECT_EQ((*out)[k].finishReason, FinishReason::kLength);
  }
  EXPECT_GT(engine.stats().numPreemptions, 0);
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 8);
}

TEST_F(TinyPycode, AbortFreesBlocks) {
  std::unique_ptr<Backend> b = backend(16);
  Engine engine(*b, config_);
  std::vector<RequestOutput> seen;
  engine.setOutputCallback([&](const RequestOutput &o) { seen.push_back(o); });
  RequestId a = *engine.addRequest(prompts_[0], greedy(30));
  RequestId c = *engine.addRequest(prompts_[4], greedy(30));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(engine.step().isOk());
  const int64_t freeBefore = engine.kvCache().numFreeBlocks();
  ASSERT_TRUE(engine.abort(c).isOk());
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), freeBefore + 2);
  EXPECT_FALSE(engine.abort(c).isOk()) << "already gone";
  ASSERT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().finishReason, FinishReason::kAbort);
  EXPECT_EQ(seen.back().outputTokenIds.size(), 3u);
  ASSERT_TRUE(engine.abort(a).isOk());
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 16);
  auto last = engine.step();
  ASSERT_TRUE(last.isOk());
  EXPECT_FALSE(engine.hasUnfinished());
}

TEST_F(TinyPycode, AnInvalidRequestFailsAlone) {
  std::unique_ptr<Backend> b = backend(4);
  Engine engine(*b, config_);
  std::vector<int32_t> tooLong(config_.maxModelLen + 1, 5);
  StatusOr<RequestId> bad = engine.addRequest(tooLong, greedy(4));
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("max_position_embeddings"),
            std::string::npos);
  bad = engine.addRequest(std::vector<int32_t>(65, 5), greedy(4));
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(bad.status().message().find("4 blocks"), std::string::npos);
  EXPECT_FALSE(engine.addRequest({}, greedy(4)).isOk());
  EXPECT_FALSE(engine.addRequest({4096}, greedy(4)).isOk());

  auto good = runToCompletion(engine, {{prompts_[1], greedy(8)}});
  ASSERT_TRUE(good.isOk()) << good.status().message();
  EXPECT_EQ((*good)[0].outputTokenIds, alone({prompts_[1]}, 8)[0]);
}

TEST_F(TinyPycode, ForkedSequencesShareBlocksUntilTheyWrite) {
  const std::vector<int32_t> prompt = prompts_[4]; // 17 tokens: 1 full block
  const std::vector<int32_t> expected = alone({prompt}, 10)[0];
  std::unique_ptr<Backend> b = backend(8);
  Engine engine(*b, config_);
  RequestId parent = *engine.addRequest(prompt, greedy(10));
  ASSERT_TRUE(engine.step().isOk()); // prefill + first token
  const int64_t freeBefore = engine.kvCache().numFreeBlocks();
  StatusOr<RequestId> child = engine.fork(parent, greedy(10));
  ASSERT_TRUE(child.isOk()) << child.status().message();
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), freeBefore);
  std::map<RequestId, std::vector<int32_t>> done;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    for (const RequestOutput &o : *out)
      if (o.finished)
        done[o.id] = o.outputTokenIds;
  }
  EXPECT_EQ(done[parent], expected);
  EXPECT_EQ(done[*child], expected) << "the copied block holds the prompt";
}

TEST_F(TinyPycode, ForkEndsWhereItsOwnParametersEndIt) {
  // A fork replays the output it inherits through its own parameters: a
  // max_new_tokens already reached or a stop token inside that output ends
  // it at once, cut after that token, holding no blocks; the parent goes
  // on as if alone.
  const std::vector<int32_t> prompt = prompts_[4];
  const std::vector<int32_t> expected = alone({prompt}, 10)[0];
  std::unique_ptr<Backend> b = backend(8);
  Engine engine(*b, config_);
  RequestId parent = *engine.addRequest(prompt, greedy(10));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(engine.step().isOk());
  const int64_t freeBefore = engine.kvCache().numFreeBlocks();
  StatusOr<RequestId> none = engine.fork(parent, greedy(0));
  ASSERT_TRUE(none.isOk()) << none.status().message();
  const int64_t inherited = engine.request(parent)->numOutputTokens();
  ASSERT_GE(inherited, 2);
  StatusOr<RequestId> shorter = engine.fork(parent, greedy(inherited - 1));
  ASSERT_TRUE(shorter.isOk()) << shorter.status().message();
  SamplingParams stopAt = greedy(10);
  stopAt.stopTokenIds = {expected[1]};
  StatusOr<RequestId> stopped = engine.fork(parent, stopAt);
  ASSERT_TRUE(stopped.isOk()) << stopped.status().message();
  const size_t stopCut =
      std::find(expected.begin(), expected.end(), expected[1]) -
      expected.begin() + 1;
  // One that goes on: the same parameters as the parent's.
  StatusOr<RequestId> same = engine.fork(parent, greedy(10));
  ASSERT_TRUE(same.isOk()) << same.status().message();
  SamplingParams two = greedy(10);
  two.n = 2;
  EXPECT_FALSE(engine.fork(parent, two).isOk()) << "a fork is one completion";
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), freeBefore)
      << "the forks that ended hold no blocks";
  std::map<RequestId, RequestOutput> done;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    for (const RequestOutput &o : *out)
      if (o.finished)
        done[o.id] = o;
  }
  ASSERT_EQ(done.size(), 5u);
  EXPECT_EQ(done[parent].outputTokenIds, expected);
  EXPECT_EQ(done[*same].outputTokenIds, expected);
  EXPECT_TRUE(done[*none].outputTokenIds.empty());
  EXPECT_EQ(done[*none].finishReason, FinishReason::kLength);
  EXPECT_EQ(done[*shorter].outputTokenIds,
            std::vector<int32_t>(expected.begin(),
                                 expected.begin() + (inherited - 1)));
  EXPECT_EQ(done[*shorter].finishReason, FinishReason::kLength);
  EXPECT_EQ(done[*stopped].outputTokenIds,
            std::vector<int32_t>(expected.begin(), expected.begin() + stopCut));
  EXPECT_EQ(done[*stopped].finishReason, FinishReason::kStop);
}

TEST_F(TinyPycode, StopTokensStopStringsAndLogprobs) {
  const std::vector<int32_t> expected = alone({prompts_[0]}, 24)[0];
  std::unique_ptr<Backend> b = backend(16);
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::fromFile(modelDir() + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  EngineConfig config = config_;
  config.tokenizer = tokenizer->get();

  SamplingParams stopToken = greedy(24);
  stopToken.stopTokenIds = {expected[5]};
  stopToken.logprobs = 3;
  const std::string full = (*tokenizer)->decode(expected, true);
  const std::string stopString = full.substr(full.size() / 2, 3);
  SamplingParams stopText = greedy(24);
  stopText.stopStrings = {stopString};

  Engine engine(*b, config);
  std::vector<TokenLogprobs> logprobs;
  engine.setOutputCallback([&](const RequestOutput &o) {
    if (o.id == 0) {
      EXPECT_EQ(o.logprobs.size(), o.newTokenIds.size());
      logprobs.insert(logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    }
  });
  auto out = runToCompletion(
      engine, {{prompts_[0], stopToken}, {prompts_[0], stopText}});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  const auto fifth =
      std::find(expected.begin(), expected.end(), expected[5]) + 1;
  EXPECT_EQ((*out)[0].outputTokenIds,
            std::vector<int32_t>(expected.begin(), fifth));
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kStop);
  ASSERT_EQ(logprobs.size(), (*out)[0].outputTokenIds.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    EXPECT_EQ(logprobs[i].token, expected[i]);
    ASSERT_EQ(logprobs[i].top.size(), 3u);
    EXPECT_EQ(logprobs[i].top[0].first, expected[i]) << "greedy = top 1";
  }
  EXPECT_EQ((*out)[1].finishReason, FinishReason::kStop);
  EXPECT_EQ((*out)[1].text, full.substr(0, full.find(stopString)));

  Engine noTokenizer(*b, config_);
  EXPECT_FALSE(noTokenizer.addRequest(prompts_[0], stopText).isOk());
}

TEST_F(TinyPycode, CompletionsOfOneRequestShareItsPrompt) {
  // n = 3 sampled completions equal three requests seeded seed, seed + 1,
  // seed + 2 run apart, while their prompt is computed once.
  const std::vector<int32_t> prompt = prompts_[4];
  SamplingParams params;
  params.maxNewTokens = 12;
  params.temperature = 0.8;
  params.seed = 11;
  params.ignoreEos = true;
  std::vector<std::vector<int32_t>> expected;
  for (int64_t i = 0; i < 3; ++i) {
    std::unique_ptr<Backend> b = backend(8);
    auto out = generate(*b, config_, {{prompt, completionParams(params, i)}});
    ASSERT_TRUE(out.isOk()) << out.status().message();
    expected.push_back((*out)[0].outputTokenIds);
  }
  EXPECT_NE(expected[0], expected[1]);

  std::unique_ptr<Backend> b = backend(8);
  Engine engine(*b, config_);
  params.n = 3;
  StatusOr<RequestId> id = engine.addRequest(prompt, params);
  ASSERT_TRUE(id.isOk()) << id.status().message();
  std::map<int64_t, std::vector<int32_t>> byIndex;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    for (const RequestOutput &o : *out) {
      EXPECT_EQ(o.parentId, *id);
      if (o.finished)
        byIndex[o.index] = o.outputTokenIds;
    }
  }
  ASSERT_EQ(byIndex.size(), 3u);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(byIndex[i], expected[i]) << "completion " << i;
  EXPECT_EQ(engine.stats().numComputedTokens,
            static_cast<int64_t>(prompt.size()) + 3 * 11)
      << "one prefill, then 11 decodes per completion";
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 8);
}

/// Proposes what a given oracle says comes next (or a wrong guess).
class ScriptedProposer : public Proposer {
public:
  ScriptedProposer(std::vector<int32_t> prompt, std::vector<int32_t> output,
                   bool wrong)
      : prompt_(std::move(prompt)), output_(std::move(output)), wrong_(wrong) {}

  std::vector<int32_t> propose(const Request &request,
                               int64_t maxTokens) override {
    std::vector<int32_t> draft;
    const size_t from = request.tokens.size() - prompt_.size();
    for (size_t i = from;
         i < output_.size() && draft.size() < static_cast<size_t>(maxTokens);
         ++i)
      draft.push_back(wrong_ ? (output_[i] + 1) % 4096 : output_[i]);
    maxAsked = std::max(maxAsked, maxTokens);
    return draft;
  }
  void onVerified(const Request &, int64_t numProposed,
                  int64_t numAccepted) override {
    verified += numProposed;
    accepted += numAccepted;
  }

  int64_t verified = 0, accepted = 0, maxAsked = 0;

private:
  std::vector<int32_t> prompt_, output_;
  bool wrong_;
};

TEST_F(TinyPycode, SpeculativeVerificationKeepsGreedyOutputs) {
  const std::vector<int32_t> prompt = prompts_[0];
  const std::vector<int32_t> expected = alone({prompt}, 24)[0];
  for (bool wrong : {false, true}) {
    std::unique_ptr<Backend> b = backend(16);
    EngineConfig config = config_;
    config.numSpeculativeTokens = 4;
    Engine engine(*b, config);
    auto proposer = std::make_unique<ScriptedProposer>(prompt, expected, wrong);
    ScriptedProposer &p = *proposer;
    engine.setProposer(std::move(proposer));
    auto out = runToCompletion(engine, {{prompt, greedy(24)}});
    ASSERT_TRUE(out.isOk()) << out.status().message();
    EXPECT_EQ((*out)[0].outputTokenIds, expected) << "wrong drafts: " << wrong;
    EXPECT_EQ(p.maxAsked, 4);
    EXPECT_GT(p.verified, 0);
    const EngineStats &s = engine.stats();
    EXPECT_EQ(s.numDraftTokens, p.verified);
    EXPECT_EQ(s.numAcceptedTokens, p.accepted);
    if (wrong) {
      EXPECT_EQ(s.acceptanceRate(), 0.0);
      EXPECT_EQ(s.numSteps, 24) << "one token per step";
    } else {
      EXPECT_EQ(s.acceptanceRate(), 1.0);
      // 1 prefill step, then 5 tokens per verification step.
      EXPECT_EQ(s.numSteps, 1 + (23 + 4) / 5);
    }
    EXPECT_EQ(engine.kvCache().numFreeBlocks(), 16);
  }
}

TEST_F(TinyPycode, CompletionsBranchOffBeforeTheirPromptsDrafts) {
  // The prompt's last chunk is its last token: that step is a decode, with
  // drafts. The second completion shares the prompt, not the first one's
  // drafts (found by EngineStressTest).
  const std::vector<int32_t> prompt = prompts_[0];
  const std::vector<int32_t> expected = alone({prompt}, 12)[0];
  std::unique_ptr<Backend> b = backend(16);
  EngineConfig config = config_;
  config.numSpeculativeTokens = 3;
  config.scheduler.maxNumBatchedTokens =
      static_cast<int64_t>(prompt.size()) - 1;
  Engine engine(*b, config);
  engine.setProposer(
      std::make_unique<ScriptedProposer>(prompt, expected, /*wrong=*/false));
  SamplingParams params = greedy(12);
  params.n = 2;
  ASSERT_TRUE(engine.addRequest(prompt, params).isOk());
  std::map<int64_t, RequestOutput> byIndex;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    for (const RequestOutput &o : *out)
      if (o.finished)
        byIndex[o.index] = o;
  }
  ASSERT_EQ(byIndex.size(), 2u);
  for (const auto &[index, o] : byIndex) {
    EXPECT_EQ(o.finishReason, FinishReason::kLength) << o.error;
    EXPECT_EQ(o.outputTokenIds, expected) << "completion " << index;
  }
  EXPECT_GT(engine.stats().numAcceptedTokens, 0);
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 16);
}

TEST_F(TinyPycode, DraftsDoNotEndARequestThePoolStillHolds) {
  // Two blocks of 16: a 17-token prompt grows to 32 computed tokens and
  // one more sampled (16 new) before the pool cannot hold it. Drafts that
  // do not fit give way; they do not end it sooner (found by
  // EngineStressTest).
  const std::vector<int32_t> prompt = prompts_[4];
  ASSERT_EQ(prompt.size(), 17u);
  std::vector<int32_t> expected = alone({prompt}, 24)[0];
  expected.resize(16);
  std::unique_ptr<Backend> b = backend(2);
  EngineConfig config = config_;
  config.numSpeculativeTokens = 3;
  Engine engine(*b, config);
  engine.setProposer(std::make_unique<ScriptedProposer>(
      prompt, alone({prompt}, 24)[0], /*wrong=*/false));
  auto out = runToCompletion(engine, {{prompt, greedy(24)}});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ((*out)[0].outputTokenIds, expected);
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kLength);
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), 2);
}

//===----------------------------------------------------------------------===//
// Stop conditions and sampling on a random-weight model
//===----------------------------------------------------------------------===//

const std::string kGqa = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

class LlamaGqaEngine : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(kGqa + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << kGqa;
    StatusOr<Artifact> a = buildLlamaArtifact(kGqa);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    config_ = engineConfigFor(artifact_);
    StatusOr<std::unique_ptr<Backend>> b = createTestBackend(artifact_, 16, 2);
    ASSERT_TRUE(b.isOk()) << b.status().message();
    backend_ = std::move(b).value();
  }

  Artifact artifact_;
  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(LlamaGqaEngine, StopsAtEosUnlessIgnored) {
  PromptRequest r;
  r.promptTokenIds = {175};
  r.sampling.maxNewTokens = 24;
  // The fixture's first greedy token is 391: call it EOS.
  EngineConfig eos = config_;
  eos.eosTokenIds = {391};
  auto out = generate(*backend_, eos, {r});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ((*out)[0].outputTokenIds, std::vector<int32_t>{391});
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kStop);

  r.sampling.ignoreEos = true;
  out = generate(*backend_, eos, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ((*out)[0].outputTokenIds.size(), 24u);
  EXPECT_EQ((*out)[0].finishReason, FinishReason::kLength);
  for (int32_t t : (*out)[0].outputTokenIds)
    EXPECT_NE(t, 391);

  EngineConfig shortContext = config_;
  shortContext.maxModelLen = 4;
  r.sampling.ignoreEos = false;
  out = generate(*backend_, shortContext, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ((*out)[0].outputTokenIds.size(), 3u)
      << "stops at the last position";

  r.sampling.maxNewTokens = 0;
  out = generate(*backend_, config_, {r});
  ASSERT_TRUE(out.isOk());
  EXPECT_TRUE((*out)[0].outputTokenIds.empty());
  EXPECT_TRUE((*out)[0].finished);
}

TEST_F(LlamaGqaEngine, NoNewTokensEndsEveryCompletion) {
  Engine engine(*backend_, config_);
  std::vector<RequestOutput> seen;
  engine.setOutputCallback([&](const RequestOutput &o) { seen.push_back(o); });
  SamplingParams params;
  params.maxNewTokens = 0;
  params.n = 3;
  StatusOr<RequestId> id = engine.addRequest({175, 20}, params);
  ASSERT_TRUE(id.isOk()) << id.status().message();
  std::vector<RequestOutput> outputs;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    outputs.insert(outputs.end(), out->begin(), out->end());
  }
  ASSERT_EQ(outputs.size(), 3u) << "one finished output a completion";
  std::set<RequestId> ids;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput &o = outputs[i];
    EXPECT_EQ(o.parentId, *id);
    EXPECT_EQ(o.index, static_cast<int64_t>(i));
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.finishReason, FinishReason::kLength);
    EXPECT_TRUE(o.outputTokenIds.empty());
    ids.insert(o.id);
  }
  EXPECT_EQ(ids.size(), 3u) << "each completion has its own id";
  EXPECT_EQ(outputs[0].id, *id);
  EXPECT_EQ(seen.size(), 3u) << "the callback sees each completion";
  EXPECT_EQ(engine.stats().numComputedTokens, 0);
}

TEST_F(LlamaGqaEngine, SeededSamplingIsReproducibleAndBatchIndependent) {
  PromptRequest a, c;
  a.promptTokenIds = {196, 25, 502, 67};
  a.sampling.maxNewTokens = 20;
  a.sampling.temperature = 1.5;
  a.sampling.seed = 7;
  c = a;
  c.promptTokenIds = {1, 2, 3};
  c.sampling.seed = 8;
  auto alone = generate(*backend_, config_, {a});
  auto batched = generate(*backend_, config_, {c, a});
  auto again = generate(*backend_, config_, {a});
  ASSERT_TRUE(alone.isOk() && batched.isOk() && again.isOk());
  EXPECT_EQ((*alone)[0].outputTokenIds, (*batched)[1].outputTokenIds);
  EXPECT_EQ((*alone)[0].outputTokenIds, (*again)[0].outputTokenIds);
  a.sampling.seed = 9;
  auto other = generate(*backend_, config_, {a});
  ASSERT_TRUE(other.isOk());
  EXPECT_NE((*alone)[0].outputTokenIds, (*other)[0].outputTokenIds);
}

TEST_F(LlamaGqaEngine, CompletionsDoNotInheritTheirPromptsPreemptions) {
  // Three blocks of 16 and a budget of 8: the first request grows into the
  // blocks the second one's prompt chunks need, which preempts the second
  // (until the first ends); its second completion branches off once the
  // prompt is computed.
  StatusOr<std::unique_ptr<Backend>> b = createTestBackend(artifact_, 3, 2);
  ASSERT_TRUE(b.isOk()) << b.status().message();
  EngineConfig config = config_;
  config.scheduler.maxNumBatchedTokens = 8;
  Engine engine(**b, config);
  SamplingParams params;
  params.maxNewTokens = 20;
  params.ignoreEos = true;
  std::vector<int32_t> prompt(15);
  std::iota(prompt.begin(), prompt.end(), 100);
  ASSERT_TRUE(engine.addRequest(prompt, params).isOk());
  params.maxNewTokens = 4;
  params.n = 2;
  prompt.resize(20, 7);
  StatusOr<RequestId> second = engine.addRequest(prompt, params);
  ASSERT_TRUE(second.isOk()) << second.status().message();
  std::map<RequestId, int64_t> preemptions;
  while (engine.hasUnfinished()) {
    auto out = engine.step();
    ASSERT_TRUE(out.isOk()) << out.status().message();
    for (const RequestOutput &o : *out)
      if (const Request *r = engine.request(o.id))
        preemptions[o.id] = r->numPreemptions;
  }
  EXPECT_GT(engine.stats().numPreemptions, 0);
  EXPECT_EQ(preemptions[*second], engine.stats().numPreemptions);
  ASSERT_EQ(preemptions.size(), 3u) << "two requests, one more completion";
  int64_t sum = 0;
  for (const auto &[id, n] : preemptions)
    sum += n;
  EXPECT_EQ(sum, engine.stats().numPreemptions)
      << "each preemption counted once, by the request preempted";
}

/// Counts the calls that reach the wrapped backend each way.
class CountingBackend : public Backend {
public:
  explicit CountingBackend(Backend &inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  int64_t numBlocks() const override { return inner_.numBlocks(); }
  StatusOr<Logits> forward(const Batch &batch) override {
    ++forwardCalls;
    return inner_.forward(batch);
  }
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override {
    ++sampleCalls;
    return inner_.forwardSample(batch, sampling);
  }
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    return inner_.copyBlocks(copies);
  }

  int64_t forwardCalls = 0;
  int64_t sampleCalls = 0;

private:
  Backend &inner_;
};

TEST_F(LlamaGqaEngine, BackendSamplingChoosesTheHostSamplersTokens) {
  PromptRequest greedy, seeded, noEos;
  greedy.promptTokenIds = {196, 25, 502, 67};
  greedy.sampling.maxNewTokens = 12;
  seeded = greedy;
  seeded.promptTokenIds = {1, 2, 3};
  seeded.sampling.temperature = 0.9;
  seeded.sampling.topK = 20;
  seeded.sampling.topP = 0.9;
  seeded.sampling.minP = 0.02;
  seeded.sampling.seed = 11;
  noEos = greedy;
  noEos.promptTokenIds = {175};
  noEos.sampling.temperature = 1.2;
  noEos.sampling.ignoreEos = true;
  noEos.sampling.seed = 5;
  EngineConfig eos = config_;
  eos.eosTokenIds = {391};
  std::vector<PromptRequest> requests = {greedy, seeded, noEos};

  CountingBackend counting(*backend_);
  auto onBackend = generate(counting, eos, requests);
  ASSERT_TRUE(onBackend.isOk()) << onBackend.status().message();
  EXPECT_GT(counting.sampleCalls, 0);
  EXPECT_EQ(counting.forwardCalls, 0);

  // Logprobs keep every step on the engine's own Sampler.
  for (PromptRequest &r : requests)
    r.sampling.logprobs = 1;
  counting.sampleCalls = 0;
  auto onHost = generate(counting, eos, requests);
  ASSERT_TRUE(onHost.isOk()) << onHost.status().message();
  EXPECT_EQ(counting.sampleCalls, 0);
  EXPECT_GT(counting.forwardCalls, 0);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ((*onBackend)[i].outputTokenIds, (*onHost)[i].outputTokenIds)
        << "request " << i;
  for (int32_t t : (*onBackend)[2].outputTokenIds)
    EXPECT_NE(t, 391);
}

} // namespace
} // namespace infer::testing
