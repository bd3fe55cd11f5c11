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

bool HostTensor::consistent() const {
  const auto n = static_cast<size_t>(numElements());
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
  switch (dtype) {
  case plan::DType::kBF16:
  case plan::DType::kF16: {
    std::vector<float> out(bits16.size());
    const bool bf16 = dtype == plan::DType::kBF16;
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = bf16 ? bf16BitsToFloat(bits16[i]) : f16BitsToFloat(bits16[i]);
    return out;
  }
  case plan::DType::kF8E4M3: {
    std::vector<float> out(fp8Codes.size());
    const size_t cols = rowScales.empty() ? 0 : out.size() / rowScales.size();
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = decodeFp8(fp8Codes[i], Fp8Format::kE4M3) * rowScales[i / cols];
    return out;
  }
  default:
    return data;
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
