//===- CudaBench.cpp - Decode and prefill sweeps of the CUDA backend ------===//
//
//   infer-cuda-bench (ARTIFACT [--weights DIR] | MODEL_DIR)
//       [--decode-batches 1,8,32] [--context 128] [--steps 32]
//       [--prefill 128,512,2048] [--repeats 3] [--graph-tokens 1024]
//       [--sample greedy] [--long-context 1:8192,1:32768] [--profile]
//       [--rewind]
//
// Times forward calls of the CUDA backend alone (no scheduler, no sampling;
// with --sample greedy, forwardSample calls that choose each row's token on
// the device and copy back only the ids, instead of the logits):
//   decode  B sequences that each hold `context` cached tokens advance by one
//           token per call; the median call time, B / median tokens/s, and
//           the memory roofline of one call: (bytes of the weights a step
//           reads + bytes of the KV cache it reads) / device copy bandwidth
//           measured in the same run. --long-context B:C,... adds decode
//           rows of B sequences of context C each after the sweep (the
//           pool then holds the largest B x C as well).
//   prefill one sequence of N tokens in one call (time to first token
//           without queueing); the FLOP roofline: (2 * N * matrix params +
//           causal attention 2 * layers * heads * head_dim * N^2) / peak.
//   gemms   (--gemms 1,16; with --no-decode and no --prefill the weights
//           are not loaded) every distinct weight shape (and dtype) of the
//           plan's linear and logits steps through the backend's routed path
//           at M rows (Gemm::linear: the skinny kernels at small M, else the
//           fp32 -> bf16 conversion and cuBLASLt, or for fp8 weights the
//           per-token E4M3 quantization and fp8 cuBLASLt): achieved
//           bandwidth against the measured copy bandwidth, the shapes'
//           summed time per forward call against the weight roofline, and
//           each candidate alone for comparison: the CUDA-core (gemv) and
//           tensor-core (gemv-mma) skinny kernels where they apply (-1 where
//           not), cuBLASLt on bf16 operands of the shape and, for fp8
//           weights, fp8 cuBLASLt with its quantization (Gemm::runFp8; the
//           table's last line says where it applied the scales) and that
//           quantization kernel alone.
// --profile times every step with CUDA events (eager calls, no graphs:
// slower than the plain runs) and prints after each decode point and prompt
// size the time per forward call by op, GEMMs by weight shape
// (stepProfileReport); the warm-up calls are left out.
// Each figure is the median over `repeats` runs (each run's median of its
// steps for decode); the runs are printed too. A decode point's runs follow
// each other without rewinding: after two warm-up steps, run r's steps read
// context + 3 + r * steps keys and up, so the runs climb with the KV they
// read (Llama-3-8B at batch 256: ~0.4 ms a run of 32 steps), the median is
// the middle run's, the roofline is at the mean context, and the last
// column gives the contexts the runs covered. Compare decode figures at
// equal --repeats and --steps. --rewind starts every run at the first one's
// context instead (the sequences' later slots written again), so the runs
// are samples of one step and their median and spread are the noise's. An
// ARTIFACT is what `infer compile` wrote (the fused pipeline users run); a
// MODEL_DIR is built into the unfused test plan
// (tests/runtime/support/LlamaPlan.h). A tensor-parallel artifact (`infer
// compile --tp N`) runs on N GPUs; its rooflines are per rank (each GPU reads
// its shard in parallel).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/engine/Artifact.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace infer;

namespace {

/// bf16 GEMM ceiling of an H100 measured with cuBLASLt (DESIGN.md).
constexpr double kPeakFlops = 780e12;

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "infer-cuda-bench: error: %s\n", message.c_str());
  std::exit(1);
}

std::vector<int64_t> parseList(const char *text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    if (!item.empty())
      values.push_back(std::atoll(item.c_str()));
  for (int64_t value : values)
    if (value <= 0)
      die(std::string("not a list of positive integers: ") + text);
  return values;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double copyBandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess ||
      cudaMalloc(&b, bytes) != cudaSuccess)
    die("cannot allocate 2 GiB to measure the copy bandwidth");
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i >= 2)
      ms.push_back(t);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (median(ms) * 1e-3); // read + write
}

