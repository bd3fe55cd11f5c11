//===- BenchSupport.h - What the CUDA benchmarks share on the host
//---------===//
//
// The CUDA benchmark tools' fatal errors (die, check), their comma-separated
// option lists and their int32 uploads (block tables, context lengths, query
// starts). Host code only, so
// that .cpp tools include it as well as GemmBenchSupport.cuh does.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_BENCH_BENCHSUPPORT_H
#define INFER_BENCH_BENCHSUPPORT_H

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace infer::bench {

/// The benchmark's name, which die() puts before its message; each main
/// sets it first.
inline const char *benchTool = "infer-bench";

/// Prints "<benchTool>: message" to stderr and exits with 1.
[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "%s: %s\n", benchTool, message.c_str());
  std::exit(1);
}

inline void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    die(std::string(what) + ": " + cudaGetErrorString(status));
}

/// The non-empty items of a comma-separated list ("256:128,1024:128").
inline std::vector<std::string> splitCommas(const std::string &s) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t comma = s.find(',', begin);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > begin)
      parts.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

/// A device copy of `host` (cudaFree it); dies where that fails.
inline int32_t *uploadInts(const std::vector<int32_t> &host) {
  int32_t *device = nullptr;
  check(cudaMalloc(&device, host.size() * sizeof(int32_t)), "int32 buffer");
  check(cudaMemcpy(device, host.data(), host.size() * sizeof(int32_t),
                   cudaMemcpyHostToDevice),
        "int32 upload");
  return device;
}

} // namespace infer::bench

#endif // INFER_BENCH_BENCHSUPPORT_H
