//===- AttentionSteps.cpp - Rope, cache writes and attention on the GPU ---===//
//
// q/k/v may be column views of the merged q/k/v projection (a view split):
// rope and the cache writes take their row stride. The cache writes store
// the layout's dtype (bf16, or fp8 codes and E4M3 scales) exactly as the
// CPU backend does; attention reads bf16 queries and writes bf16. With an
// fp8 pool, a cache write paired with its layer's Hopper prefill
// (markFreshKV) also writes FreshKV in calls with prompt rows, an arena
// range the attention reads and then frees, with room for the context rows
// the call's chunked prompts take (the attention fills those).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CacheWriteKernels.h"
#include "runtime/cuda/backend/CudaBackendImpl.h"

namespace infer::cuda {

using plan::DType;

/// The device view of a dynamic NTK rope whose query_start_loc is operand
/// `lengthsOperand`; none (a null queryStartLoc) for the other scalings.
DynamicRope CudaBackend::dynamicRope(const PreparedStep &s,
                                     size_t lengthsOperand,
                                     const Batch &batch) const {
  const plan::RopeConfig &rope = s.step.rope;
  DynamicRope dynamic;
  if (rope.scaling != "dynamic")
    return dynamic;
  int64_t unused;
  dynamic.queryStartLoc = static_cast<const int32_t *>(
      input(s.step.operands[lengthsOperand], &unused, batch));
  dynamic.numSeqs = batch.numSeqs();
  dynamic.theta = static_cast<float>(rope.theta);
  dynamic.factor = static_cast<float>(rope.factor);
  dynamic.originalMaxPositionEmbeddings =
      static_cast<int>(rope.originalMaxPositionEmbeddings);
  return dynamic;
}

Status CudaBackend::runRope(const PreparedStep &s, const Batch &batch) {
  const Tensor &x = operand(s, 0);
  int64_t t;
  const auto *positions =
      static_cast<const int32_t *>(input(s.step.operands[1], &t, batch));
  if (t != x.rows)
    return mismatch(s, "the input rows differ from the positions");
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, x.rows, x.cols, x.dtype));
  const plan::RopeConfig &rope = s.step.rope;
  return withFloatType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(launchRope(
        x.as<const T>(), y.as<T>(), x.rows, x.cols / rope.headDim,
        static_cast<int>(rope.headDim), static_cast<int>(rope.rotaryDim),
        positions, s.ropeInvFreq.as<float>(), stream_, x.stride(),
        static_cast<int>(rope.longFrom()), dynamicRope(s, 2, batch)));
    return Status::ok();
  });
}

/// The cache writes take bf16 or f16 keys and values.
template <typename F> static Status withCacheInputType(DType dtype, F &&f) {
  switch (dtype) {
  case DType::kBF16:
    return f(__nv_bfloat16{});
  case DType::kF16:
    return f(__half{});
  default:
    return unimplemented("keys and values of dtype " +
                         std::string(plan::dtypeName(dtype)) +
                         " into the KV cache (bf16 or f16)");
  }
}

/// Context rows a call may take per token: a bound on the transient arena
/// range (Llama-3-8B: 4 KB a row), which a graph's replays of other batches
/// of the same shape respect too (the kernel fills only what fits).
constexpr int64_t kMaxFreshContextRowsPerToken = 4;

Status CudaBackend::freshRowsFor(const PreparedStep &s, const Batch &batch,
                                 int64_t t, FreshKV *fresh) {
  *fresh = FreshKV();
  // A decode-only call's attention reads none.
  if (!s.writesFreshKV || batch.numTokens() <= batch.numSeqs() ||
      !freshKVReadsOn())
    return Status::ok();
  const size_t rowBytes = size_t(2) * dims_.numKVHeads * dims_.headDim * 2;
  // Context rows are an optimization: they take arena memory that is free
  // now and never grow the arena (without them the chunks read the pool).
  const int64_t contextRows =
      freshContextRowsOn()
          ? std::min(freshContextRows(batch.queryStartLoc.data(),
                                      batch.contextLens.data(), batch.numSeqs(),
                                      s.freshKVGroup),
                     kMaxFreshContextRowsPerToken * t)
          : 0;
  if (contextRows > 0) {
    if (void *data = allocateBytesIfFree(rowBytes * size_t(t + contextRows))) {
      *fresh = FreshKV{static_cast<__nv_bfloat16 *>(data), t, contextRows};
      return Status::ok();
    }
  }
  void *data = nullptr;
  INFER_RETURN_IF_ERROR(allocateBytes(rowBytes * size_t(t), &data));
  *fresh = FreshKV{static_cast<__nv_bfloat16 *>(data), t};
  return Status::ok();
}

void CudaBackend::keepFreshRows(const PreparedStep &s, const FreshKV &fresh,
                                bool written) {
  if (written) {
    freshKV_ = fresh;
    freshKVLayer_ = static_cast<int>(s.step.layer);
  } else if (fresh.data) {
    freeBytes(fresh.data);
  }
}

