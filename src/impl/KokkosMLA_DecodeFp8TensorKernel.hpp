#ifndef KOKKOSMLA_DECODEFP8TENSORKERNEL_HPP
#define KOKKOSMLA_DECODEFP8TENSORKERNEL_HPP
// Cache attention over FP8 tokens on mma.sync tensor cores (compute
// capability 8.0 and newer; e4m3 conversion by one instruction from 8.9):
// the attention of the DecodeTensorSm80 path for FP8 caches of DeepSeek's
// widths (latent 512 in e4m3, RoPE keys 64), 16-bit queries,
//   S = [qa, q_rope] [latent, k_rope]^T * scale,  oa = softmax(S) latent,
// the latent value of channel c of a token being its e4m3 code times the
// scale of c's block of 128 channels (Fp8PerBlock) or the tensor's scale.
//
// The team and its steps are DecodeTensorKernel's (4 warps over 16 query
// rows, partial scores summed through scratch), in steps of 32 keys where the
// team scratch holds them, else of 16 (Keys), but no token
// is dequantised into a 16-bit tile: tokens are staged as stored (kStages
// tiles deep, by cp.async) and each warp turns the bytes it reads into
// fp16 product operands in registers. A 16-bit tile cost three passes
// through shared memory a token (the copy, the dequantisation's loads and
// stores, ldmatrix), and the shared-memory pipe, not DRAM, bounded that
// kernel. Here a warp owns latent block w (channels 128w .. 128w + 127,
// one scale a token) and RoPE columns 16w .. 16w + 15:
//   scores: its partial S is (Q_w K_w^T) x the keys' scales, plus the RoPE
//     part. The e4m3 codes are exact in fp16, so the products are fp16 ones
//     on the codes themselves (one conversion a pair), the queries' block
//     is rounded to fp16 once, times a power of two a row that keeps it in
//     range, and the scales are applied to the fp32 sums. A thread's B
//     fragment is 4 consecutive codes of a token (one 32-bit load): the 16
//     channels of each k16 slice are ordered 4t .. 4t + 3 for lane t, and
//     the queries' A fragments follow that order.
//   values: oa's block w is P V'_w, V' the codes x the keys' scales / u,
//     u a power of two at least the tile's largest scale (so V' fits fp16),
//     and oa kept in units of u. With fp16 queries V' is rounded to fp16 (by
//     two fp16 instructions a pair); with bf16 queries the scales / u go
//     into P (one multiplication a probability) and the codes are V' as
//     they are: 8-9 % faster on the H200, within bf16's error. V's B
//     fragment takes one channel of four keys: a thread loads 4
//     consecutive codes of each of its 4 keys and sorts
//     them by channel with byte permutes, so that its tile's channels are
//     32q + 4g + i (tile 4q + i), and its accumulators hold 8 consecutive
//     channels 32q + 8t .. + 7 at the end.
// RoPE keys are T products as stored (bf16, rounded to fp16 for fp16
// queries) or, per-tensor, e4m3 codes made T pairs exactly, times the scale.
// Staged tokens are 656 bytes apart (164 words, 4 mod 32) or, per-tensor,
// 592 (148, 20 mod 32): both loads above hit 32 banks.

#include "KokkosMLA_DecodeTensorKernel.hpp"

