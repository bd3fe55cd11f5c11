//===- FaultInjectionTest.cpp - The engine when its backend fails ---------===//
//
// A backend that fails on its Nth forward call (issue 17): the requests of
// that step end with an error, no request is left half scheduled, no KV
// block leaks, and the engine keeps serving the others with the tokens they
// would have had anyway.
//
//===----------------------------------------------------------------------===//

#include "tests/runtime/support/Generate.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";

/// Delegates to a real backend, except that forward call number
/// `failingCall` (counted from 1, every later one too when `sticky`)
/// returns an error.
class FaultyBackend final : public Backend {
public:
  FaultyBackend(std::unique_ptr<Backend> inner, int64_t failingCall,
                bool sticky)
      : inner_(std::move(inner)), failingCall_(failingCall), sticky_(sticky) {}

  std::string_view name() const override { return "faulty"; }
  int64_t numBlocks() const override { return inner_->numBlocks(); }
  StatusOr<Logits> forward(const Batch &batch) override {
    ++calls_;
    if (calls_ == failingCall_ || (sticky_ && calls_ > failingCall_))
      return internalError("injected fault in forward call " +
                           std::to_string(calls_));
    return inner_->forward(batch);
  }
  int64_t calls() const { return calls_; }

private:
  std::unique_ptr<Backend> inner_;
  int64_t failingCall_;
  bool sticky_;
  int64_t calls_ = 0;
};

class FaultInjection : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(kModel + "/config.json"))
      GTEST_SKIP() << "fixture missing";
    StatusOr<Artifact> a = buildLlamaArtifact(kModel);
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact_ = std::move(a).value();
    config_ = engineConfigFor(artifact_);
    config_.scheduler.maxNumSeqs = 2;
    config_.scheduler.maxNumBatchedTokens = 16;
  }

  std::unique_ptr<Backend> cpuBackend() {
    StatusOr<std::unique_ptr<Backend>> b =
        createTestBackend(artifact_, kBlocks, 1);
    EXPECT_TRUE(b.isOk()) << b.status().message();
    return b.isOk() ? std::move(b).value() : nullptr;
  }

  static SamplingParams greedy() {
    SamplingParams p;
    p.maxNewTokens = 6;
    p.ignoreEos = true;
    return p;
  }

  static std::vector<std::vector<int32_t>> prompts() {
    std::vector<std::vector<int32_t>> out;
    for (int32_t k = 0; k < 5; ++k)
      out.push_back({1 + k, 20 + 3 * k, 7, 90 + k, 11, 12 + k, 5, 44});
    return out;
  }

  /// Runs every prompt through one engine until it has no unfinished
  /// request; returns each request's last output.
  std::map<RequestId, RequestOutput> serve(Engine &engine,
                                           std::vector<RequestId> &ids) {
    for (const std::vector<int32_t> &p : prompts()) {
      StatusOr<RequestId> id = engine.addRequest(p, greedy());
      EXPECT_TRUE(id.isOk());
      ids.push_back(*id);
    }
    std::map<RequestId, RequestOutput> last;
    for (int guard = 0; engine.hasUnfinished() && guard < 1000; ++guard) {
      StatusOr<std::vector<RequestOutput>> outputs = engine.step();
      EXPECT_TRUE(outputs.isOk()) << outputs.status().message();
      if (!outputs.isOk())
        break;
      for (RequestOutput &out : *outputs)
        last[out.id] = std::move(out);
    }
    EXPECT_FALSE(engine.hasUnfinished());
    return last;
  }

  static constexpr int64_t kBlocks = 8;
  Artifact artifact_;
  EngineConfig config_;
};

TEST_F(FaultInjection, AFailedForwardEndsItsRequestsAndServesTheRest) {
  std::unique_ptr<Backend> reference = cpuBackend();
  Engine clean(*reference, config_);
  std::vector<RequestId> cleanIds;
  std::map<RequestId, RequestOutput> expected = serve(clean, cleanIds);

  for (int64_t failingCall : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE("failing call " + std::to_string(failingCall));
    FaultyBackend faulty(cpuBackend(), failingCall, /*sticky=*/false);
    Engine engine(faulty, config_);
    std::vector<RequestId> ids;
    std::map<RequestId, RequestOutput> last = serve(engine, ids);
    int64_t failed = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const RequestOutput &out = last.at(ids[i]);
      ASSERT_TRUE(out.finished) << "request " << i << " never ended";
      if (out.finishReason == FinishReason::kError) {
        ++failed;
        EXPECT_NE(out.error.find("injected fault"), std::string::npos)
            << out.error;
        continue;
      }
      // The others got exactly their tokens.
      EXPECT_EQ(out.finishReason, FinishReason::kLength);
      EXPECT_EQ(out.outputTokenIds, expected.at(cleanIds[i]).outputTokenIds)
          << "request " << i;
    }
    // Only the failing step's requests (at most max_num_seqs) failed.
    EXPECT_GE(failed, 1);
    EXPECT_LE(failed, config_.scheduler.maxNumSeqs);
    // No block leaked: the pool is whole again.
    EXPECT_EQ(engine.kvCache().numFreeBlocks(), kBlocks);
  }
}

TEST_F(FaultInjection, ABackendThatKeepsFailingEndsEveryRequest) {
  FaultyBackend faulty(cpuBackend(), 2, /*sticky=*/true);
  Engine engine(faulty, config_);
  std::vector<RequestId> ids;
  std::map<RequestId, RequestOutput> last = serve(engine, ids);
  // The first call prefilled two prompts; no request got all its tokens
  // before the backend broke, so each one ends with the error.
  for (RequestId id : ids) {
    ASSERT_TRUE(last.count(id));
    EXPECT_TRUE(last.at(id).finished);
    EXPECT_EQ(last.at(id).finishReason, FinishReason::kError);
  }
  EXPECT_EQ(engine.kvCache().numFreeBlocks(), kBlocks);
}

} // namespace
} // namespace infer::testing
