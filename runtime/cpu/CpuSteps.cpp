//===- CpuSteps.cpp - The reference backend's function per step op --------===//
//
// One run##Name per op of runtime/plan/StepOps.def. The plan was verified
// (operand roles, static widths, attributes), so each function checks only
// what depends on the batch: rows, token ids and indices. Results are fp32
// here; CpuBackend::runStep rounds them to their value's dtype.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackendImpl.h"
#include "runtime/plan/FusedBody.h"

#include <algorithm>
#include <cstring>

namespace infer::cpu {

namespace {

Status mismatch(const std::string &what) { return invalidArgument(what); }

const Matrix &in(const PreparedStep &s, std::vector<Matrix> &values, size_t i) {
  return values[s.step.operands[i]];
}

Matrix &result(const PreparedStep &s, std::vector<Matrix> &values,
               size_t i = 0) {
  return values[s.step.results[i]];
}

/// y[T, N] = x w^T (+ bias) in fp32: bf16/f32 weights or fp8 codes with
/// their row scales (linear, linear_residual, logits).
void product(const Matrix &x, const Matrix &w, const float *bias, float *y,
             ThreadPool &pool) {
  if (w.fp8Codes)
    linearFp8(x.data, x.rows, x.cols, w.fp8Codes, w.rowScales, w.rows, bias, y,
              pool);
  else
    linear(x.data, x.rows, x.cols, w.data, w.rows, bias, y, pool);
}

/// y = f(x) elementwise, for steps of one operand.
template <typename F>
Status mapUnary(const PreparedStep &s, std::vector<Matrix> &values, F f) {
  const Matrix &x = in(s, values, 0);
  float *y = result(s, values).allocate(x.rows, x.cols);
  f(x.data, y, x.size());
  return Status::ok();
}

/// y = f(a, b) elementwise, for steps of two same-shaped operands.
template <typename F>
Status mapBinary(const PreparedStep &s, std::vector<Matrix> &values, F f) {
  const Matrix &a = in(s, values, 0), &b = in(s, values, 1);
  if (a.rows != b.rows || a.cols != b.cols)
    return mismatch("operands have different shapes");
  float *y = result(s, values).allocate(a.rows, a.cols);
  f(a.data, b.data, y, a.size());
  return Status::ok();
}

/// Calls f(first token, token count, inverse frequencies) over the batch:
/// once for all tokens, or for a dynamic rope once per sequence with the
/// frequencies of its length after the step (its last position + 1).
template <typename F>
Status forEachRopeSpan(const PreparedStep &s, const Batch &batch, F f) {
  if (s.step.rope.scaling != "dynamic") {
    f(0, batch.numTokens(), s.ropeInvFreq);
    return Status::ok();
  }
  const std::vector<int32_t> &starts = batch.queryStartLoc;
  for (size_t b = 0; b + 1 < starts.size(); ++b) {
    const int64_t first = starts[b], count = starts[b + 1] - starts[b];
    if (count <= 0)
      continue;
    const int64_t seqLen = int64_t(batch.positions[first + count - 1]) + 1;
    f(first, count, plan::dynamicRopeInverseFrequencies(s.step.rope, seqLen));
  }
  return Status::ok();
}

} // namespace

Status CpuBackend::runEmbedding(const PreparedStep &s, const Batch &batch,
                                std::vector<Matrix> &values) {
  const Matrix &table = in(s, values, 0);
  int64_t t;
  INFER_ASSIGN_OR_RETURN(const int32_t *ids,
                         intInput(s.step.operands[1], batch, t));
  const int64_t vocab = s.step.vocabSize > 0 ? s.step.vocabSize : table.rows;
  float *y = result(s, values).allocate(t, table.cols);
  for (int64_t i = 0; i < t; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      return outOfRange("token id " + std::to_string(ids[i]) +
                        " outside the vocabulary of " + std::to_string(vocab));
    // Vocabulary-parallel: another rank's slice holds the row; this rank's
    // contribution to the all-reduce is zero.
    const int64_t row = ids[i] - s.step.vocabOffset;
    if (row < 0 || row >= table.rows)
      continue;
    std::memcpy(y + i * table.cols, table.data + row * table.cols,
                table.cols * sizeof(float));
  }
  if (s.embeddingScale != 1.0f)
    for (int64_t i = 0; i < t * table.cols; ++i)
      y[i] *= s.embeddingScale;
  return Status::ok();
}

Status CpuBackend::runRmsNorm(const PreparedStep &s, const Batch &,
                              std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0), &w = in(s, values, 1);
  float *y = result(s, values).allocate(x.rows, x.cols);
  // Per-head norms: each head_dim-wide group is a row of its own.
  const int64_t h = s.step.normHeadDim > 0 ? s.step.normHeadDim : x.cols;
  if (w.rows * w.cols != h || x.cols % h != 0)
    return mismatch("rms_norm weight does not match the normalized width");
  rmsNorm(x.data, w.data, y, x.rows * (x.cols / h), h, s.step.epsilon,
          static_cast<float>(s.step.weightOffset));
  return Status::ok();
}

