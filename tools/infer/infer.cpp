//===- infer.cpp - The infer command-line tool ----------------------------===//
//
// infer import | compile | generate | logits | tokenize | inspect. Every
// failure is a message on stderr and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/engine/Engine.h"
#include "runtime/engine/MemoryEstimate.h"
#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/InputLimits.h"
#include "tools/infer/Args.h"
#include "tools/infer/DeployConfig.h"
#include "tools/infer/Model.h"
#include "tools/infer/MultiProcess.h"
#include "tools/infer/Serve.h"
#include "tools/infer/ServeBench.h"
#include "tools/infer/Speculation.h"

#ifdef INFER_HAS_COMPILER
#include "codegen/Compile.h"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace infer::tool {
namespace {

using nlohmann::json;

constexpr const char *kUsage = R"(usage: infer COMMAND [ARGS]

commands:
  import MODEL_DIR [-o FILE.mlir]      print the model-level IR of a Hugging Face model
  compile MODEL_DIR -o ARTIFACT_DIR    compile a Hugging Face model into an artifact
  pack ARTIFACT_DIR                    write the transformed weights into an artifact
  generate MODEL --prompt TEXT ...     generate text (several prompts run as one batch)
  bench MODEL --input-len I --output-len O --num-prompts N
                                       serving throughput and latency on random prompts
  serve MODEL [--port 8000]            an OpenAI-compatible HTTP server
  logits MODEL --token-ids 1,2,3 -o OUT.safetensors
                                       fp32 logits of every position
  tokenize DIR --text TEXT             token ids of a text (or --decode IDS)
  inspect ARTIFACT_DIR                 show an artifact's manifest and program

`infer COMMAND --help` describes a command's options.
)";

struct Command {
  const char *name;
  const char *help;
  std::vector<OptionSpec> options;
  std::function<Status(const ParsedArgs &)> run;
};

/// Prints a JSON value on one line; invalid UTF-8 in text becomes U+FFFD.
/// Keys stay in the order written.
std::string dumpLine(const nlohmann::ordered_json &j) {
  return j.dump(-1, ' ', false,
                nlohmann::ordered_json::error_handler_t::replace);
}

Status expectPositional(const ParsedArgs &args, size_t count,
                        const char *what) {
  if (args.positional.size() != count)
    return invalidArgument(std::string("expected ") + what + " (see --help)");
  return Status::ok();
}

StatusOr<int> threadsOption(const ParsedArgs &args) {
  INFER_ASSIGN_OR_RETURN(int64_t threads, args.getInt("--threads", 0));
  if (threads < 0 || threads > 1024)
    return invalidArgument("--threads must be in [0, 1024]");
  return static_cast<int>(threads);
}

/// --weights, --skip-weight-check, and a progress bar on a terminal.
WeightLoadOptions weightLoadOptions(const ParsedArgs &args) {
  WeightLoadOptions options;
  options.weightsDirOverride = args.get("--weights", "");
  options.verifyHash = !args.has("--skip-weight-check");
  options.showProgress = true;
  return options;
}

//===----------------------------------------------------------------------===//
// import, compile
//===----------------------------------------------------------------------===//

Status runImport(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL_DIR"));
#ifdef INFER_HAS_COMPILER
  return compiler::importModel(args.positional[0], args.get("-o", "-"));
#else
  return unimplemented(kNoCompilerMessage);
#endif
}

Status runCompile(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL_DIR"));
  if (!args.has("-o"))
    return invalidArgument("compile needs -o ARTIFACT_DIR");
  DeployConfig config;
  if (args.has("--config")) {
    INFER_ASSIGN_OR_RETURN(config, readDeployConfig(*args.get("--config")));
  }
  INFER_RETURN_IF_ERROR(applyDeployConfigFlags(args, config));
  INFER_RETURN_IF_ERROR(validateDeployConfig(config, args));
#ifdef INFER_HAS_COMPILER
  compiler::CompileOptions options;
  options.target = config.target;
  options.cudaArch = config.cudaArch;
  options.blockSize = config.blockSize;
  options.fuse = config.fuse;
  options.planMemory = config.planMemory;
  options.tp = config.tp;
  options.sinkTokens = config.sinkTokens;
  options.window = config.window;
  options.quant = config.quant;
  options.quantGranularity = config.quantGranularity;
  options.kvCacheDtype = config.kvCacheDtype;
  options.dtype = config.dtype;
  options.printIrAfterAll = args.has("--mlir-print-ir-after-all");
  const std::string artifactDir = *args.get("-o");
  MemoryEstimateOptions memory;
  INFER_ASSIGN_OR_RETURN(memory.deviceMemoryBytes,
                         parseByteSize(args.get("--gpu-memory", "80GiB")));
  INFER_RETURN_IF_ERROR(
      compiler::compileModel(args.positional[0], artifactDir, options));
  // The manifest records the options the artifact was made with; packing
  // rewrites it again with the packed files.
  INFER_ASSIGN_OR_RETURN(Artifact artifact, loadArtifact(artifactDir));
  artifact.manifest.deployConfig = deployConfigToJson(config);
  INFER_RETURN_IF_ERROR(rewriteManifest(artifactDir, artifact.manifest));
  if (config.packWeights) {
    PackOptions pack;
    pack.showProgress = true;
    INFER_RETURN_IF_ERROR(packArtifact(artifactDir, pack));
  }
  if (!args.has("--estimate-memory"))
    return Status::ok();
  // The cache stores the element type the compiler chose (fp8 caches are
  // counted by the estimate itself).
  memory.kvElementBytes = plan::dtypeSize(artifact.plan.kvCache.dtype);
  INFER_ASSIGN_OR_RETURN(
      MemoryEstimate estimate,
      estimateMemory(artifact.manifest, artifact.plan, memory));
  std::cout << formatMemoryEstimate(estimate, memory);
  return Status::ok();
#else
  return unimplemented(kNoCompilerMessage);
#endif
}

/// `infer pack ARTIFACT`: a runtime command (no compiler needed), so a GPU
/// host packs the artifacts compiled elsewhere next to its checkpoints.
Status runPack(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "ARTIFACT_DIR"));
  PackOptions options;
  options.weightsDir = args.get("--weights", "");
  options.showProgress = true;
  if (args.has("--gpu")) {
    INFER_ASSIGN_OR_RETURN(options.materialize, gpuParamMaterializer());
  }
  return packArtifact(args.positional[0], options);
}

