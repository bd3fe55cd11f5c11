//===- Gemm.cpp - Matrix products of the CUDA backend ---------------------===//

#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/CudaStatus.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/support/Env.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace infer::cuda {

/// The descriptors and chosen algorithm of one ShapeKey.
struct Gemm::Shape {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  /// The heuristic's candidates, best first (algo is candidates[0] until
  /// Gemm::tune times them); empty where it has none.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  bool tuned = false;
  /// The rank (in the heuristic's order) of the candidate tune chose;
  /// ranks past the heuristic's candidates are the skinny kernel's.
  int tunedRank = 0;
  /// > 0: tune chose the Hopper skinny kernel with this many K splits, in
  /// clusters of skinnyCluster CTAs.
  int64_t skinnySplits = 0, skinnyCluster = 1;

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

namespace {
/// INFER_SKINNY_GEMM=1: Gemm::create turns the skinny candidates on.
bool skinnyGemmRequested() {
  const char *value = std::getenv("INFER_SKINNY_GEMM");
  return value && std::strcmp(value, "1") == 0;
}

} // namespace

StatusOr<std::unique_ptr<Gemm>> Gemm::create(size_t workspaceBytes,
                                             size_t scratchBytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  INFER_CUDA_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  INFER_CUDA_RETURN_IF_ERROR(cudaMalloc(&gemm->workspace_, workspaceBytes));
  gemm->workspaceBytes_ = workspaceBytes;
  gemm->skinnyCandidates_ = skinnyGemmRequested();
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

/// Whether `algo` writes D apart from C (the heuristic sees layouts, not
/// pointers; a residual is a C other than D).
bool supportsOutOfPlace(const cublasLtMatmulAlgo_t &algo) {
  int32_t support = 0;
  size_t written = 0;
  return cublasLtMatmulAlgoCapGetAttribute(
             &algo, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &support,
             sizeof(support), &written) == CUBLAS_STATUS_SUCCESS &&
         support != 0;
}

/// cuBLASLt's heuristic choices for the descriptors, best first (empty
/// where it has none: an empty answer or CUBLAS_STATUS_NOT_SUPPORTED); with
/// `outOfPlace` (C != D) only those that support it.
Status chooseAlgorithms(cublasLtHandle_t handle, size_t workspaceBytes,
                        cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t w,
                        cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t y,
                        bool outOfPlace,
                        std::vector<cublasLtMatmulAlgo_t> &candidates) {
  candidates.clear();
  cublasLtMatmulPreference_t preference = nullptr;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int count = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes));
  // Split-K partial sums must add up in fp32: a scheme that reduces them in
  // a 16-bit output's type (in place, or OUTPUT_TYPE) rounds every partial
  // sum to bf16 (measured on an H100: up to 30 bf16 ulps off at K = 4096).
  cudaDataType_t yType = CUDA_R_32F;
  size_t written = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatrixLayoutGetAttribute(y, CUBLASLT_MATRIX_LAYOUT_TYPE,
                                              &yType, sizeof(yType), &written);
  if (status == CUBLAS_STATUS_SUCCESS && yType != CUDA_R_32F) {
    const uint32_t schemes =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
        sizeof(schemes));
  }
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, op, w, x, y, y, preference,
                                            kTuneCandidates, results, &count);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    return Status::ok();
  INFER_CUDA_RETURN_IF_ERROR(status);
  for (int i = 0; i < count; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS &&
        (!outOfPlace || supportsOutOfPlace(results[i].algo)))
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

/// The outer-vector scaling of both operands, with their scales (a
/// cuBLASLt that does not know the mode refuses the attribute).
Status setOuterVectorScales(cublasLtMatmulDesc_t op, const float *wScales,
                            const float *xScales) {
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  return setFp8Scales(op, wScales, xScales);
}

Status setBias(cublasLtMatmulDesc_t op, const void *bias) {
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  return Status::ok();
}

