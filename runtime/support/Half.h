//===- Half.h - bf16 and f16 conversions on the host ------------*- C++ -*-===//
//
// The 16-bit float formats of plan values (plan::DType kBF16, kF16) as bit
// patterns, converted to and from fp32 the way CUDA's __float2bfloat16_rn and
// __float2half_rn do: round to nearest even, overflow to infinity, NaN
// stays NaN. The CPU backend rounds a bf16 value's fp32 result with
// roundToBf16, so it stores the numbers the GPU stores.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SUPPORT_HALF_H
#define INFER_RUNTIME_SUPPORT_HALF_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace infer {

inline float bf16BitsToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t floatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, make it quiet
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16BitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    const float f = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t floatToF16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);
  // 65520 and up round to infinity (65504 is the largest half).
  if (magnitude >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) { // a normal half: 2^-14 and up
    const uint32_t mantissa = magnitude & 0x7fffffu;
    const uint32_t exponent = (magnitude >> 23) - 127 + 15;
    uint32_t h = (exponent << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
      ++h; // a carry into the exponent is the right result
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half (units of 2^-24), or zero: scale and round to even.
  float a;
  std::memcpy(&a, &magnitude, sizeof(a));
  const auto units = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
  return static_cast<uint16_t>(sign | units);
}

inline float roundToBf16(float f) {
  return bf16BitsToFloat(floatToBf16Bits(f));
}
inline float roundToF16(float f) { return f16BitsToFloat(floatToF16Bits(f)); }

} // namespace infer

#endif // INFER_RUNTIME_SUPPORT_HALF_H
