//===- DecodeBench.cpp - Batch-1 decode time of the CUDA backend ----------===//
//
//   infer-cuda-decode-bench MODEL_DIR [PROMPT_TOKENS] [DECODE_STEPS] [eager]
//
// Builds the llama plan of MODEL_DIR (no compiler needed), prefills a
// random prompt, then times single-token decode steps (each a full forward
// call with its logits copied to the host) and prints the median next to
// the memory roofline: bytes of the bf16 weights over the device-to-device
// copy bandwidth measured in the same run. `eager` turns CUDA graphs off.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

using namespace infer;

static double copyBandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess ||
      cudaMalloc(&b, bytes) != cudaSuccess)
    return 0.0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
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
  std::sort(ms.begin(), ms.end());
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3); // read + write
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [PROMPT_TOKENS] [STEPS] [eager]\n",
                 argv[0]);
    return 2;
  }
  const int64_t promptTokens = argc > 2 ? std::atoll(argv[2]) : 16;
  const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 128;
  const bool eager = argc > 4 && std::string(argv[4]) == "eager";
  StatusOr<Artifact> artifact = testing::buildLlamaArtifact(argv[1]);
  if (!artifact.isOk()) {
    std::fprintf(stderr, "%s\n", artifact.status().message().c_str());
    return 1;
  }
  StatusOr<ParamTable> params =
      loadParams(*artifact, 0, artifact->manifest.weightsDir);
  if (!params.isOk()) {
    std::fprintf(stderr, "%s\n", params.status().message().c_str());
    return 1;
  }
  int64_t weightBytes = 0, vocab = 0;
  std::set<const HostTensor *> seen;
  for (const auto &[id, tensor] : *params)
    if (seen.insert(tensor.get()).second)
      weightBytes += int64_t(tensor->data.size()) * 2;
  vocab = artifact->manifest.model.vocabSize;
  const int64_t blockSize = artifact->plan.kvCache.blockSize;
  const int64_t blocks = (promptTokens + steps + blockSize) / blockSize;
  cuda::CudaBackendOptions options;
  options.numBlocks = blocks;
  if (eager)
    options.maxGraphTokens = 0;
  auto backend = cuda::createCudaBackend(artifact->plan, 0, *params, options);
  if (!backend.isOk()) {
    std::fprintf(stderr, "%s\n", backend.status().message().c_str());
    return 1;
  }
  params->clear();

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  std::vector<int32_t> tokens;
  Batch batch;
  batch.maxBlocksPerSeq = blocks;
  for (int64_t j = 0; j < blocks; ++j)
    batch.blockTables.push_back(int32_t(j));
  auto step = [&](int64_t fresh) -> double {
    const int64_t cached = int64_t(tokens.size());
    batch.tokenIds.clear();
    batch.positions.clear();
    batch.slotMapping.clear();
    for (int64_t i = 0; i < fresh; ++i) {
      tokens.push_back(token(rng));
      batch.tokenIds.push_back(tokens.back());
      batch.positions.push_back(int32_t(cached + i));
      batch.slotMapping.push_back(cached + i);
    }
    batch.queryStartLoc = {0, int32_t(fresh)};
    batch.contextLens = {int32_t(tokens.size())};
    batch.logitsIndices = {int32_t(fresh - 1)};
    auto t0 = std::chrono::steady_clock::now();
    StatusOr<Logits> logits = (*backend)->forward(batch);
    auto t1 = std::chrono::steady_clock::now();
    if (!logits.isOk()) {
      std::fprintf(stderr, "%s\n", logits.status().message().c_str());
      std::exit(1);
    }
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  const double prefillMs = step(promptTokens);
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i)
    ms.push_back(step(1));
  std::vector<double> timed(ms.begin() + std::min<int64_t>(8, steps / 4),
                            ms.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed[timed.size() / 2];
  const double bandwidth = copyBandwidth();
  const double rooflineMs = weightBytes / bandwidth * 1e3;
  std::printf("model %s\nweights (bf16) %.3f GB, copy bandwidth %.2f TB/s\n",
              argv[1], weightBytes / 1e9, bandwidth / 1e12);
  std::printf("prefill %lld tokens: %.2f ms (first call, includes warm-up)\n",
              (long long)promptTokens, prefillMs);
  std::printf("decode batch 1 (%s), context %lld..%lld: median %.3f ms/token "
              "(min %.3f, max %.3f), roofline %.3f ms (%.0f%%)\n",
              eager ? "eager" : "CUDA graphs", (long long)promptTokens,
              (long long)(promptTokens + steps), median, timed.front(),
              timed.back(), rooflineMs, 100.0 * rooflineMs / median);
  return 0;
}
