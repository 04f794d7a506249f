#ifndef KOKKOSMLA_FP8_HPP
#define KOKKOSMLA_FP8_HPP
/// FP8 latent caches: their storage formats, and the conversions of the
/// contract that a cache's writer and its reader share (docs/serving.md,
/// "FP8 latent cache"), in portable code for the host and every device
/// backend (no vendor fp8 header).
///
/// e4m3 is OCP's E4M3 ("e4m3fn"): a sign bit, 4 exponent bits of bias 7 and
/// 3 mantissa bits; no infinities, NaN as S.1111.111, largest finite value
/// 448, subnormals k x 2^-9. Scales are fp32 and multiply: a stored value
/// decodes to e4m3 x scale.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <string>

namespace KokkosMLA {

/// How a LatentCache stores its tokens.
enum class CacheStorage {
  Native,        ///< in the plan's Scalar: LatentCache::latent (and k_rope)
  Fp8PerBlock,   ///< FlashMLA's FP8 token: R e4m3 latent values, R / 128 fp32 scales (one per 128 channels),
                 ///< then Dr RoPE values in bf16: 656 bytes for R = 512, Dr = 64
  Fp8PerTensor,  ///< R e4m3 latent values, then Dr e4m3 RoPE values; one fp32 scale for all latent values and
                 ///< one for all RoPE values (Fp8Tokens)
};

std::string to_string(CacheStorage s);

/// Bytes of one token stored as s (an FP8 storage): R + 4 R / 128 + 2 Dr for
/// Fp8PerBlock, R + Dr for Fp8PerTensor. Throws std::invalid_argument for
/// Native, negative widths, or Fp8PerBlock with R not a multiple of 128.
std::int64_t fp8_token_bytes(CacheStorage s, std::int64_t latent_dim, std::int64_t rope_dim);

/// The FP8 tokens of a LatentCache whose storage is not Native, and the scales
/// of Fp8PerTensor (Fp8PerBlock keeps its scales in the tokens).
template <class MemorySpace>
struct Fp8Tokens {
  using Bytes = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, MemorySpace>;
  /// (B, capacity, bytes) contiguous or (pages, page_size, bytes) paged,
  /// bytes = fp8_token_bytes(storage, R, Dr); addressed as LatentCache::latent.
  Bytes tokens;
  float latent_scale = 1;  ///< Fp8PerTensor: a latent value is its e4m3 x latent_scale (finite, > 0)
  float rope_scale = 1;    ///< Fp8PerTensor: a RoPE key is its e4m3 x rope_scale (finite, > 0)
  /// append_to_cache rounds each Fp8PerBlock scale up to a power of two (so
  /// that a reader may dequantise by an exponent add); with Fp8PerTensor,
  /// append_to_cache and attention reject scales that are not powers of two.
  bool power_of_two_scales = false;
};

/// The largest finite e4m3 magnitude.
constexpr float kE4m3Max = 448.f;
/// Channels of the latent that share one scale in Fp8PerBlock.
constexpr std::int64_t kFp8BlockChannels = 128;

namespace Impl {
KOKKOS_INLINE_FUNCTION std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
KOKKOS_INLINE_FUNCTION float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
/// value >> shift rounded to nearest, ties to even (0 < shift < 32).
KOKKOS_INLINE_FUNCTION std::uint32_t shift_to_nearest_even(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift, rest = value & ((std::uint32_t(1) << shift) - 1),
                      half = std::uint32_t(1) << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)) ? 1 : 0);
}
}  // namespace Impl

/// x rounded to e4m3, to nearest with ties to even; magnitudes beyond 448
/// (infinities included) saturate to +-448; NaN stays NaN (0x7f, with x's
/// sign); subnormals are exact.
KOKKOS_INLINE_FUNCTION std::uint8_t e4m3_from_float(float x) {
  const std::uint32_t u = Impl::bits_of(x);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80);
  const std::uint32_t magnitude = u & 0x7fffffff;
  if (magnitude > 0x7f800000) return std::uint8_t(sign | 0x7f);
  const int exponent = int(magnitude >> 23) - 127;
  std::uint32_t code;
  if (exponent >= -6) {
    // A normal e4m3: exponent and mantissa together, so that rounding up
    // carries into the exponent; past 448 (0x7e) saturate.
    const std::uint32_t wide = (std::uint32_t(exponent + 7) << 23) | (magnitude & 0x7fffff);
    code = exponent > 8 ? 0x7f : Impl::shift_to_nearest_even(wide, 20);
    if (code > 0x7e) code = 0x7e;
  } else if (magnitude < 0x00800000) {
    code = 0;  // zero and fp32 subnormals, far below e4m3's 2^-10
  } else {
    // A subnormal e4m3, in units of 2^-9: the significand shifted by 14 - exponent.
    const int shift = 14 - exponent;
    code = shift > 24 ? 0 : Impl::shift_to_nearest_even((magnitude & 0x7fffff) | 0x800000, shift);
  }
  return std::uint8_t(sign | code);
}

/// The value of an e4m3 code.
KOKKOS_INLINE_FUNCTION float float_from_e4m3(std::uint8_t code) {
  const std::uint32_t sign = std::uint32_t(code & 0x80) << 24, exponent = (code >> 3) & 0xf,
                      mantissa = code & 7;
  if (exponent == 0xf && mantissa == 7) return Impl::float_of(sign | 0x7fc00000);
  if (exponent == 0) return Impl::float_of(sign | Impl::bits_of(float(mantissa) * 0.001953125f));  // 2^-9
  return Impl::float_of(sign | ((exponent + 120) << 23) | (mantissa << 20));
}

/// x rounded to bf16 (its upper 16 bits), to nearest with ties to even; NaN stays NaN.
KOKKOS_INLINE_FUNCTION std::uint16_t bf16_from_float(float x) {
  const std::uint32_t u = Impl::bits_of(x);
  if ((u & 0x7fffffff) > 0x7f800000) return std::uint16_t((u >> 16) | 0x40);
  return std::uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

KOKKOS_INLINE_FUNCTION float float_from_bf16(std::uint16_t bits) {
  return Impl::float_of(std::uint32_t(bits) << 16);
}

/// The Fp8PerBlock scale of a block whose largest magnitude is amax (finite):
/// amax / 448 in fp32, with power_of_two the least power of two at or above
/// it; 1 where amax / 448 is 0 (an all-zero block, or amax below 448 x
/// 2^-149), whose values are then stored as e4m3 of themselves, 0 or a tiny subnormal.
KOKKOS_INLINE_FUNCTION float fp8_block_scale(float amax, bool power_of_two) {
  const float scale = amax / kE4m3Max;
  if (!(scale > 0.f)) return 1.f;
  if (!power_of_two) return scale;
  const std::uint32_t u = Impl::bits_of(scale);
  if (u < 0x00800000) {  // fp32 subnormal: the least power of two of its bits at or above them
    std::uint32_t p = 1;
    while (p < u) p <<= 1;
    return Impl::float_of(p);
  }
  return (u & 0x7fffff) == 0 ? scale : Impl::float_of((u & 0x7f800000) + 0x00800000);
}

}  // namespace KokkosMLA

#endif
