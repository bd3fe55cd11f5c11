//===- ParamSource.h - A param as views of checkpoint tensors ---*- C++ -*-===//
//
// What the loader makes of a param's transforms before any byte is copied:
// the slices and concatenations become views of the mapped checkpoint
// tensors, so the param's elements are a gather of contiguous runs, e.g. a
// tensor-parallel shard of a fused qkv projection:
//
//   checkpoint (mapped)             gathered param [rows, 4096] bf16
//   q_proj [4096, 4096]  rows 0..2047     -> part 0: one run of 2048 rows
//   k_proj [1024, 4096]  rows 0..511      -> part 1: one run of 512 rows
//   v_proj [1024, 4096]  rows 0..511      -> part 2: one run of 512 rows
//
// (a slice of dimension 1 gives one run per row instead). What is left after
// the gather is elementwise or per row: the cast to the param's dtype and an
// fp8 quantization (one scale per group of rows). The host loader
// (runtime/engine/Artifact.cpp) gathers into a vector and finishes there;
// the CUDA backend gathers into pinned staging chunks on their way to the
// device and finishes there. Both read the same ParamSource.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_BACKEND_PARAMSOURCE_H
#define INFER_RUNTIME_BACKEND_PARAMSOURCE_H

#include "runtime/backend/Backend.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace infer {

/// A strided view of a mapped checkpoint tensor: element (i0, .., in) is at
/// data + sum(ik * strides[k]) elements; the last stride is 1.
struct SourceView {
  /// Keeps `data` mapped.
  std::shared_ptr<const HostMapping> mapping;
  const char *data = nullptr;
  /// kBF16, kF16 or kF32.
  plan::DType dtype = plan::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  /// A whole contiguous tensor of `shape` at `data`.
  static SourceView contiguous(std::shared_ptr<const HostMapping> mapping,
                               const char *data, plan::DType dtype,
                               std::vector<int64_t> shape);
  int64_t numElements() const;
};

/// A param as its source views and what remains to do after gathering them.
struct ParamSource {
  /// Concatenated along dimension 0.
  std::vector<SourceView> parts;
  /// After the slices and concatenations.
  std::vector<int64_t> shape;
  /// The elements as gathered: the parts' dtype, or kF32 when they differ
  /// (16-bit parts are widened exactly).
  plan::DType gatherDType = plan::DType::kF32;
  /// The param's dtype (the plan value's).
  plan::DType dtype = plan::DType::kF32;
  /// quantize_fp8_e4m3 last (dtype is then kF8E4M3): the row counts of the
  /// groups that share a scale (every row, the `parts`, or all rows).
  bool quantize = false;
  std::vector<int64_t> quantizeGroups;

  int64_t numElements() const;
  uint64_t gatheredBytes() const;
  /// Whether the gathered elements are the param's bytes as they are (no
  /// cast, no quantization).
  bool gatheredIsFinal() const { return !quantize && gatherDType == dtype; }
  /// Writes the gathered bytes [offset, offset + bytes) to `out`; offset and
  /// bytes are multiples of gatherDType's size. Safe to call from several
  /// threads on disjoint ranges.
  void gather(uint64_t offset, uint64_t bytes, char *out) const;
  /// The gathered elements in a new host tensor of gatherDType.
  HostTensor gatherToHost() const;
};

/// Rounds a host tensor of 16-bit or f32 elements to `dtype` as the loader
/// does when a param's dtype differs from its source (16-bit widened
/// exactly, then rounded to nearest even; f32 kept for any other dtype).
void castHostTensor(HostTensor &tensor, plan::DType dtype);

/// Checks quantize_fp8_e4m3's `granularity` attribute: per-tensor or
/// per-channel.
Status checkFp8Granularity(const plan::WeightTransform &transform);

/// The row counts of quantize_fp8_e4m3's scale groups for a tensor of
/// `rows` rows: one per row ("per-channel"), the transform's `parts`, or
/// one group ("per-tensor").
StatusOr<std::vector<int64_t>>
fp8QuantizeGroups(const plan::WeightTransform &transform, int64_t rows);

/// Each row's fp8 scale: amax / 448 of its group, from each row's amax (a
/// NaN amax for a row holding NaN). An inf or NaN group is an error.
StatusOr<std::vector<float>> fp8RowScales(const std::vector<int64_t> &groups,
                                          const std::vector<float> &rowAmax);

} // namespace infer

#endif // INFER_RUNTIME_BACKEND_PARAMSOURCE_H
