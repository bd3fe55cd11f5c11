//===- TensorParallelBackend.cpp - All ranks of a plan, one GPU each ------===//
//
// The ranks of a tensor-parallel plan as one Backend: rank r is a
// CudaBackend on device r, driven by its own host thread for the backend's
// whole life (a thread keeps its device current and costs no start per
// step). forward() hands the batch to every rank; the ranks meet in the
// plan's all_reduce / all_gather steps on the GPUs through NCCL, and rank 0's
// logits are the result (the others keep theirs on the device).
//
//   forward(batch) ──┬── rank 0 (caller's thread, GPU 0) ──┐
//                    ├── rank 1 (thread 1, GPU 1) ─────────┼── rank 0's logits
//                    └── rank N-1 (thread N-1, GPU N-1) ───┘
//
// A rank whose forward call fails after the batch was validated may have
// left its peers waiting in a collective on the GPU: the group is aborted
// (every pending NCCL operation ends) and the backend refuses further calls
// with the cause.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/NcclCommunicator.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace infer::cuda {
namespace {

/// Ranks 1..n-1 each on a thread of their own that waits for the next job;
/// run() also runs rank 0 on the caller and returns once every rank is done.
class RankThreads {
public:
  explicit RankThreads(int numRanks) : numRanks_(numRanks) {
    for (int r = 1; r < numRanks_; ++r)
      threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : threads_)
      t.join();
  }

  void run(const std::function<void(int)> &job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      pending_ = numRanks_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

private:
  void loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)> *job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_)
          return;
        seen = generation_;
        job = job_;
      }
      (*job)(rank);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0)
        done_.notify_one();
    }
  }

  const int numRanks_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)> *job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

class TensorParallelBackend final : public Backend {
public:
  TensorParallelBackend(std::vector<std::unique_ptr<NcclCommunicator>> comms,
                        int64_t vocab, int64_t blockSize)
      : comms_(std::move(comms)), vocab_(vocab), blockSize_(blockSize),
        threads_(static_cast<int>(comms_.size())) {}
  ~TensorParallelBackend() override {
    // Each rank's backend goes on its own thread, as it was made; the
    // communicators after every rank's stream is idle.
    threads_.run([&](int r) { ranks_[r].reset(); });
  }

  std::string_view name() const override { return "cuda"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &batch) override;
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override;
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    return runOnRanks([&](int r) { return ranks_[r]->copyBlocks(copies); });
  }

  /// Makes every rank's CudaBackend on its own thread.
  Status createRanks(const plan::Plan &plan,
                     const std::vector<ParamTable> &paramsPerRank,
                     const CudaBackendOptions &options);

private:
  /// Rejects a batch every rank would reject, before any rank runs.
  Status validate(const Batch &batch) const;
  /// Runs `step` for every rank on its thread; the first failure aborts the
  /// group (peers may be waiting for the failed rank in a collective).
  Status runOnRanks(const std::function<Status(int)> &step);

  /// Declared first: destroyed after the ranks that enqueue on them.
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
  int64_t vocab_;
  int64_t blockSize_;
  std::vector<std::unique_ptr<Backend>> ranks_;
  int64_t numBlocks_ = 0;
  std::optional<Status> broken_;
  RankThreads threads_;
};

Status
TensorParallelBackend::createRanks(const plan::Plan &plan,
                                   const std::vector<ParamTable> &paramsPerRank,
                                   const CudaBackendOptions &options) {
  const int n = static_cast<int>(comms_.size());
  ranks_.resize(n);
  std::vector<Status> statuses(n, Status::ok());
  threads_.run([&](int r) {
    CudaBackendOptions rankOptions = options;
    rankOptions.device = comms_[r]->device();
    rankOptions.communicator = comms_[r].get();
    rankOptions.copyLogits = r == 0;
    StatusOr<std::unique_ptr<Backend>> rank =
        createCudaBackend(plan, r, paramsPerRank[r], rankOptions);
    if (rank.isOk())
      ranks_[r] = std::move(rank).value();
    else
      statuses[r] = rank.status().withContext("tensor-parallel rank " +
                                              std::to_string(r));
  });
  for (const Status &s : statuses)
    INFER_RETURN_IF_ERROR(s);
  // Pools sized from each device's free memory may differ by a few blocks:
  // the scheduler sees the smallest, which every rank holds.
  numBlocks_ = ranks_[0]->numBlocks();
  for (int r = 1; r < n; ++r)
    numBlocks_ = std::min(numBlocks_, ranks_[r]->numBlocks());
  return Status::ok();
}