struct Options {
  std::string model;
  std::string weights;
  std::vector<int64_t> decodeBatches = {1, 8, 32};
  std::vector<int64_t> prefill;
  std::vector<int64_t> gemmRows;
  int64_t context = 128;
  /// Extra decode points (batch, context) after the --decode-batches sweep.
  std::vector<std::pair<int64_t, int64_t>> longContext;
  int64_t steps = 32;
  int64_t repeats = 3;
  int64_t graphTokens = 1024;
  /// Time forwardSample (greedy on the device) instead of forward.
  bool sampleGreedy = false;
  /// Per-step timing (CudaBackendOptions::profileSteps).
  bool profile = false;
  /// Every decode run starts at the first run's context.
  bool rewind = false;
};

Options parseArgs(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc)
        die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--weights")
      options.weights = next();
    else if (arg == "--decode-batches")
      options.decodeBatches = parseList(next());
    else if (arg == "--prefill")
      options.prefill = parseList(next());
    else if (arg == "--gemms")
      options.gemmRows = parseList(next());
    else if (arg == "--context")
      options.context = parseList(next()).at(0);
    else if (arg == "--long-context") {
      std::string list = next();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t end = std::min(list.find(',', start), list.size());
        const std::string item = list.substr(start, end - start);
        const size_t colon = item.find(':');
        const long long b = std::atoll(item.substr(0, colon).c_str());
        const long long c = colon == std::string::npos
                                ? 0
                                : std::atoll(item.substr(colon + 1).c_str());
        if (b <= 0 || c <= 0)
          die("--long-context takes BATCH:CONTEXT pairs, not '" + item + "'");
        options.longContext.push_back({b, c});
        start = end + 1;
      }
    } else if (arg == "--steps")
      options.steps = parseList(next()).at(0);
    else if (arg == "--repeats")
      options.repeats = parseList(next()).at(0);
    else if (arg == "--graph-tokens")
      options.graphTokens = std::atoll(next());
    else if (arg == "--profile")
      options.profile = true;
    else if (arg == "--rewind")
      options.rewind = true;
    else if (arg == "--no-decode")
      options.decodeBatches.clear();
    else if (arg == "--sample") {
      const std::string mode = next();
      if (mode != "greedy")
        die("--sample takes 'greedy', not '" + mode + "'");
      options.sampleGreedy = true;
    } else if (!arg.empty() && arg[0] == '-')
      die("unknown option " + arg);
    else if (options.model.empty())
      options.model = arg;
    else
      die("unexpected argument " + arg);
  }
  if (options.model.empty())
    die("usage: infer-cuda-bench (ARTIFACT [--weights DIR] | MODEL_DIR) "
        "[--decode-batches 1,8] [--context N] [--steps N] [--prefill "
        "128,512] [--gemms 1,16] [--repeats N] [--graph-tokens N] "
        "[--no-decode] [--sample greedy] [--long-context B:C,...] "
        "[--profile] [--rewind]");
  return options;
}

/// What one forward call of the model reads and computes.
struct ModelCost {
  /// Bytes of the weights a decode step reads on the device: matrices in
  /// bf16 (fp8: 1 byte + a 4-byte scale per row), vectors in fp32; a table
  /// used only for embedding lookups is not read whole and is left out.
  double weightBytes = 0;
  /// Parameters of the matrices multiplied by every token (FLOPs / 2 / T).
  double matrixParams = 0;
  double kvBytesPerToken = 0;
  int64_t layers = 0, heads = 0, headDim = 0;
};

ModelCost modelCost(const Artifact &artifact) {
  const plan::RankPlan &rank = artifact.plan.ranks.at(0);
  std::set<int> embeddingOnly, used;
  for (const plan::Step &step : rank.steps) {
    for (size_t i = 0; i < step.operands.size(); ++i) {
      const int id = step.operands[i];
      if (rank.values[id].kind != plan::ValueKind::kParam)
        continue;
      if (step.op == "embedding" && i == 0)
        embeddingOnly.insert(id);
      else
        used.insert(id);
    }
  }
  ModelCost cost;
  for (const plan::Value &value : rank.values) {
    if (value.kind != plan::ValueKind::kParam)
      continue;
    double elements = 1;
    for (const plan::Dim &dim : value.shape)
      elements *= double(dim.size);
    const bool matrix = value.shape.size() >= 2;
    if (used.count(value.id)) {
      cost.weightBytes += value.dtype == plan::DType::kF8E4M3
                              ? elements + 4.0 * double(value.shape[0].size)
                              : elements * (matrix ? 2 : 4);
      if (matrix)
        cost.matrixParams += elements;
    }
  }
  const plan::KVCacheLayout &kv = artifact.plan.kvCache;
  cost.kvBytesPerToken =
      double(kv.numLayers) * 2 * kv.numKVHeads * kv.headDim * 2; // bf16 pool
  cost.layers = artifact.manifest.model.numLayers;
  cost.heads = artifact.manifest.model.numHeads;
  cost.headDim = artifact.manifest.model.headDim;
  return cost;
}

