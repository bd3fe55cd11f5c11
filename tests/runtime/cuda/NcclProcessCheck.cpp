//===- NcclProcessCheck.cpp - A tensor-parallel group of processes, no MPI ===//
//
// For GPU hosts without an MPI installation: proves the multi-process NCCL
// rendezvous (one process per rank, rank r on GPU r, ncclCommInitRank with
// an id made by rank 0) by passing the id through a file instead of MPI:
//
//   rank 0: ncclGetUniqueId ─▶ FILE.tmp ─▶ rename FILE ──┐
//   rank r: poll FILE (deadline) ◀────────────────────────┘
//   every rank: joinNcclGroup(id, r, n, GPU r) ─▶ CudaBackend ─▶ Engine
//
// Every rank runs its own Engine on the same requests: greedy decoding on
// the same gathered logits makes the same choices, so every rank schedules
// the same steps and the collectives meet (what followRankZero achieves
// over MPI by sending rank 0's batches). `--mode threads` runs the same
// loop on the one-process thread-per-rank backend, for comparison. Rank 0
// prints one JSON line per request (as `infer generate --json`) and, for
// each B of --batches, a table row: mode, batch, context, decode ms per
// step, tokens/s, decode steps (engine steps, host work included).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/engine/Artifact.h"
#include "runtime/engine/Engine.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

namespace {

using namespace infer;

struct Options {
  std::string artifact;
  std::string weights;
  std::string mode = "process";
  int rank = 0;
  int size = 2;
  std::string idFile;
  std::vector<std::vector<int32_t>> prompts;
  int64_t maxNewTokens = 16;
  std::vector<int32_t> batches;
  int64_t context = 128;
};

StatusOr<std::vector<int32_t>> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    char *end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      return invalidArgument("bad token id '" + item + "'");
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

StatusOr<Options> parse(int argc, char **argv) {
  Options o;
  if (argc < 2)
    return invalidArgument(
        "usage: infer-nccl-process-check ARTIFACT --weights DIR "
        "[--mode process|threads] [--rank R --size N --id-file FILE] "
        "(--token-ids 1,2,3 ... | --batches 1,32 [--context C]) "
        "[--max-new-tokens M]");
  o.artifact = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      return invalidArgument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--weights")
      o.weights = value;
    else if (flag == "--mode")
      o.mode = value;
    else if (flag == "--rank")
      o.rank = std::atoi(value.c_str());
    else if (flag == "--size")
      o.size = std::atoi(value.c_str());
    else if (flag == "--id-file")
      o.idFile = value;
    else if (flag == "--max-new-tokens")
      o.maxNewTokens = std::atoll(value.c_str());
    else if (flag == "--batches") {
      INFER_ASSIGN_OR_RETURN(o.batches, parseIds(value));
    } else if (flag == "--context")
      o.context = std::atoll(value.c_str());
    else if (flag == "--token-ids") {
      INFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parseIds(value));
      o.prompts.push_back(std::move(ids));
    } else
      return invalidArgument("unknown option " + flag);
  }
  if (o.mode != "process" && o.mode != "threads")
    return invalidArgument("--mode must be process or threads");
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return invalidArgument("--rank must be in [0, --size)");
  if (o.mode == "process" && o.idFile.empty())
    return invalidArgument("--mode process needs --id-file");
  if (o.prompts.empty() == o.batches.empty())
    return invalidArgument("give --token-ids or --batches");
  for (int32_t b : o.batches)
    if (b < 1)
      return invalidArgument("--batches must be positive");
  return o;
}

/// Rank 0 writes the id (atomically, by rename); the others wait for it.
StatusOr<cuda::NcclUniqueId> exchangeId(const Options &o) {
  if (o.rank == 0) {
    INFER_ASSIGN_OR_RETURN(cuda::NcclUniqueId id, cuda::newNcclUniqueId());
    const std::string tmp = o.idFile + ".tmp";
    std::ofstream(tmp, std::ios::binary)
        .write(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size()));
    std::filesystem::rename(tmp, o.idFile);
    return id;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(o.idFile, std::ios::binary);
    cuda::NcclUniqueId id;
    if (in &&
        in.read(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size())))
      return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return internalError("rank 0 wrote no NCCL id to " + o.idFile +
                       " within 120 s");
}

/// Random prompts of `context` tokens, the same on every rank.
std::vector<std::vector<int32_t>> randomPrompts(int64_t count, int64_t context,
                                                int64_t vocab) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(
      3, static_cast<int32_t>(vocab > 3 ? vocab - 1 : 1000));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(count));
  for (std::vector<int32_t> &p : prompts)
    for (int64_t t = 0; t < context; ++t)
      p.push_back(token(rng));
  return prompts;
}