#if KOKKOSMLA_ENABLE_SM80
namespace KokkosMLA {
namespace Impl {

/// Keys = 16: 16-key steps over a ring of 4 staged tiles (46 KB a team for
/// FlashMLA's 656-byte tokens, which any Kokkos gives); Keys = 32: 32-key
/// steps, one tile in use and one landing, half the barriers, score
/// exchanges and softmax steps a key (50 KB for 656-byte tokens: a Kokkos
/// with the CUDA shared-memory opt-in; 46 KB for 592-byte per-tensor ones).
template <class T, CacheStorage Storage, bool Listed = false, int Keys = 16>
struct DecodeFp8TensorKernel : DecodeOperands<T, 16, Keys, Listed> {  // 16 query rows a team
  using Base = DecodeOperands<T, 16, Keys, Listed>;
  using Base::heads, Base::qa, Base::queries, Base::scale, Base::scratch_level;
  using Base::kKeys, Base::kRank, Base::kRows;
  static_assert(is_half_precision<T>::value && Storage != CacheStorage::Native, "FP8 tokens, 16-bit queries");
  using Scalar = typename Base::Scalar;
  using Steps = DecodeTensorKernel<T, 64, CacheStorage::Native, Listed>;  // the team's steps
  using Ops = Mma<T>;                                                     // RoPE products
  static constexpr bool kPerBlock = Storage == CacheStorage::Fp8PerBlock;
  static constexpr bool kBf16 = std::is_same<T, Kokkos::Experimental::bhalf_t>::value;
  static constexpr int kRope = 64, kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kBlock = kRank / kWarps;        // a warp's latent channels: one scale's block
  static constexpr int kSlices = kBlock / 16;          // its k16 slices of the scores: 8
  static constexpr int kOutTiles = kBlock / 8;         // its n8 tiles of oa: 16
  static constexpr int kRopeColumns = kRope / kWarps;  // a warp's RoPE columns: one k16 slice
  static constexpr int kKeyTiles = kKeys / 8;          // n8 tiles of keys a step: 2 or 4
  static constexpr int kHalves = kKeys / 16;           // k16 slices of keys a step: 1 or 2
  static_assert(kKeys == 16 || kKeys == 32, "16- or 32-key steps");
  static constexpr int kStages = kKeys == 16 ? 4 : 2;  // staged tiles: three, or one, in flight
  static constexpr int kPitch = kPerBlock ? 656 : 592;
  using Tokens = Fp8KeyTiles<T, Storage, kKeys, kThreads, kStages, kPitch>;
  static constexpr int kScalesAt = kRank;                                        // Fp8PerBlock: fp32 scales
  static constexpr int kRopeAt = kPerBlock ? kRank + 4 * (kRank / 128) : kRank;  // RoPE values
  static_assert(Steps::kOutTiles == kOutTiles && Steps::kWarps == kWarps, "DecodeTensorKernel's team");
  static constexpr bool needs_full_team = true;
  static constexpr int kTeamsPerSM = 3;
  using bounds = Kokkos::LaunchBounds<kThreads, kTeamsPerSM>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  static constexpr std::size_t kAlignment = 16;
  static constexpr std::size_t kPartialBytes = std::size_t(kWarps) * kRows * kKeys * sizeof(float);
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return kStages * std::size_t(Tokens::kStageBytes) + kPartialBytes + kAlignment;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    attend(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::DecodeFp8TensorKernel: this GPU's code was built without sm_80 instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  /// A warp's query fragments: its latent block in fp16 times a power of
  /// two a row (undone by `unscale`), in the slices' channel order, and its
  /// RoPE columns as T pairs.
  struct Queries {
    unsigned latent[kSlices][4];
    unsigned rope[4];
    float unscale[2];
  };

  __device__ void attend(const Member& team) const {
    const int rank = hidden_from_compiler(team.team_rank()), warp = rank / 32, lane = rank % 32;
    const int g = lane / 4, t = lane % 4;  // fragment row and column pair
    const auto share = this->team_share(team.league_rank());
    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    char* staging = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + kAlignment - 1) &
                                            ~std::uintptr_t(kAlignment - 1));
    float* partial = reinterpret_cast<float*>(staging + kStages * Tokens::kStageBytes);

    const Tokens tokens{this->fp8};
    // Key positions are below 2^30 (validated): the loop counts in 32 bits.
    const int begin = int(share.begin), key_end = int(share.team_end), mask_from = int(share.edge_from);
    tokens.start(*this, share.b, begin, key_end, staging, rank);

    const std::int64_t n0 = share.first + g;
    Queries q;
    load_queries(q, share.b, n0, warp, t);
    const int visible0 = int(this->visible_end(share, n0)), visible1 = int(this->visible_end(share, n0 + 8));

    float o[kOutTiles][4];
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units), lane's sums
    float unit = 1.f;                                        // o's unit
    const float scale2 = scale * 1.4426950408889634f;        // exp(x) = exp2(x log2(e))