class Runner {
public:
  Runner(Backend &backend, int64_t blockSize, int64_t vocab)
      : backend(backend), blockSize(blockSize), rng(1), token(0, vocab - 1) {}

  /// The sequences `seqs` (indices into `lengths`, the tokens each holds)
  /// get `fresh` new tokens each in one forward call; sequence s owns the
  /// blocks s * blocksPerSeq .. (s + 1) * blocksPerSeq - 1. Returns the
  /// call's wall time in ms, the logits' copy to the host included (or,
  /// with sampleGreedy, the sampling and the tokens' copy).
  double step(std::vector<int64_t> &lengths, const std::vector<int64_t> &seqs,
              int64_t fresh, int64_t blocksPerSeq) {
    Batch batch;
    batch.maxBlocksPerSeq = blocksPerSeq;
    batch.queryStartLoc.push_back(0);
    for (int64_t s : seqs) {
      for (int64_t i = 0; i < fresh; ++i) {
        const int64_t pos = lengths[s] + i;
        batch.tokenIds.push_back(token(rng));
        batch.positions.push_back(int32_t(pos));
        const int64_t block = int64_t(s) * blocksPerSeq + pos / blockSize;
        batch.slotMapping.push_back(block * blockSize + pos % blockSize);
      }
      lengths[s] += fresh;
      batch.queryStartLoc.push_back(int32_t(batch.tokenIds.size()));
      batch.contextLens.push_back(int32_t(lengths[s]));
      batch.logitsIndices.push_back(int32_t(batch.tokenIds.size() - 1));
      for (int64_t j = 0; j < blocksPerSeq; ++j)
        batch.blockTables.push_back(int32_t(s * blocksPerSeq + j));
    }
    if (sampleGreedy) {
      SamplingBatch greedy;
      greedy.rows.resize(batch.logitsIndices.size());
      auto t0 = std::chrono::steady_clock::now();
      StatusOr<std::vector<int32_t>> tokens =
          backend.forwardSample(batch, greedy);
      auto t1 = std::chrono::steady_clock::now();
      if (!tokens.isOk())
        die(tokens.status().message());
      return std::chrono::duration<double, std::milli>(t1 - t0).count();
    }
    auto t0 = std::chrono::steady_clock::now();
    StatusOr<Logits> logits = backend.forward(batch);
    auto t1 = std::chrono::steady_clock::now();
    if (!logits.isOk())
      die(logits.status().message());
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }

  bool sampleGreedy = false;

private:
  Backend &backend;
  int64_t blockSize;
  std::mt19937 rng;
  std::uniform_int_distribution<int32_t> token;
};

std::string joined(const std::vector<double> &values) {
  std::string text;
  char buffer[32];
  for (double value : values) {
    std::snprintf(buffer, sizeof(buffer), "%s%.3f", text.empty() ? "" : ", ",
                  value);
    text += buffer;
  }
  return text;
}

/// (N, K, fp8) of every weight a linear, linear_residual or logits step
/// multiplies, with how many steps of one forward call use that shape (timed
/// without the residual).
std::map<std::tuple<int64_t, int64_t, bool>, int>
gemmShapes(const Artifact &artifact) {
  const plan::RankPlan &rank = artifact.plan.ranks.at(0);
  std::map<std::tuple<int64_t, int64_t, bool>, int> shapes;
  for (const plan::Step &step : rank.steps) {
    if ((step.op != "linear" && step.op != "linear_residual" &&
         step.op != "logits") ||
        step.operands.size() < 2)
      continue;
    const plan::Value &w = rank.values[step.operands[1]];
    if (w.shape.size() == 2)
      ++shapes[{w.shape[0].size, w.shape[1].size,
                w.dtype == plan::DType::kF8E4M3}];
  }
  return shapes;
}