/// Runs `prompts` to completion (greedy, ignore_eos) on a fresh engine;
/// the outputs, and the seconds and steps after every request had its first
/// token (the decode steps).
struct Run {
  std::vector<std::vector<int32_t>> outputs;
  double decodeSeconds = 0.0;
  int64_t decodeSteps = 0;
};
StatusOr<Run> runPrompts(Backend &backend, EngineConfig config,
                         const std::vector<std::vector<int32_t>> &prompts,
                         int64_t maxNewTokens) {
  config.scheduler.maxNumSeqs = static_cast<int64_t>(prompts.size());
  config.scheduler.maxNumBatchedTokens = 0;
  for (const std::vector<int32_t> &p : prompts)
    config.scheduler.maxNumBatchedTokens += static_cast<int64_t>(p.size());
  Engine engine(backend, config);
  SamplingParams sampling;
  sampling.maxNewTokens = maxNewTokens;
  sampling.ignoreEos = true;
  std::vector<RequestId> ids;
  for (const std::vector<int32_t> &p : prompts) {
    INFER_ASSIGN_OR_RETURN(RequestId id, engine.addRequest(p, sampling));
    ids.push_back(id);
  }
  std::map<RequestId, std::vector<int32_t>> outputs;
  std::map<RequestId, bool> started;
  Run run;
  std::chrono::steady_clock::time_point decodeStart;
  while (engine.hasUnfinished()) {
    const bool decoding = started.size() == prompts.size();
    INFER_ASSIGN_OR_RETURN(std::vector<RequestOutput> step, engine.step());
    run.decodeSteps += decoding;
    for (const RequestOutput &out : step) {
      if (!out.newTokenIds.empty() && !started.count(out.id)) {
        started[out.id] = true;
        if (started.size() == prompts.size())
          decodeStart = std::chrono::steady_clock::now();
      }
      if (out.finished)
        outputs[out.id] = out.outputTokenIds;
    }
  }
  run.decodeSeconds = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - decodeStart)
                          .count();
  for (RequestId id : ids)
    run.outputs.push_back(outputs[id]);
  return run;
}

Status run(const Options &o) {
  INFER_ASSIGN_OR_RETURN(Artifact artifact, loadArtifact(o.artifact));
  const plan::Plan &plan = artifact.plan;
  if (plan.numRanks != o.size)
    return invalidArgument("the artifact has " + std::to_string(plan.numRanks) +
                           " ranks, not " + std::to_string(o.size));
  const EngineConfig config = engineConfigFor(artifact);
  // Every rank's pool is the same size, for the same schedule: enough for
  // the largest workload.
  auto blocksFor = [&](int64_t count, int64_t promptLen) {
    return count * ((promptLen + o.maxNewTokens + config.blockSize - 1) /
                        config.blockSize +
                    1);
  };
  int64_t blocks = 0;
  for (const std::vector<int32_t> &p : o.prompts)
    blocks += blocksFor(1, static_cast<int64_t>(p.size()));
  for (int32_t b : o.batches)
    blocks = std::max(blocks, blocksFor(b, o.context));

  cuda::CudaBackendOptions options;
  options.numBlocks = blocks;
  INFER_ASSIGN_OR_RETURN(
      options.kernels,
      cuda::readKernelImages(artifact.dir, artifact.manifest.kernels));
  std::unique_ptr<cuda::NcclCommunicator> comm;
  std::unique_ptr<Backend> backend;
  if (o.mode == "threads") {
    std::vector<ParamTable> params;
    for (int r = 0; r < o.size; ++r) {
      INFER_ASSIGN_OR_RETURN(ParamTable p, loadParams(artifact, r, o.weights));
      params.push_back(std::move(p));
    }
    INFER_ASSIGN_OR_RETURN(
        backend, cuda::createCudaTensorParallelBackend(plan, params, options));
  } else {
    INFER_ASSIGN_OR_RETURN(ParamTable params,
                           loadParams(artifact, o.rank, o.weights));
    INFER_ASSIGN_OR_RETURN(cuda::NcclUniqueId id, exchangeId(o));
    INFER_ASSIGN_OR_RETURN(comm,
                           cuda::joinNcclGroup(id, o.rank, o.size, o.rank));
    options.device = o.rank;
    options.communicator = comm.get();
    INFER_ASSIGN_OR_RETURN(
        backend, cuda::createCudaBackend(plan, o.rank, params, options));
  }

  if (!o.prompts.empty()) {
    INFER_ASSIGN_OR_RETURN(
        Run run, runPrompts(*backend, config, o.prompts, o.maxNewTokens));
    for (size_t i = 0; o.rank == 0 && i < o.prompts.size(); ++i) {
      std::printf("{\"prompt_token_ids\":[");
      for (size_t k = 0; k < o.prompts[i].size(); ++k)
        std::printf("%s%d", k ? "," : "", o.prompts[i][k]);
      std::printf("],\"output_token_ids\":[");
      for (size_t k = 0; k < run.outputs[i].size(); ++k)
        std::printf("%s%d", k ? "," : "", run.outputs[i][k]);
      std::printf("]}\n");
    }
  }
  for (int32_t b : o.batches) {
    INFER_ASSIGN_OR_RETURN(
        Run run, runPrompts(*backend, config,
                            randomPrompts(b, o.context, config.vocabSize),
                            o.maxNewTokens));
    if (o.rank == 0)
      std::printf(
          "| %s | %d | %lld | %.3f | %.0f | %lld |\n", o.mode.c_str(), b,
          static_cast<long long>(o.context),
          run.decodeSteps ? 1e3 * run.decodeSeconds / run.decodeSteps : 0.0,
          run.decodeSteps ? b * run.decodeSteps / run.decodeSeconds : 0.0,
          static_cast<long long>(run.decodeSteps));
  }
  std::fflush(stdout);
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  StatusOr<Options> options = parse(argc, argv);
  if (!options.isOk()) {
    std::cerr << options.status().message() << "\n";
    return 2;
  }
  Status status = run(*options);
  if (!status.isOk()) {
    std::cerr << "rank " << options->rank << ": error: " << status.message()
              << "\n";
    return 1;
  }
  return 0;
}