Status CpuBackend::runAddRmsNorm(const PreparedStep &s, const Batch &,
                                 std::vector<Matrix> &values) {
  const Matrix &a = in(s, values, 0), &b = in(s, values, 1),
               &w = in(s, values, 2);
  if (a.rows != b.rows)
    return mismatch("add_rms_norm operands have different rows");
  float *sum = result(s, values, 0).allocate(a.rows, a.cols);
  float *y = result(s, values, 1).allocate(a.rows, a.cols);
  addRmsNorm(a.data, b.data, w.data, sum, y, a.rows, a.cols, s.step.epsilon,
             static_cast<float>(s.step.weightOffset));
  return Status::ok();
}

Status CpuBackend::runLinear(const PreparedStep &s, const Batch &,
                             std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0), &w = in(s, values, 1);
  const float *bias =
      s.step.operands.size() == 3 ? in(s, values, 2).data : nullptr;
  product(x, w, bias, result(s, values).allocate(x.rows, w.rows), pool_);
  return Status::ok();
}

Status CpuBackend::runLinearResidual(const PreparedStep &s, const Batch &,
                                     std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0), &w = in(s, values, 1),
               &r = in(s, values, 2);
  if (r.rows != x.rows || r.cols != w.rows)
    return mismatch("linear_residual: the residual is not [T, N]");
  const float *bias =
      s.step.operands.size() == 4 ? in(s, values, 3).data : nullptr;
  float *y = result(s, values).allocate(x.rows, w.rows);
  product(x, w, bias, y, pool_);
  // In fp32, before the step runner's one rounding to the result's dtype.
  for (int64_t i = 0; i < x.rows * w.rows; ++i)
    y[i] += r.data[i];
  return Status::ok();
}

Status CpuBackend::runLinearSwiGlu(const PreparedStep &s, const Batch &,
                                   std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0), &w = in(s, values, 1);
  const int64_t half = w.rows / 2;
  // gate | up for every row in fp32, then silu(gate) * up, which the step
  // runner rounds once to the result's dtype.
  std::vector<float> product2(static_cast<size_t>(x.rows * w.rows));
  product(x, w, nullptr, product2.data(), pool_);
  float *y = result(s, values).allocate(x.rows, half);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float *row = product2.data() + t * w.rows;
    siluMul(row, row + half, y + t * half, half);
  }
  return Status::ok();
}

Status CpuBackend::runLogits(const PreparedStep &s, const Batch &batch,
                             std::vector<Matrix> &values) {
  INFER_RETURN_IF_ERROR(runLinear(s, batch, values));
  if (s.step.logitSoftcap > 0) {
    Matrix &y = result(s, values);
    const double cap = s.step.logitSoftcap;
    float *data = y.mutableData();
    for (int64_t i = 0; i < y.rows * y.cols; ++i)
      data[i] = static_cast<float>(
          cap * std::tanh(static_cast<double>(data[i]) / cap));
  }
  return Status::ok();
}

Status CpuBackend::runRope(const PreparedStep &s, const Batch &batch,
                           std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0);
  if (static_cast<int64_t>(batch.positions.size()) != x.rows)
    return mismatch("rope input rows differ from the positions");
  float *y = result(s, values).allocate(x.rows, x.cols);
  std::memcpy(y, x.data, x.size() * sizeof(float));
  const int64_t heads = x.cols / s.step.rope.headDim;
  return forEachRopeSpan(
      s, batch,
      [&](int64_t first, int64_t count, const std::vector<float> &invFreq) {
        applyRope(y + first * x.cols, count, heads,
                  batch.positions.data() + first, s.step.rope, invFreq);
      });
}

Status CpuBackend::runKVCacheWrite(const PreparedStep &s, const Batch &batch,
                                   std::vector<Matrix> &values) {
  const Matrix &k = in(s, values, 1), &v = in(s, values, 2);
  if (k.rows != batch.numTokens() || v.rows != k.rows)
    return mismatch("keys/values do not have a row per token");
  kvCacheWrite(kv_, geometry_, s.step.layer, k.data, v.data,
               batch.slotMapping.data(), k.rows);
  return Status::ok();
}

