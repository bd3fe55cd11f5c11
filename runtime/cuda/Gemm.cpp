//===- Gemm.cpp - Matrix products of the CUDA backend ---------------------===//

#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/Kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>

namespace infer::cuda {

/// The descriptors and chosen algorithm of one problem size.
struct Gemm::Shape {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Shape() {
    if (y)
      cublasLtMatrixLayoutDestroy(y);
    if (x)
      cublasLtMatrixLayoutDestroy(x);
    if (w)
      cublasLtMatrixLayoutDestroy(w);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

StatusOr<std::unique_ptr<Gemm>> Gemm::create(size_t workspaceBytes,
                                             size_t dequantBytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  INFER_CUDA_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&gemm->workspace_, workspaceBytes));
  gemm->workspaceBytes_ = workspaceBytes;
  if (dequantBytes > 0) {
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void **>(&gemm->dequant_), dequantBytes));
    gemm->dequantBytes_ = dequantBytes;
  }
  return gemm;
}

Gemm::~Gemm() {
  shapes_.clear();
  if (dequant_)
    cudaFree(dequant_);
  if (workspace_)
    cudaFree(workspace_);
  if (handle_)
    cublasLtDestroy(handle_);
}

StatusOr<const Gemm::Shape *> Gemm::shape(int64_t t, int64_t n, int64_t k,
                                          int64_t ldy) {
  auto key = std::make_tuple(n, t, k, ldy);
  if (auto it = shapes_.find(key); it != shapes_.end())
    return static_cast<const Shape *>(it->second.get());
  auto s = std::make_unique<Shape>();
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transW = CUBLAS_OP_T, transX = CUBLAS_OP_N;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      s->op, CUBLASLT_MATMUL_DESC_TRANSA, &transW, sizeof(transW)));
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      s->op, CUBLASLT_MATMUL_DESC_TRANSB, &transX, sizeof(transX)));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->w, CUDA_R_16BF, k, n, k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->x, CUDA_R_16BF, k, t, k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->y, CUDA_R_32F, n, t, ldy));

  cublasLtMatmulPreference_t preference = nullptr;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  Status status =
      cudaStatus(cublasLtMatmulPreferenceSetAttribute(
                     preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                     &workspaceBytes_, sizeof(workspaceBytes_)),
                 "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__);
  if (status.isOk())
    status = cudaStatus(
        cublasLtMatmulAlgoGetHeuristic(handle_, s->op, s->w, s->x, s->y, s->y,
                                       preference, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  cublasLtMatmulPreferenceDestroy(preference);
  INFER_RETURN_IF_ERROR(status);
  if (found == 0)
    return unimplemented("cuBLASLt has no bf16 algorithm for y[" +
                         std::to_string(t) + "," + std::to_string(n) +
                         "] = x * w^T with K=" + std::to_string(k));
  s->algo = result.algo;
  const Shape *raw = s.get();
  shapes_[key] = std::move(s);
  return raw;
}

Status Gemm::run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
                 int64_t t, int64_t n, int64_t k, int64_t ldy,
                 cudaStream_t stream) {
  if (t == 0 || n == 0)
    return Status::ok();
  INFER_ASSIGN_OR_RETURN(const Shape *s, shape(t, n, k, ldy));
  const float alpha = 1.0f, beta = 0.0f;
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, s->op, &alpha, w, s->w, x, s->x, &beta, y, s->y,
                     y, s->y, &s->algo, workspace_, workspaceBytes_, stream));
  return Status::ok();
}

Gemm::Path Gemm::path(int64_t t, int64_t k, const GemmWeight &w) {
  if (!w.fp8)
    return t <= kCudaCoreBf16MaxRows ? Path::kGemv : Path::kCublasLt;
  if (t == 1)
    return Path::kGemv;
  if (t <= kFp8MmaMaxRows && gemvMmaSupports(kGemvMaxRows, k, true))
    return Path::kGemvMma;
  return t <= kGemvMaxRows ? Path::kGemv : Path::kDequantCublasLt;
}