//===----------------------------------------------------------------------===//
// generate
//===----------------------------------------------------------------------===//

/// KV blocks that let every request run to completion at the same time.
int64_t blocksForAll(const std::vector<std::vector<int32_t>> &prompts,
                     const SamplingParams &sampling,
                     const EngineConfig &config) {
  int64_t blocks = 0;
  for (const std::vector<int32_t> &prompt : prompts) {
    // Saturating: --max-new-tokens may be as large as int64 allows.
    int64_t tokens = static_cast<int64_t>(prompt.size()) +
                     std::min(sampling.maxNewTokens,
                              INT64_MAX - static_cast<int64_t>(prompt.size()));
    if (config.maxModelLen > 0)
      tokens = std::min(tokens, config.maxModelLen);
    int64_t needed = (std::max<int64_t>(tokens, 1) + config.blockSize - 1) /
                     config.blockSize;
    // Streaming: the sinks, the window and one step, the prompt or a decode
    // with up to 64 drafts (the --num-speculative-tokens limit).
    if (config.streaming.enabled())
      needed = std::min(
          needed,
          streamingBlockBound(
              config.streaming, config.blockSize,
              std::max<int64_t>(static_cast<int64_t>(prompt.size()), 1 + 64)));
    blocks += needed;
  }
  return blocks;
}

Status runGenerate(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL"));
  SamplingParams sampling;
  INFER_ASSIGN_OR_RETURN(sampling.maxNewTokens,
                         args.getInt("--max-new-tokens", 32));
  INFER_ASSIGN_OR_RETURN(sampling.temperature,
                         args.getDouble("--temperature", 0.0));
  INFER_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0));
  sampling.seed = static_cast<uint64_t>(seed);
  sampling.ignoreEos = args.has("--ignore-eos");
  if (sampling.maxNewTokens < 0)
    return invalidArgument("--max-new-tokens must be >= 0");
  if (!(sampling.temperature >= 0))
    return invalidArgument("--temperature must be >= 0");
  INFER_ASSIGN_OR_RETURN(int threads, threadsOption(args));
  const std::string backendName = args.get("--backend", "cpu");

  bool anyText = false;
  for (const auto &[name, value] : args.options)
    anyText |= name == "--prompt";
  if (!args.has("--prompt") && !args.has("--token-ids"))
    return invalidArgument(
        "generate needs at least one --prompt or --token-ids");

  INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(args.positional[0]));
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                         loadTokenizer(model.artifact));
  if (anyText && !tokenizer)
    return invalidArgument("the artifact has no tokenizer: use --token-ids");

  std::vector<std::vector<int32_t>> prompts;
  for (const auto &[name, value] : args.options) {
    if (name == "--prompt") {
      INFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                             tokenizer->tryEncode(value, true));
      prompts.push_back(std::move(ids));
    } else if (name == "--token-ids") {
      INFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parseIdList(value));
      prompts.push_back(std::move(ids));
    }
  }

  // Every sequence runs at once, as one batch: the pool holds them all and
  // the first step prefills every prompt.
  EngineConfig config = engineConfigFor(model.artifact);
  config.scheduler.maxNumSeqs = static_cast<int64_t>(prompts.size());
  config.asyncScheduling = !args.has("--no-async-scheduling");
  for (const std::vector<int32_t> &prompt : prompts)
    config.scheduler.maxNumBatchedTokens += static_cast<int64_t>(prompt.size());
  INFER_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> backend,
      createBackend(model.artifact, backendName, weightLoadOptions(args),
                    blocksForAll(prompts, sampling, config), threads));
  INFER_ASSIGN_OR_RETURN(
      Speculation speculation,
      createSpeculation(args, model.artifact, config.eosTokenIds, backendName,
                        blocksForAll(prompts, sampling, config), threads));
  config.numSpeculativeTokens = speculation.numSpeculativeTokens;
  const spec::Speculator *speculator = speculation.speculator.get();
  Engine engine(*backend, config);
  if (speculation.speculator)
    engine.setProposer(std::move(speculation.speculator));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams params = sampling;
    // Each request gets its own stream: seed, seed + 1, ...
    params.seed = sampling.seed + i;
    StatusOr<RequestId> id = engine.addRequest(prompts[i], params);
    if (!id.isOk())
      return id.status().withContext("request " + std::to_string(i));
    ids.push_back(*id);
  }
  std::map<RequestId, RequestOutput> results;
  while (engine.hasUnfinished()) {
    INFER_ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine.step());
    for (RequestOutput &out : outputs)
      if (out.finished)
        results[out.id] = std::move(out);
  }
  if (speculator)
    INFER_RETURN_IF_ERROR(speculator->status());

  const bool asJson = args.has("--json");
  Status failed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestOutput &result = results.at(ids[i]);
    if (result.finishReason == FinishReason::kError && failed.isOk())
      failed =
          dataLoss("request " + std::to_string(i) + " failed: " + result.error);
    const std::vector<int32_t> &out = result.outputTokenIds;
    std::string text = tokenizer ? tokenizer->decode(out, true) : "";
    if (asJson) {
      nlohmann::ordered_json line{
          {"prompt_token_ids", prompts[i]},
          {"output_token_ids", out},
          {"text", text},
          {"finish_reason",
           result.finishReason == FinishReason::kError  ? "error"
           : result.finishReason == FinishReason::kStop ? "stop"
                                                        : "length"}};
      if (result.finishReason == FinishReason::kError)
        line["error"] = result.error;
      if (speculator)
        line["acceptance_rate"] = speculator->stats(ids[i]).acceptanceRate();
      std::cout << dumpLine(line) << "\n";
    } else if (tokenizer) {
      std::cout << text << "\n";
    } else {
      for (size_t k = 0; k < out.size(); ++k)
        std::cout << (k ? " " : "") << out[k];
      std::cout << "\n";
    }
  }
  if (speculator)
    std::cerr << "acceptance rate " << speculator->stats().acceptanceRate()
              << " (" << speculator->stats().numAccepted << " of "
              << speculator->stats().numJudged << " judged draft tokens)\n";
  std::cout.flush();
  return failed;
}

//===----------------------------------------------------------------------===//
// bench
//===----------------------------------------------------------------------===//

