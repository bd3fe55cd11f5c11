//===- Gemm.cpp - Matrix products of the CUDA backend ---------------------===//

#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/Kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

namespace infer::cuda {

/// The descriptors and chosen algorithm of one problem size.
struct Gemm::Shape {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  /// The heuristic's candidates, best first (algo is candidates[0] until
  /// Gemm::tune times them).
  std::vector<cublasLtMatmulAlgo_t> candidates;
  bool tuned = false;
  /// The rank (in the heuristic's order) of the candidate tune chose.
  int tunedRank = 0;
  /// fp8: the scales are applied in cuBLASLt's epilogue (outer vectors)
  /// rather than by launchScaleRowsColumns after it.
  bool outerVectorScales = false;

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
                                             size_t scratchBytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  INFER_CUDA_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&gemm->workspace_, workspaceBytes));
  gemm->workspaceBytes_ = workspaceBytes;
  if (scratchBytes > 0) {
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void **>(&gemm->scratch_), scratchBytes));
    gemm->scratchBytes_ = scratchBytes;
  }
  return gemm;
}

Gemm::~Gemm() {
  shapes_.clear();
  if (flush_)
    cudaFree(flush_);
  if (scratch_)
    cudaFree(scratch_);
  if (workspace_)
    cudaFree(workspace_);
  if (handle_)
    cublasLtDestroy(handle_);
}

namespace {

/// Heuristic candidates Gemm::tune times.
constexpr int kTuneCandidates = 8;

/// cuBLASLt's heuristic choices for the descriptors, best first (empty
/// where it has none: an empty answer or CUBLAS_STATUS_NOT_SUPPORTED).
Status chooseAlgorithms(cublasLtHandle_t handle, size_t workspaceBytes,
                        cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t w,
                        cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t y,
                        std::vector<cublasLtMatmulAlgo_t> &candidates) {
  candidates.clear();
  cublasLtMatmulPreference_t preference = nullptr;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int count = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, op, w, x, y, y, preference,
                                            kTuneCandidates, results, &count);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    return Status::ok();
  INFER_CUDA_RETURN_IF_ERROR(status);
  for (int i = 0; i < count; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS)
      candidates.push_back(results[i].algo);
  return Status::ok();
}

std::string shapeText(int64_t t, int64_t n, int64_t k) {
  return "y[" + std::to_string(t) + "," + std::to_string(n) +
         "] = x * w^T with K=" + std::to_string(k);
}

/// The row scales and token scales of fp8 cuBLASLt: one fp32 per row of
/// op(A) = w (N) and one per column of B = x^T (T).
Status setFp8Scales(cublasLtMatmulDesc_t op, const float *wScales,
                    const float *xScales) {
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wScales, sizeof(wScales)));
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xScales, sizeof(xScales)));
  return Status::ok();
}

constexpr size_t kScratchAlign = 256;

} // namespace

StatusOr<Gemm::Shape *> Gemm::shape(int64_t t, int64_t n, int64_t k,
                                    int64_t ldy) {
  auto key = std::make_tuple(false, n, t, k, ldy);
  if (auto it = shapes_.find(key); it != shapes_.end())
    return it->second.get();
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
  INFER_RETURN_IF_ERROR(chooseAlgorithms(handle_, workspaceBytes_, s->op, s->w,
                                         s->x, s->y, s->candidates));
  if (s->candidates.empty())
    return unimplemented("cuBLASLt has no bf16 algorithm for " +
                         shapeText(t, n, k));
  s->algo = s->candidates[0];
  Shape *raw = s.get();
  shapes_[key] = std::move(s);
  return raw;
}

