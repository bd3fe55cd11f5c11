//===- Fp8.h - FP8 conversions as CUDA performs them ------------*- C++ -*-===//
//
// Host emulation of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) and
// of the fp8 -> float decode, so that the CPU backend produces the same bytes
// as the GPU for fp8 weights and fp8 KV cache entries.
//
//   E4M3 (OCP "FN"): s eeee mmm, bias 7, no infinities, S.1111.111 is NaN,
//                    largest finite 448 (0x7E), smallest subnormal 2^-9.
//   E5M2 (IEEE-like): s eeeee mm, bias 15, S.11111.00 is Inf, other e=31 NaN,
//                    largest finite 57344 (0x7B), smallest subnormal 2^-16.
//
// Encoding rounds to nearest, ties to even, in double precision (CUDA's host
// path widens float to double first, which is exact). Finite values beyond
// the largest finite value and infinities saturate to +-max finite; NaN
// becomes 0x7F (E4M3) or 0x7E|top mantissa bits (E5M2), sign kept.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SUPPORT_FP8_H
#define INFER_RUNTIME_SUPPORT_FP8_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace infer {

enum class Fp8Format { kE4M3, kE5M2 };

/// Largest finite magnitude of each format: what saturation clamps to.
constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

inline float fp8MaxFinite(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? kFp8E4M3Max : kFp8E5M2Max;
}

/// Bit-exact port of CUDA's host __nv_cvt_double_to_fp8 with __NV_SATFINITE.
inline uint8_t encodeFp8(float value, Fp8Format format) {
  const double x = value;
  uint64_t xbits;
  std::memcpy(&xbits, &x, sizeof(x));

  const bool e4m3 = format == Fp8Format::kE4M3;
  const unsigned expBias = e4m3 ? 7 : 15;
  const uint64_t significandBits = e4m3 ? 4 : 3; // Including the hidden bit.
  const uint8_t mantissaMask = e4m3 ? 0x7 : 0x3;
  // Half the smallest subnormal: at or below it everything rounds to zero.
  const uint64_t minDenormHalf =
      e4m3 ? 0x3F50000000000000ULL : 0x3EE0000000000000ULL;
  // Largest finite + half an ulp. E4M3's midpoint (464) rounds to even (448);
  // E5M2's (61440) would round up to Inf, hence the exclusive bound.
  const uint64_t overflowThreshold =
      e4m3 ? 0x407D000000000000ULL : 0x40EE000000000000ULL - 1;
  const uint8_t maxNorm = e4m3 ? 0x7E : 0x7B;
  const uint64_t minNorm = e4m3 ? 0x3F90000000000000ULL : 0x3F10000000000000ULL;
  const uint64_t doubleInf = 0x7FF0000000000000ULL;
  // Half an fp8 ulp, positioned in the double's 52-bit mantissa.
  const uint64_t halfUlp = 1ULL << (53 - significandBits - 1);

  const uint8_t sign = static_cast<uint8_t>((xbits >> 63) << 7);
  const uint8_t exponent = static_cast<uint8_t>(
      ((static_cast<unsigned>(xbits >> 52)) & 0x7FF) - 1023 + expBias);
  uint8_t mantissa =
      static_cast<uint8_t>(xbits >> (53 - significandBits)) & mantissaMask;
  const uint64_t absBits = xbits & 0x7FFFFFFFFFFFFFFFULL;

  uint8_t result;
  if (absBits <= minDenormHalf) {
    result = 0;
  } else if (absBits > doubleInf) {
    result = e4m3 ? 0x7F : static_cast<uint8_t>(0x7E | mantissa);
  } else if (absBits > overflowThreshold) {
    result = maxNorm;
  } else if (absBits >= minNorm) {
    result =
        static_cast<uint8_t>((exponent << (significandBits - 1)) | mantissa);
    const uint64_t roundBits = xbits & ((halfUlp << 1) - 1);
    if (roundBits > halfUlp || (roundBits == halfUlp && (mantissa & 1)))
      ++result;
  } else {
    // Subnormal: shift the significand (hidden bit made explicit) right.
    const uint8_t shift = static_cast<uint8_t>(1 - exponent);
    mantissa |= static_cast<uint8_t>(1 << (significandBits - 1));
    result = static_cast<uint8_t>(mantissa >> shift);
    const uint64_t roundBits =
        (xbits | (1ULL << 52)) & ((halfUlp << (shift + 1)) - 1);
    if (roundBits > (halfUlp << shift) ||
        (roundBits == (halfUlp << shift) && (result & 1)))
      ++result;
  }
  return static_cast<uint8_t>(result | sign);
}

/// Exact decode of an fp8 code (every fp8 value is representable in float).
inline float decodeFp8(uint8_t code, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mantissaBits = e4m3 ? 3 : 2;
  const int expBias = e4m3 ? 7 : 15;
  const int expMax = e4m3 ? 15 : 31;
  const bool negative = code & 0x80;
  const int exponent = (code & 0x7F) >> mantissaBits;
  const int mantissa = code & ((1 << mantissaBits) - 1);

  float magnitude;
  if (e4m3 && exponent == expMax && mantissa == (1 << mantissaBits) - 1)
    magnitude = std::numeric_limits<float>::quiet_NaN();
  else if (!e4m3 && exponent == expMax)
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    magnitude =
        std::ldexp(static_cast<float>(mantissa), 1 - expBias - mantissaBits);
  else
    magnitude = std::ldexp(static_cast<float>(mantissa + (1 << mantissaBits)),
                           exponent - expBias - mantissaBits);
  return negative ? -magnitude : magnitude;
}

} // namespace infer

#endif // INFER_RUNTIME_SUPPORT_FP8_H
