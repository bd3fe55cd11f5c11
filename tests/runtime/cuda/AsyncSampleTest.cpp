//===- AsyncSampleTest.cpp - launchSample / collectSample on the GPU ------===//
//
// The CUDA backend's asynchronous sampled calls against its synchronous
// forwardSample on a fixture model: two backends made alike run the same
// schedule of steps (prefills joining, decode batches growing, shrinking and
// reordering), with CUDA graphs for batches of at most 4 tokens (decode
// batches of 1 to 4 sequences, 3 padded to 4) and eagerly above (5
// sequences, prefills), and without graphs:
// - launches, two in flight, return forwardSample's tokens step by step,
//   greedy and seeded sampling;
// - sampled tokens: decode token ids taken on the device from the previous
//   launch's rows (two in flight, so never on the host) give the tokens of
//   the synchronous run with the ids filled on the host, also when the
//   sampling buffers grow between the launch and its feed;
// - forward() while two launches are uncollected runs after them (its
//   logits and the launches' tokens equal the synchronous run's);
// - bad input: collect with nothing launched, sampled tokens without an
//   earlier launch or past its rows, a third launch in flight,
//   forwardSample while launches are uncollected: clear errors, nothing
//   launched, the launches in flight unharmed;
// - deviceIdleSeconds counts the host's pause between sampled calls, and
//   launches in flight leave the device less idle than forwardSample when
//   the host works between steps (printed: "[ async idle ]");
// - the feed kernel gives token 0 for a row without a token in the
//   vocabulary (kNonFiniteLogitsToken).
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/FiniteLogits.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/SamplingKernels.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