StatusOr<Gemm::Shape *> Gemm::fp8Shape(int64_t t, int64_t n, int64_t k,
                                       const float *wScales,
                                       const float *xScales) {
  auto key = std::make_tuple(true, n, t, k, n);
  if (auto it = shapes_.find(key); it != shapes_.end())
    return it->second.get();
  auto s = std::make_unique<Shape>();
  // Hopper's fp8 tensor cores take only the TN layout: A = w transposed.
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->w, CUDA_R_8F_E4M3, k, n, k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->x, CUDA_R_8F_E4M3, k, t, k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->y, CUDA_R_32F, n, t, n));
  // Outer-vector scales first; without an algorithm for them (or where this
  // cuBLASLt rejects the mode), unit scales: the fp32 result is scaled by a
  // kernel after the product, the same arithmetic in another place.
  auto describe = [&](bool outer, bool &found) -> Status {
    if (s->op)
      cublasLtMatmulDescDestroy(s->op);
    s->op = nullptr;
    INFER_CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transW = CUBLAS_OP_T, transX = CUBLAS_OP_N;
    INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        s->op, CUBLASLT_MATMUL_DESC_TRANSA, &transW, sizeof(transW)));
    INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        s->op, CUBLASLT_MATMUL_DESC_TRANSB, &transX, sizeof(transX)));
    if (outer) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          s->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          s->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
      INFER_RETURN_IF_ERROR(setFp8Scales(s->op, wScales, xScales));
    }
    INFER_RETURN_IF_ERROR(chooseAlgorithms(handle_, workspaceBytes_, s->op,
                                           s->w, s->x, s->y, s->candidates));
    found = !s->candidates.empty();
    return Status::ok();
  };
  bool found = false;
  if (!describe(/*outer=*/true, found).isOk())
    found = false;
  s->outerVectorScales = found;
  if (!found)
    INFER_RETURN_IF_ERROR(describe(/*outer=*/false, found));
  if (!found)
    return unimplemented("cuBLASLt has no fp8 E4M3 algorithm for " +
                         shapeText(t, n, k));
  s->algo = s->candidates[0];
  Shape *raw = s.get();
  shapes_[key] = std::move(s);
  return raw;
}

const char *Gemm::fp8Scaling(int64_t t, int64_t n, int64_t k) const {
  auto it = shapes_.find(std::make_tuple(true, n, t, k, n));
  if (it == shapes_.end())
    return nullptr;
  return it->second->outerVectorScales ? "outer-vector epilogue"
                                       : "scale kernel";
}

int Gemm::tunedRank(bool fp8, int64_t t, int64_t n, int64_t k) const {
  auto it = shapes_.find(std::make_tuple(fp8, n, t, k, n));
  if (it == shapes_.end() || !it->second->tuned)
    return -1;
  return it->second->tunedRank;
}

Status Gemm::run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
                 int64_t t, int64_t n, int64_t k, int64_t ldy,
                 cudaStream_t stream) {
  if (t == 0 || n == 0)
    return Status::ok();
  INFER_ASSIGN_OR_RETURN(Shape * s, shape(t, n, k, ldy));
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&](const cublasLtMatmulAlgo_t &algo) {
    return cublasLtMatmul(handle_, s->op, &alpha, w, s->w, x, s->x, &beta, y,
                          s->y, y, s->y, &algo, workspace_, workspaceBytes_,
                          stream);
  };
  if (!s->tuned && t <= kTuneMaxRows)
    INFER_RETURN_IF_ERROR(tune(*s, launch, stream));
  INFER_CUDA_RETURN_IF_ERROR(launch(s->algo));
  return Status::ok();
}

