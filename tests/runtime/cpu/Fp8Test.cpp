//===- Fp8Test.cpp - FP8 conversions vs CUDA's rounding rules -------------===//

#include "runtime/support/Fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace infer {
namespace {

struct FormatCase {
  Fp8Format format;
  uint8_t maxCode;    // Largest finite positive code.
  float minSubnormal; // Value of code 0x01.
  float minNormal;    // Smallest normal value.
  uint8_t oneCode;    // Code of 1.0.
};

void PrintTo(const FormatCase &c, std::ostream *os) {
  *os << (c.format == Fp8Format::kE4M3 ? "E4M3" : "E5M2");
}

class Fp8Test : public ::testing::TestWithParam<FormatCase> {};

/// The finite non-negative values, ascending, with their codes.
std::vector<std::pair<float, uint8_t>> positiveFinite(Fp8Format format) {
  std::vector<std::pair<float, uint8_t>> values;
  for (int code = 0; code < 0x80; ++code) {
    float v = decodeFp8(static_cast<uint8_t>(code), format);
    if (std::isfinite(v))
      values.push_back({v, static_cast<uint8_t>(code)});
  }
  return values;
}

/// Nearest finite value, ties to the even code, beyond the range clamped to
/// the largest finite value: a brute-force model of __NV_SATFINITE + RNE.
uint8_t referenceEncode(float x, Fp8Format format) {
  auto values = positiveFinite(format);
  uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  double a = std::fabs(static_cast<double>(x));
  if (a >= values.back().first)
    return values.back().second | sign;
  auto hi = std::lower_bound(
      values.begin(), values.end(), a,
      [](const std::pair<float, uint8_t> &v, double t) { return v.first < t; });
  if (hi->first == a)
    return hi->second | sign;
  auto lo = hi - 1;
  double dLo = a - lo->first, dHi = hi->first - a;
  if (dLo < dHi)
    return lo->second | sign;
  if (dHi < dLo)
    return hi->second | sign;
  return ((lo->second & 1) ? hi->second : lo->second) | sign;
}

TEST_P(Fp8Test, DecodesEveryCode) {
  const FormatCase &c = GetParam();
  EXPECT_EQ(decodeFp8(0x00, c.format), 0.0f);
  EXPECT_TRUE(std::signbit(decodeFp8(0x80, c.format)));
  EXPECT_EQ(decodeFp8(0x01, c.format), c.minSubnormal);
  EXPECT_EQ(decodeFp8(c.oneCode, c.format), 1.0f);
  EXPECT_EQ(decodeFp8(c.maxCode, c.format), fp8MaxFinite(c.format));

  // Positive codes ascend; within a binade the spacing is constant and the
  // subnormals are multiples of the smallest one.
  auto values = positiveFinite(c.format);
  ASSERT_EQ(values.size(), static_cast<size_t>(c.maxCode) + 1);
  for (size_t i = 1; i < values.size(); ++i) {
    EXPECT_EQ(values[i].second, i);
    EXPECT_LT(values[i - 1].first, values[i].first) << "code " << i;
    if (values[i].first <= c.minNormal)
      EXPECT_EQ(values[i].first, c.minSubnormal * i);
  }
  // Negative codes mirror positive ones.
  for (int code = 0; code < 0x80; ++code) {
    float pos = decodeFp8(static_cast<uint8_t>(code), c.format);
    float neg = decodeFp8(static_cast<uint8_t>(code | 0x80), c.format);
    if (std::isnan(pos))
      EXPECT_TRUE(std::isnan(neg));
    else
      EXPECT_EQ(neg, -pos);
  }
}

TEST_P(Fp8Test, SpecialCodes) {
  const FormatCase &c = GetParam();
  if (c.format == Fp8Format::kE4M3) {
    for (int code = 0; code < 256; ++code)
      EXPECT_EQ(std::isnan(decodeFp8(code, c.format)), (code & 0x7F) == 0x7F)
          << code;
    for (int code = 0; code < 256; ++code)
      EXPECT_FALSE(std::isinf(decodeFp8(code, c.format)));
  } else {
    EXPECT_EQ(decodeFp8(0x7C, c.format), INFINITY);
    EXPECT_EQ(decodeFp8(0xFC, c.format), -INFINITY);
    for (uint8_t code : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF})
      EXPECT_TRUE(std::isnan(decodeFp8(code, c.format))) << int(code);
  }
}