#define BENCH_CHECK(expr)                                                      \
  do {                                                                         \
    if ((expr) != cudaSuccess)                                                 \
      die(std::string(#expr) + " failed");                                     \
  } while (0)

/// Median microseconds of `once` over 7 samples of 20 calls, after 3.
template <typename F>
double timeCalls(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop,
                 F once) {
  for (int i = 0; i < 3; ++i)
    once();
  std::vector<double> us;
  constexpr int kPerSample = 20;
  for (int sample = 0; sample < 7; ++sample) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kPerSample; ++i)
      once();
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1e3 / kPerSample);
  }
  return median(us);
}

void benchGemms(const Artifact &artifact, const std::vector<int64_t> &rows,
                double bandwidth, double weightBytes) {
  auto gemm = cuda::Gemm::create(size_t(32) << 20, size_t(64) << 20);
  if (!gemm.isOk())
    die(gemm.status().message());
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  const auto shapes = gemmShapes(artifact);
  std::printf(
      "| M | N x K (uses per call) | weights | path | us | GB/s | %% of "
      "copy bandwidth | gemv us | gemv-mma us | cuBLASLt bf16 us | fp8 "
      "cuBLASLt us | of which quantization us |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::set<std::string> fp8Scalings;
  for (int64_t m : rows) {
    double totalUs = 0, totalCublasUs = 0, totalGemvUs = 0, totalMmaUs = 0,
           totalFp8Us = 0, totalQuantizeUs = 0;
    bool gemvMissing = false, mmaMissing = false, fp8Missing = false;
    for (const auto &[shape, uses] : shapes) {
      const auto [n, k, fp8] = shape;
      __nv_bfloat16 *w = nullptr, *xb = nullptr;
      uint8_t *codes = nullptr;
      float *x = nullptr, *y = nullptr, *scales = nullptr;
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void **>(&w), size_t(n) * k * 2));
      BENCH_CHECK(
          cudaMalloc(reinterpret_cast<void **>(&xb), size_t(m) * k * 2));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void **>(&x), size_t(m) * k * 4));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void **>(&y), size_t(m) * n * 4));
      BENCH_CHECK(cudaMemset(w, 0x3c, size_t(n) * k * 2)); // bf16 ~0.0115
      BENCH_CHECK(cudaMemset(xb, 0x3c, size_t(m) * k * 2));
      BENCH_CHECK(cudaMemset(x, 0x3c, size_t(m) * k * 4)); // fp32 ~0.0115
      cuda::GemmWeight weight;
      if (fp8) {
        BENCH_CHECK(
            cudaMalloc(reinterpret_cast<void **>(&codes), size_t(n) * k));
        BENCH_CHECK(cudaMemset(codes, 0x38, size_t(n) * k)); // E4M3 1.0
        const std::vector<float> host(size_t(n), 0.01f);
        BENCH_CHECK(cudaMalloc(reinterpret_cast<void **>(&scales), n * 4));
        BENCH_CHECK(
            cudaMemcpy(scales, host.data(), n * 4, cudaMemcpyHostToDevice));
        weight.fp8 = codes;
        weight.rowScales = scales;
      } else {
        weight.bf16 = w;
      }
      // What CudaBackend::linear runs: the bf16 copy of x only where the
      // path reads it.
      const cuda::Gemm::Path path = cuda::Gemm::path(m, n, k, weight);
      const bool convert = cuda::Gemm::needsBf16Input(m, n, k, weight);
      const double t = timeCalls(stream, start, stop, [&] {
        if (convert && cuda::launchToBf16(x, xb, m * k, stream) != cudaSuccess)
          die("bf16 conversion failed");
        Status status =
            (*gemm)->linear(x, xb, weight, nullptr, y, m, n, k, stream);
        if (!status.isOk())
          die(status.message());
      });
      // Each skinny kernel alone where it applies (routing evidence); -1
      // where it does not.
      auto launchCheck = [](cudaError_t error) {
        if (error != cudaSuccess)
          die(std::string("kernel launch: ") + cudaGetErrorString(error));
      };
      const double gemv =
          m > cuda::kGemvMaxRows ? -1 : timeCalls(stream, start, stop, [&] {
            launchCheck(
                fp8 ? cuda::launchGemvFp8(x, codes, scales, nullptr, y, m, n, k,
                                          stream)
                    : cuda::launchGemv(x, w, nullptr, y, m, n, k, stream));
          });
      const double mma =
          !cuda::gemvMmaSupports(m, k, fp8)
              ? -1
              : timeCalls(stream, start, stop, [&] {
                  launchCheck(fp8 ? cuda::launchGemvMmaFp8(x, codes, scales,
                                                           nullptr, y, m, n, k,
                                                           stream)
                                  : cuda::launchGemvMma(x, w, nullptr, y, m, n,
                                                        k, stream));
                });
      const double cublas = timeCalls(stream, start, stop, [&] {
        Status status = (*gemm)->run(xb, w, y, m, n, k, stream);
        if (!status.isOk())
          die(status.message());
      });
      const double fp8Cublas =
          !fp8 || !cuda::Gemm::fp8CublasLtSupports(n, k, codes)
              ? -1
              : timeCalls(stream, start, stop, [&] {
                  Status status =
                      (*gemm)->runFp8(x, weight, nullptr, y, m, n, k, stream);
                  if (!status.isOk())
                    die(status.message());
                });
      if (const char *scaling =
              fp8Cublas < 0 ? nullptr : (*gemm)->fp8Scaling(m, n, k))
        fp8Scalings.insert(scaling);
      // Its first kernel alone: x to per-token E4M3 codes and scales.
      double quantize = -1;
      if (fp8Cublas >= 0) {
        uint8_t *xCodes = nullptr;
        float *xScales = nullptr;
        BENCH_CHECK(
            cudaMalloc(reinterpret_cast<void **>(&xCodes), size_t(m) * k));
        BENCH_CHECK(cudaMalloc(reinterpret_cast<void **>(&xScales), m * 4));
        quantize = timeCalls(stream, start, stop, [&] {
          launchCheck(
              cuda::launchQuantizeRowsFp8(x, m, k, xCodes, xScales, stream));
        });
        cudaFree(xCodes);
        cudaFree(xScales);
      }
      const double bytes = double(n) * k * (fp8 ? 1 : 2) + (fp8 ? 4.0 * n : 0) +
                           double(m) * k * 4 + double(m) * n * 4;
      std::printf("| %lld | %lld x %lld (%d) | %s | %s | %.1f | %.0f | %.0f%% "
                  "| %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                  (long long)m, (long long)n, (long long)k, uses,
                  fp8 ? "fp8" : "bf16", cuda::Gemm::pathName(path), t,
                  bytes / t / 1e3, 100.0 * bytes / (t * 1e-6) / bandwidth, gemv,
                  mma, cublas, fp8Cublas, quantize);
      totalUs += t * uses;
      totalCublasUs += cublas * uses;
      totalGemvUs += gemv * uses;
      totalMmaUs += mma * uses;
      totalFp8Us += fp8Cublas * uses;
      totalQuantizeUs += quantize * uses;
      gemvMissing = gemvMissing || gemv < 0;
      mmaMissing = mmaMissing || mma < 0;
      fp8Missing = fp8Missing || fp8Cublas < 0;
      cudaFree(w);
      cudaFree(xb);
      cudaFree(x);
      cudaFree(y);
      cudaFree(codes);
      cudaFree(scales);
    }
    // A candidate's total only where it takes every shape.
    auto total = [](bool missing, double us) {
      char text[32] = "-";
      if (!missing)
        std::snprintf(text, sizeof(text), "%.1f", us);
      return std::string(text);
    };
    std::printf("| %lld | all GEMMs of one forward call | | | %.1f | | "
                "weight roofline %.1f us | %s | %s | %.1f | %s | %s |\n",
                (long long)m, totalUs, weightBytes / bandwidth * 1e6,
                total(gemvMissing, totalGemvUs).c_str(),
                total(mmaMissing, totalMmaUs).c_str(), totalCublasUs,
                total(fp8Missing, totalFp8Us).c_str(),
                total(fp8Missing, totalQuantizeUs).c_str());
  }
  for (const std::string &scaling : fp8Scalings)
    std::printf("\nfp8 cuBLASLt scales: %s", scaling.c_str());
  std::printf("\n");
  cudaStreamDestroy(stream);
}

} // namespace