Status Gemm::tune(
    Shape &s,
    const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t &)> &launch,
    cudaStream_t stream) {
  // Inside a capture nothing can be timed: the heuristic's first choice
  // stays, and a later eager call of the shape does not tune either.
  s.tuned = true;
  s.tunedRank = -1;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone || s.candidates.size() < 2)
    return Status::ok();
  if (!flush_ && !flushFailed_ &&
      cudaMalloc(&flush_, kFlushBytes) != cudaSuccess) {
    // Tune with warm caches rather than not at all.
    (void)cudaGetLastError();
    flush_ = nullptr;
    flushFailed_ = true;
  }
  constexpr int kTrials = 3;
  const size_t count = s.candidates.size();
  std::vector<cudaEvent_t> events(count * kTrials * 2, nullptr);
  Status status = Status::ok();
  for (cudaEvent_t &event : events)
    if (status.isOk())
      status = cudaStatus(cudaEventCreate(&event), "cudaEventCreate", __FILE__,
                          __LINE__);
  std::vector<bool> ran(count, true);
  for (size_t c = 0; c < count && status.isOk(); ++c)
    for (int r = 0; r < kTrials && status.isOk(); ++r) {
      // The weights come from HBM in a forward call, not from L2.
      if (flush_)
        status = cudaStatus(cudaMemsetAsync(flush_, r, kFlushBytes, stream),
                            "cudaMemsetAsync", __FILE__, __LINE__);
      if (status.isOk())
        status =
            cudaStatus(cudaEventRecord(events[2 * (c * kTrials + r)], stream),
                       "cudaEventRecord", __FILE__, __LINE__);
      // A candidate the library refuses at launch is left out.
      if (status.isOk() && launch(s.candidates[c]) != CUBLAS_STATUS_SUCCESS)
        ran[c] = false;
      if (status.isOk())
        status = cudaStatus(
            cudaEventRecord(events[2 * (c * kTrials + r) + 1], stream),
            "cudaEventRecord", __FILE__, __LINE__);
    }
  if (status.isOk())
    status = cudaStatus(cudaEventSynchronize(events.back()),
                        "cudaEventSynchronize", __FILE__, __LINE__);
  float best = 0.0f;
  size_t bestIndex = 0;
  for (size_t c = 0; c < count && status.isOk(); ++c) {
    if (!ran[c])
      continue;
    float fastest = 0.0f;
    for (int r = 0; r < kTrials && status.isOk(); ++r) {
      float ms = 0.0f;
      status =
          cudaStatus(cudaEventElapsedTime(&ms, events[2 * (c * kTrials + r)],
                                          events[2 * (c * kTrials + r) + 1]),
                     "cudaEventElapsedTime", __FILE__, __LINE__);
      fastest = r == 0 ? ms : std::min(fastest, ms);
    }
    if (status.isOk() && (best == 0.0f || fastest < best)) {
      best = fastest;
      bestIndex = c;
    }
  }
  for (cudaEvent_t event : events)
    if (event)
      cudaEventDestroy(event);
  INFER_RETURN_IF_ERROR(status);
  if (best > 0.0f) {
    s.algo = s.candidates[bestIndex];
    s.tunedRank = static_cast<int>(bestIndex);
  }
  return Status::ok();
}

bool Gemm::fp8CublasLtSupports(int64_t n, int64_t k, const uint8_t *codes) {
  return k % 16 == 0 && n % 4 == 0 &&
         reinterpret_cast<uintptr_t>(codes) % 16 == 0;
}

Status Gemm::runFp8(const float *x, const GemmWeight &w, const float *bias,
                    float *y, int64_t t, int64_t n, int64_t k,
                    cudaStream_t stream) {
  if (t == 0 || n == 0)
    return Status::ok();
  if (!w.fp8 || !w.rowScales)
    return invalidArgument("gemm: fp8 cuBLASLt needs E4M3 codes with row "
                           "scales");
  if (!fp8CublasLtSupports(n, k, w.fp8) ||
      reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return invalidArgument(
        "gemm: fp8 cuBLASLt needs K % 16 == 0, N % 4 == 0 and 16-byte "
        "aligned codes and y; got " +
        shapeText(t, n, k));
  // Scratch: [scales of `chunk` tokens | pad to 256 | codes, chunk x K]. A
  // chunk short of T is a multiple of 64 rows, so y's row blocks stay
  // 256-byte aligned.
  const int64_t fit =
      scratchBytes_ > kScratchAlign
          ? static_cast<int64_t>((scratchBytes_ - kScratchAlign) /
                                 (static_cast<size_t>(k) + sizeof(float)))
          : 0;
  const int64_t chunk = t <= fit ? t : fit / 64 * 64;
  if (chunk <= 0)
    return resourceExhausted(
        "gemm: fp8 weights at " + std::to_string(t) +
        " rows need a scratch of at least " +
        std::to_string(kScratchAlign + std::min<int64_t>(t, 64) *
                                           (k + int64_t(sizeof(float)))) +
        " bytes for the quantized activations (have " +
        std::to_string(scratchBytes_) + ")");
  float *xScales = reinterpret_cast<float *>(scratch_);
  const size_t scalesBytes = (chunk * sizeof(float) + kScratchAlign - 1) /
                             kScratchAlign * kScratchAlign;
  uint8_t *xCodes = scratch_ + scalesBytes;
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t r = 0; r < t; r += chunk) {
    const int64_t rows = std::min(chunk, t - r);
    float *yr = y + r * n;
    INFER_CUDA_RETURN_IF_ERROR(
        launchQuantizeRowsFp8(x + r * k, rows, k, xCodes, xScales, stream));
    INFER_ASSIGN_OR_RETURN(Shape * s,
                           fp8Shape(rows, n, k, w.rowScales, xScales));
    // Shapes are shared by weights of one size: this call's row scales.
    if (s->outerVectorScales)
      INFER_RETURN_IF_ERROR(setFp8Scales(s->op, w.rowScales, xScales));
    auto launch = [&](const cublasLtMatmulAlgo_t &algo) {
      return cublasLtMatmul(handle_, s->op, &alpha, w.fp8, s->w, xCodes, s->x,
                            &beta, yr, s->y, yr, s->y, &algo, workspace_,
                            workspaceBytes_, stream);
    };
    if (!s->tuned && rows <= kTuneMaxRows)
      INFER_RETURN_IF_ERROR(tune(*s, launch, stream));
    INFER_CUDA_RETURN_IF_ERROR(launch(s->algo));
    if (!s->outerVectorScales)
      INFER_CUDA_RETURN_IF_ERROR(launchScaleRowsColumns(
          yr, xScales, w.rowScales, bias, rows, n, stream));
    else if (bias)
      INFER_CUDA_RETURN_IF_ERROR(launchAddBias(yr, bias, rows, n, stream));
  }
  return Status::ok();
}