Status CudaBackend::runKVCacheWrite(const PreparedStep &s, const Batch &batch) {
  const Tensor &k = operand(s, 1), &v = operand(s, 2);
  int64_t t;
  const auto *slots =
      static_cast<const int64_t *>(input(s.step.operands[3], &t, batch));
  if (k.rows != t || v.rows != t || k.dtype != v.dtype)
    return mismatch(s, "keys/values do not have a row per token");
  FreshKV fresh;
  INFER_RETURN_IF_ERROR(freshRowsFor(s, batch, t, &fresh));
  bool written = false;
  Status status = withCacheInputType(k.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(
        launchKVCacheWrite(kvPool(), dims_, static_cast<int>(s.step.layer),
                           k.as<const T>(), v.as<const T>(), slots, t, stream_,
                           k.stride(), v.stride(), fresh, &written));
    return Status::ok();
  });
  keepFreshRows(s, fresh, written);
  return status;
}

Status CudaBackend::runRopeKVCacheWrite(const PreparedStep &s,
                                        const Batch &batch) {
  const Tensor &k = operand(s, 1), &v = operand(s, 2);
  int64_t t, numPositions;
  const auto *slots =
      static_cast<const int64_t *>(input(s.step.operands[3], &t, batch));
  const auto *positions = static_cast<const int32_t *>(
      input(s.step.operands[4], &numPositions, batch));
  if (k.rows != t || v.rows != t || numPositions != t || k.dtype != v.dtype)
    return mismatch(s, "keys/values do not have a row per token");
  FreshKV fresh;
  INFER_RETURN_IF_ERROR(freshRowsFor(s, batch, t, &fresh));
  bool written = false;
  Status status = withCacheInputType(k.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(launchRopeKVCacheWrite(
        kvPool(), dims_, static_cast<int>(s.step.layer), k.as<const T>(),
        v.as<const T>(), slots, positions, t,
        static_cast<int>(s.step.rope.rotaryDim), s.ropeInvFreq.as<float>(),
        stream_, k.stride(), v.stride(),
        static_cast<int>(s.step.rope.longFrom()), dynamicRope(s, 5, batch),
        fresh, &written));
    return Status::ok();
  });
  keepFreshRows(s, fresh, written);
  return status;
}

Status CudaBackend::runRopeQKVCacheWrite(const PreparedStep &s,
                                         const Batch &batch) {
  const Tensor &q = operand(s, 1), &k = operand(s, 2), &v = operand(s, 3);
  int64_t t, numPositions;
  const auto *slots =
      static_cast<const int64_t *>(input(s.step.operands[4], &t, batch));
  const auto *positions = static_cast<const int32_t *>(
      input(s.step.operands[5], &numPositions, batch));
  if (q.rows != t || k.rows != t || v.rows != t || numPositions != t)
    return mismatch(s, "queries/keys/values do not have a row per token");
  if (q.dtype != k.dtype || v.dtype != k.dtype)
    return mismatch(s, "queries, keys and values of different dtypes");
  const plan::RopeConfig &rope = s.step.rope;
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, q.rows, q.cols, q.dtype));
  FreshKV fresh;
  INFER_RETURN_IF_ERROR(freshRowsFor(s, batch, t, &fresh));
  bool written = false;
  Status status = withCacheInputType(k.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    INFER_CUDA_RETURN_IF_ERROR(launchRopeQKVCacheWrite(
        q.as<const T>(), y.as<T>(), q.cols / rope.headDim, kvPool(), dims_,
        static_cast<int>(s.step.layer), k.as<const T>(), v.as<const T>(), slots,
        positions, t, static_cast<int>(rope.rotaryDim),
        s.ropeInvFreq.as<float>(), stream_, q.stride(), k.stride(), v.stride(),
        static_cast<int>(rope.longFrom()), dynamicRope(s, 6, batch), fresh,
        &written));
    return Status::ok();
  });
  keepFreshRows(s, fresh, written);
  return status;
}

Status CudaBackend::runPagedAttention(const PreparedStep &s,
                                      const Batch &batch) {
  const Tensor &q = operand(s, 0);
  if (q.rows != batch.numTokens())
    return mismatch(s, "the query does not have a row per token");
  Tensor &y = result(s);
  INFER_RETURN_IF_ERROR(allocate(y, q.rows, q.cols, DType::kBF16));
  int64_t unused;
  FreshKV fresh;
  if (s.readsFreshKV && freshKV_.data && freshKVLayer_ == s.attention.layer &&
      freshKV_.rows == q.rows)
    fresh = freshKV_;
  const cudaError_t launched = launchPagedAttention(
      q.as<const __nv_bfloat16>(), kvPool(), dims_, s.attention,
      static_cast<const int32_t *>(input(s.step.operands[2], &unused, batch)),
      paddedBlocksPerSeq_,
      static_cast<const int32_t *>(input(s.step.operands[3], &unused, batch)),
      static_cast<const int32_t *>(input(s.step.operands[4], &unused, batch)),
      batch.numSeqs(), q.rows, y.as<__nv_bfloat16>(), stream_, splitKV_, fresh);
  // The range is done with once the attention is enqueued (the arena hands
  // out host-side ranges in stream order).
  if (freshKV_.data && s.readsFreshKV) {
    freeBytes(freshKV_.data);
    freshKV_ = FreshKV();
    freshKVLayer_ = -1;
  }
  INFER_CUDA_RETURN_IF_ERROR(launched);
  return Status::ok();
}

} // namespace infer::cuda