template <typename Y> constexpr cudaDataType_t cudaTypeOf() {
  static_assert(std::is_same_v<Y, float> || std::is_same_v<Y, __nv_bfloat16>,
                "GEMM outputs are fp32 or bf16");
  return std::is_same_v<Y, float> ? CUDA_R_32F : CUDA_R_16BF;
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

constexpr size_t kScratchAlign = 256;

/// Whether `residual` may be read as C while y[t, n] is written: 16-byte
/// aligned (cuBLASLt reads C in vectors) and apart from y.
template <typename Y>
Status checkResidual(const Y *residual, const Y *y, int64_t t, int64_t n) {
  if (!residual)
    return Status::ok();
  if (!aligned16(residual))
    return invalidArgument("gemm: the residual must be 16-byte aligned");
  const Y *end = y + t * n, *residualEnd = residual + t * n;
  if (residual < end && y < residualEnd)
    return invalidArgument("gemm: the residual overlaps y (cuBLASLt's C must "
                           "be apart from D: tuning runs the product several "
                           "times)");
  return Status::ok();
}

} // namespace

StatusOr<Gemm::Shape *> Gemm::shape(const ShapeKey &key, const void *bias,
                                    const float *wScales,
                                    const float *xScales) {
  if (auto it = shapes_.find(key); it != shapes_.end())
    return it->second.get();
  auto s = std::make_unique<Shape>();
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Hopper's fp8 tensor cores take only the TN layout: A = w transposed.
  const cublasOperation_t transW = CUBLAS_OP_T, transX = CUBLAS_OP_N;
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      s->op, CUBLASLT_MATMUL_DESC_TRANSA, &transW, sizeof(transW)));
  INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      s->op, CUBLASLT_MATMUL_DESC_TRANSB, &transX, sizeof(transX)));
  if (key.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t biasType = key.y;
    INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        s->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType,
        sizeof(biasType)));
    INFER_RETURN_IF_ERROR(setBias(s->op, bias));
  }
  if (key.fp8 && fp8FastAccumulation()) {
    const int8_t fast = 1;
    INFER_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        s->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  const cudaDataType_t operands = key.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->w, operands, key.k, key.n, key.k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->x, operands, key.k, key.t, key.k));
  INFER_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&s->y, key.y, key.n, key.t, key.ldy));
  // A cuBLASLt without outer-vector scaling refuses the mode: no candidates,
  // as where the heuristic has none.
  const bool described = key.scaling != Scaling::kOuterVectors ||
                         setOuterVectorScales(s->op, wScales, xScales).isOk();
  if (described)
    INFER_RETURN_IF_ERROR(chooseAlgorithms(handle_, workspaceBytes_, s->op,
                                           s->w, s->x, s->y, key.residual,
                                           s->candidates));
  if (!s->candidates.empty())
    s->algo = s->candidates[0];
  Shape *raw = s.get();
  shapes_[key] = std::move(s);
  return raw;
}

bool Gemm::fp8FastAccumulation() {
  static const bool on = envSwitchOn("INFER_FP8_FAST_ACCUM");
  return on;
}

const Gemm::Shape *Gemm::findShape(const ShapeKey &key) const {
  auto it = shapes_.find(key);
  return it == shapes_.end() ? nullptr : it->second.get();
}

Gemm::ShapeKey Gemm::fp8OuterKey(int64_t t, int64_t n, int64_t k,
                                 cudaDataType_t y, bool bias, bool residual) {
  ShapeKey key;
  key.fp8 = true;
  key.y = y;
  key.bias = bias;
  key.residual = residual;
  key.scaling = Scaling::kOuterVectors;
  key.n = n;
  key.t = t;
  key.k = k;
  key.ldy = n;
  return key;
}

