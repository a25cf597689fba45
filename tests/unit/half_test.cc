// Tests for the float16 and bfloat16 conversions (base/half.h) that the host reduction
// and the CUDA kernels round with: known values, every float16 and bfloat16 exhaustively
// against the IEEE definition (round to nearest, ties to even, NaNs quiet), and the
// portable conversion against the F16C instructions the vector loops use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "base/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gyre {
namespace {

uint32_t floatBits(float f) { return half_detail::floatBits(f); }
float bitsFloat(uint32_t u) { return half_detail::bitsFloat(u); }

TEST(HalfTest, Float16KnownValues) {
  EXPECT_EQ(toFloat16(1.0f).bits, 0x3c00);
  EXPECT_EQ(toFloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(toFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(toFloat16(65504.0f).bits, 0x7bff);   // largest finite
  EXPECT_EQ(toFloat16(65519.99f).bits, 0x7bff);  // below the tie with 2^16
  EXPECT_EQ(toFloat16(65520.0f).bits, 0x7c00);   // the tie goes to even: infinity
  EXPECT_EQ(toFloat16(1e9f).bits, 0x7c00);
  EXPECT_EQ(toFloat16(-INFINITY).bits, 0xfc00);
  EXPECT_EQ(toFloat16(NAN).bits & 0x7e00, 0x7e00);
  EXPECT_EQ(toFloat16(bitsFloat(0x7f800001)).bits, 0x7e00);  // signalling NaN made quiet
  // Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(toFloat16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(toFloat16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_EQ(toFloat16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits, 0x3c01);
  // Subnormals: units of 2^-24; 2^-25 is a tie between 0 and 2^-24.
  EXPECT_EQ(toFloat16(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(toFloat16(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(toFloat16(std::ldexp(1.0f, -25) * 1.001f).bits, 0x0001);
  EXPECT_EQ(toFloat16(3 * std::ldexp(1.0f, -25)).bits, 0x0002);
  EXPECT_EQ(toFloat16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)).bits, 0x0400);
  EXPECT_EQ(toFloat16(-std::ldexp(1.0f, -30)).bits, 0x8000);
  EXPECT_EQ(toFloat16(1e-45f).bits, 0x0000);  // float subnormal

  EXPECT_EQ(toFloat(Float16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(toFloat(Float16{0x03ff}), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(toFloat(Float16{0x7bff}), 65504.0f);
  EXPECT_EQ(toFloat(Float16{0xfc00}), -INFINITY);
  EXPECT_EQ(floatBits(toFloat(Float16{0x7c01})), 0x7fc02000u);  // quiet, payload kept
}

// Every float16 converts exactly, and every float rounds to the nearest float16, ties
// to even: checked at the midpoints between neighbours and one float ulp either side.
TEST(HalfTest, Float16ExhaustiveAgainstDefinition) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    const float got = toFloat(Float16{static_cast<uint16_t>(h)});
    if (exponent == 0x1f) {
      EXPECT_EQ(std::isnan(got), mantissa != 0) << h;
      continue;
    }
    const float expected = exponent == 0
                               ? sign * std::ldexp(static_cast<float>(mantissa), -24)
                               : sign * std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
    ASSERT_EQ(floatBits(got), floatBits(expected)) << std::hex << h;
    ASSERT_EQ(toFloat16(got).bits, h) << std::hex << h;  // round trip
  }
  for (uint16_t h = 0; h < 0x7bff; ++h) {  // positive finite neighbours h, h + 1
    const double lo = toFloat(Float16{h}), hi = toFloat(Float16{static_cast<uint16_t>(h + 1)});
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    const uint16_t even = (h & 1) ? h + 1 : h;
    ASSERT_EQ(toFloat16(mid).bits, even) << std::hex << h;
    ASSERT_EQ(toFloat16(std::nextafter(mid, 0.0f)).bits, h) << std::hex << h;
    ASSERT_EQ(toFloat16(std::nextafter(mid, INFINITY)).bits, h + 1) << std::hex << h;
    ASSERT_EQ(toFloat16(-mid).bits, even | 0x8000) << std::hex << h;
  }
}

TEST(HalfTest, BFloat16KnownValues) {
  EXPECT_EQ(toBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(toBFloat16(bitsFloat(0x3f808000)).bits, 0x3f80);  // tie, to even
  EXPECT_EQ(toBFloat16(bitsFloat(0x3f818000)).bits, 0x3f82);  // tie, to even
  EXPECT_EQ(toBFloat16(bitsFloat(0x3f808001)).bits, 0x3f81);
  EXPECT_EQ(toBFloat16(bitsFloat(0x7f7fffff)).bits, 0x7f80);  // max float rounds to inf
  EXPECT_EQ(toBFloat16(bitsFloat(0x7f7f7fff)).bits, 0x7f7f);
  EXPECT_EQ(toBFloat16(-INFINITY).bits, 0xff80);
  EXPECT_EQ(toBFloat16(bitsFloat(0x7f800001)).bits, 0x7fc0);  // NaN stays NaN, quiet
  EXPECT_EQ(toBFloat16(bitsFloat(0xff812345)).bits, 0xffc1);
  EXPECT_EQ(toBFloat16(bitsFloat(0x00008000)).bits, 0x0000);  // subnormal tie
  EXPECT_EQ(toBFloat16(bitsFloat(0x00018000)).bits, 0x0002);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = toFloat(BFloat16{static_cast<uint16_t>(h)});
    ASSERT_EQ(floatBits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(toBFloat16(f).bits, h);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t f16cToHalf(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
__attribute__((target("f16c"))) float f16cToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// The vector loops convert with F16C; the scalar tail and the portable loop use
// base/half.h. They must agree on every input, NaN payloads included.
TEST(HalfTest, Float16MatchesF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(floatBits(toFloat(Float16{static_cast<uint16_t>(h)})),
              floatBits(f16cToFloat(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  // Every 4099th float pattern (all exponents, signs, NaNs), plus the low bits of the
  // mantissa around the rounding position of every exponent.
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) {
    const float f = bitsFloat(static_cast<uint32_t>(x));
    ASSERT_EQ(toFloat16(f).bits, f16cToHalf(f)) << std::hex << x;
  }
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (uint32_t low = 0; low < 0x4000; ++low) {
      const uint32_t x = (exponent << 23) | (low << 5) | (low & 0x1f);
      ASSERT_EQ(toFloat16(bitsFloat(x)).bits, f16cToHalf(bitsFloat(x))) << std::hex << x;
    }
  }
}
#endif

}  // namespace
}  // namespace gyre
