// FP8 latent caches: the e4m3 and bf16 conversions against an independent
// model of the formats, the block scales and the token sizes.

#include "Reference.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace KokkosMLA {
namespace Test {
namespace {

/// The value of an e4m3 code from the format's definition, in double.
double e4m3_value(int code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/// x rounded to e4m3 by search: the nearest finite code (ties to the even
/// code), saturating beyond 448, NaN to NaN.
int e4m3_model(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  int best = 0;
  for (int code = 1; code <= 0x7e; ++code) {
    const double d = std::fabs(e4m3_value(code) - a), best_d = std::fabs(e4m3_value(best) - a);
    if (d < best_d || (d == best_d && code % 2 == 0)) best = code;
  }
  return sign | best;
}

TEST(Fp8, EveryE4m3CodeDecodesAndRoundTrips) {
  int finite = 0;
  for (int code = 0; code < 256; ++code) {
    const float value = float_from_e4m3(std::uint8_t(code));
    const double want = e4m3_value(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(value)) << code;
      EXPECT_EQ(e4m3_from_float(value), code) << "NaN keeps its sign";
      continue;
    }
    ++finite;
    EXPECT_EQ(double(value), want) << "code " << code;
    EXPECT_EQ(std::signbit(value), code >= 0x80) << "code " << code;
    EXPECT_EQ(int(e4m3_from_float(value)), code) << "a representable value is stored exactly";
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(float_from_e4m3(0x7e), 448.f);
  EXPECT_EQ(float_from_e4m3(0x01), std::ldexp(1.f, -9));  // the least subnormal
  EXPECT_EQ(float_from_e4m3(0x08), std::ldexp(1.f, -6));  // the least normal
}

TEST(Fp8, E4m3RoundsToNearestEvenBetweenEveryPairOfCodes) {
  for (int code = 0; code < 0x7e; ++code)
    for (float sign : {1.f, -1.f}) {
      const float lo = float_from_e4m3(std::uint8_t(code)), hi = float_from_e4m3(std::uint8_t(code + 1));
      const float mid = (lo + hi) / 2;  // exact: a few significant bits
      ASSERT_EQ(double(mid), (double(lo) + double(hi)) / 2);
      const int s = sign < 0 ? 0x80 : 0;
      const int even = code % 2 == 0 ? code : code + 1;
      EXPECT_EQ(int(e4m3_from_float(sign * mid)), s | even)
          << "tie between codes " << code << " and " << code + 1;
      EXPECT_EQ(int(e4m3_from_float(sign * std::nextafter(mid, 0.f))), s | code);
      EXPECT_EQ(int(e4m3_from_float(sign * std::nextafter(mid, 1e9f))), s | (code + 1));
    }
}

TEST(Fp8, E4m3SaturatesKeepsNaNAndFlushesBelowHalfTheLeastSubnormal) {
  for (float x : {448.f, 449.f, 463.9f, 464.f, 465.f, 480.f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(e4m3_from_float(x), 0x7e) << x;
    EXPECT_EQ(e4m3_from_float(-x), 0xfe) << -x;
  }
  EXPECT_EQ(e4m3_from_float(std::nanf("")), 0x7f);
  EXPECT_EQ(e4m3_from_float(-std::nanf("")), 0xff);
  const float half_least = std::ldexp(1.f, -10);
  EXPECT_EQ(e4m3_from_float(half_least), 0x00) << "a tie rounds to the even code 0";
  EXPECT_EQ(e4m3_from_float(std::nextafter(half_least, 1.f)), 0x01);
  EXPECT_EQ(e4m3_from_float(-0.f), 0x80);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.f, -30)), 0x00);
}

TEST(Fp8, E4m3MatchesTheModelOnRandomValues) {
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-14, 10);
  int mismatches = 0;
  for (int i = 0; i < 20000; ++i) {
    const float x = float(std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1 : 1));
    const int got = e4m3_from_float(x), want = e4m3_model(x);
    if (got != want && ++mismatches <= 5) ADD_FAILURE() << x << ": code " << got << ", model " << want;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Fp8, Bf16RoundsToNearestEvenAndKeepsNaN) {
  const float one = 1.f, ulp = std::ldexp(1.f, -7);  // bf16's spacing at 1
  EXPECT_EQ(bf16_from_float(one), 0x3f80);
  EXPECT_EQ(bf16_from_float(one + ulp / 2), 0x3f80) << "tie to the even 1";
  EXPECT_EQ(bf16_from_float(one + 3 * ulp / 2), 0x3f82) << "tie to the even 1 + 2 ulp";
  EXPECT_EQ(bf16_from_float(std::nextafter(one + ulp / 2, 2.f)), 0x3f81);
  EXPECT_EQ(float_from_bf16(0x3f81), one + ulp);
  EXPECT_EQ(float_from_bf16(bf16_from_float(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(std::nanf("")))));
  EXPECT_EQ(float_from_bf16(bf16_from_float(INFINITY)), INFINITY);
}

TEST(Fp8, BlockScales) {
  EXPECT_EQ(fp8_block_scale(448.f, false), 1.f);
  EXPECT_EQ(fp8_block_scale(3.5f, false), 3.5f / 448.f);
  EXPECT_EQ(fp8_block_scale(3.5f, true), 1.f / 128) << "3.5 / 448 = 1 / 128 is a power of two";
  EXPECT_EQ(fp8_block_scale(3.6f, true), 1.f / 64);
  EXPECT_EQ(fp8_block_scale(0.f, false), 1.f) << "an all-zero block";
  EXPECT_EQ(fp8_block_scale(0.f, true), 1.f);
  EXPECT_EQ(fp8_block_scale(std::numeric_limits<float>::denorm_min(), false), 1.f) << "amax / 448 underflows";
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-120, 120);
  for (int i = 0; i < 1000; ++i) {
    const float amax = float(std::ldexp(mantissa(rng), exponent(rng)));
    const float plain = fp8_block_scale(amax, false), p2 = fp8_block_scale(amax, true);
    EXPECT_EQ(plain, amax / 448.f);
    int e = 0;
    EXPECT_EQ(std::frexp(p2, &e), 0.5f) << p2 << " is a power of two";
    EXPECT_GE(p2, plain);
    EXPECT_LT(p2, 2 * plain);
  }
}

TEST(Fp8, TokenBytes) {
  EXPECT_EQ(fp8_token_bytes(CacheStorage::Fp8PerBlock, 512, 64), 656);
  EXPECT_EQ(fp8_token_bytes(CacheStorage::Fp8PerBlock, 128, 0), 132);
  EXPECT_EQ(fp8_token_bytes(CacheStorage::Fp8PerTensor, 512, 64), 576);
  EXPECT_EQ(fp8_token_bytes(CacheStorage::Fp8PerTensor, 7, 3), 10);
  EXPECT_THROW(fp8_token_bytes(CacheStorage::Fp8PerBlock, 500, 64), std::invalid_argument);
  EXPECT_THROW(fp8_token_bytes(CacheStorage::Native, 512, 64), std::invalid_argument);
  EXPECT_THROW(fp8_token_bytes(CacheStorage::Fp8PerTensor, 0, 64), std::invalid_argument);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
