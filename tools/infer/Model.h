//===- Model.h - The tool's MODEL argument ----------------------*- C++ -*-===//

#ifndef INFER_TOOLS_INFER_MODEL_H
#define INFER_TOOLS_INFER_MODEL_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/engine/PackedWeights.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <memory>
#include <string>

namespace infer::tool {

/// The message of every compiler command in a build without the compiler.
inline constexpr const char *kNoCompilerMessage =
    "infer was built without the compiler (INFER_ENABLE_COMPILER=OFF)";

/// A directory removed (with its contents) when this goes away.
class TempDir {
public:
  static StatusOr<std::unique_ptr<TempDir>> create();
  ~TempDir();
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

/// An artifact ready to run: MODEL is an artifact directory (manifest.json)
/// or a Hugging Face model directory compiled on the fly into `tempDir`.
struct LoadedModel {
  std::unique_ptr<TempDir> tempDir;
  Artifact artifact;
};
StatusOr<LoadedModel> loadModel(const std::string &model);

/// `infer pack --gpu`: makes fp8 params on the GPU (cuda::materializeOnDevice);
/// an error when infer has no CUDA backend or the machine no GPU.
StatusOr<ParamMaterializer> gpuParamMaterializer();

/// The backend `name` ("cpu" or "cuda") with `numBlocks` KV blocks; on
/// cuda, `numBlocks` 0 sizes the pool from `kvCacheMemoryFraction` of the
/// device memory free after the weights (`--gpu-memory-utilization`).
/// `weights` says where params come from (packed files or the checkpoint).
/// `profileSteps` (one-rank cuda only): every forward call runs eagerly and
/// times its steps (cuda::stepProfileReport; `infer bench --profile`).
StatusOr<std::unique_ptr<Backend>>
createBackend(const Artifact &artifact, const std::string &name,
              const WeightLoadOptions &weights, int64_t numBlocks,
              int numThreads, double kvCacheMemoryFraction = 0.9,
              bool profileSteps = false);

/// The token budget of a forward call (`--max-num-batched-tokens auto`) on
/// backend `name`: 2048 on the cpu; on cuda 8192, and for offline runs
/// (`infer bench`) 16384 on a device of at least 70 GiB, as vLLM's LLM
/// class takes on H100-class GPUs: prefill GEMMs twice as tall, fewer
/// forward calls (H100, Llama-3-8B 128/128 x 2000: +2.5%, bench/RESULTS.md).
int64_t autoMaxNumBatchedTokens(const std::string &name, bool offline);

/// The per-step device times of a backend made with `profileSteps`, as a
/// markdown table ("" for any other backend).
std::string stepProfileReport(const Backend &backend);

/// The tokenizer of an artifact, a model directory, or a tokenizer.json.
StatusOr<std::unique_ptr<Tokenizer>> loadTokenizer(const std::string &path);
/// The artifact's tokenizer, or null when it was compiled without one.
StatusOr<std::unique_ptr<Tokenizer>> loadTokenizer(const Artifact &artifact);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_MODEL_H
