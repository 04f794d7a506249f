#ifndef KOKKOSMLA_FP8KERNELS_HPP
#define KOKKOSMLA_FP8KERNELS_HPP
// FP8 latent caches (KokkosMLA_Fp8.hpp): quantising new tokens into a
// cache's storage (append_to_cache), and dequantising the tokens each
// sequence holds into a contiguous cache of a compute type (the Widened
// path's reading of an FP8 cache). The byte layout and rounding follow
// docs/serving.md, "FP8 latent cache".

#include <KokkosMLA_Fp8.hpp>

#include "KokkosMLA_LatentKernels.hpp"

namespace KokkosMLA {
namespace Impl {

KOKKOS_INLINE_FUNCTION float load_float(const std::uint8_t* p) {
  float x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

/// Where the parts of one FP8 token lie, and its scales.
struct Fp8Format {
  CacheStorage storage = CacheStorage::Fp8PerBlock;
  std::int64_t rank = 0, rope_dim = 0;
  float latent_scale = 1, rope_scale = 1;  ///< Fp8PerTensor

  template <class Cache>
  static Fp8Format of(const Cache& c, std::int64_t rank, std::int64_t rope_dim) {
    return {c.storage, rank, rope_dim, c.fp8.latent_scale, c.fp8.rope_scale};
  }
  KOKKOS_INLINE_FUNCTION bool per_block() const { return storage == CacheStorage::Fp8PerBlock; }
  /// Latent blocks of up to 128 channels: one scale each in Fp8PerBlock.
  KOKKOS_INLINE_FUNCTION std::int64_t blocks() const {
    return (rank + kFp8BlockChannels - 1) / kFp8BlockChannels;
  }
  /// Byte offset of block j's scale (Fp8PerBlock).
  KOKKOS_INLINE_FUNCTION std::int64_t scale_at(std::int64_t j) const { return rank + 4 * j; }
  /// Byte offset of RoPE value e: bf16 after the scales (Fp8PerBlock), else e4m3 after the latent.
  KOKKOS_INLINE_FUNCTION std::int64_t rope_at(std::int64_t e) const {
    return per_block() ? rank + 4 * blocks() + 2 * e : rank + e;
  }

  /// Column c of the token's [latent, RoPE key] row, dequantised to fp32.
  KOKKOS_INLINE_FUNCTION float value(const std::uint8_t* token, std::int64_t c) const {
    if (c < rank)
      return float_from_e4m3(token[c]) *
             (per_block() ? load_float(token + scale_at(c / kFp8BlockChannels)) : latent_scale);
    const std::uint8_t* at = token + rope_at(c - rank);
    if (!per_block()) return float_from_e4m3(*at) * rope_scale;
    std::uint16_t bits;
    std::memcpy(&bits, at, sizeof bits);
    return float_from_bf16(bits);
  }
};

/// append_to_cache into an FP8 cache: one thread per latent block of a new
/// token (its scale from the block's largest magnitude in Fp8PerBlock) and
/// one per token's RoPE key; values are rounded to fp32 first.
template <class T>
struct Fp8AppendKernel {
  LatentKeys<std::uint8_t> at;  // addressing of the cache's tokens (pointers unused)
  std::uint8_t* bytes;          // the cache's tokens, at.latent_ld apart
  Fp8Format format;
  bool power_of_two_scales;
  HeadRows<const T> new_latent;  // (B, tokens, R), by token row
  HeadRows<const T> new_rope;    // (B, tokens, Dr), or null
  std::int64_t tokens;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t e) const {
    const std::int64_t parts = format.blocks() + 1, token = e / parts, part = e % parts;
    const std::int64_t b = token / tokens, i = token % tokens, R = format.rank, Dr = format.rope_dim;
    std::uint8_t* const row = bytes + at.row(b, at.length(b) - tokens + i) * at.latent_ld;
    if (part == parts - 1) {
      for (std::int64_t d = 0; d < Dr; ++d) {
        const float x = float(new_rope.at(token, 0)[d]);
        std::uint8_t* const to = row + format.rope_at(d);
        if (format.per_block()) {
          const std::uint16_t bits = bf16_from_float(x);
          std::memcpy(to, &bits, sizeof bits);
        } else {
          *to = e4m3_from_float(x / format.rope_scale);
        }
      }
      return;
    }
    const T* const from = new_latent.at(token, 0);
    const std::int64_t c0 = part * kFp8BlockChannels, c1 = min_of(c0 + kFp8BlockChannels, R);
    float scale = format.latent_scale;
    if (format.per_block()) {
      float amax = 0;
      for (std::int64_t c = c0; c < c1; ++c) {
        const float x = float(from[c]), magnitude = x < 0 ? -x : x;
        amax = magnitude > amax ? magnitude : amax;
      }
      scale = fp8_block_scale(amax, power_of_two_scales);
      std::memcpy(row + format.scale_at(part), &scale, sizeof scale);
    }
    for (std::int64_t c = c0; c < c1; ++c) row[c] = e4m3_from_float(float(from[c]) / scale);
  }
};

/// An FP8 cache's tokens dequantised into a contiguous cache (B, capacity,
/// R + Dr) of C as [latent, RoPE key] rows; zeros past each sequence's length.
template <class C>
struct Fp8GatherKernel {
  LatentKeys<std::uint8_t> from;
  Fp8Format format;
  C* to;
  std::int64_t capacity, width;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t b = i / (capacity * width), s = i / width % capacity, c = i % width;
    to[i] = s < from.length(b) ? C(format.value(from.latent + from.row(b, s) * from.latent_ld, c)) : C(0);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
