//===- GemmBenchSupport.cuh - What the GEMM benchmarks share ----*- CUDA
//-*-===//
//
// infer-gemm-search and infer-swiglu-gemm: comma-separated integer lists of
// their flags, and the random bf16 operands they time (constant ones draw
// less power and run faster than a model's).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_BENCH_GEMMBENCHSUPPORT_CUH
#define INFER_BENCH_GEMMBENCHSUPPORT_CUH

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

namespace infer::bench {

/// "256,1024,2048" -> {256, 1024, 2048}.
inline std::vector<int64_t> parseList(const std::string &text) {
  std::vector<int64_t> values;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos)
      end = text.size();
    values.push_back(std::stoll(text.substr(pos, end - pos)));
    pos = end + 1;
  }
  return values;
}

/// p[i] = a hash of (i, seed) spread uniformly over [-scale, scale).
static __global__ void fillKernel(__nv_bfloat16 *p, int64_t n, uint32_t seed,
                                  float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) *
                            scale);
  }
}

} // namespace infer::bench

#endif // INFER_BENCH_GEMMBENCHSUPPORT_CUH
