//===- EngineHostBench.cpp - The engine's host work per step --------------===//
//
//   infer-engine-host-bench [--num-prompts 2000] [--input-len 128]
//       [--output-len 128] [--max-num-seqs 1024]
//       [--max-num-batched-tokens 8192] [--repeats 5]
//       [--async-scheduling on|off]
//
// Runs `infer bench`'s offline workload (random prompts all at once, each
// generating exactly --output-len tokens, ignore_eos, greedy, prefix caching
// on) through the Engine over a backend that answers every forward call at
// once (a token per logits row, no device), so that what is timed is the
// engine's host work alone: scheduling, KV-block bookkeeping, batch packing,
// committing the tokens, stop checks and the outputs. `infer bench` reports
// the same work on a real backend as "host work ms per step" (the share of
// the run the backend sat idle, without overlap); this tool isolates it on
// any machine. Prints the median over --repeats runs of ms per step.
// --async-scheduling on runs the engine as `infer bench` does by default
// (EngineConfig::asyncScheduling, the backend's default launchSample): the
// same host work, in another order.
//
//===----------------------------------------------------------------------===//

#include "runtime/engine/Engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace infer;

namespace {

/// Chooses token 7 for every logits row, at once.
class InstantBackend final : public Backend {
public:
  explicit InstantBackend(int64_t numBlocks) : numBlocks_(numBlocks) {}
  std::string_view name() const override { return "instant"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &) override {
    return unimplemented("the instant backend only samples on the device");
  }
  StatusOr<std::vector<int32_t>> forwardSample(const Batch &batch,
                                               const SamplingBatch &) override {
    return std::vector<int32_t>(batch.logitsIndices.size(), 7);
  }

private:
  int64_t numBlocks_;
};

[[noreturn]] void usage(const std::string &message) {
  std::fprintf(stderr,
               "infer-engine-host-bench: %s\nusage: infer-engine-host-bench "
               "[--num-prompts N] [--input-len N] [--output-len N] "
               "[--max-num-seqs N] [--max-num-batched-tokens N] "
               "[--repeats N] [--async-scheduling on|off]\n",
               message.c_str());
  std::exit(2);
}

} // namespace

int main(int argc, char **argv) {
  int64_t numPrompts = 2000, inputLen = 128, outputLen = 128, maxNumSeqs = 1024,
          maxBatchedTokens = 8192, repeats = 5;
  bool async = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      usage("missing value of " + flag);
    if (flag == "--async-scheduling") {
      const std::string value = argv[i + 1];
      if (value != "on" && value != "off")
        usage("--async-scheduling takes on or off");
      async = value == "on";
      continue;
    }
    char *end = nullptr;
    const long long value = std::strtoll(argv[i + 1], &end, 10);
    if (*end != '\0' || value <= 0)
      usage(flag + " takes a positive integer");
    if (flag == "--num-prompts")
      numPrompts = value;
    else if (flag == "--input-len")
      inputLen = value;
    else if (flag == "--output-len")
      outputLen = value;
    else if (flag == "--max-num-seqs")
      maxNumSeqs = value;
    else if (flag == "--max-num-batched-tokens")
      maxBatchedTokens = value;
    else if (flag == "--repeats")
      repeats = value;
    else
      usage("unknown flag " + flag);
  }
  constexpr int64_t kBlockSize = 16;
  const int64_t blocksPerRequest =
      (inputLen + outputLen + kBlockSize - 1) / kBlockSize;
  std::vector<double> msPerStep;
  int64_t steps = 0;
  for (int64_t run = 0; run < repeats; ++run) {
    InstantBackend backend(blocksPerRequest * std::min(numPrompts, maxNumSeqs));
    EngineConfig config;
    config.blockSize = kBlockSize;
    config.vocabSize = 128256;
    config.scheduler.maxNumSeqs = maxNumSeqs;
    config.scheduler.maxNumBatchedTokens = maxBatchedTokens;
    config.asyncScheduling = async;
    Engine engine(backend, config);
    SamplingParams sampling;
    sampling.maxNewTokens = outputLen;
    sampling.ignoreEos = true;
    std::mt19937 rng(static_cast<uint32_t>(run));
    for (int64_t p = 0; p < numPrompts; ++p) {
      std::vector<int32_t> prompt(static_cast<size_t>(inputLen));
      for (int32_t &token : prompt)
        token = static_cast<int32_t>(rng() % 128000);
      StatusOr<RequestId> id = engine.addRequest(std::move(prompt), sampling);
      if (!id.isOk())
        usage("addRequest: " + id.status().message());
    }
    const auto start = std::chrono::steady_clock::now();
    while (engine.hasUnfinished()) {
      StatusOr<std::vector<RequestOutput>> outputs = engine.step();
      if (!outputs.isOk())
        usage("step: " + outputs.status().message());
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    steps = engine.stats().numSteps;
    msPerStep.push_back(1e3 * seconds / static_cast<double>(steps));
  }
  std::vector<double> sorted = msPerStep;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "engine host work: %lld prompts of %lld tokens, %lld out, "
      "max_num_seqs %lld, max_num_batched_tokens %lld, asynchronous "
      "scheduling %s\n",
      static_cast<long long>(numPrompts), static_cast<long long>(inputLen),
      static_cast<long long>(outputLen), static_cast<long long>(maxNumSeqs),
      static_cast<long long>(maxBatchedTokens), async ? "on" : "off");
  std::printf("steps %lld, host work %.3f ms per step (median of %zu runs:",
              static_cast<long long>(steps), sorted[sorted.size() / 2],
              sorted.size());
  for (double ms : msPerStep)
    std::printf(" %.3f", ms);
  std::printf(")\n");
  return 0;
}
