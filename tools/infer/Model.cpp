//===- Model.cpp - Turning the tool's MODEL argument into a backend -------===//

#include "tools/infer/Model.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/engine/Progress.h"
#include "tools/infer/MultiProcess.h"

#ifdef INFER_HAS_CUDA
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/ParamUpload.h"
#endif

#ifdef INFER_HAS_COMPILER
#include "codegen/Compile.h"
#endif

#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

namespace infer::tool {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<TempDir>> TempDir::create() {
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec)
    base = "/tmp";
  std::string pattern = (base / "infer-XXXXXX").string();
  if (!::mkdtemp(pattern.data()))
    return internalError("cannot create a temporary directory in " +
                         base.string());
  auto dir = std::unique_ptr<TempDir>(new TempDir());
  dir->path_ = pattern;
  return dir;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

StatusOr<LoadedModel> loadModel(const std::string &model) {
  LoadedModel loaded;
  std::error_code ec;
  if (!fs::is_directory(model, ec))
    return notFound("model '" + model + "' is not a directory");
  std::string artifactDir = model;
  if (!isArtifactDir(model)) {
    if (!fs::exists(fs::path(model) / "config.json", ec))
      return notFound(model +
                      " is neither an artifact (manifest.json) nor a Hugging "
                      "Face model directory (config.json)");
#ifdef INFER_HAS_COMPILER
    INFER_ASSIGN_OR_RETURN(loaded.tempDir, TempDir::create());
    artifactDir = loaded.tempDir->path() + "/artifact";
    compiler::CompileOptions options;
    INFER_RETURN_IF_ERROR(compiler::compileModel(model, artifactDir, options)
                              .withContext("compiling " + model));
#else
    return unimplemented(std::string(kNoCompilerMessage) +
                         "; compile the model elsewhere and pass the "
                         "artifact directory");
#endif
  }
  INFER_ASSIGN_OR_RETURN(loaded.artifact, loadArtifact(artifactDir));
  return loaded;
}

#ifdef INFER_HAS_CUDA
/// The CUDA backend's options for `artifact`: the pool (numBlocks, or 0 and
/// the memory fraction) and the artifact's generated kernels.
static StatusOr<cuda::CudaBackendOptions>
cudaOptionsFor(const Artifact &artifact, int64_t numBlocks,
               double kvCacheMemoryFraction) {
  cuda::CudaBackendOptions options;
  options.numBlocks = numBlocks;
  options.kvCacheMemoryFraction = kvCacheMemoryFraction;
  INFER_ASSIGN_OR_RETURN(
      options.kernels,
      cuda::readKernelImages(artifact.dir, artifact.manifest.kernels));
  return options;
}

/// Bytes the backend will make of the deferred params (unpacked artifacts
/// on cuda), for the progress of their upload.
static uint64_t deferredBytes(const std::vector<ParamTable> &params) {
  std::set<const HostTensor *> seen;
  uint64_t total = 0;
  for (const ParamTable &table : params)
    for (const auto &[id, tensor] : table)
      if (tensor && tensor->isDeferred() && seen.insert(tensor.get()).second)
        total += static_cast<uint64_t>(tensor->elementBytes()) +
                 (tensor->isFp8() ? tensor->shape.at(0) * sizeof(float) : 0);
  return total;
}
#endif

/// `weights` as `backend` loads them: the cuda backend takes an unpacked
/// artifact's params deferred and transforms them on their way to the
/// device (no host copy of the model).
static WeightLoadOptions weightsFor(const std::string &backend,
                                    const WeightLoadOptions &weights) {
  WeightLoadOptions options = weights;
  options.deferTransforms = backend == "cuda";
  return options;
}

/// All ranks of a tensor-parallel artifact in this process, one thread each
/// (and one GPU each on cuda).
static StatusOr<std::unique_ptr<Backend>>
createTensorParallelBackend(const Artifact &artifact, const std::string &name,
                            const WeightLoadOptions &weights, int64_t numBlocks,
                            int numThreads, double kvCacheMemoryFraction) {
  const int numRanks = artifact.plan.numRanks;
  std::vector<ParamTable> params;
  for (int rank = 0; rank < numRanks; ++rank) {
    INFER_ASSIGN_OR_RETURN(
        ParamTable rankParams,
        loadRankParams(artifact, rank, weightsFor(name, weights)));
    params.push_back(std::move(rankParams));
  }
#ifdef INFER_HAS_CUDA
  if (name == "cuda") {
    INFER_ASSIGN_OR_RETURN(
        cuda::CudaBackendOptions options,
        cudaOptionsFor(artifact, numBlocks, kvCacheMemoryFraction));
    const uint64_t streamed = deferredBytes(params);
    Progress progress("streaming weights of " + std::to_string(numRanks) +
                          " ranks to the devices",
                      streamed, weights.showProgress && streamed > 0);
    options.uploadProgress = [&progress](uint64_t n) { progress.advance(n); };
    StatusOr<std::unique_ptr<Backend>> backend =
        cuda::createCudaTensorParallelBackend(artifact.plan, params, options);
    if (backend.isOk())
      progress.finish();
    return backend;
  }
#endif
  cpu::CpuBackendOptions options;
  options.numBlocks = numBlocks;
  options.numThreads = numThreads;
  return cpu::createCpuTensorParallelBackend(artifact.plan, std::move(params),
                                             options);
}

StatusOr<std::unique_ptr<Backend>>
createBackend(const Artifact &artifact, const std::string &name,
              const WeightLoadOptions &weights, int64_t numBlocks,
              int numThreads, double kvCacheMemoryFraction,
              bool profileSteps) {
  if (name != "cpu" && name != "cuda")
    return invalidArgument("unknown backend '" + name +
                           "' (expected cpu or cuda)");
#ifndef INFER_HAS_CUDA
  if (name == "cuda")
    return unimplemented("infer was built without the CUDA backend "
                         "(INFER_ENABLE_CUDA=OFF)");
#else
  if (name == "cuda") {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      return unimplemented("--backend cuda: " + why);
  }
#endif
  // Under mpirun / srun: one rank per process.
  if (profileSteps && (name != "cuda" || artifact.plan.numRanks > 1))
    return invalidArgument("--profile times the steps of the one-GPU cuda "
                           "backend (--backend cuda, a tp=1 artifact)");
  if (artifact.plan.numRanks > 1 && inMultiProcessLaunch())
    return createMultiProcessBackend(artifact, name, weights, numBlocks,
                                     numThreads, kvCacheMemoryFraction);
  if (artifact.plan.numRanks > 1)
    return createTensorParallelBackend(artifact, name, weights, numBlocks,
                                       numThreads, kvCacheMemoryFraction);
  INFER_ASSIGN_OR_RETURN(
      ParamTable params,
      loadRankParams(artifact, 0, weightsFor(name, weights)));
#ifdef INFER_HAS_CUDA
  if (name == "cuda") {
    INFER_ASSIGN_OR_RETURN(
        cuda::CudaBackendOptions options,
        cudaOptionsFor(artifact, numBlocks, kvCacheMemoryFraction));
    options.profileSteps = profileSteps;
    const uint64_t streamed = deferredBytes({params});
    Progress progress("streaming weights of rank 0 to the device", streamed,
                      weights.showProgress && streamed > 0);
    options.uploadProgress = [&progress](uint64_t n) { progress.advance(n); };
    StatusOr<std::unique_ptr<Backend>> backend =
        cuda::createCudaBackend(artifact.plan, 0, params, options);
    if (backend.isOk())
      progress.finish();
    return backend;
  }
#endif
  cpu::CpuBackendOptions options;
  options.numBlocks = numBlocks;
  options.numThreads = numThreads;
  return cpu::createCpuBackend(artifact.plan, 0, std::move(params), options);
}

int64_t autoMaxNumBatchedTokens(const std::string &name, bool offline) {
  if (name != "cuda")
    return 2048;
#ifdef INFER_HAS_CUDA
  constexpr size_t kLargeDeviceBytes = size_t(70) << 30;
  if (offline && cuda::cudaDeviceMemoryBytes(0) >= kLargeDeviceBytes)
    return 16384;
#else
  (void)offline;
#endif
  return 8192;
}

std::string stepProfileReport(const Backend &backend) {
#ifdef INFER_HAS_CUDA
  return cuda::stepProfileReport(backend);
#else
  (void)backend;
  return "";
#endif
}

StatusOr<ParamMaterializer> gpuParamMaterializer() {
#ifdef INFER_HAS_CUDA
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    return unimplemented("--gpu: " + why);
  return ParamMaterializer([](const plan::Value &v, const ParamSource &source) {
    return cuda::materializeOnDevice(v.name, source);
  });
#else
  return unimplemented("--gpu: infer was built without the CUDA backend "
                       "(INFER_ENABLE_CUDA=OFF)");
#endif
}

StatusOr<std::unique_ptr<Tokenizer>> loadTokenizer(const std::string &path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec))
    return Tokenizer::fromFile(path);
  if (isArtifactDir(path)) {
    INFER_ASSIGN_OR_RETURN(plan::Manifest manifest,
                           plan::readManifestFile(path + "/manifest.json"));
    if (manifest.tokenizerFile.empty())
      return notFound("artifact " + path + " has no tokenizer");
    return Tokenizer::fromFile(path + "/" + manifest.tokenizerFile);
  }
  const std::string file = path + "/tokenizer.json";
  if (!fs::exists(file, ec))
    return notFound("no tokenizer.json in " + path);
  return Tokenizer::fromFile(file);
}

StatusOr<std::unique_ptr<Tokenizer>> loadTokenizer(const Artifact &artifact) {
  if (artifact.manifest.tokenizerFile.empty())
    return std::unique_ptr<Tokenizer>();
  return Tokenizer::fromFile(artifact.path(artifact.manifest.tokenizerFile));
}

} // namespace infer::tool
