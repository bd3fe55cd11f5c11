//===- ThreadPool.h - A fixed pool of worker threads ------------*- C++ -*-===//
//
// The CPU backend splits matrix rows and attention heads across a few
// persistent threads; starting threads per kernel would cost more than the
// small decode-time kernels themselves.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CPU_THREADPOOL_H
#define INFER_RUNTIME_CPU_THREADPOOL_H

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infer::cpu {

class ThreadPool {
public:
  /// `numThreads` includes the calling thread; 1 runs everything inline.
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least
  /// `minChunk` long, and returns when all are done.
  void parallelFor(int64_t n, int64_t minChunk,
                   const std::function<void(int64_t, int64_t)> &fn);

  /// The number of hardware threads, at least 1.
  static int defaultNumThreads();

private:
  void workerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t jobSize_ = 0;
  int64_t chunkSize_ = 0;
  int64_t nextChunk_ = 0;
  int64_t numChunks_ = 0;
  int64_t chunksDone_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_THREADPOOL_H