namespace infer::testing {
namespace {

constexpr int64_t kBlocksPerSeq = 4;
constexpr int64_t kNumSeqs = 5;

/// One sequence of a step: a prefill of `prompt` tokens, or (0) a decode of
/// the token its previous step sampled.
struct Entry {
  int seq = 0;
  int prompt = 0;
};
using Schedule = std::vector<std::vector<Entry>>;

/// A then B prefill; C, then D and E join; batches of 1 to 5 sequences in
/// changing orders, some sequences skipping steps.
Schedule schedule() {
  return {
      {{0, 4}, {1, 2}},
      {{1, 0}, {0, 0}, {2, 3}},
      {{2, 0}, {0, 0}, {1, 0}},
      {{0, 0}, {1, 0}, {2, 0}, {3, 5}, {4, 2}},
      {{4, 0}, {3, 0}, {2, 0}, {1, 0}, {0, 0}},
      {{1, 0}, {3, 0}},
      {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}},
      {{2, 0}, {0, 0}, {1, 0}},
      {{0, 0}, {1, 0}, {2, 0}, {3, 0}},
      {{3, 0}},
      {{4, 0}, {3, 0}, {2, 0}},
  };
}

/// A prefill of 4 tokens for each of `seqs` sequences, then `steps` decode
/// steps of them all.
Schedule decodeSchedule(int seqs, int steps) {
  Schedule sched(1 + steps);
  for (int s = 0; s < seqs; ++s) {
    sched[0].push_back({s, 4});
    for (int k = 1; k <= steps; ++k)
      sched[k].push_back({s, 0});
  }
  return sched;
}

/// Where a decode step's token ids come from.
enum class Inputs {
  /// Fixed ids (teacher forcing): every batch is known before any runs.
  kTeacher,
  /// The tokens the sequence sampled, filled in on the host.
  kHost,
  /// The previous launch's rows as sampled tokens where that launch is not
  /// collected yet, else the host's.
  kFeed,
};

struct SeqState {
  std::vector<int32_t> prompt;
  std::vector<int32_t> sampled;
  int32_t processed = 0;
  int lastStep = -1;
  int32_t lastRow = -1;
};

int32_t promptToken(int seq, int i) { return (seq * 37 + i * 11 + 5) % 500; }
int32_t teacherToken(int seq, int position) {
  return (seq * 53 + position * 29 + 7) % 509;
}

/// Builds step `k` of `sched` and advances the sequences' positions.
Batch buildStep(const Schedule &sched, int k, std::vector<SeqState> &seqs,
                Inputs inputs, int64_t blockSize) {
  Batch batch;
  batch.queryStartLoc = {0};
  batch.maxBlocksPerSeq = kBlocksPerSeq;
  for (const Entry &e : sched[k]) {
    SeqState &s = seqs[e.seq];
    const auto row = static_cast<int32_t>(batch.logitsIndices.size());
    auto add = [&](int32_t token) {
      batch.tokenIds.push_back(token);
      batch.positions.push_back(s.processed);
      batch.slotMapping.push_back(e.seq * kBlocksPerSeq * blockSize +
                                  s.processed);
      ++s.processed;
    };
    if (e.prompt > 0) {
      for (int i = 0; i < e.prompt; ++i) {
        s.prompt.push_back(promptToken(e.seq, i));
        add(s.prompt.back());
      }
    } else {
      const size_t known = s.processed - s.prompt.size();
      const auto index = static_cast<int32_t>(batch.tokenIds.size());
      if (inputs == Inputs::kTeacher) {
        add(teacherToken(e.seq, s.processed));
      } else if (inputs == Inputs::kFeed && s.lastStep == k - 1) {
        batch.sampledTokens.push_back({index, s.lastRow});
        add(0);
      } else {
        EXPECT_LT(known, s.sampled.size()) << "step " << k << " seq " << e.seq;
        add(known < s.sampled.size() ? s.sampled[known] : 0);
      }
    }
    batch.logitsIndices.push_back(
        static_cast<int32_t>(batch.tokenIds.size() - 1));
    batch.queryStartLoc.push_back(static_cast<int32_t>(batch.tokenIds.size()));
    batch.contextLens.push_back(s.processed);
    for (int32_t b = 0; b < kBlocksPerSeq; ++b)
      batch.blockTables.push_back(e.seq * kBlocksPerSeq + b);
    s.lastStep = k;
    s.lastRow = row;
  }
  return batch;
}

/// Step k's sampling: greedy, or seeded draws (the same for every run).
SamplingBatch samplingFor(int k, size_t rows, bool seeded) {
  SamplingBatch sampling;
  sampling.rows.resize(rows);
  std::mt19937_64 rng(1000 + k);
  std::uniform_real_distribution<double> uniform;
  if (seeded)
    for (RowSampling &r : sampling.rows) {
      r.temperature = 0.9;
      r.topK = 40;
      r.topP = 0.95;
      r.uniform = uniform(rng);
    }
  return sampling;
}

/// Records step k's tokens in its sequences.
void takeTokens(const Schedule &sched, int k,
                const std::vector<int32_t> &tokens,
                std::vector<SeqState> &seqs) {
  ASSERT_EQ(tokens.size(), sched[k].size()) << "step " << k;
  for (size_t r = 0; r < tokens.size(); ++r)
    seqs[sched[k][r].seq].sampled.push_back(tokens[r]);
}

using StepTokens = std::vector<std::vector<int32_t>>;
using Micros = std::chrono::microseconds;

/// The host's own work before a step (scheduling, packing), as a busy wait.
void hostWork(Micros duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// The schedule through forwardSample, one step at a time.
void runSync(Backend &backend, const Schedule &sched, Inputs inputs,
             bool seeded, int64_t blockSize, StepTokens &out,
             Micros work = Micros(0)) {
  std::vector<SeqState> seqs(kNumSeqs);
  for (int k = 0; k < static_cast<int>(sched.size()); ++k) {
    hostWork(work);
    const Batch batch = buildStep(sched, k, seqs, inputs, blockSize);
    StatusOr<std::vector<int32_t>> tokens = backend.forwardSample(
        batch, samplingFor(k, batch.logitsIndices.size(), seeded));
    ASSERT_TRUE(tokens.isOk())
        << "step " << k << ": " << tokens.status().message();
    ASSERT_NO_FATAL_FAILURE(takeTokens(sched, k, *tokens, seqs));
    out.push_back(*tokens);
  }
}

/// The schedule through launchSample / collectSample, two in flight: step
/// k is launched before step k-1 is collected.
void runAsync(Backend &backend, const Schedule &sched, Inputs inputs,
              bool seeded, int64_t blockSize, StepTokens &out,
              Micros work = Micros(0)) {
  const int steps = static_cast<int>(sched.size());
  std::vector<SeqState> seqs(kNumSeqs);
  auto collect = [&](int k) {
    StatusOr<std::vector<int32_t>> tokens = backend.collectSample();
    ASSERT_TRUE(tokens.isOk())
        << "step " << k << ": " << tokens.status().message();
    ASSERT_NO_FATAL_FAILURE(takeTokens(sched, k, *tokens, seqs));
    out.push_back(*tokens);
  };
  for (int k = 0; k < steps; ++k) {
    hostWork(work);
    const Batch batch = buildStep(sched, k, seqs, inputs, blockSize);
    if (inputs == Inputs::kFeed && k > 0)
      EXPECT_FALSE(batch.sampledTokens.empty()) << "step " << k;
    Status launched = backend.launchSample(
        batch, samplingFor(k, batch.logitsIndices.size(), seeded));
    ASSERT_TRUE(launched.isOk()) << "step " << k << ": " << launched.message();
    if (k > 0)
      ASSERT_NO_FATAL_FAILURE(collect(k - 1));
  }
  ASSERT_NO_FATAL_FAILURE(collect(steps - 1));
  EXPECT_FALSE(backend.collectSample().isOk());
}

class CudaAsyncSampleTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA async sampling tests need a GPU: " << why;
    const std::string dir = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
    if (!std::filesystem::exists(dir + "/config.json"))
      GTEST_SKIP() << "fixture missing: " << dir;
    StatusOr<Artifact> artifact =
        buildLlamaArtifact(dir, 16, plan::DType::kBF16);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    artifact_ = std::move(*artifact);
    StatusOr<ParamTable> params = loadParams(*artifact_, 0, dir);
    ASSERT_TRUE(params.isOk()) << params.status().message();
    params_ = std::move(*params);
    blockSize_ = artifact_->plan.kvCache.blockSize;
  }

