//===- GemmBenchSupport.cuh - What the GEMM benchmarks share -*- CUDA -*-===//
//
// infer-gemm-search, infer-swiglu-gemm and infer-overlap-bench:
// BenchSupport.h's fatal errors and cuBLAS's (check), comma-separated integer
// lists and NxK shapes of their flags, the cuBLASLt descriptor and preferences
// the CUDA backend uses, and the random bf16 operands they time (constant ones
// draw less power and run faster than a model's).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_BENCH_GEMMBENCHSUPPORT_CUH
#define INFER_BENCH_GEMMBENCHSUPPORT_CUH

#include "bench/BenchSupport.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace infer::bench {

inline void check(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    die(std::string(what) + ": cuBLAS status " +
        std::to_string(static_cast<int>(status)));
}

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

/// The product y^T[N, T] = w[K, N]^T x^T[K, T] as the CUDA backend asks
/// cuBLASLt for it (runtime/cuda/Gemm.cpp): fp32 compute and scale, w
/// transposed.
inline cublasLtMatmulDesc_t backendMatmulDesc() {
  cublasLtMatmulDesc_t op;
  check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t transW = CUBLAS_OP_T, transX = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transW,
                                       sizeof(transW)),
        "transa");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transX,
                                       sizeof(transX)),
        "transb");
  return op;
}

/// The backend's heuristic preferences: its workspace and, for bf16 outputs
/// (restrictReduction), split-K partial sums reduced in fp32 only.
inline cublasLtMatmulPreference_t backendPreference(size_t workspaceBytes,
                                                    bool restrictReduction) {
  cublasLtMatmulPreference_t preference;
  check(cublasLtMatmulPreferenceCreate(&preference), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(
            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &workspaceBytes, sizeof(workspaceBytes)),
        "workspace preference");
  const uint32_t schemes =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (restrictReduction)
    check(cublasLtMatmulPreferenceSetAttribute(
              preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
              sizeof(schemes)),
          "reduction preference");
  return preference;
}

/// "6144x4096,4096x4096" -> {{6144, 4096}, {4096, 4096}} (--shapes: the
/// weights' N x K).
inline std::vector<std::pair<int64_t, int64_t>>
parseShapes(const std::string &text) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos)
      end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t x = item.find('x');
    if (x == std::string::npos)
      die("--shapes takes NxK,...");
    shapes.push_back(
        {std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
    pos = end + 1;
  }
  return shapes;
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