const char *Gemm::fp8Scaling(int64_t t, int64_t n, int64_t k,
                             cudaDataType_t yType, bool epilogueBias,
                             bool residual) const {
  const Shape *outer =
      findShape(fp8OuterKey(t, n, k, yType, epilogueBias, residual));
  if (!outer)
    return nullptr;
  if (!outer->candidates.empty())
    return "outer-vector epilogue";
  return yType == CUDA_R_32F ? "scale kernel" : "skinny kernels";
}

int Gemm::tunedRank(bool fp8, int64_t t, int64_t n, int64_t k,
                    cudaDataType_t yType, bool epilogueBias,
                    bool residual) const {
  ShapeKey key;
  key.fp8 = fp8;
  key.y = yType;
  key.bias = epilogueBias;
  key.residual = residual;
  key.scaling = fp8 ? Scaling::kOuterVectors : Scaling::kNone;
  key.n = n;
  key.t = t;
  key.k = k;
  key.ldy = n;
  const Shape *s = findShape(key);
  if (fp8 && (!s || s->candidates.empty())) {
    key.scaling = Scaling::kNone;
    s = findShape(key);
  }
  if (!s || !s->tuned)
    return -1;
  return s->tunedRank;
}

Status Gemm::tune(
    Shape &s,
    const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t &)> &launch,
    cudaStream_t stream, const std::vector<SkinnyCandidate> &skinny) {
  // Inside a capture nothing can be timed: the heuristic's first choice
  // stays, and a later eager call of the shape does not tune either.
  s.tuned = true;
  s.tunedRank = -1;
  s.skinnySplits = 0;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capturing));
  const size_t heuristic = s.candidates.size();
  const size_t count = heuristic + skinny.size();
  if (capturing != cudaStreamCaptureStatusNone || count < 2)
    return Status::ok();
  if (!flush_ && !flushFailed_ &&
      cudaMalloc(&flush_, kFlushBytes) != cudaSuccess) {
    // Tune with warm caches rather than not at all.
    (void)cudaGetLastError();
    flush_ = nullptr;
    flushFailed_ = true;
  }
  constexpr int kTrials = 3;
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
      // A candidate the library or the launcher refuses is left out.
      if (status.isOk() &&
          (c < heuristic ? launch(s.candidates[c]) != CUBLAS_STATUS_SUCCESS
                         : skinny[c - heuristic].launch() != cudaSuccess)) {
        (void)cudaGetLastError();
        ran[c] = false;
      }
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
    if (bestIndex < heuristic)
      s.algo = s.candidates[bestIndex];
    else {
      s.skinnySplits = skinny[bestIndex - heuristic].splits;
      s.skinnyCluster = skinny[bestIndex - heuristic].cluster;
    }
    s.tunedRank = static_cast<int>(bestIndex);
  }
  return Status::ok();
}

