#ifndef KOKKOSMLA_FP8TILES_HPP
#define KOKKOSMLA_FP8TILES_HPP
// FP8 cache tokens for the tensor-core decode kernels (DecodeFp8TensorKernel,
// DecodeSm90Kernel), DeepSeek's widths (latent 512, RoPE 64) in either FP8
// storage (docs/serving.md, "FP8 latent cache"):
//   fetch:       a tile's tokens copied as they are stored (656 or 576 bytes,
//                Pitch apart) by cp.async into one buffer of a ring of
//                `Stages` staging buffers in team scratch;
//   load_piece, put_piece: (DecodeSm90Kernel, whose products read 16-bit
//                tiles) a token read from the cache into registers, then
//                turned into 16-bit tile rows: e4m3 x scale in fp32 (the
//                contract's value), rounded to T once; bf16 RoPE keys of
//                Fp8PerBlock as they are (bf16) or rounded (fp16).
// DecodeFp8TensorKernel reads the staged tokens themselves. Eight threads
// share a token: one row lookup a thread a pass, in 8 Keys / Threads
// passes. DecodeSm90's third warpgroup dequantises, two passes ahead.

#include <KokkosMLA_Fp8.hpp>

#include "KokkosMLA_LatentKernels.hpp"
#include "KokkosMLA_TensorOps.hpp"

#if KOKKOSMLA_ENABLE_SM80
namespace KokkosMLA {
namespace Impl {

/// Where an FP8 cache's tokens are and their per-tensor scales (Fp8PerTensor).
struct Fp8Keys {
  LatentKeys<std::uint8_t> tokens;  ///< rows of fp8_token_bytes bytes (`latent`, `latent_ld`)
  float latent_scale = 1, rope_scale = 1;
};

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
/// The low two e4m3 codes of `codes` as an fp16 pair (exact: every e4m3 value is an fp16 one).
__device__ inline unsigned f16x2_from_e4m3x2(unsigned codes) {
#if __CUDA_ARCH__ >= 890
  unsigned halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(halves) : "h"(static_cast<unsigned short>(codes)));
  return halves;
#else
  return Fp16Mma::pack(float_from_e4m3(std::uint8_t(codes)), float_from_e4m3(std::uint8_t(codes >> 8)));
#endif
}

/// The four e4m3 codes of `codes` as two fp16 pairs (low: bytes 0, 1; high:
/// bytes 2, 3). The conversions read the halves of the word in place, where
/// f16x2_from_e4m3x2(codes >> 16) takes a shift first.
__device__ inline void f16x2_pairs_from_e4m3x4(unsigned codes, unsigned& low, unsigned& high) {
#if __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\n"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(low), "=r"(high)
      : "r"(codes));
#else
  low = f16x2_from_e4m3x2(codes), high = f16x2_from_e4m3x2(codes >> 16);
#endif
}
#endif

/// Bytes of an FP8 token of DeepSeek's widths: 512 e4m3, then 4 fp32 scales
/// and 64 bf16 RoPE values (Fp8PerBlock, 656), or 64 e4m3 RoPE values (576).
constexpr int deepseek_fp8_token_bytes(CacheStorage storage) {
  return storage == CacheStorage::Fp8PerBlock ? 512 + 4 * (512 / 128) + 2 * 64 : 512 + 64;
}

/// Pitch: bytes between staged tokens (their size, or more so that a
/// kernel's accesses hit every bank).
template <class T, CacheStorage Storage, int Keys, int Threads, int Stages,
          int Pitch = deepseek_fp8_token_bytes(Storage)>
struct Fp8KeyTiles {
  static_assert(Storage != CacheStorage::Native, "an FP8 storage");
  static constexpr bool kPerBlock = Storage == CacheStorage::Fp8PerBlock;
  static constexpr int kRank = 512;
  static constexpr int kTokenBytes = deepseek_fp8_token_bytes(Storage);
  static_assert(Pitch >= kTokenBytes && Pitch % 16 == 0, "whole tokens, 16-byte aligned");
  static constexpr int kPitch = Pitch;
  static constexpr int kPieces = kTokenBytes / 16;  // 16-byte pieces of a token: 41 or 36
  static constexpr int kStageBytes = Keys * Pitch;
  static constexpr int kScratchBytes = Stages * kStageBytes;
  static constexpr int kPassKeys = Threads / 8;  // tokens a pass
  static constexpr int kPasses = Keys / kPassKeys;
  static_assert(kTokenBytes % 16 == 0 && Threads % 8 == 0 && Keys % kPassKeys == 0,
                "16-byte pieces, eight threads a token, whole passes");

  Fp8Keys keys;

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  /// The staging buffer of tile `tile` of a part.
  __device__ static char* slot(char* staging, int tile) { return staging + tile % Stages * kStageBytes; }

  /// A ring read in place (DecodeFp8TensorKernel), Stages - 1 tiles in
  /// flight: `start` fetches the part's first Stages - 1 tiles (keys from k0
  /// on); at step i, wait_current (before the step's first barrier) waits
  /// for this thread's copies of tile i, and fetch_ahead (after it, keys k0
  /// on) starts tile i + Stages - 1 in the buffer that tile i - 1 left.
  template <class Operands>
  __device__ void start(const Operands& op, std::int64_t b, std::int64_t k0, std::int64_t end, char* staging,
                        int rank) const {
    for (int j = 0; j < Stages - 1; ++j) fetch(op, b, k0 + j * Keys, end, slot(staging, j), rank);
  }
  __device__ static void wait_current() { wait_copies<Stages - 2>(); }
  template <class Operands>
  __device__ void fetch_ahead(const Operands& op, std::int64_t b, std::int64_t k0, std::int64_t end,
                              char* staging, int step, int rank) const {
    fetch(op, b, k0 + (Stages - 1) * Keys, end, slot(staging, step + Stages - 1), rank);
  }

