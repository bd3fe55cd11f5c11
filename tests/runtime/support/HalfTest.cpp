//===- HalfTest.cpp - bf16 and f16 conversions ----------------------------===//

#include "runtime/support/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace infer {
namespace {

TEST(Half, EveryBf16PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = bf16BitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16BitsToFloat(floatToBf16Bits(f))));
      continue;
    }
    ASSERT_EQ(floatToBf16Bits(f), bits) << std::hex << bits;
  }
}

TEST(Half, EveryF16PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = f16BitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16BitsToFloat(floatToF16Bits(f))));
      continue;
    }
    ASSERT_EQ(floatToF16Bits(f), bits) << std::hex << bits;
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(roundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  EXPECT_EQ(roundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)),
            1.0f + std::ldexp(1.0f, -6));
  // Just above halfway rounds up.
  EXPECT_EQ(roundToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(roundToBf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::isinf(roundToBf16(std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(roundToBf16(std::nanf(""))));
}

TEST(Half, F16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(roundToF16(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(roundToF16(1.0f + 3 * std::ldexp(1.0f, -11)),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(roundToF16(65504.0f), 65504.0f);
  EXPECT_EQ(roundToF16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(roundToF16(65520.0f)));
  // Subnormals are multiples of 2^-24; half of the smallest ties to 0.
  EXPECT_EQ(roundToF16(std::ldexp(3.0f, -25)), std::ldexp(2.0f, -24));
  EXPECT_EQ(roundToF16(std::ldexp(1.0f, -25)), 0.0f);
  EXPECT_EQ(roundToF16(std::ldexp(1.5f, -24)), std::ldexp(2.0f, -24));
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(roundToF16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)),
            std::ldexp(1.0f, -14));
  EXPECT_EQ(floatToF16Bits(-0.0f), 0x8000);
}

} // namespace
} // namespace infer
