//===- ElementwiseSteps.cpp - Elementwise and data-movement steps ---------===//
//
// silu, gelu_tanh, add, mul, silu_mul, cast, split, gather_rows and fused,
// each in its values' dtype (fp32 arithmetic, one rounding per result).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

namespace infer::cuda {

using plan::DType;

Status CudaBackend::runSilu(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launchSilu(x.as<const T>(), y.as<T>(), x.size(), stream_));
    return Status::ok();
  });
}

Status CudaBackend::runGeluTanh(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launchGeluTanh(x.as<const T>(), y.as<T>(), x.size(), stream_));
    return Status::ok();
  });
}

Status CudaBackend::runGelu(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launchGelu(x.as<const T>(), y.as<T>(), x.size(), stream_));
    return Status::ok();
  });
}

template <typename Launch>
Status CudaBackend::runSameShapePair(const PreparedStep &s, Launch launch) {
  const Tensor &a = operand(s, 0), &b = operand(s, 1);
  if (a.rows != b.rows)
    return mismatch(s, "operands have different shapes");
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, a.rows, a.cols, a.dtype));
  return withFloatType(a.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launch(a.as<const T>(), b.as<const T>(), y.as<T>(), a.size()));
    return Status::ok();
  });
}

Status CudaBackend::runAdd(const PreparedStep &s, const Batch &) {
  return runSameShapePair(s, [&](auto a, auto b, auto y, int64_t n) {
    return launchAdd(a, b, y, n, stream_);
  });
}

Status CudaBackend::runMul(const PreparedStep &s, const Batch &) {
  return runSameShapePair(s, [&](auto a, auto b, auto y, int64_t n) {
    return launchMul(a, b, y, n, stream_);
  });
}

Status CudaBackend::runSiluMul(const PreparedStep &s, const Batch &) {
  const Tensor &gate = operand(s, 0), &up = operand(s, 1);
  if (gate.rows != up.rows)
    return mismatch(s, "operands have different shapes");
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, gate.rows, gate.cols, gate.dtype));
  std::optional<Fp8ForNext> q;
  if (gate.dtype == DType::kBF16) {
    INFER_ASSIGN_OR_RETURN(q, fp8OperandForNext(s, gate.rows, gate.cols));
  }
  if (q) {
    INFER_CUDA_RETURN_IF_ERROR(launchSiluMulFp8(
        gate.as<const __nv_bfloat16>(), gate.stride(),
        up.as<const __nv_bfloat16>(), up.stride(),
        q->storeRow ? y.as<__nv_bfloat16>() : nullptr, q->operand.codes,
        q->operand.scales, gate.rows, gate.cols, stream_));
    fp8Quantized_ = &s + 1;
    ++numFp8QuantizeLaunches_;
    numFp8UnstoredLaunches_ += !q->storeRow;
    return Status::ok();
  }
  return withFloatType(gate.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launchSiluMul(gate.as<const T>(), gate.stride(), up.as<const T>(),
                      up.stride(), y.as<T>(), gate.rows, gate.cols, stream_));
    return Status::ok();
  });
}

Status CudaBackend::runCast(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  Tensor &y = result(s);
  const DType to = rank_.values[s.step.results[0]].dtype;
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, to));
  if (to == x.dtype) {
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(y.data, x.data, x.size() * plan::dtypeSize(to),
                        cudaMemcpyDeviceToDevice, stream_));
    return Status::ok();
  }
  return withFloatType(x.dtype, [&](auto fromTag) -> Status {
    using From = decltype(fromTag);
    return withFloatType(to, [&](auto toTag) -> Status {
      using To = decltype(toTag);
      if constexpr (std::is_same_v<From, To>) {
        return internalError("a cast to the same dtype");
      } else {
        INFER_CUDA_RETURN_IF_ERROR(
            launchCast(x.as<const From>(), y.as<To>(), x.size(), stream_));
        return Status::ok();
      }
    });
  });
}

Status CudaBackend::runGatherRows(const PreparedStep &s, const Batch &batch) {
  const Tensor &x = operand(s, 0);
  int64_t count;
  const auto *indices =
      static_cast<const int32_t *>(input(s.step.operands[1], &count, batch));
  gatherRows_.emplace_back(&s - steps_.data(), x.rows);
  for (int32_t index : batch.logitsIndices)
    if (index < 0 || index >= x.rows)
      return outOfRange("gather_rows index " + std::to_string(index) +
                        " outside " + std::to_string(x.rows) + " rows");
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, count, x.cols, x.dtype));
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(launchGatherRows(
        x.as<const T>(), x.cols, indices, count, y.as<T>(), stream_));
    return Status::ok();
  });
}

Status CudaBackend::runSplit(const PreparedStep &s, const Batch &) {
  const Tensor &x = operand(s, 0);
  int64_t column = 0;
  const int64_t elementBytes = plan::dtypeSize(x.dtype);
  for (size_t r = 0; r < s.step.results.size(); ++r) {
    const int64_t width = s.step.splitSizes[r];
    Tensor &y = result(s, r);
    if (s.viewSplit) {
      y = Tensor();
      y.data = static_cast<char *>(x.data) + column * elementBytes;
      y.dtype = x.dtype;
      y.rows = x.rows;
      y.cols = width;
      y.ld = x.stride();
      column += width;
      continue;
    }
    INFER_RETURN_IF_ERROR(allocate(y, x.rows, width, x.dtype));
    INFER_RETURN_IF_ERROR(withFloatType(x.dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      INFER_CUDA_RETURN_IF_ERROR(launchSplitColumns(
          x.as<const T>(), x.rows, x.cols, column, width, y.as<T>(), stream_));
      return Status::ok();
    }));
    column += width;
  }
  return Status::ok();
}

Status CudaBackend::runFused(const PreparedStep &s, const Batch &) {
  const Tensor &first = operand(s, 0);
  for (size_t i = 0; i < s.step.operands.size(); ++i)
    if (operand(s, i).rows != first.rows || operand(s, i).ld)
      return mismatch(s, "fused operands have different shapes");
  std::vector<const void *> inputs;
  for (size_t i = 0; i < s.step.operands.size(); ++i)
    inputs.push_back(operand(s, i).data);
  std::vector<void *> outputs;
  for (size_t r = 0; r < s.step.results.size(); ++r) {
    Tensor &y = result(s, r);
    INFER_RETURN_IF_ERROR(allocate(y, first.rows, first.cols,
                                   rank_.values[s.step.results[r]].dtype));
    outputs.push_back(y.data);
  }
  if (s.generated) {
    INFER_CUDA_RETURN_IF_ERROR(launchGeneratedKernel(
        s.generated, inputs, outputs, first.size(), stream_));
    return Status::ok();
  }
  FusedProgram program = s.fused;
  std::copy(inputs.begin(), inputs.end(), program.inputs);
  std::copy(outputs.begin(), outputs.end(), program.outputs);
  INFER_CUDA_RETURN_IF_ERROR(launchFused(program, first.size(), stream_));
  return Status::ok();
}

} // namespace infer::cuda