Status CpuBackend::runRopeKVCacheWrite(const PreparedStep &s,
                                       const Batch &batch,
                                       std::vector<Matrix> &values) {
  const Matrix &k = in(s, values, 1), &v = in(s, values, 2);
  if (k.rows != batch.numTokens() || v.rows != k.rows)
    return mismatch("keys/values do not have a row per token");
  return forEachRopeSpan(
      s, batch,
      [&](int64_t first, int64_t count, const std::vector<float> &invFreq) {
        ropeKVCacheWrite(
            kv_, geometry_, s.step.layer, k.data + first * k.cols,
            v.data + first * v.cols, batch.slotMapping.data() + first,
            batch.positions.data() + first, count, s.step.rope, invFreq);
      });
}

Status CpuBackend::runRopeQKVCacheWrite(const PreparedStep &s,
                                        const Batch &batch,
                                        std::vector<Matrix> &values) {
  const Matrix &q = in(s, values, 1), &k = in(s, values, 2),
               &v = in(s, values, 3);
  if (q.rows != batch.numTokens() || k.rows != q.rows || v.rows != q.rows)
    return mismatch("queries/keys/values do not have a row per token");
  float *y = result(s, values).allocate(q.rows, q.cols);
  std::memcpy(y, q.data, q.size() * sizeof(float));
  const int64_t heads = q.cols / s.step.rope.headDim;
  // runRope of the queries and runRopeKVCacheWrite, the same arithmetic.
  return forEachRopeSpan(
      s, batch,
      [&](int64_t first, int64_t count, const std::vector<float> &invFreq) {
        applyRope(y + first * q.cols, count, heads,
                  batch.positions.data() + first, s.step.rope, invFreq);
        ropeKVCacheWrite(
            kv_, geometry_, s.step.layer, k.data + first * k.cols,
            v.data + first * v.cols, batch.slotMapping.data() + first,
            batch.positions.data() + first, count, s.step.rope, invFreq);
      });
}

Status CpuBackend::runPagedAttention(const PreparedStep &s, const Batch &batch,
                                     std::vector<Matrix> &values) {
  const Matrix &q = in(s, values, 0);
  if (q.rows != batch.numTokens())
    return mismatch("the query does not have a row per token");
  float *y = result(s, values).allocate(q.rows, q.cols);
  pagedAttention(q.data, kv_, geometry_, s.attention, batch.blockTables.data(),
                 batch.maxBlocksPerSeq, batch.contextLens.data(),
                 batch.queryStartLoc.data(), batch.numSeqs(), y, pool_);
  return Status::ok();
}

Status CpuBackend::runSilu(const PreparedStep &s, const Batch &,
                           std::vector<Matrix> &values) {
  return mapUnary(s, values, silu);
}

Status CpuBackend::runGeluTanh(const PreparedStep &s, const Batch &,
                               std::vector<Matrix> &values) {
  return mapUnary(s, values, geluTanh);
}

Status CpuBackend::runGelu(const PreparedStep &s, const Batch &,
                           std::vector<Matrix> &values) {
  return mapUnary(s, values, gelu);
}

Status CpuBackend::runCast(const PreparedStep &s, const Batch &,
                           std::vector<Matrix> &values) {
  // The copy is rounded to the result's dtype by runStep.
  return mapUnary(s, values, [](const float *x, float *y, int64_t n) {
    std::memcpy(y, x, n * sizeof(float));
  });
}

Status CpuBackend::runAdd(const PreparedStep &s, const Batch &,
                          std::vector<Matrix> &values) {
  return mapBinary(s, values,
                   [](const float *a, const float *b, float *y, int64_t n) {
                     for (int64_t i = 0; i < n; ++i)
                       y[i] = a[i] + b[i];
                   });
}

Status CpuBackend::runMul(const PreparedStep &s, const Batch &,
                          std::vector<Matrix> &values) {
  return mapBinary(s, values,
                   [](const float *a, const float *b, float *y, int64_t n) {
                     for (int64_t i = 0; i < n; ++i)
                       y[i] = a[i] * b[i];
                   });
}

Status CpuBackend::runSiluMul(const PreparedStep &s, const Batch &,
                              std::vector<Matrix> &values) {
  return mapBinary(s, values, siluMul);
}

Status CpuBackend::runBiasAdd(const PreparedStep &s, const Batch &,
                              std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0), &bias = in(s, values, 1);
  float *y = result(s, values).allocate(x.rows, x.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j)
      y[i * x.cols + j] = x.data[i * x.cols + j] + bias.data[j];
  return Status::ok();
}

