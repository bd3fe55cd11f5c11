//===- HostTensor.cpp - Parameters on the host ----------------------------===//

#include "runtime/backend/Backend.h"
#include "runtime/support/Fp8.h"
#include "runtime/support/Half.h"

namespace infer {

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const float *HostTensor::f32Data() const {
  return mapping ? static_cast<const float *>(mappedElements) : data.data();
}

const uint16_t *HostTensor::bits16Data() const {
  return mapping ? static_cast<const uint16_t *>(mappedElements)
                 : bits16.data();
}

const uint8_t *HostTensor::fp8Data() const {
  return mapping ? static_cast<const uint8_t *>(mappedElements)
                 : fp8Codes.data();
}

const float *HostTensor::rowScaleData() const {
  return mapping ? mappedRowScales : rowScales.data();
}

int64_t HostTensor::elementBytes() const {
  return numElements() * plan::dtypeSize(dtype);
}

bool HostTensor::consistent() const {
  const auto n = static_cast<size_t>(numElements());
  if (source)
    return false;
  if (mapping) {
    const bool owned = !data.empty() || !bits16.empty() || !fp8Codes.empty() ||
                       !rowScales.empty();
    const bool known = dtype == plan::DType::kF32 ||
                       dtype == plan::DType::kBF16 ||
                       dtype == plan::DType::kF16 || isFp8();
    return known && !owned && (mappedElements || n == 0) &&
           (!isFp8() || (!shape.empty() && mappedRowScales));
  }
  switch (dtype) {
  case plan::DType::kF32:
    return data.size() == n && bits16.empty() && fp8Codes.empty();
  case plan::DType::kBF16:
  case plan::DType::kF16:
    return bits16.size() == n && data.empty() && fp8Codes.empty();
  case plan::DType::kF8E4M3:
    return fp8Codes.size() == n && data.empty() && bits16.empty() &&
           !shape.empty() && rowScales.size() == static_cast<size_t>(shape[0]);
  default:
    return false;
  }
}

std::vector<float> HostTensor::toFloat() const {
  const auto n = static_cast<size_t>(numElements());
  switch (dtype) {
  case plan::DType::kBF16:
  case plan::DType::kF16: {
    std::vector<float> out(n);
    const uint16_t *bits = bits16Data();
    const bool bf16 = dtype == plan::DType::kBF16;
    for (size_t i = 0; i < n; ++i)
      out[i] = bf16 ? bf16BitsToFloat(bits[i]) : f16BitsToFloat(bits[i]);
    return out;
  }
  case plan::DType::kF8E4M3: {
    std::vector<float> out(n);
    const uint8_t *codes = fp8Data();
    const float *scales = rowScaleData();
    const size_t cols = shape.empty() || shape[0] == 0 ? 0 : n / shape[0];
    for (size_t i = 0; i < n; ++i)
      out[i] = decodeFp8(codes[i], Fp8Format::kE4M3) * scales[i / cols];
    return out;
  }
  default:
    return std::vector<float>(f32Data(), f32Data() + n);
  }
}

void HostTensor::convertTo(plan::DType to) {
  if (to != plan::DType::kBF16 && to != plan::DType::kF16)
    return;
  bits16.resize(data.size());
  for (size_t i = 0; i < data.size(); ++i)
    bits16[i] = to == plan::DType::kBF16 ? floatToBf16Bits(data[i])
                                         : floatToF16Bits(data[i]);
  data = std::vector<float>();
  dtype = to;
}

} // namespace infer
