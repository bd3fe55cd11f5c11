//===- ThreadPool.cpp - A fixed pool of workers for parallel loops --------===//

#include "runtime/cpu/ThreadPool.h"

#include <algorithm>

namespace infer::cpu {

ThreadPool::ThreadPool(int numThreads) {
  for (int i = 1; i < numThreads; ++i)
    workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

int ThreadPool::defaultNumThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::parallelFor(int64_t n, int64_t minChunk,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  const int64_t threads = numThreads();
  minChunk = std::max<int64_t>(minChunk, 1);
  if (threads == 1 || n <= minChunk) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven chunks without much locking.
  int64_t chunks =
      std::min<int64_t>(threads * 4, (n + minChunk - 1) / minChunk);
  int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  jobSize_ = n;
  chunkSize_ = chunk;
  nextChunk_ = 0;
  numChunks_ = chunks;
  chunksDone_ = 0;
  ++generation_;
  wake_.notify_all();
  while (nextChunk_ < numChunks_) {
    int64_t c = nextChunk_++;
    lock.unlock();
    fn(c * chunk, std::min(n, (c + 1) * chunk));
    lock.lock();
    ++chunksDone_;
  }
  done_.wait(lock, [&] { return chunksDone_ == numChunks_; });
  job_ = nullptr;
}

void ThreadPool::workerLoop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] {
      return stop_ || (generation_ != seen && job_ && nextChunk_ < numChunks_);
    });
    if (stop_)
      return;
    seen = generation_;
    while (job_ && nextChunk_ < numChunks_) {
      int64_t c = nextChunk_++;
      const auto *fn = job_;
      int64_t n = jobSize_, chunk = chunkSize_;
      lock.unlock();
      (*fn)(c * chunk, std::min(n, (c + 1) * chunk));
      lock.lock();
      if (++chunksDone_ == numChunks_)
        done_.notify_all();
    }
  }
}

} // namespace infer::cpu