Gemm::Path Gemm::path(int64_t t, int64_t n, int64_t k, const GemmWeight &w) {
  if (!w.fp8)
    return t <= kCudaCoreBf16MaxRows ? Path::kGemv : Path::kCublasLt;
  if (t == 1)
    return Path::kGemv;
  const bool mma = gemvMmaSupports(kGemvMaxRows, k, true);
  if (t <= kFp8SkinnyMaxRows)
    return mma ? Path::kGemvMma : Path::kGemv;
  if (fp8CublasLtSupports(n, k, w.fp8))
    return Path::kFp8CublasLt;
  return t <= kFp8MmaMaxRows && mma ? Path::kGemvMma : Path::kDequantCublasLt;
}

const char *Gemm::pathName(Path path) {
  switch (path) {
  case Path::kGemv:
    return "gemv";
  case Path::kGemvMma:
    return "gemv-mma";
  case Path::kCublasLt:
    return "cuBLASLt";
  case Path::kFp8CublasLt:
    return "fp8 cuBLASLt";
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
  const Path p = path(t, n, k, w);
  switch (p) {
  case Path::kGemvMma:
  case Path::kGemv: {
    // The tensor-core kernel needs 16-byte aligned operands (the backend's
    // arena gives 256); the CUDA-core one takes any. Both take at most
    // kGemvMaxRows rows: more (fp8 up to kFp8MmaMaxRows) run as blocks of
    // rows, each streaming the weights again.
    const bool mma =
        p == Path::kGemvMma && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(w.fp8 ? static_cast<const void *>(w.fp8)
                                          : w.bf16) %
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
  case Path::kFp8CublasLt:
    return runFp8(x, w, bias, y, t, n, k, stream);
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
  return runDequantized(xBf16, w, bias, y, t, n, k, stream);
}

Status Gemm::runDequantized(const __nv_bfloat16 *xBf16, const GemmWeight &w,
                            const float *bias, float *y, int64_t t, int64_t n,
                            int64_t k, cudaStream_t stream) {
  // Chunks of rows decoded into the scratch, a multiple of 64 rows so that
  // every chunk's y column block stays 256-byte aligned.
  __nv_bfloat16 *dequant = reinterpret_cast<__nv_bfloat16 *>(scratch_);
  const int64_t fit = static_cast<int64_t>(
      scratchBytes_ / (sizeof(__nv_bfloat16) * static_cast<size_t>(k)));
  const int64_t chunk = n <= fit ? n : fit / 64 * 64;
  if (chunk <= 0)
    return resourceExhausted(
        "gemm: fp8 weights at " + std::to_string(t) +
        " rows need a dequantization scratch of at least " +
        std::to_string(64 * k * sizeof(__nv_bfloat16)) + " bytes (have " +
        std::to_string(scratchBytes_) + ")");
  for (int64_t n0 = 0; n0 < n; n0 += chunk) {
    const int64_t rows = std::min(chunk, n - n0);
    INFER_CUDA_RETURN_IF_ERROR(
        launchDequantizeFp8(w.fp8 + n0 * k, dequant, rows * k, stream));
    INFER_RETURN_IF_ERROR(run(xBf16, dequant, y + n0, t, rows, k, n, stream));
  }
  INFER_CUDA_RETURN_IF_ERROR(
      launchScaleColumns(y, w.rowScales, bias, t, n, stream));
  return Status::ok();
}

} // namespace infer::cuda
