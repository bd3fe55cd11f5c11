//===- TensorParallelBackend.cpp - All ranks of a plan, one thread each ---===//
//
// The ranks of a tensor-parallel plan as one Backend: forward() hands the
// batch to every rank's CpuBackend on its own thread; the ranks meet in the
// plan's all_reduce / all_gather steps through a ThreadGroup and all end with
// the same logits.
//
//   forward(batch) ──┬── rank 0 (caller's thread) ──┐
//                    ├── rank 1 (thread) ───────────┼── rank 0's logits
//                    └── rank N-1 (thread) ─────────┘
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/ThreadCommunicator.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <mutex>
#include <thread>

namespace infer::cpu {
namespace {

class TensorParallelBackend final : public Backend {
public:
  explicit TensorParallelBackend(int numRanks)
      : group_(std::make_unique<ThreadGroup>(numRanks)) {}

  std::string_view name() const override { return "cpu"; }
  int64_t numBlocks() const override { return ranks_.front()->numBlocks(); }
  StatusOr<Logits> forward(const Batch &batch) override;
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    for (const std::unique_ptr<Backend> &rank : ranks_)
      INFER_RETURN_IF_ERROR(rank->copyBlocks(copies));
    return Status::ok();
  }

  ThreadGroup &group() { return *group_; }
  void addRank(std::unique_ptr<Backend> rank) {
    ranks_.push_back(std::move(rank));
  }

private:
  /// Outlives the ranks, which hold its communicators.
  std::unique_ptr<ThreadGroup> group_;
  std::vector<std::unique_ptr<Backend>> ranks_;
};

StatusOr<Logits> TensorParallelBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  const int n = static_cast<int>(ranks_.size());
  std::vector<StatusOr<Logits>> results(
      n, StatusOr<Logits>(internalError("rank did not run")));
  std::mutex errorMutex;
  std::optional<Status> firstError;
  auto runRank = [&](int r) {
    results[r] = ranks_[r]->forward(batch);
    if (results[r].isOk())
      return;
    // The first failure is the cause; the others see the aborted group.
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!firstError) {
      firstError = results[r].status().withContext("tensor-parallel rank " +
                                                   std::to_string(r));
      group_->abort();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r)
    threads.emplace_back(runRank, r);
  runRank(0);
  for (std::thread &t : threads)
    t.join();
  if (firstError) {
    // Every rank has returned: the group can serve the next call.
    group_->reset();
    return *firstError;
  }
  return std::move(results[0]);
}

} // namespace

StatusOr<std::unique_ptr<Backend>>
createCpuTensorParallelBackend(const plan::Plan &plan,
                               std::vector<ParamTable> paramsPerRank,
                               const CpuBackendOptions &options) {
  const int n = plan.numRanks;
  if (static_cast<int>(paramsPerRank.size()) != n ||
      static_cast<int>(plan.ranks.size()) != n)
    return invalidArgument(
        "cpu backend: " + std::to_string(n) + "-rank plan with " +
        std::to_string(paramsPerRank.size()) + " parameter tables");
  auto backend = std::make_unique<TensorParallelBackend>(n);
  const int threads = options.numThreads > 0 ? options.numThreads
                                             : ThreadPool::defaultNumThreads();
  for (int r = 0; r < n; ++r) {
    CpuBackendOptions rankOptions = options;
    rankOptions.numThreads = std::max(1, threads / n);
    rankOptions.communicator = &backend->group().communicator(r);
    INFER_ASSIGN_OR_RETURN(
        std::unique_ptr<Backend> rank,
        createCpuBackend(plan, r, std::move(paramsPerRank[r]), rankOptions));
    backend->addRank(std::move(rank));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace infer::cpu