template <typename Y>
Status Gemm::runBf16(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                     const Y *bias, Y *y, int64_t t, int64_t n, int64_t k,
                     int64_t ldy, cudaStream_t stream, const Y *residual) {
  if (t == 0 || n == 0)
    return Status::ok();
  ShapeKey key;
  key.y = cudaTypeOf<Y>();
  key.bias = bias != nullptr;
  key.residual = residual != nullptr;
  key.n = n;
  key.t = t;
  key.k = k;
  key.ldy = ldy;
  INFER_ASSIGN_OR_RETURN(Shape * s, shape(key, bias, nullptr, nullptr));
  if (s->candidates.empty())
    return unimplemented("cuBLASLt has no bf16 algorithm for " +
                         shapeText(t, n, k));
  // Shapes are shared by weights of one size: this call's bias.
  if (bias)
    INFER_RETURN_IF_ERROR(setBias(s->op, bias));
  // The residual is C (y's layout), added in fp32 before D's one rounding.
  const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  const Y *c = residual ? residual : y;
  auto launch = [&](const cublasLtMatmulAlgo_t &algo) {
    return cublasLtMatmul(handle_, s->op, &alpha, w, s->w, x, s->x, &beta, c,
                          s->y, y, s->y, &algo, workspace_, workspaceBytes_,
                          stream);
  };
  if constexpr (std::is_same_v<Y, __nv_bfloat16>) {
    // The Hopper skinny kernel competes with the heuristic's candidates in
    // tuning; the workspace holds its partial sums (cuBLASLt's and its
    // launches are ordered on the stream).
    auto skinnyLaunch = [&, ldy](int64_t splits, int64_t cluster) {
      return ldy != n ? cudaErrorInvalidValue
                      : launchSkinnyGemmSm90(x, w, bias, residual, y, t, n, k,
                                             splits, cluster,
                                             static_cast<float *>(workspace_),
                                             workspaceBytes_, stream);
    };
    if (!s->tuned && t <= kTuneMaxRows && tuneNewShapes_) {
      // 1, 2 and the device-filling number of K splits, each in clusters
      // of 1, 2 and 4 CTAs that divide the row tiles.
      std::vector<SkinnyCandidate> skinny;
      if (skinnyCandidates_ && ldy == n && skinnyGemmSm90Supports(t, n, k)) {
        const int64_t fill = skinnyGemmSm90Splits(t, n, k);
        std::vector<int64_t> splitCounts = {1};
        for (int64_t splits : {int64_t(2), fill})
          if (splits <= fill && splits != splitCounts.back())
            splitCounts.push_back(splits);
        for (int64_t splits : splitCounts)
          for (int64_t cluster : {1, 2, 4})
            if ((n / 128) % cluster == 0 &&
                skinnyGemmSm90WorkspaceBytes(t, n, splits) <= workspaceBytes_)
              skinny.push_back(
                  {splits, cluster, [&skinnyLaunch, splits, cluster] {
                     return skinnyLaunch(splits, cluster);
                   }});
      }
      INFER_RETURN_IF_ERROR(tune(*s, launch, stream, skinny));
    }
    if (s->skinnySplits > 0) {
      INFER_CUDA_RETURN_IF_ERROR(
          skinnyLaunch(s->skinnySplits, s->skinnyCluster));
      return Status::ok();
    }
  } else {
    if (!s->tuned && t <= kTuneMaxRows && tuneNewShapes_)
      INFER_RETURN_IF_ERROR(tune(*s, launch, stream));
  }
  INFER_CUDA_RETURN_IF_ERROR(launch(s->algo));
  return Status::ok();
}

Status Gemm::run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
                 int64_t t, int64_t n, int64_t k, cudaStream_t stream) {
  return runBf16<float>(x, w, nullptr, y, t, n, k, n, stream);
}

bool Gemm::fp8CublasLtSupports(int64_t n, int64_t k, const uint8_t *codes,
                               int64_t yBytes) {
  return k % 16 == 0 && (n * yBytes) % 16 == 0 && aligned16(codes);
}

template <typename X, typename Y>
Status Gemm::runSkinny(const X *x, const GemmWeight &w, const Y *bias, Y *y,
                       int64_t t, int64_t n, int64_t k, bool mma,
                       cudaStream_t stream, const Y *residual) {
  // The tensor-core kernel needs 16-byte aligned operands (the backend's
  // arena gives 256); the CUDA-core one takes any. Both take at most
  // kGemvMaxRows rows: more run as blocks of rows, each streaming the
  // weights again.
  const bool tensorCores =
      mma && aligned16(x) &&
      aligned16(w.fp8 ? static_cast<const void *>(w.fp8) : w.bf16);
  for (int64_t r = 0; r < t; r += kGemvMaxRows) {
    const int64_t rows = std::min(kGemvMaxRows, t - r);
    const X *xr = x + r * k;
    Y *yr = y + r * n;
    const Y *rr = residual ? residual + r * n : nullptr;
    if (w.fp8)
      INFER_CUDA_RETURN_IF_ERROR(
          tensorCores ? launchGemvMmaFp8(xr, w.fp8, w.rowScales, bias, yr, rows,
                                         n, k, stream, rr)
                      : launchGemvFp8(xr, w.fp8, w.rowScales, bias, yr, rows, n,
                                      k, stream, rr));
    else
      INFER_CUDA_RETURN_IF_ERROR(
          tensorCores
              ? launchGemvMma(xr, w.bf16, bias, yr, rows, n, k, stream, rr)
              : launchGemv(xr, w.bf16, bias, yr, rows, n, k, stream, rr));
  }
  return Status::ok();
}