TEST_P(Fp8Test, EncodeRoundTripsEveryFiniteCode) {
  const FormatCase &c = GetParam();
  for (int code = 0; code < 256; ++code) {
    float v = decodeFp8(static_cast<uint8_t>(code), c.format);
    if (std::isfinite(v))
      EXPECT_EQ(encodeFp8(v, c.format), code) << "value " << v;
  }
}

TEST_P(Fp8Test, TiesRoundToEven) {
  const FormatCase &c = GetParam();
  auto values = positiveFinite(c.format);
  for (size_t i = 1; i < values.size(); ++i) {
    auto [lo, loCode] = values[i - 1];
    auto [hi, hiCode] = values[i];
    float mid = (lo + hi) / 2; // Exact: fp8 has far fewer bits than float.
    uint8_t even = (loCode & 1) ? hiCode : loCode;
    EXPECT_EQ(encodeFp8(mid, c.format), even) << "midpoint " << mid;
    EXPECT_EQ(encodeFp8(-mid, c.format), even | 0x80) << "midpoint " << -mid;
    EXPECT_EQ(encodeFp8(std::nextafter(mid, 0.0f), c.format), loCode);
    EXPECT_EQ(encodeFp8(std::nextafter(mid, INFINITY), c.format), hiCode);
  }
  // Half the smallest subnormal is a tie between 0 and 0x01: zero is even.
  EXPECT_EQ(encodeFp8(c.minSubnormal / 2, c.format), 0x00);
  EXPECT_EQ(encodeFp8(-c.minSubnormal / 2, c.format), 0x80);
  EXPECT_EQ(encodeFp8(std::nextafter(c.minSubnormal / 2, 1.0f), c.format),
            0x01);
  EXPECT_EQ(encodeFp8(1e-30f, c.format), 0x00);
}

TEST_P(Fp8Test, OverflowSaturates) {
  const FormatCase &c = GetParam();
  float max = fp8MaxFinite(c.format);
  uint8_t negMax = c.maxCode | 0x80;
  for (float x : {std::nextafter(max, INFINITY), max * 1.0625f, max * 2, 1e30f,
                  std::numeric_limits<float>::max(), INFINITY}) {
    EXPECT_EQ(encodeFp8(x, c.format), c.maxCode) << x;
    EXPECT_EQ(encodeFp8(-x, c.format), negMax) << -x;
  }
}

TEST_P(Fp8Test, NaNAsCuda) {
  const FormatCase &c = GetParam();
  float nan = std::numeric_limits<float>::quiet_NaN();
  // CUDA: E4M3 NaN is 0x7F; E5M2 keeps the top mantissa bits over 0x7E.
  uint8_t expected = c.format == Fp8Format::kE4M3 ? 0x7F : 0x7E;
  EXPECT_EQ(encodeFp8(nan, c.format), expected);
  EXPECT_EQ(encodeFp8(-nan, c.format), expected | 0x80);
  EXPECT_TRUE(std::isnan(decodeFp8(encodeFp8(nan, c.format), c.format)));
}

TEST_P(Fp8Test, MatchesBruteForceNearestOverFloatRange) {
  const FormatCase &c = GetParam();
  // Every 4099th float bit pattern from far below the smallest subnormal to
  // beyond the saturation point, both signs.
  uint32_t from, to;
  float lowest = c.minSubnormal / 64, highest = fp8MaxFinite(c.format) * 4;
  std::memcpy(&from, &lowest, 4);
  std::memcpy(&to, &highest, 4);
  for (uint32_t bits = from; bits <= to; bits += 4099) {
    float x;
    std::memcpy(&x, &bits, 4);
    ASSERT_EQ(encodeFp8(x, c.format), referenceEncode(x, c.format)) << x;
    ASSERT_EQ(encodeFp8(-x, c.format), referenceEncode(-x, c.format)) << -x;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test,
                         ::testing::Values(FormatCase{Fp8Format::kE4M3, 0x7E,
                                                      0x1p-9f, 0x1p-6f, 0x38},
                                           FormatCase{Fp8Format::kE5M2, 0x7B,
                                                      0x1p-16f, 0x1p-14f,
                                                      0x3C}),
                         [](const ::testing::TestParamInfo<FormatCase> &info) {
                           return info.param.format == Fp8Format::kE4M3
                                      ? std::string("E4M3")
                                      : std::string("E5M2");
                         });

} // namespace
} // namespace infer
