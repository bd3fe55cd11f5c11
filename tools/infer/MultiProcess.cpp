//===- MultiProcess.cpp - infer under mpirun / srun -----------------------===//

#include "tools/infer/MultiProcess.h"

#ifdef INFER_HAS_MPI
#include "runtime/cpu/CpuBackend.h"
#include "runtime/distributed/MpiCommunicator.h"
#include "runtime/distributed/MultiProcessBackend.h"
#ifdef INFER_HAS_CUDA
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/GeneratedKernels.h"
#include "runtime/distributed/NcclRendezvous.h"
#endif
#endif

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <thread>

namespace infer::tool {

namespace fs = std::filesystem;

#ifdef INFER_HAS_MPI

namespace {

/// One rank's part of a tensor-parallel artifact: its parameters, then its
/// communicator (MPI on the CPU, NCCL on the GPU) and backend.
class RankBuilder final : public distributed::RankBackendBuilder {
public:
  Status load(const distributed::RankBackendSpec &spec,
              distributed::MpiWorld &world) override {
    spec_ = spec;
    INFER_ASSIGN_OR_RETURN(artifact_, loadArtifact(spec.artifactDir));
    if (artifact_.plan.numRanks != world.size())
      return invalidArgument("the artifact is compiled for " +
                             std::to_string(artifact_.plan.numRanks) +
                             " tensor-parallel ranks, "
                             "the launch has " +
                             std::to_string(world.size()) + " processes");
    if (spec.backend == "cuda") {
#ifdef INFER_HAS_CUDA
      std::string why;
      if (!cuda::cudaDeviceAvailable(&why))
        return unimplemented("--backend cuda: " + why);
      if (!cuda::ncclAvailable(&why))
        return unimplemented(why);
      INFER_ASSIGN_OR_RETURN(device_, distributed::deviceOfRank(world));
#else
      return unimplemented("infer was built without the CUDA backend "
                           "(INFER_ENABLE_CUDA=OFF)");
#endif
    }
    WeightLoadOptions weights;
    weights.weightsDirOverride = spec.weightsDirOverride;
    weights.verifyHash = spec.verifyHash;
    // One progress bar: rank 0's.
    weights.showProgress = spec.showProgress && world.rank() == 0;
    // cuda: an unpacked artifact's params go to the device as they are
    // transformed (no host copy of the rank's weights).
    weights.deferTransforms = spec.backend == "cuda";
    INFER_ASSIGN_OR_RETURN(params_,
                           loadRankParams(artifact_, world.rank(), weights));
    return Status::ok();
  }