  /// A backend with graphs for calls of up to `maxGraphTokens` tokens.
  std::unique_ptr<Backend> makeBackend(int64_t maxGraphTokens) {
    cuda::CudaBackendOptions options;
    options.numBlocks = kNumSeqs * kBlocksPerSeq;
    options.maxGraphTokens = maxGraphTokens;
    StatusOr<std::unique_ptr<Backend>> backend =
        cuda::createCudaBackend(artifact_->plan, 0, params_, options);
    EXPECT_TRUE(backend.isOk()) << backend.status().message();
    return backend.isOk() ? std::move(*backend) : nullptr;
  }

  /// runSync with `syncInputs` and runAsync with `asyncInputs` on fresh
  /// backends, with graphs (kGraphSettings) and without, greedy and
  /// seeded: the same tokens every step, each a vocabulary id.
  void expectSameTokens(Inputs syncInputs, Inputs asyncInputs);

  std::optional<Artifact> artifact_;
  ParamTable params_;
  int64_t blockSize_ = 16;
};

/// Graphs for decode batches of 1 to 4 sequences (3 is padded to 4), eager
/// for 5 and for prefills; or no graphs.
constexpr int64_t kGraphSettings[] = {4, 0};

void CudaAsyncSampleTest::expectSameTokens(Inputs syncInputs,
                                           Inputs asyncInputs) {
  for (int64_t graphs : kGraphSettings)
    for (bool seeded : {false, true}) {
      SCOPED_TRACE("maxGraphTokens " + std::to_string(graphs) +
                   (seeded ? ", seeded" : ", greedy"));
      std::unique_ptr<Backend> sync = makeBackend(graphs);
      std::unique_ptr<Backend> async = makeBackend(graphs);
      ASSERT_TRUE(sync && async);
      StepTokens expected, actual;
      ASSERT_NO_FATAL_FAILURE(
          runSync(*sync, schedule(), syncInputs, seeded, blockSize_, expected));
      ASSERT_NO_FATAL_FAILURE(runAsync(*async, schedule(), asyncInputs, seeded,
                                       blockSize_, actual));
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t k = 0; k < expected.size(); ++k) {
        EXPECT_EQ(actual[k], expected[k]) << "step " << k;
        for (int32_t token : expected[k]) {
          EXPECT_GE(token, 0);
          EXPECT_LT(token, 512);
        }
      }
    }
}

TEST_F(CudaAsyncSampleTest, LaunchesReturnTheTokensOfForwardSample) {
  expectSameTokens(Inputs::kTeacher, Inputs::kTeacher);
}

TEST_F(CudaAsyncSampleTest, SampledTokensFeedThePreviousLaunchsRows) {
  expectSameTokens(Inputs::kHost, Inputs::kFeed);
}

Batch makeBatch(const std::vector<SequencePart> &parts, int64_t blockSize) {
  return multiSequenceBatch(parts, blockSize, kBlocksPerSeq);
}

