//===- ModelSteps.cpp - Embedding, norms, GEMMs and biases on the GPU -----===//
//
// Each function runs one step op of StepOps.def on the backend's stream.
// The plan was verified (roles, static widths, attributes), so they check
// what depends on the batch and the dtypes this backend runs; each result
// is allocated as its plan value's dtype.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include "runtime/cuda/GemmSm90.h"

namespace infer::cuda {

using plan::DType;

Status CudaBackend::runEmbedding(const PreparedStep &s, const Batch &batch) {
  const Tensor &table = operand(s, 0);
  if (table.dtype != DType::kBF16)
    return mismatch(s, "the embedding table must be bf16, it is " +
                           std::string(plan::dtypeName(table.dtype)));
  int64_t t;
  const auto *ids =
      static_cast<const int32_t *>(input(s.step.operands[1], &t, batch));
  Tensor &y = result(s);
  const DType dtype = rank_.values[s.step.results[0]].dtype;
  INFER_RETURN_IF_ERROR(allocate(y, t, table.cols, dtype));
  return withFloatType(dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(launchEmbedding<T>(
        table.as<__nv_bfloat16>(), table.rows, table.cols, s.step.vocabOffset,
        ids, t, y.as<T>(), stream_, static_cast<float>(s.step.embeddingScale)));
    return Status::ok();
  });
}

Status CudaBackend::runRmsNorm(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &w = operand(s, 1);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  // Per-head norms: each head_dim-wide group is a row of its own (x and y
  // are contiguous: rms_norm takes no column views).
  const int64_t h = s.step.normHeadDim > 0 ? s.step.normHeadDim : x.cols;
  if (x.cols % h != 0 || x.stride() != x.cols)
    return mismatch(s, "the input is not contiguous rows of head_dim groups");
  std::optional<Fp8ForNext> q;
  if (x.dtype == DType::kBF16 && h == x.cols) {
    INFER_ASSIGN_OR_RETURN(q, fp8OperandForNext(s, x.rows, x.cols));
  }
  if (q) {
    INFER_RETURN_IF_ERROR(
        withParamOf<__nv_bfloat16>(w, [&](const auto *weight) -> Status {
          INFER_CUDA_RETURN_IF_ERROR(launchRmsNormFp8(
              x.as<const __nv_bfloat16>(), weight,
              q->storeRow ? y.as<__nv_bfloat16>() : nullptr, q->operand.codes,
              q->operand.scales, x.rows, h, static_cast<float>(s.step.epsilon),
              stream_, static_cast<float>(s.step.weightOffset)));
          return Status::ok();
        }));
    fp8Quantized_ = &s + 1;
    ++numFp8QuantizeLaunches_;
    numFp8UnstoredLaunches_ += !q->storeRow;
    return Status::ok();
  }
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    return withParamOf<T>(w, [&](const auto *weight) -> Status {
      INFER_CUDA_RETURN_IF_ERROR(launchRmsNorm(
          x.as<const T>(), weight, y.as<T>(), x.rows * (x.cols / h), h,
          static_cast<float>(s.step.epsilon), stream_,
          static_cast<float>(s.step.weightOffset)));
      return Status::ok();
    });
  });
}

Status CudaBackend::runAddRmsNorm(const PreparedStep &s, const Batch &) {
  const Tensor &a = operand(s, 0), &b = operand(s, 1), &w = operand(s, 2);
  if (a.rows != b.rows || a.dtype != b.dtype)
    return mismatch(s, "operands have different rows or dtypes");
  Tensor &sum = result(s, 0), &y = result(s, 1);
  INFER_RETURN_IF_ERROR(allocate(sum, a.rows, a.cols, a.dtype));
  INFER_RETURN_IF_ERROR(allocate(y, a.rows, a.cols, a.dtype));
  return withFloatType(a.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    return withParamOf<T>(w, [&](const auto *weight) -> Status {
      INFER_CUDA_RETURN_IF_ERROR(launchAddRmsNorm(
          a.as<const T>(), b.as<const T>(), weight, sum.as<T>(), y.as<T>(),
          a.rows, a.cols, static_cast<float>(s.step.epsilon), stream_,
          static_cast<float>(s.step.weightOffset)));
      return Status::ok();
    });
  });
}

/// linear, linear_residual and logits: bf16 x (prepareStep checked), bf16
/// or fp8 weights, a bf16 result (linear) or fp32 logits, the bias and the
/// residual in the result's dtype.
/// `xQuantized`: the step before wrote x's fp8 codes and scales into the
/// Gemm's scratch (CudaBackend::fp8OperandForNext).
template <typename Y>
static Status runGemm(Gemm &gemm, const Tensor &x, const Tensor &w,
                      const Tensor *bias, Tensor &y, cudaStream_t stream,
                      const Tensor *residual = nullptr,
                      bool xQuantized = false) {
  if (!(w.dtype == DType::kBF16 || w.fp8))
    return unimplemented("a GEMM weight of dtype " +
                         std::string(plan::dtypeName(w.dtype)) +
                         " (bf16 or f8e4m3)");
  if (bias && bias->dtype != dtypeOf<Y>())
    return unimplemented(
        "a " + std::string(plan::dtypeName(bias->dtype)) + " bias of a " +
        std::string(plan::dtypeName(dtypeOf<Y>())) + " result");
  // The residual is read in y's layout: contiguous [T, N] rows.
  if (residual &&
      (residual->dtype != dtypeOf<Y>() || residual->rows != x.rows ||
       residual->cols != w.rows || residual->stride() != residual->cols))
    return invalidArgument(
        "the residual is not contiguous [" + std::to_string(x.rows) + ", " +
        std::to_string(w.rows) + "] rows of the result's dtype");
  const GemmWeight weight{w.as<const __nv_bfloat16>(), w.fp8, w.rowScales};
  const Y *b = bias ? bias->as<const Y>() : nullptr;
  const Y *r = residual ? residual->as<const Y>() : nullptr;
  if (xQuantized)
    return gemm.linearQuantized<Y>(x.as<const __nv_bfloat16>(), weight, b,
                                   y.as<Y>(), x.rows, w.rows, w.cols, stream,
                                   r);
  return gemm.linear<Y>(x.as<const __nv_bfloat16>(), weight, b, y.as<Y>(),
                        x.rows, w.rows, w.cols, stream, r);
}

