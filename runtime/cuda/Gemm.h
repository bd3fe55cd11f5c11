//===- Gemm.h - Matrix products of the CUDA backend -------------*- C++ -*-===//
//
// y[T,N] (fp32) = x[T,K] * w[N,K]^T (+ bias), fp32 accumulation, w bf16 or
// FP8 E4M3 codes with an fp32 scale per row. linear() routes by T:
//
//   bf16, T <= 2        the CUDA-core skinny kernel (GemvKernels.h): the
//                       fp32 x as is, the weights streamed once (decode)
//   bf16, T > 2         cuBLASLt on x converted to bf16 (from T = 4 it beats
//                       both skinny kernels: infer-cuda-bench --gemms on an
//                       H100, Llama-3-8B shapes)
//   fp8, T = 1          the CUDA-core skinny kernel
//   fp8, 2 <= T <= 24   the tensor-core skinny kernel (mma.sync, codes
//                       decoded to bf16 in registers, x rounded to bf16) in
//                       blocks of 8 rows, where K % 64 == 0; else the
//                       CUDA-core one up to T = 8 (it runs out of FMA
//                       throughput beyond: 2x slower than the tensor cores
//                       at T = 8)
//   larger T, fp8       the codes decoded to bf16 (exact) in chunks of rows
//                       that fill the dequantization scratch, cuBLASLt per
//                       chunk, then y[:, j] *= rowScales[j] (+ bias): the
//                       same products as bf16 weights, no activation
//                       quantization; 2.7x the bf16 GEMM time at T = 16
//                       (decode) and 1.5x a bf16 prefill of 512 tokens
//
// In cuBLAS's column-major terms y^T[N,T] = op_T(w as [K,N]) * x^T[K,T]. The
// heuristic's algorithm is chosen once per (N, T, K, ldy) and cached.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GEMM_H
#define INFER_RUNTIME_CUDA_GEMM_H

#include "runtime/cuda/GemvKernels.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <tuple>

namespace infer::cuda {

/// A weight matrix [N, K] on the device: bf16, or E4M3 codes and row scales.
struct GemmWeight {
  const __nv_bfloat16 *bf16 = nullptr;
  const uint8_t *fp8 = nullptr;
  const float *rowScales = nullptr;
};

class Gemm {
public:
  /// A cuBLASLt handle, a `workspaceBytes` device workspace and a
  /// `dequantBytes` scratch for fp8 weights at large T (0: no fp8 weights).
  static StatusOr<std::unique_ptr<Gemm>> create(size_t workspaceBytes,
                                                size_t dequantBytes = 0);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  enum class Path { kGemv, kGemvMma, kCublasLt, kDequantCublasLt };
  /// What linear() runs for T rows, width K and `w` (16-byte aligned
  /// operands; a misaligned one takes kGemv instead of kGemvMma).
  static Path path(int64_t t, int64_t k, const GemmWeight &w);
  static const char *pathName(Path path);
  /// Whether that path reads the bf16 copy of x.
  static bool needsBf16Input(int64_t t, int64_t k, const GemmWeight &w) {
    const Path p = path(t, k, w);
    return p == Path::kCublasLt || p == Path::kDequantCublasLt;
  }

  /// y[T,N] = x[T,K] * w^T (+ bias, may be null), routed as above. `x` is
  /// the fp32 activation; `xBf16` the same rounded to bf16 where
  /// needsBf16Input (else it may be null). Graph-capturable once the shape has
  /// run outside a capture (cuBLASLt's heuristic query).
  Status linear(const float *x, const __nv_bfloat16 *xBf16, const GemmWeight &w,
                const float *bias, float *y, int64_t t, int64_t n, int64_t k,
                cudaStream_t stream);

  /// cuBLASLt alone: y = x * w^T, both bf16 (no routing).
  Status run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
             int64_t t, int64_t n, int64_t k, cudaStream_t stream) {
    return run(x, w, y, t, n, k, n, stream);
  }

private:
  /// bf16 rows the CUDA-core kernel takes (T = 2: 5.65 ms of GEMMs per
  /// Llama-3-8B token against cuBLASLt's 6.26 and the tensor-core kernel's
  /// 6.04; T = 4: cuBLASLt 5.67, tensor cores 5.92, CUDA cores 6.14).
  static constexpr int64_t kCudaCoreBf16MaxRows = 2;
  /// fp8 rows the tensor-core kernel takes in blocks of kGemvMaxRows: three
  /// blocks (3 x 3.74 ms per token at T = 8) still beat dequantization
  /// (15.1 ms at T = 16).
  static constexpr int64_t kFp8MmaMaxRows = 24;

  Gemm() = default;
  struct Shape;
  StatusOr<const Shape *> shape(int64_t t, int64_t n, int64_t k, int64_t ldy);
  /// y has leading dimension ldy (a column block of a wider output).
  Status run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
             int64_t t, int64_t n, int64_t k, int64_t ldy, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  __nv_bfloat16 *dequant_ = nullptr;
  size_t dequantBytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>,
           std::unique_ptr<Shape>>
      shapes_;
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GEMM_H