Status CpuBackend::runGatherRows(const PreparedStep &s, const Batch &batch,
                                 std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0);
  int64_t count;
  INFER_ASSIGN_OR_RETURN(const int32_t *indices,
                         intInput(s.step.operands[1], batch, count));
  float *y = result(s, values).allocate(count, x.cols);
  for (int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || indices[i] >= x.rows)
      return outOfRange("gather_rows index " + std::to_string(indices[i]) +
                        " outside " + std::to_string(x.rows) + " rows");
    std::memcpy(y + i * x.cols, x.data + indices[i] * x.cols,
                x.cols * sizeof(float));
  }
  return Status::ok();
}

Status CpuBackend::runSplit(const PreparedStep &s, const Batch &,
                            std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0);
  int64_t column = 0;
  for (size_t r = 0; r < s.step.results.size(); ++r) {
    const int64_t width = s.step.splitSizes[r];
    float *y = result(s, values, r).allocate(x.rows, width);
    for (int64_t i = 0; i < x.rows; ++i)
      std::memcpy(y + i * width, x.data + i * x.cols + column,
                  width * sizeof(float));
    column += width;
  }
  return Status::ok();
}

/// Interprets the register program a chunk of elements at a time: every
/// register is a chunk-sized array, and each instruction is one loop over
/// it, computing exactly what the unfused step of the same op computes. A
/// register is fp32 throughout; only the results are rounded (runStep).
Status CpuBackend::runFused(const PreparedStep &s, const Batch &,
                            std::vector<Matrix> &values) {
  const plan::FusedBody &body = s.step.fused;
  const Matrix &first = in(s, values, 0);
  for (int id : s.step.operands)
    if (values[id].rows != first.rows)
      return mismatch("fused operands have different rows");
  std::vector<float *> outputs;
  for (size_t r = 0; r < s.step.results.size(); ++r)
    outputs.push_back(result(s, values, r).allocate(first.rows, first.cols));

  constexpr int64_t kChunk = 256;
  const int64_t n = first.size();
  std::vector<float> scratch(body.instructions.size() * kChunk);
  std::vector<const float *> regs(body.numRegisters());
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    for (int i = 0; i < body.numInputs; ++i)
      regs[i] = values[s.step.operands[i]].data + begin;
    for (size_t i = 0; i < body.instructions.size(); ++i) {
      const plan::FusedInstruction &instr = body.instructions[i];
      float *y = scratch.data() + i * kChunk;
      const float *a = regs[instr.args[0]];
      const float *b = instr.args.size() > 1 ? regs[instr.args[1]] : nullptr;
      switch (instr.op) {
      case plan::ElementwiseOp::kAdd:
        for (int64_t j = 0; j < count; ++j)
          y[j] = a[j] + b[j];
        break;
      case plan::ElementwiseOp::kMul:
        for (int64_t j = 0; j < count; ++j)
          y[j] = a[j] * b[j];
        break;
      case plan::ElementwiseOp::kSilu:
        silu(a, y, count);
        break;
      case plan::ElementwiseOp::kGeluTanh:
        geluTanh(a, y, count);
        break;
      case plan::ElementwiseOp::kGelu:
        gelu(a, y, count);
        break;
      case plan::ElementwiseOp::kSiluMul:
        siluMul(a, b, y, count);
        break;
      }
      regs[body.numInputs + i] = y;
    }
    for (size_t r = 0; r < outputs.size(); ++r)
      std::memcpy(outputs[r] + begin, regs[body.yields[r]],
                  count * sizeof(float));
  }
  return Status::ok();
}

Status CpuBackend::runAllReduce(const PreparedStep &s, const Batch &,
                                std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0);
  float *y = result(s, values).allocate(x.rows, x.cols);
  std::memcpy(y, x.data, x.size() * sizeof(float));
  return communicator_->allReduceSum(y, x.size());
}

/// Gathers rank-major blocks, then interleaves them for dim 1:
///
///   recv  [rank 0: rows x c][rank 1: rows x c]   (dim 0: the result as is)
///   y     row i = [rank 0 row i | rank 1 row i]  (dim 1)
Status CpuBackend::runAllGather(const PreparedStep &s, const Batch &,
                                std::vector<Matrix> &values) {
  const Matrix &x = in(s, values, 0);
  Matrix &y = result(s, values);
  const int64_t n = communicator_->size();
  if (s.step.gatherDim == 0) {
    float *out = y.allocate(x.rows * n, x.cols);
    return communicator_->allGather(x.data, x.size(), out);
  }
  std::vector<float> recv(static_cast<size_t>(x.size() * n));
  INFER_RETURN_IF_ERROR(
      communicator_->allGather(x.data, x.size(), recv.data()));
  float *out = y.allocate(x.rows, x.cols * n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < x.rows; ++i)
      std::memcpy(out + i * x.cols * n + r * x.cols,
                  recv.data() + (r * x.rows + i) * x.cols,
                  x.cols * sizeof(float));
  return Status::ok();
}

} // namespace infer::cpu