/// Wall-clock timeline of one benchmark request.
struct BenchRequest {
  std::vector<int32_t> prompt;
  double arrival = 0.0;
  double firstToken = -1.0;
  double finish = 0.0;
  /// Time of each output that carried tokens.
  std::vector<double> tokenTimes;
  int64_t numOutputTokens = 0;
};

/// The q-quantile (0..1) of `values`, linearly interpolated like numpy.
double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] +
         (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

double mean(const std::vector<double> &values) {
  double sum = 0.0;
  for (double v : values)
    sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

/// {"mean", "p50", "p99"} of latencies in seconds, as milliseconds.
nlohmann::ordered_json latencyStats(const std::vector<double> &seconds) {
  return {{"mean", mean(seconds) * 1e3},
          {"p50", quantile(seconds, 0.5) * 1e3},
          {"p99", quantile(seconds, 0.99) * 1e3}};
}

void drawProgress(int64_t done, int64_t total) {
  const int width = 40;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r[%s] %lld/%lld requests", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total));
  if (done == total)
    std::fputc('\n', stderr);
  std::fflush(stderr);
}

/// --max-num-seqs auto's cap: the largest decode batch the CUDA backend
/// captures graphs for (CudaBackendOptions::maxGraphTokens).
constexpr int64_t kAutoMaxNumSeqs = 1024;

Status runBench(const ParsedArgs &args) {
  if (args.has("--base-url"))
    return runServeBench(args);
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL"));
  INFER_ASSIGN_OR_RETURN(int64_t inputLen, args.getInt("--input-len", 128));
  INFER_ASSIGN_OR_RETURN(int64_t outputLen, args.getInt("--output-len", 128));
  INFER_ASSIGN_OR_RETURN(int64_t numPrompts, args.getInt("--num-prompts", 64));
  INFER_ASSIGN_OR_RETURN(double rate,
                         args.getDouble("--request-rate", INFINITY));
  INFER_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0));
  if (inputLen <= 0 || outputLen <= 0 || numPrompts <= 0)
    return invalidArgument(
        "--input-len, --output-len and --num-prompts must be > 0");
  // Token counts are int32 positions; their sums must not overflow.
  if (inputLen > INT32_MAX || outputLen > INT32_MAX || numPrompts > INT32_MAX)
    return invalidArgument("--input-len, --output-len and --num-prompts must "
                           "be at most " +
                           std::to_string(INT32_MAX));
  if (!(rate > 0))
    return invalidArgument("--request-rate must be > 0 (inf: all at once)");
  // A bench run must end: the arrivals of a Poisson process of rate R span
  // about N / R seconds.
  constexpr double kMaxArrivalSeconds = 24 * 3600;
  if (static_cast<double>(numPrompts) / rate > kMaxArrivalSeconds)
    return invalidArgument(
        "--request-rate " + args.get("--request-rate", "") + " spreads " +
        std::to_string(numPrompts) +
        " arrivals over more than a day: give a larger rate");
  INFER_ASSIGN_OR_RETURN(int threads, threadsOption(args));
  const std::string backendName = args.get("--backend", "cpu");
  // --gpu-memory-utilization F: the cuda backend's KV pool takes F of the
  // device memory free after the weights, instead of a count of blocks. On
  // cuda that is the default (F = 0.9, as vLLM's), unless --num-blocks says
  // or a --draft model shares the pool's size.
  const bool explicitMemoryPool = args.has("--gpu-memory-utilization");
  const bool poolFromMemory =
      explicitMemoryPool || (backendName == "cuda" &&
                             !args.has("--num-blocks") && !args.has("--draft"));
  INFER_ASSIGN_OR_RETURN(double memoryFraction,
                         args.getDouble("--gpu-memory-utilization", 0.9));
  if (explicitMemoryPool) {
    if (backendName != "cuda")
      return invalidArgument("--gpu-memory-utilization needs --backend cuda");
    if (args.has("--num-blocks"))
      return invalidArgument(
          "give --num-blocks or --gpu-memory-utilization, not both");
    if (args.has("--draft"))
      return invalidArgument("--gpu-memory-utilization sizes the target's "
                             "pool only; give --num-blocks with --draft");
    if (!(memoryFraction > 0 && memoryFraction <= 1))
      return invalidArgument("--gpu-memory-utilization must be in (0, 1]");
  }

  INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(args.positional[0]));
  EngineConfig config = engineConfigFor(model.artifact);
  SchedulerConfig &sched = config.scheduler;
  // auto (the default): as many running sequences as the pool holds whole
  // requests of this workload (resolved once the pool is sized, below), and
  // a token budget that keeps a GPU's prefill GEMMs large.
  const bool autoSeqs = args.get("--max-num-seqs", "auto") == "auto";
  if (!autoSeqs) {
    INFER_ASSIGN_OR_RETURN(sched.maxNumSeqs, args.getInt("--max-num-seqs", 0));
  }
  sched.maxNumBatchedTokens =
      autoMaxNumBatchedTokens(backendName, /*offline=*/true);
  if (args.get("--max-num-batched-tokens", "auto") != "auto") {
    INFER_ASSIGN_OR_RETURN(sched.maxNumBatchedTokens,
                           args.getInt("--max-num-batched-tokens", 0));
  }
  if (sched.maxNumSeqs <= 0 || sched.maxNumBatchedTokens <= 0)
    return invalidArgument(
        "--max-num-seqs and --max-num-batched-tokens must be > 0 (or auto)");
  config.enablePrefixCaching = !args.has("--no-prefix-caching");
  config.asyncScheduling = !args.has("--no-async-scheduling");
  if (config.maxModelLen > 0 && inputLen + outputLen > config.maxModelLen)
    return invalidArgument("--input-len + --output-len exceed the model's " +
                           std::to_string(config.maxModelLen) + " positions");
  // By default the pool lets max_num_seqs requests run to completion at once
  // (auto: up to kAutoMaxNumSeqs of them).
  const int64_t blocksPerRequest =
      (inputLen + outputLen + config.blockSize - 1) / config.blockSize;
  const int64_t seqsForPool =
      autoSeqs ? std::min(numPrompts, kAutoMaxNumSeqs) : sched.maxNumSeqs;
  INFER_ASSIGN_OR_RETURN(
      int64_t numBlocks,
      args.getInt("--num-blocks",
                  blocksPerRequest * std::min(numPrompts, seqsForPool)));
  if (numBlocks < blocksPerRequest)
    return invalidArgument("--num-blocks must hold one request (" +
                           std::to_string(blocksPerRequest) + " blocks)");

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  const int64_t vocab = std::max<int64_t>(config.vocabSize, 1);
  std::vector<BenchRequest> requests(static_cast<size_t>(numPrompts));
  double arrival = 0.0;
  for (BenchRequest &r : requests) {
    for (int64_t i = 0; i < inputLen; ++i)
      r.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    r.arrival = arrival;
    if (std::isfinite(rate))
      arrival += std::exponential_distribution<double>(rate)(rng);
  }

  INFER_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> backend,
      createBackend(model.artifact, backendName, weightLoadOptions(args),
                    poolFromMemory ? 0 : numBlocks, threads, memoryFraction,
                    args.has("--profile")));
  INFER_ASSIGN_OR_RETURN(Speculation speculation,
                         createSpeculation(args, model.artifact,
                                           config.eosTokenIds, backendName,
                                           numBlocks, threads));
  config.numSpeculativeTokens = speculation.numSpeculativeTokens;
  const spec::Speculator *speculator = speculation.speculator.get();
  if (autoSeqs)
    sched.maxNumSeqs = std::clamp<int64_t>(
        backend->numBlocks() / blocksPerRequest, 1, kAutoMaxNumSeqs);
  Engine engine(*backend, config);
  if (speculation.speculator)
    engine.setProposer(std::move(speculation.speculator));
  SamplingParams sampling;
  sampling.maxNewTokens = outputLen;
  sampling.ignoreEos = true;

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto now = [&start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::map<RequestId, size_t> index;
  int64_t numFinished = 0;
  Status failed;
  engine.setOutputCallback([&](const RequestOutput &out) {
    BenchRequest &r = requests[index.at(out.id)];
    const double t = now();
    if (!out.newTokenIds.empty()) {
      if (r.firstToken < 0)
        r.firstToken = t;
      r.tokenTimes.push_back(t);
      r.numOutputTokens += static_cast<int64_t>(out.newTokenIds.size());
    }
    if (out.finished) {
      r.finish = t;
      ++numFinished;
      if (out.finishReason == FinishReason::kError && failed.isOk())
        failed = dataLoss("request " + std::to_string(index.at(out.id)) +
                          " failed: " + out.error);
    }
  });
  const bool progress = ::isatty(STDERR_FILENO);
  size_t next = 0;
  int64_t drawn = -1;
  while (numFinished < numPrompts) {
    for (; next < requests.size() && requests[next].arrival <= now(); ++next) {
      // Timelines start at the scheduled arrival, as a client would see.
      INFER_ASSIGN_OR_RETURN(RequestId id,
                             engine.addRequest(requests[next].prompt, sampling,
                                               0, requests[next].arrival));
      index[id] = next;
    }
    if (engine.hasUnfinished()) {
      INFER_ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine.step());
    } else if (next < requests.size()) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(requests[next].arrival - now()));
    }
    if (progress && numFinished != drawn)
      drawProgress(drawn = numFinished, numPrompts);
  }
  const double duration = now();
  INFER_RETURN_IF_ERROR(failed);

  std::vector<double> ttft, tpot, itl;
  int64_t outputTokens = 0;
  for (const BenchRequest &r : requests) {
    ttft.push_back(r.firstToken - r.arrival);
    outputTokens += r.numOutputTokens;
    if (r.numOutputTokens > 1)
      tpot.push_back((r.finish - r.firstToken) /
                     static_cast<double>(r.numOutputTokens - 1));
    for (size_t i = 1; i < r.tokenTimes.size(); ++i)
      itl.push_back(r.tokenTimes[i] - r.tokenTimes[i - 1]);
  }
  const EngineStats &stats = engine.stats();
  const double inputTokens = static_cast<double>(numPrompts * inputLen);
  nlohmann::ordered_json result{
      {"backend", std::string(backend->name())},
      {"num_prompts", numPrompts},
      {"input_len", inputLen},
      {"output_len", outputLen},
      {"request_rate", std::isfinite(rate) ? nlohmann::ordered_json(rate)
                                           : nlohmann::ordered_json("inf")},
      {"max_num_seqs", sched.maxNumSeqs},
      {"max_num_batched_tokens", sched.maxNumBatchedTokens},
      {"num_blocks", backend->numBlocks()},
      {"duration_s", duration},
      {"request_throughput", numPrompts / duration},
      {"output_throughput", outputTokens / duration},
      {"total_token_throughput", (inputTokens + outputTokens) / duration},
      {"ttft_ms", latencyStats(ttft)},
      {"tpot_ms", latencyStats(tpot)},
      {"itl_ms", latencyStats(itl)},
      {"num_steps", stats.numSteps},
      {"num_computed_tokens", stats.numComputedTokens},
      {"num_cached_tokens", stats.numCachedTokens},
      {"num_preemptions", stats.numPreemptions},
      // What the device waits for between forward calls: the engine's host
      // work per step, and the share of the run outside the backend.
      {"host_ms_per_step",
       stats.numSteps
           ? 1e3 * (stats.stepSeconds - stats.backendSeconds) / stats.numSteps
           : 0.0},
      {"backend_idle_fraction", 1.0 - stats.backendSeconds / duration},
      // With asynchronous scheduling the host works while the device runs:
      // the device's own measure of its idle time between forward calls
      // (null where the backend does not measure it).
      {"async_scheduling", config.asyncScheduling},
      {"num_async_steps", stats.numAsyncSteps},
      {"device_idle_fraction",
       stats.deviceIdleSeconds >= 0
           ? nlohmann::ordered_json(stats.deviceIdleSeconds / duration)
           : nlohmann::ordered_json()},
      {"acceptance_rate", stats.numDraftTokens
                              ? nlohmann::ordered_json(stats.acceptanceRate())
                              : nlohmann::ordered_json()}};
  if (speculator) {
    INFER_RETURN_IF_ERROR(speculator->status());
    // Per judged draft token, as generate --json reports it.
    result["acceptance_rate"] = speculator->stats().acceptanceRate();
    result["num_speculative_tokens"] = config.numSpeculativeTokens;
  }
  if (args.has("--json")) {
    std::cout << dumpLine(result) << "\n";
    std::cout.flush();
    return Status::ok();
  }
  auto latency = [&](const char *name, const char *key) {
    char line[160];
    std::snprintf(
        line, sizeof(line), "%-5s ms: mean %9.2f  p50 %9.2f  p99 %9.2f\n", name,
        result[key]["mean"].get<double>(), result[key]["p50"].get<double>(),
        result[key]["p99"].get<double>());
    std::cout << line;
  };
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "backend %s: %lld requests, input %lld, output %lld tokens, "
      "request rate %s\n",
      std::string(backend->name()).c_str(), static_cast<long long>(numPrompts),
      static_cast<long long>(inputLen), static_cast<long long>(outputLen),
      std::isfinite(rate) ? std::to_string(rate).c_str() : "inf");
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "max_num_seqs %lld, max_num_batched_tokens %lld, %lld KV "
                "blocks\n",
                static_cast<long long>(sched.maxNumSeqs),
                static_cast<long long>(sched.maxNumBatchedTokens),
                static_cast<long long>(backend->numBlocks()));
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "duration %.3f s\nthroughput: %.3f req/s, %.2f output tok/s, "
                "%.2f total tok/s\n",
                duration, numPrompts / duration, outputTokens / duration,
                (inputTokens + outputTokens) / duration);
  std::cout << line;
  latency("TTFT", "ttft_ms");
  latency("TPOT", "tpot_ms");
  latency("ITL", "itl_ms");
  std::snprintf(line, sizeof(line),
                "steps %lld, tokens computed %lld, prefix-cache hits %lld "
                "tokens, preemptions %lld\n",
                static_cast<long long>(stats.numSteps),
                static_cast<long long>(stats.numComputedTokens),
                static_cast<long long>(stats.numCachedTokens),
                static_cast<long long>(stats.numPreemptions));
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "host work %.3f ms per step; backend idle %.1f%% of the run\n",
                result["host_ms_per_step"].get<double>(),
                100.0 * result["backend_idle_fraction"].get<double>());
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "asynchronous scheduling %s: %lld of %lld steps launched "
                "before the previous step's tokens were known\n",
                config.asyncScheduling ? "on" : "off",
                static_cast<long long>(stats.numAsyncSteps),
                static_cast<long long>(stats.numSteps));
  std::cout << line;
  if (stats.deviceIdleSeconds >= 0) {
    std::snprintf(line, sizeof(line),
                  "device idle between forward calls %.1f%% of the run "
                  "(%.3f s, device timestamps)\n",
                  100.0 * stats.deviceIdleSeconds / duration,
                  stats.deviceIdleSeconds);
    std::cout << line;
  }
  if (stats.numDraftTokens) {
    std::snprintf(line, sizeof(line), "acceptance rate %.3f\n",
                  result["acceptance_rate"].get<double>());
    std::cout << line;
  }
  if (args.has("--profile"))
    std::cout << "\ndevice time per forward call, by step (eager, an event "
                 "per step):\n"
              << stepProfileReport(*backend);
  std::cout.flush();
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// logits
//===----------------------------------------------------------------------===//