Status Gemm::runFp8(const float *x, const GemmWeight &w, const float *bias,
                    float *y, int64_t t, int64_t n, int64_t k,
                    cudaStream_t stream) {
  return runFp8Chunks(x, w, bias, y, t, n, k, stream);
}

int64_t Gemm::fp8ChunkRows(int64_t t, int64_t k) const {
  const int64_t fit =
      scratchBytes_ > kScratchAlign
          ? static_cast<int64_t>((scratchBytes_ - kScratchAlign) /
                                 (static_cast<size_t>(k) + sizeof(float)))
          : 0;
  return t <= fit ? t : fit / 64 * 64;
}

Gemm::Fp8Operand Gemm::fp8ChunkOperand(int64_t chunk) const {
  const size_t scalesBytes = (chunk * sizeof(float) + kScratchAlign - 1) /
                             kScratchAlign * kScratchAlign;
  return {scratch_ + scalesBytes, reinterpret_cast<float *>(scratch_)};
}

std::optional<Gemm::Fp8Operand> Gemm::fp8Operand(int64_t t, int64_t n,
                                                 int64_t k, const GemmWeight &w,
                                                 int64_t yBytes, bool bias,
                                                 bool residual) const {
  if (t <= 0 || n <= 0 || !w.fp8 || !w.rowScales ||
      path(t, n, k, w, yBytes, bias, residual) != Path::kFp8CublasLt ||
      fp8ChunkRows(t, k) != t)
    return std::nullopt;
  return fp8ChunkOperand(t);
}

StatusOr<bool> Gemm::fp8OperandSuffices(int64_t t, int64_t n, int64_t k,
                                        const GemmWeight &w,
                                        const __nv_bfloat16 *bias,
                                        bool residual) {
  if (!fp8Operand(t, n, k, w, sizeof(__nv_bfloat16), bias != nullptr, residual))
    return false;
  // The shape runFp8Chunks takes for these rows (one chunk, a bf16 y).
  INFER_ASSIGN_OR_RETURN(
      Shape * s,
      shape(fp8OuterKey(t, n, k, CUDA_R_16BF, bias != nullptr, residual), bias,
            w.rowScales, fp8ChunkOperand(t).scales));
  return !s->candidates.empty();
}

