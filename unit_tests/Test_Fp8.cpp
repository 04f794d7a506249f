// FP8 latent caches: the e4m3 and bf16 conversions against an independent
// model of the formats, and append_to_cache's quantiser against the written
// contract (docs/serving.md, "FP8 latent cache"): byte layout, scales,
// rounding, saturation, zero blocks, power-of-two scales, bad input.

#include "Reference.hpp"

#include <kokkosmla.h>

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

using Bytes = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, Space>;

/// A paged FP8 cache of B sequences with every byte 0xff (NaN codes, NaN
/// scales) and pages in reverse order; seqlens as given.
template <class T>
LatentCache<T> fp8_cache(CacheStorage storage, std::int64_t R, std::int64_t Dr, std::int64_t page,
                         std::int64_t per_sequence, const std::vector<int>& lengths) {
  const std::int64_t B = std::int64_t(lengths.size()), pages = B * per_sequence;
  LatentCache<T> c;
  c.storage = storage;
  c.fp8.tokens = Bytes("tokens", pages, page, fp8_token_bytes(storage, R, Dr));
  Kokkos::deep_copy(c.fp8.tokens, std::uint8_t(0xff));
  Kokkos::View<int**, Kokkos::LayoutRight, Space> table("block_table", B, per_sequence);
  Kokkos::View<int*, Kokkos::LayoutRight, Space> seqlens("seqlens", B);
  auto ht = Kokkos::create_mirror_view(table);
  auto hl = Kokkos::create_mirror_view(seqlens);
  for (std::int64_t b = 0; b < B; ++b) {
    hl(b) = lengths[b];
    for (std::int64_t p = 0; p < per_sequence; ++p) ht(b, p) = int(pages - 1 - (b * per_sequence + p));
  }
  Kokkos::deep_copy(table, ht);
  Kokkos::deep_copy(seqlens, hl);
  c.block_table = table;
  c.seqlens = seqlens;
  return c;
}

/// The bytes of token s of sequence b of a cache made by fp8_cache, on the host.
struct HostTokens {
  Kokkos::View<const std::uint8_t***, Kokkos::LayoutRight, Kokkos::HostSpace> bytes;
  Kokkos::View<const int**, Kokkos::LayoutRight, Kokkos::HostSpace> table;
  const std::uint8_t* token(std::int64_t b, std::int64_t s) const {
    const std::int64_t page = std::int64_t(bytes.extent(1));
    return &bytes(table(b, s / page), s % page, 0);
  }
  template <class T>
  explicit HostTokens(const LatentCache<T>& c)
      : bytes(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.fp8.tokens)),
        table(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.block_table)) {}
};

float scale_in(const std::uint8_t* token, std::int64_t at) {
  float x;
  std::memcpy(&x, token + at, sizeof x);
  return x;
}

/// (B, Tn, width) values, uniform in [-1, 1) times a magnitude per 128-channel
/// block (10^-3 .. 10^3), with block 1 of token 0 of every sequence all zeros.
std::vector<double> new_values(std::int64_t B, std::int64_t Tn, std::int64_t width, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1), e(-3, 3);
  std::vector<double> v(B * Tn * width);
  for (std::int64_t t = 0; t < B * Tn; ++t)
    for (std::int64_t c0 = 0; c0 < width; c0 += 128) {
      const double magnitude = std::pow(10.0, e(rng));
      for (std::int64_t c = c0; c < std::min(c0 + 128, width); ++c)
        v[t * width + c] = t % Tn == 0 && c0 == 128 ? 0.0 : magnitude * u(rng);
    }
  return v;
}

template <class T>
class Fp8Append : public ::testing::Test {};
TYPED_TEST_SUITE(Fp8Append, Scalars);

