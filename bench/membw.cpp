//===- membw.cpp - Host memory bandwidth for the CPU roofline -------------===//
//
// Streams a 256 MiB fp32 array (a sum, like a GEMV reading its weights once)
// with 1..N threads and prints the best GB/s of 5 passes. Build and run:
//   g++ -O3 -march=native -pthread bench/membw.cpp -o /tmp/membw && /tmp/membw
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  const size_t n = (256u << 20) / sizeof(float);
  std::vector<float> data(n, 1.0f);
  const unsigned maxThreads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads = 1; threads <= maxThreads; threads *= 2) {
    double best = 0.0;
    for (int pass = 0; pass < 5; ++pass) {
      std::vector<float> sums(threads);
      auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          const size_t begin = n * t / threads, end = n * (t + 1) / threads;
          float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          for (size_t i = begin; i + 3 < end; i += 4) {
            s0 += data[i];
            s1 += data[i + 1];
            s2 += data[i + 2];
            s3 += data[i + 3];
          }
          sums[t] = s0 + s1 + s2 + s3;
        });
      for (std::thread &th : pool)
        th.join();
      const double s = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      best = std::max(best, n * sizeof(float) / s / 1e9);
      if (sums[0] < 0)
        std::printf("unreachable\n");
    }
    std::printf("%u thread(s): %.1f GB/s read\n", threads, best);
  }
  return 0;
}