Status runLogits(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL"));
  if (!args.has("--token-ids"))
    return invalidArgument("logits needs --token-ids 1,2,3");
  if (!args.has("-o"))
    return invalidArgument("logits needs -o OUT.safetensors");
  INFER_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                         parseIdList(*args.get("--token-ids")));
  INFER_ASSIGN_OR_RETURN(int threads, threadsOption(args));
  const std::string backendName = args.get("--backend", "cpu");
  INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(args.positional[0]));
  const EngineConfig config = engineConfigFor(model.artifact);
  int64_t blocks =
      (static_cast<int64_t>(tokens.size()) + config.blockSize - 1) /
      config.blockSize;
  // A streaming artifact's logits are those decoding sees, one token per
  // forward call with the cache evicting what falls out of the window.
  if (config.streaming.enabled())
    blocks = std::min(
        blocks, streamingBlockBound(config.streaming, config.blockSize, 1));
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                         createBackend(model.artifact, backendName,
                                       weightLoadOptions(args), blocks,
                                       threads));
  INFER_ASSIGN_OR_RETURN(
      Logits logits, config.streaming.enabled()
                         ? streamingLogits(*backend, config.blockSize,
                                           config.streaming, tokens)
                         : promptLogits(*backend, config.blockSize, tokens));
  safetensors::TensorToWrite tensor;
  tensor.name = "logits";
  tensor.dtype = safetensors::DType::kF32;
  tensor.shape = {logits.rows, logits.vocab};
  tensor.bytes =
      std::string_view(reinterpret_cast<const char *>(logits.data.data()),
                       logits.data.size() * sizeof(float));
  return safetensors::writeFile(*args.get("-o"), {tensor});
}