// Fp8PerBlock: each block's scale is amax / 448 (or its power-of-two
// ceiling), each code the e4m3 of value / scale, so that every value decodes
// within half an e4m3 step; RoPE keys are bf16; all-zero blocks get scale 1
// and codes 0; bytes of other tokens are untouched.
TYPED_TEST(Fp8Append, PerBlockFollowsTheContract) {
  using T = TypeParam;
  for (bool power_of_two : {false, true})
    for (std::int64_t R : {128, 512})
      for (std::int64_t Dr : {0, 64, 3}) {
        SCOPED_TRACE("R=" + std::to_string(R) + " Dr=" + std::to_string(Dr) +
                     " power_of_two=" + std::to_string(power_of_two));
        const std::int64_t B = 3, Tn = 3, page = 5;
        const std::vector<int> lengths = {3, 7, 11};  // the new tokens end each sequence
        LatentCache<T> cache = fp8_cache<T>(CacheStorage::Fp8PerBlock, R, Dr, page, 3, lengths);
        cache.fp8.power_of_two_scales = power_of_two;
        const std::vector<double> latent = new_values(B, Tn, R, 40 + R + Dr);
        const std::vector<double> rope = new_values(B, Tn, Dr, 41);
        append_to_cache(Space(), cache, to_device3<T>(latent, B, Tn, R),
                        Dr > 0 ? to_device3<T>(rope, B, Tn, Dr) : View3<T>());
        const HostTokens host(cache);
        int zero_blocks = 0;
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t s = 0; s < lengths[b]; ++s) {
            const std::uint8_t* token = host.token(b, s);
            const std::int64_t i = s - (lengths[b] - Tn);  // which new token, or < 0
            if (i < 0) {
              for (std::int64_t k = 0; k < std::int64_t(host.bytes.extent(2)); ++k)
                ASSERT_EQ(token[k], 0xff) << "token " << s << " of sequence " << b << " was written";
              continue;
            }
            const double* x = &latent[(b * Tn + i) * R];
            for (std::int64_t j = 0; j < R / 128; ++j) {
              double amax = 0;
              for (std::int64_t c = 128 * j; c < 128 * (j + 1); ++c)
                amax = std::max(amax, double(std::fabs(float(T(x[c])))));
              const float scale = scale_in(token, R + 4 * j);
              if (amax == 0) {
                ++zero_blocks;
                EXPECT_EQ(scale, 1.f) << "an all-zero block's scale";
              } else if (power_of_two) {
                int e = 0;
                EXPECT_EQ(std::frexp(scale, &e), 0.5f) << scale;
                EXPECT_GE(double(scale), double(float(amax) / 448.f));
                EXPECT_LT(double(scale), 2 * double(float(amax) / 448.f));
              } else {
                EXPECT_EQ(scale, float(amax) / 448.f);
              }
              for (std::int64_t c = 128 * j; c < 128 * (j + 1); ++c) {
                const float v = float(T(x[c]));
                ASSERT_EQ(token[c], e4m3_from_float(v / scale)) << "channel " << c;
                const double decoded = e4m3_value(token[c]) * scale;
                ASSERT_FALSE(std::isnan(decoded));
                // Half an e4m3 step: 2^-4 relative, or 2^-10 scale among subnormals.
                EXPECT_LE(std::fabs(decoded - v),
                          std::max(std::fabs(v) / 16, std::ldexp(scale, -10)) * 1.000001)
                    << "channel " << c;
                EXPECT_LE(std::fabs(decoded), 448.0 * scale);
              }
            }
            for (std::int64_t e = 0; e < Dr; ++e) {
              std::uint16_t bits;
              std::memcpy(&bits, token + R + 4 * (R / 128) + 2 * e, sizeof bits);
              EXPECT_EQ(bits, bf16_from_float(float(T(rope[(b * Tn + i) * Dr + e])))) << "RoPE value " << e;
            }
          }
        EXPECT_EQ(zero_blocks, R > 128 ? B : 0);
      }
}