std::vector<int32_t> prompt(int seq, int n) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i)
    tokens.push_back(promptToken(seq, i));
  return tokens;
}

TEST_F(CudaAsyncSampleTest, SampledTokensOutliveTheSamplingBuffersGrowing) {
  // Step 1 samples 72 rows (two prompts with a logits row per token), more
  // than the 64 the buffers first hold: they grow while step 0 is in
  // flight, and step 0's tokens, which step 1 feeds, move with them.
  std::unique_ptr<Backend> sync = makeBackend(4);
  std::unique_ptr<Backend> async = makeBackend(4);
  ASSERT_TRUE(sync && async);
  auto sampling = [](int k, const Batch &b) {
    return samplingFor(k, b.logitsIndices.size(), true);
  };
  const Batch first =
      makeBatch({{0, 0, prompt(0, 4)}, {1, 0, prompt(1, 4)}}, blockSize_);
  StatusOr<std::vector<int32_t>> t0 =
      sync->forwardSample(first, sampling(0, first));
  ASSERT_TRUE(t0.isOk()) << t0.status().message();
  const Batch second = makeBatch({{0, 4, {(*t0)[0]}},
                                  {1, 4, {(*t0)[1]}},
                                  {2, 0, prompt(2, 40), true},
                                  {3, 0, prompt(3, 30), true}},
                                 blockSize_);
  ASSERT_EQ(second.logitsIndices.size(), 72u);
  StatusOr<std::vector<int32_t>> t1 =
      sync->forwardSample(second, sampling(1, second));
  ASSERT_TRUE(t1.isOk()) << t1.status().message();
  const Batch third = makeBatch({{0, 5, {(*t1)[0]}},
                                 {1, 5, {(*t1)[1]}},
                                 {2, 40, {(*t1)[41]}},
                                 {3, 30, {(*t1)[71]}}},
                                blockSize_);
  StatusOr<std::vector<int32_t>> t2 =
      sync->forwardSample(third, sampling(2, third));
  ASSERT_TRUE(t2.isOk()) << t2.status().message();

  Batch fedSecond = second;
  fedSecond.tokenIds[0] = fedSecond.tokenIds[1] = 0;
  fedSecond.sampledTokens = {{0, 0}, {1, 1}};
  Batch fedThird = third;
  fedThird.tokenIds = {0, 0, 0, 0};
  fedThird.sampledTokens = {{0, 0}, {1, 1}, {2, 41}, {3, 71}};
  ASSERT_TRUE(async->launchSample(first, sampling(0, first)).isOk());
  ASSERT_TRUE(async->launchSample(fedSecond, sampling(1, second)).isOk());
  StatusOr<std::vector<int32_t>> a0 = async->collectSample();
  ASSERT_TRUE(a0.isOk()) << a0.status().message();
  EXPECT_EQ(*a0, *t0);
  ASSERT_TRUE(async->launchSample(fedThird, sampling(2, third)).isOk());
  StatusOr<std::vector<int32_t>> a1 = async->collectSample();
  ASSERT_TRUE(a1.isOk()) << a1.status().message();
  EXPECT_EQ(*a1, *t1);
  StatusOr<std::vector<int32_t>> a2 = async->collectSample();
  ASSERT_TRUE(a2.isOk()) << a2.status().message();
  EXPECT_EQ(*a2, *t2);
}