//===----------------------------------------------------------------------===//
// tokenize, inspect
//===----------------------------------------------------------------------===//

Status runTokenize(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "MODEL_OR_TOKENIZER_DIR"));
  if (args.has("--text") == args.has("--decode"))
    return invalidArgument("tokenize needs exactly one of --text or --decode");
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                         loadTokenizer(args.positional[0]));
  if (args.has("--decode")) {
    INFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                           parseIdList(*args.get("--decode")));
    std::string text =
        tokenizer->decode(ids, args.has("--skip-special-tokens"));
    if (args.has("--json"))
      std::cout << dumpLine(json{{"text", text}}) << "\n";
    else
      std::cout << text << "\n";
    return Status::ok();
  }
  INFER_ASSIGN_OR_RETURN(
      std::vector<int32_t> ids,
      tokenizer->tryEncode(*args.get("--text"),
                           !args.has("--no-special-tokens")));
  if (args.has("--json")) {
    std::cout << dumpLine(json{{"ids", ids}}) << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i)
      std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  }
  return Status::ok();
}

Status runInspect(const ParsedArgs &args) {
  INFER_RETURN_IF_ERROR(expectPositional(args, 1, "ARTIFACT_DIR"));
  INFER_ASSIGN_OR_RETURN(Artifact artifact, loadArtifact(args.positional[0]));
  const plan::Manifest &m = artifact.manifest;
  const plan::ModelInfo &mi = m.model;
  std::ostringstream out;
  out << "artifact: " << artifact.dir << "\n"
      << "format: manifest v" << m.formatVersion << ", plan v"
      << artifact.plan.formatVersion << ", infer " << m.inferVersion << "\n"
      << "model: " << mi.architecture << ", vocab " << mi.vocabSize
      << ", hidden " << mi.hiddenSize << ", " << mi.numLayers << " layers, "
      << mi.numHeads << " heads / " << mi.numKVHeads << " kv heads, head_dim "
      << mi.headDim << ", max positions " << mi.maxPositionEmbeddings << "\n"
      << "tokens: bos "
      << (mi.bosTokenId ? std::to_string(*mi.bosTokenId) : "-") << ", eos [";
  for (size_t i = 0; i < mi.eosTokenIds.size(); ++i)
    out << (i ? ", " : "") << mi.eosTokenIds[i];
  out << "], pad " << (mi.padTokenId ? std::to_string(*mi.padTokenId) : "-")
      << "\n";
  out << "targets:";
  for (const std::string &t : m.targets)
    out << " " << t;
  out << "\ncompile options:";
  for (const auto &[k, v] : m.compileOptions)
    out << " " << k << "=" << v;
  const plan::KVCacheLayout &kv = m.kvCache;
  out << "\nkv cache: " << kv.layout << ", " << kv.numLayers << " layers, "
      << kv.numKVHeads << " kv heads, head_dim " << kv.headDim
      << ", block_size " << kv.blockSize << ", " << plan::dtypeName(kv.dtype)
      << " (" << kv.blockElements() * 4 << " bytes per block)\n";
  if (kv.isStreaming())
    out << "streaming: " << kv.sinkTokens << " sink tokens, window "
        << kv.window << "\n";
  out << "weights: " << (m.weightsDir.empty() ? "-" : m.weightsDir) << "\n";
  for (const plan::WeightFile &f : m.weightFiles)
    out << "  " << f.name << " (" << f.size << " bytes, header "
        << f.headerFingerprint << ")\n";
  for (const plan::PackedWeightFile &f : m.packedWeights)
    out << "packed weights: rank " << f.rank << " " << f.file << " (" << f.size
        << " bytes, " << f.hash << ")\n";
  if (!m.deployConfig.empty())
    out << "deploy config: " << m.deployConfig << "\n";
  out << "tokenizer: " << (m.tokenizerFile.empty() ? "-" : m.tokenizerFile)
      << "\n";
  for (const plan::RankPlan &rank : artifact.plan.ranks) {
    std::map<std::string, int> ops;
    int params = 0;
    for (const plan::Step &s : rank.steps)
      ++ops[s.op];
    for (const plan::Value &v : rank.values)
      params += v.kind == plan::ValueKind::kParam;
    out << "plan rank " << rank.rank << ": " << rank.values.size()
        << " values (" << params << " params), " << rank.steps.size()
        << " steps:";
    for (const auto &[op, count] : ops)
      out << " " << op << " x" << count;
    out << "\n";
  }
  std::cout << out.str();
  // Bounded: a program.mlir linked to /dev/zero would stream forever.
  StatusOr<std::string> program = readBoundedFile(artifact.path(m.programFile));
  if (!program.isOk())
    return program.status().withContext("cannot read the program");
  std::cout << "\n// " << m.programFile << "\n" << *program;
  std::cout.flush();
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

/// `options` and the flags that set deploy-config keys.
std::vector<OptionSpec> withDeployConfigFlags(std::vector<OptionSpec> options) {
  const std::vector<OptionSpec> flags = deployConfigFlags();
  options.insert(options.end(), flags.begin(), flags.end());
  return options;
}

/// `options` and the speculative-decoding options.
std::vector<OptionSpec> withSpeculation(std::vector<OptionSpec> options) {
  const std::vector<OptionSpec> speculation = speculationOptions();
  options.insert(options.end(), speculation.begin(), speculation.end());
  return options;
}

std::vector<Command> commands() {
  const OptionSpec output{"-o", true, "--output"};
  const OptionSpec backend{"--backend"};
  const OptionSpec weights{"--weights"};
  const OptionSpec threads{"--threads"};
  const OptionSpec skipWeightCheck{"--skip-weight-check", false};
  return {
      {"import",
       "usage: infer import MODEL_DIR [-o FILE.mlir]\n\n"
       "Imports a Hugging Face model directory and prints the model-level\n"
       "`infer` IR to FILE.mlir (default: stdout).\n",
       {output},
       runImport},
      {"compile",
       "usage: infer compile MODEL_DIR -o ARTIFACT_DIR [--target cpu|cuda]\n"
       "                     [--cuda-arch sm_90a]\n"
       "                     [--dtype auto|bfloat16|float16|float32]\n"
       "                     [--block-size 16] [--no-fuse] [--no-plan-memory]\n"
       "                     [--tp 1] [--sink-tokens 4 --window N]\n"
       "                     [--quant fp8 [--quant-granularity per-tensor]]\n"
       "                     [--kv-cache-dtype auto|fp8_e5m2|fp8_e4m3]\n"
       "                     [--estimate-memory [--gpu-memory 80GiB]]\n"
       "                     [--mlir-print-ir-after-all]\n"
       "                     [--pack-weights] [--config deploy.json]\n\n"
       "Compiles a Hugging Face model directory into an artifact directory.\n"
       "--target cuda also generates one CUDA kernel per fused elementwise\n"
       "region (kernels/fused.cu), compiled with NVRTC to a cubin for\n"
       "--cuda-arch (default sm_90a) and to PTX for other GPUs; no GPU is\n"
       "needed. Artifacts of either target run on both backends (the cuda\n"
       "backend interprets fused regions that have no generated kernel).\n"
       "--dtype is the element type of activations, weights and the KV cache\n"
       "(infer-assign-precision): auto is the checkpoint's torch_dtype for\n"
       "--target cuda and float32 for --target cpu; logits stay float32.\n"
       "--no-fuse leaves out infer-fuse (merged projections, fused norms,\n"
       "activations and cache writes, elementwise regions).\n"
       "--no-plan-memory gives every activation its own memory instead of a\n"
       "place in one reused workspace (infer-plan-memory).\n"
       "--tp N splits the model over N tensor-parallel ranks (one SPMD plan;\n"
       "generate and logits run every rank, one thread each on the cpu\n"
       "backend).\n"
       "--window N (> 0) keeps attention sinks, the first --sink-tokens\n"
       "tokens (default 4, rounded up to whole blocks), and at least the N\n"
       "most recent tokens of each sequence in the KV cache (StreamingLLM,\n"
       "infer-streaming-kv): memory stays bounded and generation runs past\n"
       "the model's max_position_embeddings.\n"
       "--quant fp8 stores every linear and LM-head weight as FP8 E4M3 with\n"
       "scales computed from the checkpoint at load, one per tensor or per\n"
       "output row (--quant-granularity per-channel); infer-quantize-fp8.\n"
       "--kv-cache-dtype fp8_e5m2 stores the KV cache as FP8 E5M2, fp8_e4m3\n"
       "as FP8 E4M3 with an fp32 scale per token and head (both backends).\n"
       "--mlir-print-ir-after-all prints the module to stderr after every\n"
       "pass of the pipeline.\n"
       "--pack-weights packs the params into the artifact (see infer pack).\n"
       "--fuse, --plan-memory and --no-pack-weights undo a config's false,\n"
       "false and true (the last of a flag and its inverse wins).\n"
       "--config FILE reads these options from a JSON object keyed by the\n"
       "flags' names in snake_case (target, cuda_arch, dtype, block_size,\n"
       "fuse, plan_memory, tp, quant, quant_granularity, kv_cache_dtype,\n"
       "sink_tokens, window, pack_weights); flags override it, an unknown\n"
       "key is an error, and the manifest records the result (deploy_config,\n"
       "shown by infer inspect).\n"
       "--estimate-memory prints, per rank, the weights, activations and KV\n"
       "bytes per token, and how many tokens and full-context sequences fit\n"
       "in --gpu-memory (default 80GiB, 90% usable), with the --dtype and\n"
       "--kv-cache-dtype the artifact was compiled for.\n",
       withDeployConfigFlags({output,
                              {"--config"},
                              {"--estimate-memory", false},
                              {"--mlir-print-ir-after-all", false},
                              {"--gpu-memory"}}),
       runCompile},
      {"pack",
       "usage: infer pack ARTIFACT_DIR [--weights DIR] [--gpu]\n\n"
       "Writes each rank's params after their transforms (tensor-parallel\n"
       "slices, merged projections, dtype, fp8 codes and scales) into\n"
       "ARTIFACT_DIR/weights/rank<R>.safetensors, in the layout the backends\n"
       "upload as is, and records their sizes and content hashes (xxHash) in\n"
       "the manifest: the artifact then runs without the checkpoint, and\n"
       "loads by mapping the files. The checkpoint is read from --weights\n"
       "DIR or the manifest's weights directory. Needs no compiler, so a\n"
       "GPU host packs artifacts compiled elsewhere (`infer compile\n"
       "--pack-weights` does the same right after compiling).\n"
       "--gpu quantizes fp8 weights on the GPU (the same bytes as the host's\n"
       "quantizer, several times faster).\n",
       {weights, {"--gpu", false}},
       runPack},
      {"generate",
       "usage: infer generate MODEL (--prompt TEXT | --token-ids 1,2,3)...\n"
       "           [--max-new-tokens 32] [--temperature 0] [--seed 0]\n"
       "           [--ignore-eos] [--backend cpu|cuda] [--json]\n"
       "           [--weights DIR] [--skip-weight-check] [--threads N]\n"
       "           [--draft MODEL | --ngram-speculation [--ngram-max 4]\n"
       "            [--ngram-min 1]] [--num-speculative-tokens 4]\n"
       "           [--adaptive-speculation] [--no-async-scheduling]\n\n"
       "MODEL is an artifact directory or a Hugging Face model directory\n"
       "(compiled on the fly). Every --prompt / --token-ids is one sequence;\n"
       "all run in one batch. --prompt text is encoded with the special "
       "tokens\n"
       "of the tokenizer's post-processor (BOS). --temperature 0 (the "
       "default)\n"
       "is greedy; T > 0 samples softmax(logits / T) with seed S for the "
       "first\n"
       "sequence, S+1 for the second, ... --ignore-eos masks EOS ids so every\n"
       "sequence produces --max-new-tokens tokens. Prints each sequence's "
       "text\n"
       "(token ids when the artifact has no tokenizer), or with --json one\n"
       "line per sequence: {\"prompt_token_ids\", \"output_token_ids\",\n"
       "\"text\", \"finish_reason\"}. --weights overrides the weights "
       "directory.\n"
       "A packed artifact (infer pack) maps its weight files and checks\n"
       "their content hashes (--skip-weight-check skips that, for trusted\n"
       "storage); --weights DIR reads the checkpoint instead. The engine\n"
       "schedules step N+1 while the device runs step N (asynchronous\n"
       "scheduling; --no-async-scheduling waits for each step's tokens).\n\n"
       "Speculative decoding: --draft MODEL (an artifact or model directory\n"
       "with the target's vocabulary) or --ngram-speculation (prompt lookup\n"
       "of the last n tokens, n from --ngram-max down to --ngram-min) "
       "proposes\n"
       "--num-speculative-tokens K tokens per step, verified in one target\n"
       "forward: greedy output is unchanged, sampled output follows the\n"
       "target distribution. --adaptive-speculation picks k <= K per step\n"
       "from the measured acceptance and the running requests. With --json\n"
       "each line also has \"acceptance_rate\": accepted per judged draft\n"
       "token (drafts after a rejection are not judged).\n",
       withSpeculation({{"--prompt"},
                        {"--token-ids"},
                        {"--max-new-tokens"},
                        {"--temperature"},
                        {"--seed"},
                        {"--ignore-eos", false},
                        {"--no-async-scheduling", false},
                        {"--json", false},
                        backend,
                        weights,
                        skipWeightCheck,
                        threads}),
       runGenerate},
      {"bench",
       "usage: infer bench MODEL [--backend cpu|cuda] [--input-len 128]\n"
       "           [--output-len 128] [--num-prompts 64] [--request-rate inf]\n"
       "           [--seed 0] [--max-num-seqs auto|N]\n"
       "           [--max-num-batched-tokens auto|N] [--num-blocks N]\n"
       "           [--no-prefix-caching] [--no-async-scheduling] [--json]\n"
       "           [--profile] [--weights DIR] [--skip-weight-check]\n"
       "           [--gpu-memory-utilization F] [--threads N]\n"
       "           [--draft MODEL | --ngram-speculation]\n"
       "           [--num-speculative-tokens 4] [--adaptive-speculation]\n"
       "       infer bench [MODEL] --base-url URL [--max-concurrency N]\n"
       "           [--goodput ttft:MS,tpot:MS] [--vocab-size V] ...\n\n"
       "Runs --num-prompts requests of --input-len random tokens (seeded by\n"
       "--seed) through the engine, each generating exactly --output-len\n"
       "tokens. --request-rate R spaces arrivals as a Poisson process of R\n"
       "requests per second (inf: all at once). Prints throughput (req/s,\n"
       "output and total tok/s), TTFT, TPOT and ITL (mean, p50, p99), engine\n"
       "counters, the engine's host work per step and the share of the run\n"
       "the backend sat idle (with asynchronous scheduling, the default, the\n"
       "host works while the device runs: the device's idle time between\n"
       "forward calls, where the backend measures it; --no-async-scheduling\n"
       "waits for each step's tokens before the next is scheduled), and, with\n"
       "speculative decoding, the acceptance\n"
       "rate; --json prints one line with the same fields. On cuda the KV\n"
       "pool takes --gpu-memory-utilization F (default 0.9) of the device\n"
       "memory free after the weights (preempting when it runs out); on cpu,\n"
       "and with --draft, it holds min(N, max-num-seqs) whole requests (auto:\n"
       "up to 1024); --num-blocks says otherwise. --max-num-seqs auto (the\n"
       "default) runs as many sequences as the pool holds whole requests, up\n"
       "to 1024;\n"
       "--max-num-batched-tokens auto is 2048 on cpu, 8192 on cuda, 16384\n"
       "on a GPU of 70 GiB or more (vLLM's offline default there). A\n"
       "progress bar goes to stderr when it is a terminal. Speculative\n"
       "decoding options are generate's; acceptance_rate is then accepted per\n"
       "judged draft token. --profile (one-GPU cuda) runs every forward call\n"
       "eagerly with a CUDA event per step and prints the device time per\n"
       "call by step (op, GEMM weight shape): where a workload's time goes,\n"
       "not its speed.\n\n"
       "--base-url URL (http://127.0.0.1:8000, /v1 optional) benchmarks a\n"
       "running OpenAI-compatible server instead: the same prompts go out as\n"
       "streaming completions, --request-rate spaces their arrivals and\n"
       "--max-concurrency N bounds those in flight (0: unbounded); MODEL (or\n"
       "--vocab-size V) gives the range of the prompt ids, GET /v1/models\n"
       "the model name (or --served-model-name). Prints the same metrics\n"
       "plus end-to-end latency and, with --goodput ttft:MS,tpot:MS,e2el:MS,\n"
       "the requests per second that meet every SLO.\n",
       withSpeculation({{"--base-url"},
                        {"--max-concurrency"},
                        {"--goodput"},
                        {"--vocab-size"},
                        {"--served-model-name"},
                        {"--input-len"},
                        {"--output-len"},
                        {"--num-prompts"},
                        {"--request-rate"},
                        {"--seed"},
                        {"--max-num-seqs"},
                        {"--max-num-batched-tokens"},
                        {"--num-blocks"},
                        {"--gpu-memory-utilization"},
                        {"--no-prefix-caching", false},
                        {"--no-async-scheduling", false},
                        {"--json", false},
                        {"--profile", false},
                        backend,
                        weights,
                        skipWeightCheck,
                        threads}),
       runBench},
      {"serve", kServeHelp, serveOptions(), runServe},
      {"logits",
       "usage: infer logits MODEL --token-ids 1,2,3 -o OUT.safetensors\n"
       "           [--backend cpu|cuda] [--weights DIR] [--skip-weight-check]\n"
       "           [--threads N]\n\n"
       "Writes the fp32 logits of every position, tensor \"logits\" [T, "
       "vocab].\n",
       {{"--token-ids"}, output, backend, weights, skipWeightCheck, threads},
       runLogits},
      {"tokenize",
       "usage: infer tokenize MODEL_OR_TOKENIZER_DIR --text TEXT [--json]\n"
       "                      [--no-special-tokens]\n"
       "       infer tokenize MODEL_OR_TOKENIZER_DIR --decode 1,2,3 [--json]\n"
       "                      [--skip-special-tokens]\n\n"
       "Encodes TEXT with add_special_tokens=true (HF's default) and prints\n"
       "the ids, or {\"ids\": [...]} with --json; --decode prints the text of\n"
       "ids (special tokens kept unless --skip-special-tokens, like HF).\n",
       {{"--text"},
        {"--decode"},
        {"--json", false},
        {"--no-special-tokens", false},
        {"--skip-special-tokens", false}},
       runTokenize},
      {"inspect",
       "usage: infer inspect ARTIFACT_DIR\n\n"
       "Prints the manifest summary, the plan's step counts and the program.\n",
       {},
       runInspect},
  };
}

int runMain(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" ||
      args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  for (const Command &command : commands()) {
    if (args[0] != command.name)
      continue;
    StatusOr<ParsedArgs> parsed =
        parseArgs(std::vector<std::string>(args.begin() + 1, args.end()),
                  command.options);
    if (!parsed.isOk()) {
      std::cerr << "infer " << command.name
                << ": error: " << parsed.status().message() << "\n";
      return 1;
    }
    if (parsed->help) {
      std::cout << command.help;
      return 0;
    }
    Status status = command.run(*parsed);
    if (!status.isOk()) {
      std::cerr << "infer " << command.name << ": error: " << status.message()
                << "\n";
      return 1;
    }
    return 0;
  }
  std::cerr << "infer: error: unknown command '" << args[0]
            << "' (see infer --help)\n";
  return 1;
}

} // namespace
} // namespace infer::tool

int main(int argc, char **argv) {
  try {
    // Under mpirun / srun, ranks other than 0 follow rank 0's backend.
    return infer::tool::runUnderLauncher(
        [&] { return infer::tool::runMain(argc, argv); });
  } catch (const std::exception &e) {
    std::cerr << "infer: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "infer: internal error\n";
  }
  return 1;
}