// Fp8PerTensor: codes are the e4m3 of value / scale with the caller's two
// scales; values beyond 448 x scale saturate to +-448 x scale; R and Dr of
// any width.
TYPED_TEST(Fp8Append, PerTensorFollowsTheContract) {
  using T = TypeParam;
  const std::int64_t B = 2, Tn = 2, R = 13, Dr = 5, page = 3;
  const std::vector<int> lengths = {2, 5};
  LatentCache<T> cache = fp8_cache<T>(CacheStorage::Fp8PerTensor, R, Dr, page, 2, lengths);
  cache.fp8.latent_scale = 0.01f;
  cache.fp8.rope_scale = 0.25f;
  std::vector<double> latent = new_values(B, Tn, R, 7), rope = new_values(B, Tn, Dr, 8);
  latent[0] = 5.0, latent[1] = -9.0;  // beyond 448 x 0.01
  rope[0] = 1e3;                      // beyond 448 x 0.25
  append_to_cache(Space(), cache, to_device3<T>(latent, B, Tn, R), to_device3<T>(rope, B, Tn, Dr));
  const HostTokens host(cache);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < Tn; ++i) {
      const std::uint8_t* token = host.token(b, lengths[b] - Tn + i);
      for (std::int64_t c = 0; c < R + Dr; ++c) {
        const double x = c < R ? latent[(b * Tn + i) * R + c] : rope[(b * Tn + i) * Dr + c - R];
        const float scale = c < R ? 0.01f : 0.25f;
        EXPECT_EQ(token[c], e4m3_model(double(float(T(x)) / scale))) << "column " << c;
      }
    }
  const std::uint8_t* first = host.token(0, 0);
  EXPECT_EQ(first[0], 0x7e);
  EXPECT_EQ(first[1], 0xfe);
  EXPECT_EQ(first[R], 0x7e);
}

TYPED_TEST(Fp8Append, BadInputIsRejectedBeforeAnyWrite) {
  using T = TypeParam;
  const LatentCache<T> good = fp8_cache<T>(CacheStorage::Fp8PerBlock, 256, 64, 4, 2, {5, 8});
  const View3<T> latent("latent", 2, 1, 256), rope("rope", 2, 1, 64);
  auto append = [&](const LatentCache<T>& c, const View3<T>& l, const View3<T>& r) {
    return [=] { append_to_cache(Space(), c, l, r); };
  };
  {  // tokens of another size
    LatentCache<T> c = good;
    c.fp8.tokens = Bytes("tokens", 4, 4, 576);
    expect_rejected<std::uint8_t>(
        append(c, latent, rope),
        {"cache.fp8.tokens.extent(2) = 576", "Fp8PerBlock", "R = 256", "Dr = 64", "needs 392"}, c.fp8.tokens);
    c.storage = CacheStorage::Fp8PerTensor;  // 256 + 64 bytes
    expect_rejected<std::uint8_t>(append(c, latent, rope), {"cache.fp8.tokens.extent(2) = 576", "needs 320"},
                                  c.fp8.tokens);
  }
  {  // a latent not a multiple of 128 wide
    LatentCache<T> c = good;
    const View3<T> odd("latent", 2, 1, 200);
    c.fp8.tokens = Bytes("tokens", 4, 4, 200 + 2 * 64);
    expect_rejected<std::uint8_t>(append(c, odd, rope), {"new_latent.extent(2) = 200", "multiple of 128"},
                                  c.fp8.tokens);
  }
  {  // a Scalar latent beside FP8 tokens
    LatentCache<T> c = good;
    c.latent = View3<T>("latent", 4, 4, 320);
    expect_rejected<std::uint8_t>(append(c, latent, rope),
                                  {"cache.storage = Fp8PerBlock", "cache.latent (4, 4, 320)"}, c.fp8.tokens);
  }
  {  // RoPE keys the tokens have no room for, and none where they have
    LatentCache<T> c = good;
    expect_rejected<std::uint8_t>(append(c, latent, View3<T>()), {"Dr = 0", "needs 264"}, c.fp8.tokens);
  }
  {  // pages of another batch, and a sequence shorter than its new tokens
    LatentCache<T> c = good;
    const View3<T> three("latent", 3, 1, 256), three_rope("rope", 3, 1, 64);
    expect_rejected<std::uint8_t>(append(c, three, three_rope),
                                  {"cache.seqlens.extent(0) = 2", "new_latent.extent(0) = 3"}, c.fp8.tokens);
    const View3<T> many("latent", 2, 6, 256), many_rope("rope", 2, 6, 64);
    expect_rejected<std::uint8_t>(append(c, many, many_rope), {"cache.seqlens(0) = 5", "[6, 8]"},
                                  c.fp8.tokens);
  }
  {  // per-tensor scales that are not finite and positive, or not powers of two when promised
    LatentCache<T> c = fp8_cache<T>(CacheStorage::Fp8PerTensor, 256, 64, 4, 2, {5, 8});
    for (float bad : {0.f, -1.f, INFINITY, std::nanf("")}) {
      c.fp8.latent_scale = bad;
      expect_rejected<std::uint8_t>(append(c, latent, rope),
                                    {"cache.fp8.latent_scale", "finite and positive"}, c.fp8.tokens);
    }
    c.fp8.latent_scale = 0.5f;
    c.fp8.rope_scale = 0.3f;
    c.fp8.power_of_two_scales = true;
    expect_rejected<std::uint8_t>(append(c, latent, rope), {"cache.fp8.rope_scale = 0.3", "power of two"},
                                  c.fp8.tokens);
    c.fp8.rope_scale = 0.25f;
    append_to_cache(Space(), c, latent, rope);  // powers of two: taken
  }
}