Status CudaBackend::runLinear(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &w = operand(s, 1);
  const Tensor *bias = s.step.operands.size() == 3 ? &operand(s, 2) : nullptr;
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, w.rows, DType::kBF16));
  const bool quantized = fp8Quantized_ == &s;
  fp8Quantized_ = nullptr;
  return runGemm<__nv_bfloat16>(*gemm_, x, w, bias, y, stream_, nullptr,
                                quantized);
}

Status CudaBackend::runLinearResidual(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &w = operand(s, 1), &r = operand(s, 2);
  const Tensor *bias = s.step.operands.size() == 4 ? &operand(s, 3) : nullptr;
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, w.rows, DType::kBF16));
  const bool quantized = fp8Quantized_ == &s;
  fp8Quantized_ = nullptr;
  return runGemm<__nv_bfloat16>(*gemm_, x, w, bias, y, stream_, &r, quantized);
}

/// linear_swiglu: on an sm_90a device the Hopper GEMM's SwiGLU epilogue
/// (GemmSm90.h) for a bf16 weight of 256-row multiples, 16-byte aligned
/// operands and at least swiGluKernelMinRows() rows; otherwise (small
/// batches, fp8 weights, other GPUs) the linear's GEMM into an fp32 scratch
/// of at most kSwiGluScratchRows rows of [gate | up] at a time and silu_mul
/// of its halves. Both round once, from the fp32 products, as the CPU
/// backend does: the paths differ only in the products' summation order and
/// the exponential's last bits, not in where they round.
Status CudaBackend::runLinearSwiGlu(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &w = operand(s, 1);
  const int64_t half = w.rows / 2;
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, half, DType::kBF16));
  fp8Quantized_ = nullptr;
  if (x.rows == 0)
    return Status::ok();
  auto aligned16 = [](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  if (w.dtype == DType::kBF16 && !w.fp8 && x.stride() == x.cols &&
      x.rows >= swiGluKernelMinRows() && aligned16(x.data) &&
      aligned16(w.data) && aligned16(y.data) &&
      gemmSm90Supports(x.rows, w.rows, w.cols)) {
    INFER_CUDA_RETURN_IF_ERROR(
        launchGemmSm90(x.as<const __nv_bfloat16>(), w.as<const __nv_bfloat16>(),
                       y.as<__nv_bfloat16>(), x.rows, w.rows, w.cols,
                       GemmSm90Epilogue::kSwiGlu, stream_));
    return Status::ok();
  }
  // Chunks of rows bound the scratch (Llama-3-8B: 117 MB), below the bf16
  // [T, 2I] product a long prefill wrote before linear_swiglu.
  constexpr int64_t kSwiGluScratchRows = 1024;
  const int64_t chunk = std::min(x.rows, kSwiGluScratchRows);
  void *scratch = nullptr;
  INFER_RETURN_IF_ERROR(
      allocateBytes(size_t(chunk) * w.rows * sizeof(float), &scratch));
  Status status = Status::ok();
  for (int64_t row = 0; row < x.rows && status.isOk(); row += chunk) {
    const int64_t rows = std::min(chunk, x.rows - row);
    Tensor xRows = x;
    xRows.owned = false;
    xRows.rows = rows;
    xRows.data = const_cast<__nv_bfloat16 *>(x.as<const __nv_bfloat16>() +
                                             row * x.stride());
    Tensor gateUp;
    gateUp.rows = rows;
    gateUp.cols = w.rows;
    gateUp.dtype = DType::kF32;
    gateUp.data = scratch;
    status = runGemm<float>(*gemm_, xRows, w, nullptr, gateUp, stream_);
    if (!status.isOk())
      break;
    const auto *gu = gateUp.as<const float>();
    const cudaError_t launched = launchSiluMulF32(
        gu, w.rows, gu + half, w.rows, y.as<__nv_bfloat16>() + row * half, rows,
        half, stream_);
    if (launched != cudaSuccess)
      status = cudaStatus(launched, "launchSiluMulF32", __FILE__, __LINE__);
  }
  freeBytes(scratch);
  return status;
}

Status CudaBackend::runLogits(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &w = operand(s, 1);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, w.rows, DType::kF32));
  INFER_RETURN_IF_ERROR(runGemm<float>(*gemm_, x, w, nullptr, y, stream_));
  if (s.step.logitSoftcap > 0)
    INFER_CUDA_RETURN_IF_ERROR(
        launchSoftcap(y.as<float>(), y.rows * y.cols,
                      static_cast<float>(s.step.logitSoftcap), stream_));
  return Status::ok();
}

Status CudaBackend::runBiasAdd(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0), &bias = operand(s, 1);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    return withParamOf<T>(bias, [&](const auto *b) -> Status {
      INFER_CUDA_RETURN_IF_ERROR(launchBiasAdd(x.as<const T>(), b, y.as<T>(),
                                               x.rows, x.cols, stream_));
      return Status::ok();
    });
  });
}

} // namespace infer::cuda
