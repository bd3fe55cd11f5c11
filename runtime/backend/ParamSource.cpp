//===- ParamSource.cpp - A param as views of checkpoint tensors -----------===//

#include "runtime/backend/ParamSource.h"
#include "runtime/support/Fp8.h"
#include "runtime/support/Half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace infer {

namespace {

int64_t product(const std::vector<int64_t> &dims, size_t first, size_t last) {
  int64_t n = 1;
  for (size_t d = first; d < last; ++d)
    n *= dims[d];
  return n;
}

/// A view as runs of contiguous elements: the trailing dimensions that are
/// packed merge into one run; the leading ones (`outerDims`) index runs.
struct Runs {
  size_t outerDims = 0;
  int64_t length = 1;
};

Runs runsOf(const SourceView &view) {
  Runs runs;
  size_t d = view.shape.size();
  int64_t packedStride = 1;
  while (d > 0 && view.strides[d - 1] == packedStride) {
    packedStride *= view.shape[d - 1];
    --d;
  }
  runs.outerDims = d;
  runs.length = product(view.shape, d, view.shape.size());
  return runs;
}

/// The first element of run `run` of `view`.
const char *runStart(const SourceView &view, const Runs &runs, int64_t run) {
  int64_t offset = 0;
  for (size_t d = runs.outerDims; d-- > 0;) {
    offset += (run % view.shape[d]) * view.strides[d];
    run /= view.shape[d];
  }
  return view.data + offset * plan::dtypeSize(view.dtype);
}

/// Copies `count` elements of `from` (a 16-bit or f32 dtype) to `to` as
/// `toDType` (the same, or f32).
void copyElements(const char *from, plan::DType fromDType, int64_t count,
                  char *to, plan::DType toDType) {
  if (fromDType == toDType) {
    std::memcpy(to, from,
                static_cast<size_t>(count * plan::dtypeSize(toDType)));
    return;
  }
  const bool bf16 = fromDType == plan::DType::kBF16;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, from + 2 * i, 2);
    const float value = bf16 ? bf16BitsToFloat(bits) : f16BitsToFloat(bits);
    std::memcpy(to + 4 * i, &value, 4);
  }
}

} // namespace

SourceView SourceView::contiguous(std::shared_ptr<const HostMapping> mapping,
                                  const char *data, plan::DType dtype,
                                  std::vector<int64_t> shape) {
  SourceView view;
  view.mapping = std::move(mapping);
  view.data = data;
  view.dtype = dtype;
  view.strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    view.strides[d - 1] = view.strides[d] * shape[d];
  view.shape = std::move(shape);
  return view;
}

int64_t SourceView::numElements() const {
  return product(shape, 0, shape.size());
}

int64_t ParamSource::numElements() const {
  return product(shape, 0, shape.size());
}

uint64_t ParamSource::gatheredBytes() const {
  return static_cast<uint64_t>(numElements() * plan::dtypeSize(gatherDType));
}

void ParamSource::gather(uint64_t offset, uint64_t bytes, char *out) const {
  const int64_t elementSize = plan::dtypeSize(gatherDType);
  int64_t element = static_cast<int64_t>(offset) / elementSize;
  int64_t left = static_cast<int64_t>(bytes) / elementSize;
  for (const SourceView &part : parts) {
    if (left == 0)
      return;
    const int64_t partElements = part.numElements();
    if (element >= partElements) {
      element -= partElements;
      continue;
    }
    const Runs runs = runsOf(part);
    const int64_t sourceSize = plan::dtypeSize(part.dtype);
    while (left > 0 && element < partElements) {
      const int64_t run = element / runs.length;
      const int64_t at = element % runs.length;
      const int64_t take = std::min(runs.length - at, left);
      copyElements(runStart(part, runs, run) + at * sourceSize, part.dtype,
                   take, out, gatherDType);
      out += take * elementSize;
      element += take;
      left -= take;
    }
    element = 0;
  }
}

HostTensor ParamSource::gatherToHost() const {
  HostTensor tensor;
  tensor.dtype = gatherDType;
  tensor.shape = shape;
  const auto n = static_cast<size_t>(numElements());
  char *out;
  if (gatherDType == plan::DType::kF32) {
    tensor.data.resize(n);
    out = reinterpret_cast<char *>(tensor.data.data());
  } else {
    tensor.bits16.resize(n);
    out = reinterpret_cast<char *>(tensor.bits16.data());
  }
  gather(0, gatheredBytes(), out);
  return tensor;
}

void castHostTensor(HostTensor &tensor, plan::DType dtype) {
  if (tensor.dtype == dtype)
    return;
  if (!tensor.bits16.empty()) {
    tensor.data = tensor.toFloat();
    tensor.bits16 = std::vector<uint16_t>();
    tensor.dtype = plan::DType::kF32;
  }
  tensor.convertTo(dtype);
}

Status checkFp8Granularity(const plan::WeightTransform &transform) {
  auto it = transform.attrs.find("granularity");
  const auto *granularity = it == transform.attrs.end()
                                ? nullptr
                                : std::get_if<std::string>(&it->second);
  if (!granularity)
    return invalidArgument("quantize_fp8_e4m3 needs a string 'granularity' "
                           "attribute");
  if (*granularity != "per-tensor" && *granularity != "per-channel")
    return invalidArgument("quantize_fp8_e4m3: unknown granularity '" +
                           *granularity +
                           "' (expected per-tensor or per-channel)");
  return Status::ok();
}

StatusOr<std::vector<int64_t>>
fp8QuantizeGroups(const plan::WeightTransform &transform, int64_t rows) {
  INFER_RETURN_IF_ERROR(checkFp8Granularity(transform));
  if (std::get<std::string>(transform.attrs.at("granularity")) == "per-channel")
    return std::vector<int64_t>(static_cast<size_t>(rows), 1);
  auto parts = transform.attrs.find("parts");
  if (parts == transform.attrs.end())
    return std::vector<int64_t>{rows};
  const auto *sizes = std::get_if<std::vector<int64_t>>(&parts->second);
  bool positive = sizes != nullptr;
  int64_t total = 0;
  for (int64_t n : sizes ? *sizes : std::vector<int64_t>{}) {
    positive = positive && n > 0;
    total += n;
  }
  if (!positive || total != rows)
    return invalidArgument("quantize_fp8_e4m3: parts must be positive row "
                           "counts adding up to " +
                           std::to_string(rows));
  return *sizes;
}

StatusOr<std::vector<float>> fp8RowScales(const std::vector<int64_t> &groups,
                                          const std::vector<float> &rowAmax) {
  std::vector<float> scales(rowAmax.size());
  size_t row = 0;
  for (int64_t groupRows : groups) {
    const auto end = row + static_cast<size_t>(groupRows);
    float amax = 0.0f;
    // max that stays NaN once either is (std::max drops a NaN).
    for (size_t r = row; r < end; ++r)
      amax = std::isnan(amax) || std::isnan(rowAmax[r])
                 ? NAN
                 : std::max(amax, rowAmax[r]);
    if (!std::isfinite(amax))
      return invalidArgument("cannot quantize a tensor holding inf or NaN");
    // An all-zero group keeps scale 0 (its codes are 0: no division by 0).
    std::fill(scales.begin() + static_cast<std::ptrdiff_t>(row),
              scales.begin() + static_cast<std::ptrdiff_t>(end),
              amax / kFp8E4M3Max);
    row = end;
  }
  return scales;
}

} // namespace infer