/// The C interface's append and cache attention on an FP8 cache
/// (kokkosmla.h: kokkosmla_cache::storage and the fp8 fields) against the
/// C++ API's on the same inputs: the same bytes, and out and lse bit for bit.
template <class T, class CAppend, class CAttend>
void expect_c_interface_matches(CacheStorage storage, CAppend c_append, CAttend c_attend) {
  const std::int64_t B = 3, Tn = 4, Tq = 2, H = 3, D = 8, R = 128, Dr = 5, page = 3, per_sequence = 4;
  const std::vector<int> lengths = {9, 4, 12};
  for (bool power_of_two : {false, true}) {
    SCOPED_TRACE(to_string(storage) + " power_of_two=" + std::to_string(power_of_two));
    LatentCache<T> cpp = fp8_cache<T>(storage, R, Dr, page, per_sequence, lengths);
    LatentCache<T> c_side = fp8_cache<T>(storage, R, Dr, page, per_sequence, lengths);
    for (LatentCache<T>* c : {&cpp, &c_side}) {
      c->fp8.power_of_two_scales = power_of_two;
      c->fp8.latent_scale = power_of_two ? 0.25f : 0.3f;
      c->fp8.rope_scale = power_of_two ? 0.5f : 0.7f;
    }
    const View3<T> latent = to_device3<T>(new_values(B, Tn, R, 51), B, Tn, R);
    const View3<T> rope = to_device3<T>(new_values(B, Tn, Dr, 52), B, Tn, Dr);
    append_to_cache(Space(), cpp, latent, rope);

    kokkosmla_cache cache;
    std::memset(&cache, 0, sizeof cache);
    cache.latent = c_side.fp8.tokens.data();
    cache.block_table = c_side.block_table.data();
    cache.seqlens = c_side.seqlens.data();
    cache.pages = std::int64_t(c_side.fp8.tokens.extent(0));
    cache.page_size = page;
    cache.pages_per_sequence = per_sequence;
    cache.latent_dim = R;
    cache.rope_dim = Dr;
    cache.storage = int(storage);
    cache.fp8_power_of_two_scales = power_of_two;
    cache.fp8_latent_scale = c_side.fp8.latent_scale;
    cache.fp8_rope_scale = c_side.fp8.rope_scale;
    ASSERT_EQ(c_append(&cache, latent.data(), rope.data(), B, Tn), KOKKOSMLA_SUCCESS)
        << kokkosmla_last_error();
    const auto want_bytes = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), cpp.fp8.tokens);
    const auto got_bytes = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c_side.fp8.tokens);
    ASSERT_EQ(std::memcmp(want_bytes.data(), got_bytes.data(), want_bytes.span()), 0);

    std::mt19937_64 rng(53);
    CacheArguments<T> a;
    const View4<T> q("q", B, Tq, H, D), q_rope("q_rope", B, Tq, H, Dr);
    const View3<T> w_uk("w_uk", R, H, D), w_uv("w_uv", R, H, D);
    Problem<T>::fill(q, rng, 1.0);
    Problem<T>::fill(q_rope, rng, 1.0);
    Problem<T>::fill(w_uk, rng, 0.1);
    Problem<T>::fill(w_uv, rng, 0.1);
    a.q = q;
    a.q_rope = q_rope;
    a.w_uk = w_uk;
    a.w_uv = w_uv;
    a.cache = cpp;
    a.out = View4<T>("out", B, Tq, H, D);
    a.lse = typename CacheArguments<T>::Lse("lse", B, Tq, H);
    cache_attention(Space(), a);
    const View4<T> out("out_c", B, Tq, H, D);
    const typename CacheArguments<T>::Lse lse("lse_c", B, Tq, H);
    ASSERT_EQ(c_attend(q.data(), q_rope.data(), &cache, w_uk.data(), w_uv.data(), out.data(), lse.data(), B,
                       Tq, H, D),
              KOKKOSMLA_SUCCESS)
        << kokkosmla_last_error();
    const auto want_out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.out);
    const auto got_out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    const auto want_lse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.lse);
    const auto got_lse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
    ASSERT_EQ(std::memcmp(want_out.data(), got_out.data(), want_out.span() * sizeof(T)), 0);
    ASSERT_EQ(std::memcmp(want_lse.data(), got_lse.data(), want_lse.span() * sizeof(T)), 0);
    double largest = 0;
    for (std::size_t i = 0; i < want_out.span(); ++i)
      largest = std::max(largest, std::fabs(double(want_out.data()[i])));
    EXPECT_GT(largest, 0) << "the compared outputs are not all zero";
  }
}

