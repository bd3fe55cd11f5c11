//===- ThreadCommunicator.cpp - Collectives between threads ---------------===//

#include "runtime/cpu/ThreadCommunicator.h"

#include <algorithm>
#include <cstring>

namespace infer::cpu {

class ThreadGroup::RankCommunicator final : public Communicator {
public:
  RankCommunicator(ThreadGroup &group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  Status allReduceSum(float *data, int64_t count) override {
    return group_.allReduceSum(rank_, data, count);
  }
  Status allGather(const float *send, int64_t count, float *recv) override {
    return group_.allGather(rank_, send, count, recv);
  }

private:
  ThreadGroup &group_;
  int rank_;
};

ThreadGroup::ThreadGroup(int size)
    : size_(std::max(size, 1)), buffers_(size_, nullptr), counts_(size_, 0) {
  for (int r = 0; r < size_; ++r)
    communicators_.push_back(std::make_unique<RankCommunicator>(*this, r));
}

void ThreadGroup::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  arrived_.notify_all();
}

void ThreadGroup::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = false;
  waiting_ = 0;
  std::fill(buffers_.begin(), buffers_.end(), nullptr);
  std::fill(counts_.begin(), counts_.end(), 0);
}

Status ThreadGroup::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_)
    return internalError(
        "the tensor-parallel group was aborted by a failed rank");
  const uint64_t generation = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return Status::ok();
  }
  arrived_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation)
    return internalError(
        "the tensor-parallel group was aborted by a failed rank");
  return Status::ok();
}

Status ThreadGroup::checkCounts(const char *collective) const {
  for (int r = 1; r < size_; ++r)
    if (counts_[r] != counts_[0])
      return invalidArgument(
          std::string(collective) + ": the ranks disagree on the element " +
          "count (rank 0: " + std::to_string(counts_[0]) + ", rank " +
          std::to_string(r) + ": " + std::to_string(counts_[r]) + ")");
  return Status::ok();
}

Status ThreadGroup::allReduceSum(int rank, float *data, int64_t count) {
  if (size_ == 1)
    return Status::ok();
  buffers_[rank] = data;
  counts_[rank] = count;
  INFER_RETURN_IF_ERROR(barrier());
  if (Status counts = checkCounts("all_reduce"); !counts.isOk()) {
    // Every rank read the counts before any may publish again.
    INFER_RETURN_IF_ERROR(barrier());
    return counts;
  }
  std::vector<float> sum(buffers_[0], buffers_[0] + count);
  for (int r = 1; r < size_; ++r) {
    const float *other = buffers_[r];
    for (int64_t i = 0; i < count; ++i)
      sum[i] += other[i];
  }
  // Nobody may overwrite its buffer while another rank still reads it.
  INFER_RETURN_IF_ERROR(barrier());
  std::memcpy(data, sum.data(), count * sizeof(float));
  return Status::ok();
}

Status ThreadGroup::allGather(int rank, const float *send, int64_t count,
                              float *recv) {
  buffers_[rank] = send;
  counts_[rank] = count;
  INFER_RETURN_IF_ERROR(barrier());
  if (Status counts = checkCounts("all_gather"); !counts.isOk()) {
    // Every rank read the counts before any may publish again.
    INFER_RETURN_IF_ERROR(barrier());
    return counts;
  }
  for (int r = 0; r < size_; ++r)
    std::memcpy(recv + r * count, buffers_[r], count * sizeof(float));
  return barrier();
}

} // namespace infer::cpu