TEST_F(CudaAsyncSampleTest, ForwardWhileLaunchesAreInFlightRunsAfterThem) {
  const Schedule sched = schedule();
  for (int64_t graphs : kGraphSettings) {
    SCOPED_TRACE("maxGraphTokens " + std::to_string(graphs));
    std::unique_ptr<Backend> sync = makeBackend(graphs);
    std::unique_ptr<Backend> async = makeBackend(graphs);
    ASSERT_TRUE(sync && async);
    // Each step reads the keys and values the steps before it wrote; step
    // 2 (3 sequences, padded to 4) replays a graph.
    std::vector<SeqState> seqs(kNumSeqs);
    std::vector<Batch> steps;
    std::vector<SamplingBatch> sampling;
    for (int k = 0; k < 3; ++k) {
      steps.push_back(buildStep(sched, k, seqs, Inputs::kTeacher, blockSize_));
      sampling.push_back(samplingFor(k, steps[k].logitsIndices.size(), true));
    }
    StepTokens expected;
    for (int k = 0; k < 2; ++k) {
      StatusOr<std::vector<int32_t>> tokens =
          sync->forwardSample(steps[k], sampling[k]);
      ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
      expected.push_back(*tokens);
    }
    StatusOr<Logits> expectedLogits = sync->forward(steps[2]);
    ASSERT_TRUE(expectedLogits.isOk()) << expectedLogits.status().message();

    for (int k = 0; k < 2; ++k)
      ASSERT_TRUE(async->launchSample(steps[k], sampling[k]).isOk());
    StatusOr<Logits> logits = async->forward(steps[2]);
    ASSERT_TRUE(logits.isOk()) << logits.status().message();
    for (int k = 0; k < 2; ++k) {
      StatusOr<std::vector<int32_t>> tokens = async->collectSample();
      ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
      EXPECT_EQ(*tokens, expected[k]) << "step " << k;
    }
    ASSERT_EQ(logits->rows, expectedLogits->rows);
    EXPECT_EQ(logits->data, expectedLogits->data);
  }
}

TEST_F(CudaAsyncSampleTest, BadLaunchesAndCollectsAreClearErrors) {
  const Schedule sched = schedule();
  std::unique_ptr<Backend> sync = makeBackend(4);
  std::unique_ptr<Backend> async = makeBackend(4);
  ASSERT_TRUE(sync && async);
  StepTokens expected;
  ASSERT_NO_FATAL_FAILURE(
      runSync(*sync, schedule(), Inputs::kHost, false, blockSize_, expected));

  StatusOr<std::vector<int32_t>> none = async->collectSample();
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("no launch to collect"),
            std::string::npos)
      << none.status().message();

  std::vector<SeqState> seqs(kNumSeqs);
  Batch first = buildStep(sched, 0, seqs, Inputs::kFeed, blockSize_);
  Batch early = first;
  early.sampledTokens.push_back({0, 0});
  Status noEarlier = async->launchSample(early, samplingFor(0, 2, false));
  ASSERT_FALSE(noEarlier.isOk());
  EXPECT_NE(noEarlier.message().find("without an earlier launch"),
            std::string::npos)
      << noEarlier.message();

  ASSERT_TRUE(async->launchSample(first, samplingFor(0, 2, false)).isOk());
  Batch second = buildStep(sched, 1, seqs, Inputs::kFeed, blockSize_);
  ASSERT_EQ(second.sampledTokens.size(), 2u);
  // Step 0 sampled 2 rows: row 2 is past them.
  Batch pastRows = second;
  pastRows.sampledTokens[0].row = 2;
  Status past = async->launchSample(pastRows, samplingFor(1, 3, false));
  ASSERT_FALSE(past.isOk());
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.message().find("reads row 2 of the 2"), std::string::npos)
      << past.message();

  ASSERT_TRUE(async->launchSample(second, samplingFor(1, 3, false)).isOk());
  std::vector<SeqState> unused = seqs;
  const Batch third = buildStep(sched, 2, unused, Inputs::kFeed, blockSize_);
  Status tooMany = async->launchSample(third, samplingFor(2, 3, false));
  ASSERT_FALSE(tooMany.isOk());
  EXPECT_NE(tooMany.message().find("2 launches are not collected"),
            std::string::npos)
      << tooMany.message();
  Batch plain = third;
  plain.sampledTokens.clear();
  StatusOr<std::vector<int32_t>> syncCall =
      async->forwardSample(plain, samplingFor(2, 3, false));
  ASSERT_FALSE(syncCall.isOk());
  EXPECT_NE(syncCall.status().message().find("not collected"),
            std::string::npos)
      << syncCall.status().message();

  // The refused calls launched nothing: the two launches give the
  // synchronous run's tokens, and nothing is left.
  for (int k = 0; k < 2; ++k) {
    StatusOr<std::vector<int32_t>> tokens = async->collectSample();
    ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
    EXPECT_EQ(*tokens, expected[k]) << "step " << k;
  }
  EXPECT_FALSE(async->collectSample().isOk());

  // After forwardSample the device's tokens are not a launch's.
  std::vector<SeqState> fresh(kNumSeqs);
  const Batch prefill = buildStep(sched, 0, fresh, Inputs::kHost, blockSize_);
  ASSERT_TRUE(async->forwardSample(prefill, samplingFor(0, 2, false)).isOk());
  Status afterSync = async->launchSample(second, samplingFor(1, 3, false));
  ASSERT_FALSE(afterSync.isOk());
  EXPECT_NE(afterSync.message().find("without an earlier launch"),
            std::string::npos)
      << afterSync.message();
  EXPECT_FALSE(async->forward(second).isOk());
}