TEST(Fp8, CInterfaceMatchesTheCppApi) {
  for (CacheStorage storage : {CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor}) {
    expect_c_interface_matches<double>(
        storage,
        [](const kokkosmla_cache* c, const double* l, const double* r, std::int64_t B, std::int64_t Tn) {
          return kokkosmla_append_to_cache_d(c, l, r, B, Tn, nullptr);
        },
        [](const double* q, const double* qr, const kokkosmla_cache* c, const double* uk, const double* uv,
           double* out, double* lse, std::int64_t B, std::int64_t Tq, std::int64_t H, std::int64_t D) {
          return kokkosmla_cache_attention_d(q, qr, c, uk, uv, out, lse, B, Tq, H, D, nullptr);
        });
    expect_c_interface_matches<float>(
        storage,
        [](const kokkosmla_cache* c, const float* l, const float* r, std::int64_t B, std::int64_t Tn) {
          return kokkosmla_append_to_cache_f(c, l, r, B, Tn, nullptr);
        },
        [](const float* q, const float* qr, const kokkosmla_cache* c, const float* uk, const float* uv,
           float* out, float* lse, std::int64_t B, std::int64_t Tq, std::int64_t H, std::int64_t D) {
          return kokkosmla_cache_attention_f(q, qr, c, uk, uv, out, lse, B, Tq, H, D, nullptr);
        });
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