Status
TensorParallelBackend::runOnRanks(const std::function<Status(int)> &step) {
  if (broken_)
    return *broken_;
  std::mutex errorMutex;
  std::optional<Status> firstError;
  threads_.run([&](int r) {
    Status status = step(r);
    if (status.isOk())
      return;
    std::lock_guard<std::mutex> lock(errorMutex);
    if (firstError)
      return;
    firstError =
        status.withContext("tensor-parallel rank " + std::to_string(r));
    for (std::unique_ptr<NcclCommunicator> &comm : comms_)
      comm->abort();
  });
  if (!firstError)
    return Status::ok();
  broken_ = firstError->withContext(
      "cuda backend: the tensor-parallel group was aborted");
  return *firstError;
}

Status TensorParallelBackend::validate(const Batch &batch) const {
  // What every rank would reject alike is rejected here, before any rank
  // enqueues a collective its peers would wait for.
  INFER_RETURN_IF_ERROR(batch.validate(numBlocks(), blockSize_));
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  for (int32_t id : batch.tokenIds)
    if (id < 0 || id >= vocab_)
      return outOfRange("token id " + std::to_string(id) +
                        " outside the vocabulary of " + std::to_string(vocab_));
  return Status::ok();
}

StatusOr<Logits> TensorParallelBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(validate(batch));
  Logits logits;
  INFER_RETURN_IF_ERROR(runOnRanks([&](int r) -> Status {
    StatusOr<Logits> result = ranks_[r]->forward(batch);
    if (!result.isOk())
      return result.status();
    if (r == 0)
      logits = std::move(result).value();
    return Status::ok();
  }));
  return logits;
}

/// Rank 0 samples on its GPU, where the gathered logits are; the other
/// ranks run the same forward call (their collectives meet rank 0's) and
/// copy nothing back. launchSample() and collectSample() keep Backend's
/// default, this call run at once: the ranks' threads wait for their
/// forward calls, so a tensor-parallel step does not overlap the host's
/// next one.
StatusOr<std::vector<int32_t>>
TensorParallelBackend::forwardSample(const Batch &batch,
                                     const SamplingBatch &sampling) {
  INFER_RETURN_IF_ERROR(validate(batch));
  std::vector<int32_t> tokens;
  INFER_RETURN_IF_ERROR(runOnRanks([&](int r) -> Status {
    if (r != 0)
      return ranks_[r]->forward(batch).status();
    StatusOr<std::vector<int32_t>> result =
        ranks_[0]->forwardSample(batch, sampling);
    if (!result.isOk())
      return result.status();
    tokens = std::move(result).value();
    return Status::ok();
  }));
  return tokens;
}

/// The vocabulary the token ids index: the embedding's vocab_size, or its
/// table's rows when the embedding is not vocabulary-parallel.
StatusOr<int64_t> vocabularyOf(const plan::RankPlan &rank) {
  for (const plan::Step &step : rank.steps) {
    if (step.op != "embedding" || step.operands.empty() ||
        step.operands[0] < 0 ||
        step.operands[0] >= static_cast<int>(rank.values.size()))
      continue;
    const plan::Value &table = rank.values[step.operands[0]];
    return step.getInt("vocab_size",
                       table.shape.empty() ? 0 : table.shape[0].size);
  }
  return invalidArgument("cuda backend: the plan has no embedding step");
}

} // namespace

StatusOr<std::unique_ptr<Backend>>
createCudaTensorParallelBackend(const plan::Plan &plan,
                                const std::vector<ParamTable> &paramsPerRank,
                                const CudaBackendOptions &options) {
  const int n = plan.numRanks;
  if (static_cast<int>(paramsPerRank.size()) != n ||
      static_cast<int>(plan.ranks.size()) != n)
    return invalidArgument(
        "cuda backend: " + std::to_string(n) + "-rank plan with " +
        std::to_string(paramsPerRank.size()) + " parameter tables");
  std::string why;
  if (!cudaDeviceAvailable(&why))
    return unimplemented("cuda backend: " + why +
                         " on this machine (use --backend cpu)");
  if (!ncclAvailable(&why))
    return unimplemented(why);
  int devices = 0;
  INFER_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&devices));
  if (n > devices)
    return invalidArgument("cuda backend: the plan is tensor-parallel over " +
                           std::to_string(n) + " ranks, one GPU each, but " +
                           std::to_string(devices) +
                           " CUDA device(s) are visible; compile with --tp " +
                           std::to_string(devices) + " or fewer");
  INFER_ASSIGN_OR_RETURN(int64_t vocab, vocabularyOf(plan.ranks[0]));
  std::vector<int> ids;
  for (int r = 0; r < n; ++r)
    ids.push_back(r);
  INFER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<NcclCommunicator>> comms,
                         createNcclGroup(ids));
  auto backend = std::make_unique<TensorParallelBackend>(
      std::move(comms), vocab, plan.kvCache.blockSize);
  INFER_RETURN_IF_ERROR(backend->createRanks(plan, paramsPerRank, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace infer::cuda