  StatusOr<distributed::RankBackend>
  create(distributed::MpiWorld &world) override {
    const plan::Plan &plan = artifact_.plan;
    distributed::RankBackend out;
    out.blockSize = plan.kvCache.blockSize;
    INFER_ASSIGN_OR_RETURN(out.vocabSize,
                           distributed::tokenVocabulary(plan.ranks[0]));
#ifdef INFER_HAS_CUDA
    if (spec_.backend == "cuda") {
      cuda::CudaBackendOptions options;
      options.numBlocks = spec_.numBlocks;
      options.kvCacheMemoryFraction = spec_.kvCacheMemoryFraction;
      INFER_ASSIGN_OR_RETURN(
          options.kernels,
          cuda::readKernelImages(artifact_.dir, artifact_.manifest.kernels));
      INFER_ASSIGN_OR_RETURN(std::unique_ptr<cuda::NcclCommunicator> comm,
                             distributed::joinNcclGroupOverMpi(world, device_));
      options.device = device_;
      options.communicator = comm.get();
      options.copyLogits = world.rank() == 0;
      out.communicator = std::move(comm);
      INFER_ASSIGN_OR_RETURN(
          out.backend,
          cuda::createCudaBackend(plan, world.rank(), params_, options));
      return out;
    }
#endif
    cpu::CpuBackendOptions options;
    options.numBlocks = spec_.numBlocks;
    // The host's cores are shared by the ranks on it.
    const int cores =
        std::max(1u, std::thread::hardware_concurrency()) / world.localSize();
    options.numThreads =
        spec_.numThreads > 0 ? spec_.numThreads : std::max(1, cores);
    out.communicator = std::make_unique<distributed::MpiCommunicator>(world);
    options.communicator = out.communicator.get();
    INFER_ASSIGN_OR_RETURN(
        out.backend,
        cpu::createCpuBackend(plan, world.rank(), std::move(params_), options));
    return out;
  }

private:
  distributed::RankBackendSpec spec_;
  Artifact artifact_;
  ParamTable params_;
  int device_ = 0;
};

std::unique_ptr<distributed::RankBackendBuilder> makeRankBuilder() {
  return std::make_unique<RankBuilder>();
}

} // namespace

int runUnderLauncher(const std::function<int()> &command) {
  if (!distributed::launchedAsRanks())
    return command();
  StatusOr<distributed::MpiWorld *> initialized = distributed::MpiWorld::init();
  if (!initialized.isOk()) {
    std::cerr << "infer: error: " << initialized.status().message() << "\n";
    return 1;
  }
  distributed::MpiWorld &world = **initialized;
  if (world.size() == 1) {
    const int code = command();
    world.finalize();
    return code;
  }
  if (world.rank() != 0)
    return distributed::followRankZero(world, makeRankBuilder);
  int code = 1;
  try {
    code = command();
  } catch (const std::exception &e) {
    std::cerr << "infer: internal error: " << e.what() << "\n";
    world.markBroken();
  }
  return distributed::finishRankZero(world, code);
}

bool inMultiProcessLaunch() {
  distributed::MpiWorld *world = distributed::MpiWorld::active();
  return world && world->size() > 1;
}

StatusOr<std::unique_ptr<Backend>>
createMultiProcessBackend(const Artifact &artifact, const std::string &name,
                          const WeightLoadOptions &weights, int64_t numBlocks,
                          int numThreads, double kvCacheMemoryFraction) {
  distributed::MpiWorld &world = *distributed::MpiWorld::active();
  if (artifact.plan.numRanks != world.size())
    return invalidArgument("the artifact is compiled for " +
                           std::to_string(artifact.plan.numRanks) +
                           " tensor-parallel ranks but the launcher started " +
                           std::to_string(world.size()) +
                           " processes (one per rank: mpirun -np " +
                           std::to_string(artifact.plan.numRanks) + ")");
  distributed::RankBackendSpec spec;
  std::error_code ec;
  spec.artifactDir = fs::absolute(artifact.dir, ec).string();
  if (!weights.weightsDirOverride.empty())
    spec.weightsDirOverride =
        fs::absolute(weights.weightsDirOverride, ec).string();
  spec.verifyHash = weights.verifyHash;
  spec.showProgress = weights.showProgress;
  spec.backend = name;
  spec.numBlocks = numBlocks;
  spec.numThreads = numThreads;
  spec.kvCacheMemoryFraction = kvCacheMemoryFraction;
  return distributed::createLeaderBackend(world, spec, makeRankBuilder);
}

#else // !INFER_HAS_MPI

/// The launch's process count from the environment, before MPI is up (1
/// when no launcher started this process).
static int launchSizeFromEnv() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  if (std::getenv("SLURM_STEP_ID"))
    if (const char *value = std::getenv("SLURM_NTASKS"))
      return std::atoi(value);
  return 1;
}

int runUnderLauncher(const std::function<int()> &command) {
  // N copies of a one-process run would each print the whole output.
  if (const int size = launchSizeFromEnv(); size > 1) {
    std::cerr
        << "infer: error: started as one of " << size
        << " processes, but infer was built without MPI "
           "(install libopenmpi-dev and build with INFER_ENABLE_MPI=ON)\n";
    return 1;
  }
  return command();
}

bool inMultiProcessLaunch() { return false; }

StatusOr<std::unique_ptr<Backend>>
createMultiProcessBackend(const Artifact &, const std::string &,
                          const WeightLoadOptions &, int64_t, int, double) {
  return unimplemented("infer was built without MPI");
}

#endif // INFER_HAS_MPI

} // namespace infer::tool