  /// Starts copying keys k0 .. k0 + Keys - 1 of sequence b (zeros from
  /// `end` on; row_of(b, k) is key k's token) into `stage` as one group (an
  /// empty one when k0 >= end, so that every step commits one). Thread
  /// `rank` copies pieces rank % 8 + 8j of tokens rank / 8 + kPassKeys pass.
  template <class Operands>
  __device__ void fetch(const Operands& op, std::int64_t b, std::int64_t k0, std::int64_t end, char* stage,
                        int rank) const {
    const int piece = rank % 8;
    if (k0 < end) {
      KOKKOSMLA_UNROLL
      for (int pass = 0; pass < kPasses; ++pass) {
        const int key = rank / 8 + kPassKeys * pass;
        const bool valid = k0 + key < end;
        const std::uint8_t* from =
            keys.tokens.latent + (valid ? op.key_row(b, k0 + key) : 0) * keys.tokens.latent_ld;
        char* to = stage + key * Pitch;
        KOKKOSMLA_UNROLL
        for (int p = piece; p < kPieces; p += 8) copy_async<CopyVia::L2>(to + 16 * p, from + 16 * p, valid);
      }
    }
    commit_copies();
  }

  /// Where the token of cache row `row` starts.
  __device__ const std::uint8_t* token(std::int64_t row) const {
    return keys.tokens.latent + row * keys.tokens.latent_ld;
  }

  /// A thread's share of one token, read from the cache into registers
  /// (DecodeSm90Kernel's dequantising warpgroup): latent channels 16 (piece
  /// + 8j) .. + 15 of each 128-channel block j, the token's block scales
  /// (Fp8PerBlock) and its RoPE values 8 piece .. + 7.
  struct TokenPiece {
    uint4 codes[kRank / 128];
    uint4 scales;  // Fp8PerBlock: block j's fp32 scale in word j
    uint4 rope;    // eight bf16 (Fp8PerBlock) or eight e4m3 codes in words 0, 1 (Fp8PerTensor)
  };

  /// Piece `piece` (of eight) of the token at `from`; zeros, read from
  /// nowhere, where !valid (keys past a part's end, whose rows may hold anything).
  __device__ static TokenPiece load_piece(const std::uint8_t* from, int piece, bool valid) {
    TokenPiece p{};
    if (!valid) return p;
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kRank / 128; ++j) p.codes[j] = load_global_16(from + 16 * (piece + 8 * j));
    if constexpr (kPerBlock) {
      p.scales = load_global_16(from + kRank);
      p.rope = load_global_16(from + kRank + 4 * (kRank / 128) + 16 * piece);
    } else {
      const uint2 codes = load_global_8(from + kRank + 8 * piece);
      p.rope.x = codes.x, p.rope.y = codes.y;
    }
    return p;
  }

  /// Dequantises a piece of token `key` of a tile; put(key, column, bits)
  /// stores 16 bytes (eight T values of [latent, RoPE key] columns column ..
  /// column + 7) of the kernel's tile.
  template <class Put>
  __device__ void put_piece(const TokenPiece& p, int key, int piece, Put&& put) const {
    static_assert(kRank / 128 == 4, "a scale word for each block");
    const unsigned block_scales[4] = {p.scales.x, p.scales.y, p.scales.z, p.scales.w};
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kRank / 128; ++j) {
      const int channel = 16 * (piece + 8 * j);  // in block j
      const float scale = kPerBlock ? __uint_as_float(block_scales[j]) : keys.latent_scale;
      put(key, channel, pairs(p.codes[j].x, p.codes[j].y, scale));
      put(key, channel + 8, pairs(p.codes[j].z, p.codes[j].w, scale));
    }
    const int column = kRank + 8 * piece;
    if constexpr (kPerBlock) {
      if constexpr (std::is_same<T, Kokkos::Experimental::bhalf_t>::value)
        put(key, column, p.rope);
      else
        put(key, column,
            uint4{from_bf16(p.rope.x), from_bf16(p.rope.y), from_bf16(p.rope.z), from_bf16(p.rope.w)});
    } else {
      put(key, column, pairs(p.rope.x, p.rope.y, keys.rope_scale));
    }
  }

  /// The eight e4m3 codes of two words times scale, as four T pairs.
  __device__ static uint4 pairs(unsigned first, unsigned second, float scale) {
    uint4 halves;
    f16x2_pairs_from_e4m3x4(first, halves.x, halves.y);
    f16x2_pairs_from_e4m3x4(second, halves.z, halves.w);
    return uint4{scaled(halves.x, scale), scaled(halves.y, scale), scaled(halves.z, scale),
                 scaled(halves.w, scale)};
  }

  /// An fp16 pair times scale, as a T pair.
  __device__ static unsigned scaled(unsigned halves, float scale) {
    const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&halves));
    return Mma<T>::pack(x.x * scale, x.y * scale);
  }

  /// A bf16 pair as a T pair.
  __device__ static unsigned from_bf16(unsigned bits) {
    return Mma<T>::pack(float_from_bf16(std::uint16_t(bits)), float_from_bf16(std::uint16_t(bits >> 16)));
  }
#endif
};

/// How an FP8 cache's tokens are addressed, and its per-tensor scales.
template <class Cache>
Fp8Keys fp8_keys(const Cache& cache) {
  return {cache_rows<std::uint8_t>(cache, cache.fp8.tokens), cache.fp8.latent_scale, cache.fp8.rope_scale};
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_ENABLE_SM80
#endif