TEST_F(CudaAsyncSampleTest, IdleTimeCountsTheHostsPauseBetweenCalls) {
  const Schedule sched = schedule();
  std::unique_ptr<Backend> backend = makeBackend(4);
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->deviceIdleSeconds(), 0.0);
  std::vector<SeqState> seqs(kNumSeqs);
  std::vector<Batch> batches;
  for (int k = 0; k < 4; ++k)
    batches.push_back(buildStep(sched, k, seqs, Inputs::kTeacher, blockSize_));
  auto sample = [&](int k) {
    StatusOr<std::vector<int32_t>> tokens = backend->forwardSample(
        batches[k], samplingFor(k, batches[k].logitsIndices.size(), false));
    ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
  };
  ASSERT_NO_FATAL_FAILURE(sample(0));
  EXPECT_EQ(backend->deviceIdleSeconds(), 0.0) << "no call before the first";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NO_FATAL_FAILURE(sample(1));
  const double idle = backend->deviceIdleSeconds();
  EXPECT_GE(idle, 0.045);
  EXPECT_LT(idle, 5.0);
  // A forward() between two sampled calls is device work, not idle time.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(backend->forward(batches[2]).isOk());
  ASSERT_NO_FATAL_FAILURE(sample(3));
  EXPECT_EQ(backend->deviceIdleSeconds(), idle);
}

TEST_F(CudaAsyncSampleTest, LaunchesHideTheHostsWorkFromTheDevice) {
  // 4 sequences decode 48 steps (graphs); before each step the host works
  // for `work` (what the engine's scheduling and packing would take).
  const Schedule sched = decodeSchedule(4, 48);
  const auto steps = static_cast<double>(sched.size());
  for (Micros work : {Micros(0), Micros(200)}) {
    SCOPED_TRACE("host work " + std::to_string(work.count()) + " us");
    std::unique_ptr<Backend> sync = makeBackend(4);
    std::unique_ptr<Backend> async = makeBackend(4);
    ASSERT_TRUE(sync && async);
    StepTokens expected, actual;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_NO_FATAL_FAILURE(
        runSync(*sync, sched, Inputs::kHost, true, blockSize_, expected, work));
    const auto middle = std::chrono::steady_clock::now();
    ASSERT_NO_FATAL_FAILURE(
        runAsync(*async, sched, Inputs::kFeed, true, blockSize_, actual, work));
    const auto end = std::chrono::steady_clock::now();
    EXPECT_EQ(actual, expected);
    const double syncIdle = sync->deviceIdleSeconds();
    const double asyncIdle = async->deviceIdleSeconds();
    std::printf(
        "[ async idle ] host work %lld us/step: device idle "
        "%.1f us/step synchronous, %.1f us/step with launches in "
        "flight; wall %.1f vs %.1f us/step\n",
        static_cast<long long>(work.count()), 1e6 * syncIdle / steps,
        1e6 * asyncIdle / steps,
        std::chrono::duration<double, std::micro>(middle - start).count() /
            steps,
        std::chrono::duration<double, std::micro>(end - middle).count() /
            steps);
    EXPECT_GT(syncIdle, 0.0);
    EXPECT_LT(asyncIdle, syncIdle);
  }
}

TEST_F(CudaAsyncSampleTest, FeedKernelGivesTokenZeroOutsideTheVocabulary) {
  DeviceArray<int32_t> ids(std::vector<int32_t>{7, 7, 7, 7, 7});
  DeviceArray<cuda::DeviceSampledToken> pairs(
      std::vector<cuda::DeviceSampledToken>{{0, 2}, {3, 0}, {4, 1}, {1, 3}});
  DeviceArray<int32_t> sampled(
      std::vector<int32_t>{5, kNonFiniteLogitsToken, 9, 512});
  ASSERT_EQ(cuda::launchFeedSampledTokens(ids.get(), pairs.get(), 4,
                                          sampled.get(), 512, nullptr),
            cudaSuccess);
  EXPECT_EQ(ids.download(), (std::vector<int32_t>{9, 0, 7, 5, 0}));
}

} // namespace
} // namespace infer::testing