const char *Gemm::pathName(Path path) {
  switch (path) {
  case Path::kGemv:
    return "gemv";
  case Path::kGemvMma:
    return "gemv-mma";
  case Path::kCublasLt:
    return "cuBLASLt";
  case Path::kDequantCublasLt:
    return "dequant+cuBLASLt";
  }
  return "?";
}

Status Gemm::linear(const float *x, const __nv_bfloat16 *xBf16,
                    const GemmWeight &w, const float *bias, float *y, int64_t t,
                    int64_t n, int64_t k, cudaStream_t stream) {
  if (t == 0 || n == 0)
    return Status::ok();
  if (!w.bf16 && !(w.fp8 && w.rowScales))
    return invalidArgument("gemm: the weight has neither bf16 values nor fp8 "
                           "codes with row scales");
  switch (path(t, k, w)) {
  case Path::kGemvMma:
  case Path::kGemv: {
    // The tensor-core kernel needs 16-byte aligned operands (the backend's
    // arena gives 256); the CUDA-core one takes any. Both take at most
    // kGemvMaxRows rows: more (fp8 up to kFp8MmaMaxRows) run as blocks of
    // rows, each streaming the weights again.
    const bool mma = path(t, k, w) == Path::kGemvMma &&
                     reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(
                         w.fp8 ? static_cast<const void *>(w.fp8) : w.bf16) %
                             16 ==
                         0;
    for (int64_t r = 0; r < t; r += kGemvMaxRows) {
      const int64_t rows = std::min(kGemvMaxRows, t - r);
      const float *xr = x + r * k;
      float *yr = y + r * n;
      INFER_CUDA_RETURN_IF_ERROR(
          mma ? (w.fp8
                     ? launchGemvMmaFp8(xr, w.fp8, w.rowScales, bias, yr, rows,
                                        n, k, stream)
                     : launchGemvMma(xr, w.bf16, bias, yr, rows, n, k, stream))
              : (w.fp8 ? launchGemvFp8(xr, w.fp8, w.rowScales, bias, yr, rows,
                                       n, k, stream)
                       : launchGemv(xr, w.bf16, bias, yr, rows, n, k, stream)));
    }
    return Status::ok();
  }
  case Path::kCublasLt:
  case Path::kDequantCublasLt:
    break;
  }
  if (!xBf16)
    return invalidArgument("gemm: " + std::to_string(t) +
                           " rows need the bf16 copy of x");
  if (w.bf16) {
    INFER_RETURN_IF_ERROR(run(xBf16, w.bf16, y, t, n, k, n, stream));
    if (bias)
      INFER_CUDA_RETURN_IF_ERROR(launchAddBias(y, bias, t, n, stream));
    return Status::ok();
  }
  // fp8 at large T: chunks of rows decoded into the scratch, a multiple of
  // 64 rows so that every chunk's y column block stays 256-byte aligned.
  const int64_t fit = static_cast<int64_t>(
      dequantBytes_ / (sizeof(__nv_bfloat16) * static_cast<size_t>(k)));
  const int64_t chunk = n <= fit ? n : fit / 64 * 64;
  if (chunk <= 0)
    return resourceExhausted(
        "gemm: fp8 weights at " + std::to_string(t) +
        " rows need a dequantization scratch of at least " +
        std::to_string(64 * k * sizeof(__nv_bfloat16)) + " bytes (have " +
        std::to_string(dequantBytes_) + ")");
  for (int64_t n0 = 0; n0 < n; n0 += chunk) {
    const int64_t rows = std::min(chunk, n - n0);
    INFER_CUDA_RETURN_IF_ERROR(
        launchDequantizeFp8(w.fp8 + n0 * k, dequant_, rows * k, stream));
    INFER_RETURN_IF_ERROR(run(xBf16, dequant_, y + n0, t, rows, k, n, stream));
  }
  INFER_CUDA_RETURN_IF_ERROR(
      launchScaleColumns(y, w.rowScales, bias, t, n, stream));
  return Status::ok();
}

} // namespace infer::cuda
