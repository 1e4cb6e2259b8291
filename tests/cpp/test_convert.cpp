// The fp32 <-> f16/bf16 conversions of common/convert.h: round-to-nearest-even, exact round trips,
// infinities, NaN, subnormals.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/convert.h"

namespace {

using namespace flashattn::detail;

// Correctly rounded (nearest-even) value of x in a binary format with `mant` explicit mantissa bits and
// minimum normal exponent emin, computed in double.
double round_ne(double x, int mant, int emin, double max_finite) {
  if (x == 0 || std::isnan(x)) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = f * 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, emin);
  const double ulp = std::ldexp(1.0, exp - mant);
  double r = std::nearbyint(x / ulp) * ulp;  // default rounding mode: nearest-even
  if (std::fabs(r) > max_finite) r = std::copysign(INFINITY, x);
  return r;
}

TEST(Convert, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    EXPECT_EQ(float_to_f16(f), uint16_t(h)) << std::hex << h;
  }
}

TEST(Convert, Bf16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), uint16_t(h)) << std::hex << h;
  }
}

TEST(Convert, RoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    // keep the f16 test inside and around its range, including subnormals
    const float g = std::ldexp(std::fmod(std::fabs(f), 2.0f) * (u & 1 ? 1 : -1), int(u % 44) - 28);
    const double want16 = round_ne(g, 10, -14, 65504.0);
    const double got16 = f16_to_float(float_to_f16(g));
    EXPECT_EQ(got16, want16) << g;
    if (std::isinf(f)) continue;
    const double want_bf = round_ne(f, 7, -126, double(std::numeric_limits<float>::max()));
    EXPECT_EQ(double(bf16_to_float(float_to_bf16(f))), want_bf) << f;
  }
}

TEST(Convert, SpecialValues) {
  EXPECT_EQ(float_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_f16(70000.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
}

}  // namespace