int main(int argc, char **argv) {
  Options options = parseArgs(argc, argv);
  StatusOr<Artifact> artifact =
      isArtifactDir(options.model) ? loadArtifact(options.model)
                                   : testing::buildLlamaArtifact(options.model);
  if (!artifact.isOk())
    die(artifact.status().message());
  const ModelCost cost = modelCost(*artifact);
  // The GEMM table alone needs the plan's shapes, not the weights.
  if (options.decodeBatches.empty() && options.prefill.empty()) {
    if (options.gemmRows.empty())
      die("nothing to time: give --decode-batches, --prefill or --gemms");
    const double bandwidth = copyBandwidth();
    std::printf("model %s: GEMMs only (no weights loaded), copy bandwidth "
                "%.2f TB/s (measured)\n\n",
                options.model.c_str(), bandwidth / 1e12);
    benchGemms(*artifact, options.gemmRows, bandwidth, cost.weightBytes);
    return 0;
  }
  const int numRanks = artifact->plan.numRanks;
  const std::string weightsDir = weightsDirOf(*artifact, options.weights);
  auto loadStart = std::chrono::steady_clock::now();
  // Deferred: the backend streams them from the checkpoint to the device.
  std::vector<ParamTable> params;
  for (int r = 0; r < numRanks; ++r) {
    StatusOr<ParamTable> rankParams =
        loadDeferredParams(*artifact, r, weightsDir);
    if (!rankParams.isOk())
      die(rankParams.status().message());
    params.push_back(std::move(rankParams).value());
  }
  const int64_t blockSize = artifact->plan.kvCache.blockSize;
  const int64_t vocab = artifact->manifest.model.vocabSize;

  // One pool that fits the largest decode point or the longest prompt.
  auto blocksPerSeq = [&](int64_t context) {
    return (context + options.repeats * options.steps + 8 + blockSize) /
           blockSize;
  };
  std::vector<std::pair<int64_t, int64_t>> decodePoints;
  for (int64_t b : options.decodeBatches)
    decodePoints.push_back({b, options.context});
  decodePoints.insert(decodePoints.end(), options.longContext.begin(),
                      options.longContext.end());
  int64_t decodeBlocks = 0;
  for (auto [b, c] : decodePoints)
    decodeBlocks = std::max(decodeBlocks, b * blocksPerSeq(c));
  int64_t maxPrefill = 0;
  for (int64_t n : options.prefill)
    maxPrefill = std::max(maxPrefill, n);
  const int64_t prefillBlocks = (maxPrefill + blockSize - 1) / blockSize;
  cuda::CudaBackendOptions backendOptions;
  backendOptions.numBlocks =
      std::max<int64_t>({decodeBlocks, prefillBlocks, 1});
  backendOptions.maxGraphTokens = options.graphTokens;
  backendOptions.profileSteps = options.profile;
  // A tensor-parallel artifact runs rank r on GPU r (NCCL).
  auto backend = numRanks == 1
                     ? cuda::createCudaBackend(artifact->plan, 0, params[0],
                                               backendOptions)
                     : cuda::createCudaTensorParallelBackend(
                           artifact->plan, params, backendOptions);
  if (!backend.isOk())
    die(backend.status().message());
  params.clear();
  const double loadSeconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - loadStart)
                                 .count();

  const double bandwidth = copyBandwidth();
  cudaDeviceProp prop{};
  int device = 0;
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  std::printf("model %s on %s, tp %d\n", options.model.c_str(), prop.name,
              numRanks);
  std::printf("weights read per decode step %.3f GB (bf16 matrices, per "
              "rank), KV %.1f KiB/token, load %.1f s\n",
              cost.weightBytes / 1e9, cost.kvBytesPerToken / 1024, loadSeconds);
  std::printf("copy bandwidth %.2f TB/s (measured), peak %.0f TFLOP/s "
              "(bf16 GEMM ceiling, DESIGN.md)\n\n",
              bandwidth / 1e12, kPeakFlops / 1e12);

  if (!options.gemmRows.empty())
    benchGemms(*artifact, options.gemmRows, bandwidth, cost.weightBytes);
  Runner runner(**backend, blockSize, vocab);
  runner.sampleGreedy = options.sampleGreedy;
  if (options.sampleGreedy)
    std::printf("decode steps: forwardSample, greedy on the device (token "
                "ids come back, not logits)\n\n");
  // --profile: one step table per decode point and prompt size, printed
  // after the sweeps.
  std::vector<std::string> profiles;
  if (!decodePoints.empty()) {
    std::printf("| decode batch | context | ms/step (median of %lld runs) | "
                "tokens/s | roofline ms/step | %% of roofline | runs | "
                "contexts |\n"
                "|---|---|---|---|---|---|---|---|\n",
                (long long)options.repeats);
    for (auto [batch, context] : decodePoints) {
      const int64_t decodeBlocksPerSeq = blocksPerSeq(context);
      std::vector<int64_t> lengths(batch, 0);
      // Prefill every sequence's context, whole prompts of at most 8192
      // tokens per call (a longer context in chunks of 8192).
      const int64_t perCall = std::max<int64_t>(1, 8192 / context);
      for (int64_t first = 0; first < batch; first += perCall) {
        std::vector<int64_t> seqs;
        for (int64_t s = first; s < std::min(batch, first + perCall); ++s)
          seqs.push_back(s);
        for (int64_t done = 0; done < context; done += 8192)
          runner.step(lengths, seqs, std::min<int64_t>(8192, context - done),
                      decodeBlocksPerSeq);
      }
      std::vector<int64_t> everyone(batch);
      for (int64_t s = 0; s < batch; ++s)
        everyone[s] = s;
      // Two steps first: the eager one that tunes cuBLASLt's shapes and the
      // graph capture of this batch size stay out of the times and the
      // profile.
      for (int warm = 0; warm < 2; ++warm)
        runner.step(lengths, everyone, 1, decodeBlocksPerSeq);
      std::vector<double> runs;
      cuda::resetStepProfile(**backend);
      const std::vector<int64_t> atStart = lengths;
      for (int64_t r = 0; r < options.repeats; ++r) {
        if (options.rewind)
          lengths = atStart;
        std::vector<double> ms;
        for (int64_t i = 0; i < options.steps; ++i)
          ms.push_back(runner.step(lengths, everyone, 1, decodeBlocksPerSeq));
        runs.push_back(median(ms));
      }
      const double stepMs = median(runs);
      // The timed steps read context + 3 .. context + 2 + repeats * steps
      // keys (after the two warm-up steps; with --rewind, each run reads
      // context + 3 .. context + 2 + steps).
      const int64_t firstKeys = context + 3;
      const int64_t lastKeys =
          context + 2 + (options.rewind ? 1 : options.repeats) * options.steps;
      const double avgContext = (firstKeys + lastKeys) / 2.0;
      const double rooflineMs =
          (cost.weightBytes + batch * avgContext * cost.kvBytesPerToken) /
          bandwidth * 1e3;
      std::printf("| %lld | %lld | %.3f | %.0f | %.3f | %.0f%% | %s | "
                  "%lld-%lld |\n",
                  (long long)batch, (long long)context, stepMs,
                  batch / stepMs * 1e3, rooflineMs, 100.0 * rooflineMs / stepMs,
                  joined(runs).c_str(), (long long)firstKeys,
                  (long long)lastKeys);
      std::fflush(stdout);
      if (options.profile)
        profiles.push_back("decode batch " + std::to_string(batch) +
                           ", context " + std::to_string(context) + ":\n" +
                           cuda::stepProfileReport(**backend));
    }
    std::printf("\n");
  }
  if (!options.prefill.empty()) {
    std::printf("| prefill tokens | TTFT ms (median of %lld) | tokens/s | "
                "roofline ms | %% of roofline | TFLOP/s | runs |\n"
                "|---|---|---|---|---|---|---|\n",
                (long long)options.repeats);
    for (int64_t n : options.prefill) {
      std::vector<double> runs;
      for (int64_t r = 0; r <= options.repeats; ++r) {
        std::vector<int64_t> lengths(1, 0);
        const double ms = runner.step(lengths, {0}, n, prefillBlocks);
        if (r > 0) // the first call of a size warms up (allocations)
          runs.push_back(ms);
        else
          cuda::resetStepProfile(**backend);
      }
      const double ms = median(runs);
      const double flops =
          2.0 * n * cost.matrixParams +
          2.0 * cost.layers * cost.heads * cost.headDim * double(n) * n;
      const double rooflineMs = flops / kPeakFlops * 1e3;
      std::printf("| %lld | %.2f | %.0f | %.2f | %.0f%% | %.0f | %s |\n",
                  (long long)n, ms, n / ms * 1e3, rooflineMs,
                  100.0 * rooflineMs / ms, flops / (ms * 1e-3) / 1e12,
                  joined(runs).c_str());
      std::fflush(stdout);
      if (options.profile)
        profiles.push_back("prefill " + std::to_string(n) + " tokens:\n" +
                           cuda::stepProfileReport(**backend));
    }
    std::printf("\n");
  }
  for (const std::string &profile : profiles)
    std::printf("%s\n", profile.c_str());
  return 0;
}