template <typename X, typename Y>
Status Gemm::runFp8Chunks(const X *x, const GemmWeight &w, const Y *bias, Y *y,
                          int64_t t, int64_t n, int64_t k, cudaStream_t stream,
                          const Y *residual, bool xQuantized) {
  constexpr bool kBf16Y = std::is_same_v<Y, __nv_bfloat16>;
  if (t == 0 || n == 0)
    return Status::ok();
  if (!w.fp8 || !w.rowScales)
    return invalidArgument("gemm: fp8 cuBLASLt needs E4M3 codes with row "
                           "scales");
  if (!fp8CublasLtSupports(n, k, w.fp8, sizeof(Y)) || !aligned16(y))
    return invalidArgument(
        "gemm: fp8 cuBLASLt needs K % 16 == 0, 16-byte rows of y and 16-byte "
        "aligned codes and y; got " +
        shapeText(t, n, k));
  // Scratch: [scales of `chunk` tokens | pad to 256 | codes, chunk x K]. A
  // chunk short of T is a multiple of 64 rows, so y's row blocks stay
  // 256-byte aligned (their rows are 16-byte multiples).
  const int64_t chunk = fp8ChunkRows(t, k);
  if (chunk <= 0)
    return resourceExhausted(
        "gemm: fp8 weights at " + std::to_string(t) +
        " rows need a scratch of at least " +
        std::to_string(kScratchAlign + std::min<int64_t>(t, 64) *
                                           (k + int64_t(sizeof(float)))) +
        " bytes for the quantized activations (have " +
        std::to_string(scratchBytes_) + ")");
  if (xQuantized && chunk != t)
    return internalError("gemm: " + std::to_string(t) +
                         " rows quantized in place of several chunks");
  const Fp8Operand operand = fp8ChunkOperand(chunk);
  float *xScales = operand.scales;
  uint8_t *xCodes = operand.codes;
  // fp8 cuBLASLt adds a bias of a bf16 y in its epilogue; with an fp32 y it
  // takes only a bf16 bias, so an fp32 one is added after it. A bf16 y's
  // residual is C (beta = 1, unscaled: the outer-vector scales multiply the
  // product); an fp32 y's is added after it too, in fp32.
  const bool epilogueBias = kBf16Y && bias;
  const bool epilogueResidual = kBf16Y && residual;
  const float alpha = 1.0f, beta = epilogueResidual ? 1.0f : 0.0f;
  for (int64_t r = 0; r < t; r += chunk) {
    const int64_t rows = std::min(chunk, t - r);
    Y *yr = y + r * n;
    const Y *rr = residual ? residual + r * n : nullptr;
    ShapeKey key = fp8OuterKey(rows, n, k, cudaTypeOf<Y>(), epilogueBias,
                               epilogueResidual);
    INFER_ASSIGN_OR_RETURN(Shape * s, shape(key, bias, w.rowScales, xScales));
    const bool outer = !s->candidates.empty();
    if (!outer) {
      if constexpr (kBf16Y) {
        // Unscaled cuBLASLt would need an fp32 y to scale and round once:
        // these rows take the skinny kernels instead.
        INFER_RETURN_IF_ERROR(runSkinny(x + r * k, w, bias, yr, rows, n, k,
                                        gemvMmaSupports(kGemvMaxRows, k, true),
                                        stream, rr));
        continue;
      } else {
        // The same arithmetic in another place: unit scales in cuBLASLt,
        // then launchScaleRowsColumns.
        key.scaling = Scaling::kNone;
        INFER_ASSIGN_OR_RETURN(s, shape(key, nullptr, nullptr, nullptr));
        if (s->candidates.empty())
          return unimplemented("cuBLASLt has no fp8 E4M3 algorithm for " +
                               shapeText(rows, n, k));
      }
    }
    if (!xQuantized)
      INFER_CUDA_RETURN_IF_ERROR(
          launchQuantizeRowsFp8(x + r * k, rows, k, xCodes, xScales, stream));
    // Shapes are shared by weights of one size: this call's pointers.
    if (outer)
      INFER_RETURN_IF_ERROR(setFp8Scales(s->op, w.rowScales, xScales));
    if (epilogueBias)
      INFER_RETURN_IF_ERROR(setBias(s->op, bias));
    const Y *c = epilogueResidual ? rr : yr;
    auto launch = [&](const cublasLtMatmulAlgo_t &algo) {
      return cublasLtMatmul(handle_, s->op, &alpha, w.fp8, s->w, xCodes, s->x,
                            &beta, c, s->y, yr, s->y, &algo, workspace_,
                            workspaceBytes_, stream);
    };
    if (!s->tuned && rows <= kTuneMaxRows && tuneNewShapes_)
      INFER_RETURN_IF_ERROR(tune(*s, launch, stream));
    INFER_CUDA_RETURN_IF_ERROR(launch(s->algo));
    if constexpr (!kBf16Y) {
      if (!outer)
        INFER_CUDA_RETURN_IF_ERROR(launchScaleRowsColumns(
            yr, xScales, w.rowScales, bias, rows, n, stream));
      else if (bias)
        INFER_CUDA_RETURN_IF_ERROR(launchAddBias(yr, bias, rows, n, stream));
      if (rr)
        INFER_CUDA_RETURN_IF_ERROR(launchAdd(yr, rr, yr, rows * n, stream));
    }
  }
  return Status::ok();
}