    for (int k0 = begin, step = 0; k0 < key_end; k0 += kKeys, ++step) {
      Tokens::wait_current();
      team.team_barrier();  // the tile is visible; every warp is done with the last one and the partials
      tokens.fetch_ahead(*this, share.b, k0, key_end, staging, step, rank);
      const unsigned tile = shared_address(Tokens::slot(staging, step));
      float scales[2 * kKeyTiles];  // of keys 8n + 2t, 8n + 2t + 1 (n8 tile n) in this warp's block
      block_scales(tile, warp, t, scales);
      float s[kKeyTiles][4];
      partial_scores(s, q, tile, warp, g, t, scales);
      Steps::exchange_partial_scores(team, s, partial, warp, g, t);
      const float tile_unit = unit_of(scales), per_unit = reciprocal_of_unit(tile_unit);
      Steps::softmax_step(s, o, m, l, k0 + kKeys > mask_from, visible0 - k0, visible1 - k0, t, scale2,
                          unit * per_unit);
      unit = tile_unit;
      accumulate(o, s, scales, per_unit, tile, warp, g, t);
    }
    team.team_barrier();  // with one part, oa overwrites qa columns other warps may not have read yet
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) o[n][0] *= unit, o[n][1] *= unit, o[n][2] *= unit, o[n][3] *= unit;
    finish(o, m, l, share.b, share.part, n0, t, warp);
  }

  /// Rows n0 and n0 + 8 of sequence b's queries (zeros past the last row):
  /// block `warp` of qa (A fragment entry i of slice kk: row n0 + 8 (i % 2),
  /// channels 16 kk + 4t + 2 (i / 2) and the next), and RoPE columns 16 warp
  /// + 2t (+ 8).
  __device__ void load_queries(Queries& q, std::int64_t b, std::int64_t n0, int warp, int t) const {
    const std::int64_t rows = queries * heads;
    const Scalar* row[2];
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) row[r] = n0 + 8 * r < rows ? qa + (b * rows + n0 + 8 * r) * kRank : nullptr;
    auto pair = [&](int r, int kk, int half) -> float2 {
      if (!row[r]) return make_float2(0.f, 0.f);
      const Scalar* x = row[r] + warp * kBlock + 16 * kk + 4 * t + 2 * half;
      return make_float2(float(x[0]), float(x[1]));
    };
    // The power of two that brings each row's largest magnitude into [128, 256).
    float top[2] = {0.f, 0.f};
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < kSlices; ++kk) {
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float2 x = pair(i % 2, kk, i / 2);
        top[i % 2] = fmaxf(top[i % 2], fmaxf(fabsf(x.x), fabsf(x.y)));
      }
    }
    float up[2];
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
      top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
      const int exponent = int(__float_as_uint(top[r]) >> 23) & 0xff;  // biased; 0 for zero rows
      const int up_exponent = 261 - exponent < 254 ? 261 - exponent : 254;
      up[r] = top[r] > 0.f ? __uint_as_float(unsigned(up_exponent) << 23) : 1.f;
      q.unscale[r] = 1.f / up[r];
    }
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < kSlices; ++kk) {
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float2 x = pair(i % 2, kk, i / 2);
        q.latent[kk][i] = Fp16Mma::pack(x.x * up[i % 2], x.y * up[i % 2]);
      }
    }
    const Scalar* const rope[2] = {this->rope_row(b, n0), this->rope_row(b, n0 + 8)};
    KOKKOSMLA_UNROLL
    for (int i = 0; i < 4; ++i)
      q.rope[i] =
          row[i % 2]
              ? *reinterpret_cast<const unsigned*>(rope[i % 2] + kRopeColumns * warp + 2 * t + 8 * (i / 2))
              : 0u;
  }

  /// The scales of keys 8n + 2t and 8n + 2t + 1 (scales[2n], scales[2n + 1])
  /// of the staged tile, in block `warp`.
  __device__ void block_scales(unsigned tile, int warp, int t, float (&scales)[2 * kKeyTiles]) const {
    KOKKOSMLA_UNROLL
    for (int j = 0; j < 2 * kKeyTiles; ++j) {
      const int key = 8 * (j / 2) + 2 * t + j % 2;
      scales[j] = kPerBlock ? __uint_as_float(load_shared_word(tile + key * kPitch + kScalesAt + 4 * warp))
                            : this->fp8.latent_scale;
    }
  }

  /// The power of two at least the largest of the tile's scales in this
  /// warp's block (the four lanes of a fragment row hold its keys'), or 1.
  __device__ static float unit_of(const float (&scales)[2 * kKeyTiles]) {
    float top = scales[0];
    KOKKOSMLA_UNROLL
    for (int j = 1; j < 2 * kKeyTiles; ++j) top = fmaxf(top, scales[j]);
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
    return top > 0.f ? __uint_as_float((__float_as_uint(top) + 0x007fffffu) & 0xff800000u) : 1.f;
  }

  /// 1 / u for a unit u of unit_of, exactly: the power of two's exponent
  /// negated in its bits (no division), where 1 / u is a normal float.
  __device__ static float reciprocal_of_unit(float u) {
    const unsigned bits = __float_as_uint(u);
    return bits < 0x7f000000u ? __uint_as_float(0x7f000000u - bits) : 1.f / u;
  }

  /// This warp's partial S (rows g, g + 8; keys 8n + 2t, 8n + 2t + 1 in
  /// s[n]): its latent block's products on the codes, times the keys'
  /// scales and the rows' unscale, plus its RoPE columns' products.
  __device__ void partial_scores(float (&s)[kKeyTiles][4], const Queries& q, unsigned tile, int warp, int g,
                                 int t, const float (&scales)[2 * kKeyTiles]) const {
    // Even and odd slices in two chains that do not wait on each other; with
    // four key tiles their own chains are enough (and registers are short).
    constexpr int kChains = kKeyTiles == 2 ? 2 : 1;
    float latent[kChains][kKeyTiles][4] = {};
    float rope[kKeyTiles][4] = {};
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kKeyTiles; ++n) {
      const unsigned token = tile + (8 * n + g) * kPitch;
      KOKKOSMLA_UNROLL
      for (int kk = 0; kk < kSlices; ++kk) {
        unsigned low, high;  // channels 4t, 4t + 1 and 4t + 2, 4t + 3 of slice kk
        f16x2_pairs_from_e4m3x4(load_shared_word(token + warp * kBlock + 16 * kk + 4 * t), low, high);
        Fp16Mma::run(latent[kk % kChains][n], q.latent[kk], low, high);
      }
      unsigned kb[2];
      rope_fragment(token, warp, t, kb);
      Ops::run(rope[n], q.rope, kb[0], kb[1]);
    }
    const float rope_scale = kPerBlock ? 1.f : this->fp8.rope_scale;
    auto codes_sum = [&](int n, int e) {
      if constexpr (kChains == 2) return latent[0][n][e] + latent[1][n][e];
      return latent[0][n][e];
    };
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kKeyTiles; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e)
        s[n][e] = codes_sum(n, e) * (scales[2 * n + e % 2] * q.unscale[e / 2]) + rope[n][e] * rope_scale;
    }
  }

  /// A token's RoPE B fragment for columns 16 warp + 2t, + 1 and + 8, + 9, as T pairs.
  __device__ static void rope_fragment(unsigned token, int warp, int t, unsigned (&kb)[2]) {
    KOKKOSMLA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int column = kRopeColumns * warp + 2 * t + 8 * h;
      if constexpr (kPerBlock) {
        const unsigned bits = load_shared_word(token + kRopeAt + 2 * column);
        kb[h] = kBf16 ? bits : Tokens::from_bf16(bits);
      } else {
        const unsigned word = load_shared_word(token + kRopeAt + column / 4 * 4);  // columns 2t, 2t + 1 of 4
        const unsigned codes = column % 4 ? word >> 16 : word;
        const unsigned halves = f16x2_from_e4m3x2(codes);
        const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&halves));
        kb[h] = kBf16 ? Ops::pack(x.x, x.y) : halves;
      }
    }
  }

  /// o += P V' over this warp's block, V' = the codes x the keys' scales x
  /// inv_unit. With fp16 queries each value is rounded to fp16 once (the
  /// key's scale carried as two fp16 parts), as dequantising to fp16 would;
  /// with bf16 queries the scales are folded into P instead (P x scale x
  /// inv_unit rounded to fp16, the codes multiplied as they are): that rounds
  /// all of a key's products alike, by up to 2^-12, within what a bf16
  /// framework's rounding of P and of the values to 8 bits errs, and saves
  /// two fp16 instructions a pair of values. One k16 product per 16 keys.
  __device__ static void accumulate(float (&o)[kOutTiles][4], const float (&p)[kKeyTiles][4],
                                    const float (&scales)[2 * kKeyTiles], float inv_unit, unsigned tile,
                                    int warp, int g, int t) {
    KOKKOSMLA_UNROLL
    for (int h = 0; h < kHalves; ++h)
      accumulate_16(o, p[2 * h], p[2 * h + 1], scales + 4 * h, inv_unit, tile + 16 * h * kPitch, warp, g, t);
  }

  /// o += P V' over 16 keys (from `keys16`): p0 and p1 their n8 tiles of P,
  /// scales of keys 2t, 2t + 1, 8 + 2t, 9 + 2t. For tile 4q + i, lane g's
  /// column is channel 32q + 4g + i: its keys' four codes from channel
  /// 32q + 4g, sorted by channel.
  __device__ static void accumulate_16(float (&o)[kOutTiles][4], const float (&p0)[4], const float (&p1)[4],
                                       const float* scales, float inv_unit, unsigned keys16, int warp, int g,
                                       int t) {
    float w[4];  // keys 2t, 2t + 1, 8 + 2t, 9 + 2t
    KOKKOSMLA_UNROLL
    for (int j = 0; j < 4; ++j) w[j] = scales[j] * inv_unit;
    __half2 high[2], low[2];  // fp16 queries' scale parts: (keys 2t, 2t + 1), (8 + 2t, 9 + 2t)
    if constexpr (!kBf16) {
      KOKKOSMLA_UNROLL
      for (int h = 0; h < 2; ++h) {
        high[h] = __floats2half2_rn(w[2 * h], w[2 * h + 1]);
        low[h] = __floats2half2_rn(w[2 * h] - __low2float(high[h]), w[2 * h + 1] - __high2float(high[h]));
      }
    }
    auto values = [&](unsigned bits, int h) {  // an fp16 pair of keys' codes, as P V' takes it
      if constexpr (kBf16) return bits;
      const __half2 v = *reinterpret_cast<const __half2*>(&bits);
      const __half2 x = __hfma2(v, high[h], __hmul2(v, low[h]));
      return *reinterpret_cast<const unsigned*>(&x);
    };
    auto weight = [&](int j) { return kBf16 ? w[j] : 1.f; };
    const unsigned pa[4] = {Fp16Mma::pack(p0[0] * weight(0), p0[1] * weight(1)),
                            Fp16Mma::pack(p0[2] * weight(0), p0[3] * weight(1)),
                            Fp16Mma::pack(p1[0] * weight(2), p1[1] * weight(3)),
                            Fp16Mma::pack(p1[2] * weight(2), p1[3] * weight(3))};
    const unsigned keys[4] = {keys16 + 2 * t * kPitch, keys16 + (2 * t + 1) * kPitch,
                              keys16 + (2 * t + 8) * kPitch, keys16 + (2 * t + 9) * kPitch};
    KOKKOSMLA_UNROLL
    for (int quarter = 0; quarter < 4; ++quarter) {
      const int at = warp * kBlock + 32 * quarter + 4 * g;
      unsigned codes[4];
      KOKKOSMLA_UNROLL
      for (int k = 0; k < 4; ++k) codes[k] = load_shared_word(keys[k] + at);
      // Channel pairs of keys (2t, 2t + 1) and (2t + 8, 2t + 9): channels 0, 1 then 2, 3.
      const unsigned first[2] = {__byte_perm(codes[0], codes[1], 0x5140),
                                 __byte_perm(codes[2], codes[3], 0x5140)};
      const unsigned second[2] = {__byte_perm(codes[0], codes[1], 0x7362),
                                  __byte_perm(codes[2], codes[3], 0x7362)};
      unsigned v[4][2];  // channel i's fp16 pairs: keys (2t, 2t + 1), (2t + 8, 2t + 9)
      KOKKOSMLA_UNROLL
      for (int h = 0; h < 2; ++h) {
        f16x2_pairs_from_e4m3x4(first[h], v[0][h], v[1][h]);
        f16x2_pairs_from_e4m3x4(second[h], v[2][h], v[3][h]);
      }
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i)
        Fp16Mma::run(o[4 * quarter + i], pa, values(v[i][0], 0), values(v[i][1], 1));
    }
  }

  /// Normalises and writes this lane's oa of rows n0 and n0 + 8 (channels
  /// 32q + 8t .. + 7 of this warp's block), and lse.
  __device__ void finish(const float (&o)[kOutTiles][4], const float (&m)[2], float (&l)[2], std::int64_t b,
                         int part, std::int64_t n0, int t, int warp) const {
    this->finish_rows(m, l, b, part, n0, warp == 0 && t == 0, [&](int r, auto&& put) {
      KOKKOSMLA_UNROLL
      for (int quarter = 0; quarter < 4; ++quarter) {
        const int column = warp * kBlock + 32 * quarter + 8 * t, n = 4 * quarter;
        put(column, o[n][2 * r], o[n + 1][2 * r]);
        put(column + 2, o[n + 2][2 * r], o[n + 3][2 * r]);
        put(column + 4, o[n][2 * r + 1], o[n + 1][2 * r + 1]);
        put(column + 6, o[n + 2][2 * r + 1], o[n + 3][2 * r + 1]);
      }
    });
  }
#endif
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_ENABLE_SM80
#endif
