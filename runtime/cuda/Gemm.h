//===- Gemm.h - cuBLASLt matrix products of the CUDA backend ----*- C++ -*-===//
//
// y[T,N] (fp32) = x[T,K] (bf16) * w[N,K]^T (bf16), fp32 accumulation. In
// cuBLAS's column-major terms y^T[N,T] = op_T(w as [K,N]) * x^T[K,T]. The
// heuristic's algorithm is chosen once per (N, T, K) and cached.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GEMM_H
#define INFER_RUNTIME_CUDA_GEMM_H

#include "runtime/support/Status.h"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <tuple>

namespace infer::cuda {

class Gemm {
public:
  /// A cuBLASLt handle and a `workspaceBytes` device workspace.
  static StatusOr<std::unique_ptr<Gemm>> create(size_t workspaceBytes);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  Status run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
             int64_t t, int64_t n, int64_t k, cudaStream_t stream);

private:
  Gemm() = default;
  struct Shape;
  StatusOr<const Shape *> shape(int64_t t, int64_t n, int64_t k);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Shape>>
      shapes_;
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GEMM_H