Gemm::Path Gemm::path(int64_t t, int64_t n, int64_t k, const GemmWeight &w,
                      int64_t yBytes, bool bias, bool residual) {
  if (!w.fp8) {
    if (t <= kCudaCoreBf16MaxRows)
      return Path::kGemv;
    // Where y's rows are not 16-byte multiples, cuBLASLt's bf16 kernels
    // round the product to bf16 before the bias epilogue adds it (measured
    // on the H100: 1.5 ulp from the fp32 sum + bias the CPU rounds once).
    // The skinny kernels add the bias to the fp32 sum at any T; such shapes
    // (N % 8 != 0 with a bias) are not in the models' hot paths. A residual
    // goes the same way (cuBLASLt's C on such rows is unmeasured).
    if (yBytes == 2 && (bias || residual) && (n * yBytes) % 16 != 0)
      return gemvMmaSupports(kGemvMaxRows, k, false) ? Path::kGemvMma
                                                     : Path::kGemv;
    return Path::kCublasLt;
  }
  if (t == 1)
    return Path::kGemv;
  const bool mma = gemvMmaSupports(kGemvMaxRows, k, true);
  if (t <= kFp8SkinnyMaxRows)
    return mma ? Path::kGemvMma : Path::kGemv;
  if (fp8CublasLtSupports(n, k, w.fp8, yBytes))
    return Path::kFp8CublasLt;
  // A bf16 y is rounded once by the skinny kernels at any T; an fp32 one
  // can be scaled after a bf16 cuBLASLt product.
  if (yBytes != 4)
    return mma ? Path::kGemvMma : Path::kGemv;
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

template <typename Y>
Status Gemm::linear(const __nv_bfloat16 *x, const GemmWeight &w,
                    const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                    int64_t k, cudaStream_t stream,
                    const NonDeduced<Y> *residual) {
  if (t == 0 || n == 0)
    return Status::ok();
  if (!w.bf16 && !(w.fp8 && w.rowScales))
    return invalidArgument("gemm: the weight has neither bf16 values nor fp8 "
                           "codes with row scales");
  if (bias && !aligned16(bias))
    return invalidArgument("gemm: the bias must be 16-byte aligned "
                           "(cuBLASLt's epilogue reads it)");
  INFER_RETURN_IF_ERROR(checkResidual(residual, y, t, n));
  const Path p =
      path(t, n, k, w, sizeof(Y), bias != nullptr, residual != nullptr);
  switch (p) {
  case Path::kGemv:
  case Path::kGemvMma:
    return runSkinny(x, w, bias, y, t, n, k, p == Path::kGemvMma, stream,
                     residual);
  case Path::kCublasLt:
    return runBf16(x, w.bf16, bias, y, t, n, k, n, stream, residual);
  case Path::kFp8CublasLt:
    return runFp8Chunks(x, w, bias, y, t, n, k, stream, residual);
  case Path::kDequantCublasLt:
    break;
  }
  // path() takes only an fp32 y here.
  if constexpr (std::is_same_v<Y, float>) {
    INFER_RETURN_IF_ERROR(runDequantized(x, w, bias, y, t, n, k, stream));
    if (residual)
      INFER_CUDA_RETURN_IF_ERROR(launchAdd(y, residual, y, t * n, stream));
    return Status::ok();
  } else {
    return internalError("gemm: dequantized fp8 weights with a bf16 y");
  }
}

template <typename Y>
Status Gemm::linearQuantized(const __nv_bfloat16 *x, const GemmWeight &w,
                             const NonDeduced<Y> *bias, Y *y, int64_t t,
                             int64_t n, int64_t k, cudaStream_t stream,
                             const NonDeduced<Y> *residual) {
  if (!fp8Operand(t, n, k, w, sizeof(Y), bias != nullptr, residual != nullptr))
    return internalError("gemm: a quantized x of " + shapeText(t, n, k) +
                         " that does not take fp8 cuBLASLt in one chunk");
  if (bias && !aligned16(bias))
    return invalidArgument("gemm: the bias must be 16-byte aligned "
                           "(cuBLASLt's epilogue reads it)");
  INFER_RETURN_IF_ERROR(checkResidual(residual, y, t, n));
  return runFp8Chunks(x, w, bias, y, t, n, k, stream, residual,
                      /*xQuantized=*/true);
}

Status Gemm::linear(const float *x, const __nv_bfloat16 *xBf16,
                    const GemmWeight &w, const float *bias, float *y, int64_t t,
                    int64_t n, int64_t k, cudaStream_t stream,
                    const float *residual) {
  if (t == 0 || n == 0)
    return Status::ok();
  if (!w.bf16 && !(w.fp8 && w.rowScales))
    return invalidArgument("gemm: the weight has neither bf16 values nor fp8 "
                           "codes with row scales");
  INFER_RETURN_IF_ERROR(checkResidual(residual, y, t, n));
  const Path p = path(t, n, k, w);
  switch (p) {
  case Path::kGemvMma:
  case Path::kGemv:
    return runSkinny(x, w, bias, y, t, n, k, p == Path::kGemvMma, stream,
                     residual);
  case Path::kFp8CublasLt:
    return runFp8Chunks(x, w, bias, y, t, n, k, stream, residual);
  case Path::kCublasLt:
  case Path::kDequantCublasLt:
    break;
  }
  if (!xBf16)
    return invalidArgument("gemm: " + std::to_string(t) +
                           " rows need the bf16 copy of x");
  // fp32 y: the bias and the residual are added after the product, in fp32.
  if (w.bf16) {
    INFER_RETURN_IF_ERROR(
        runBf16<float>(xBf16, w.bf16, nullptr, y, t, n, k, n, stream));
    if (bias)
      INFER_CUDA_RETURN_IF_ERROR(launchAddBias(y, bias, t, n, stream));
  } else {
    INFER_RETURN_IF_ERROR(runDequantized(xBf16, w, bias, y, t, n, k, stream));
  }
  if (residual)
    INFER_CUDA_RETURN_IF_ERROR(launchAdd(y, residual, y, t * n, stream));
  return Status::ok();
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
    INFER_RETURN_IF_ERROR(
        runBf16<float>(xBf16, dequant, nullptr, y + n0, t, rows, k, n, stream));
  }
  INFER_CUDA_RETURN_IF_ERROR(
      launchScaleColumns(y, w.rowScales, bias, t, n, stream));
  return Status::ok();
}

template Status Gemm::linear<__nv_bfloat16>(const __nv_bfloat16 *,
                                            const GemmWeight &,
                                            const __nv_bfloat16 *,
                                            __nv_bfloat16 *, int64_t, int64_t,
                                            int64_t, cudaStream_t,
                                            const __nv_bfloat16 *);
template Status Gemm::linear<float>(const __nv_bfloat16 *, const GemmWeight &,
                                    const float *, float *, int64_t, int64_t,
                                    int64_t, cudaStream_t, const float *);
template Status
Gemm::linearQuantized<__nv_bfloat16>(const __nv_bfloat16 *, const GemmWeight &,
                                     const __nv_bfloat16 *, __nv_bfloat16 *,
                                     int64_t, int64_t, int64_t, cudaStream_t,
                                     const __nv_bfloat16 *);
template Status Gemm::linearQuantized<float>(const __nv_bfloat16 *,
                                             const GemmWeight &, const float *,
                                             float *, int64_t, int64_t, int64_t,
                                             cudaStream_t, const float *);

} // namespace infer::cuda
