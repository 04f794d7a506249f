#ifndef KOKKOSMLA_FLASHTENSORKERNEL_HPP
#define KOKKOSMLA_FLASHTENSORKERNEL_HPP
// Flash attention on tensor cores: the Decompressed algorithm's attention on
// CUDA GPUs of compute capability 8.0 and newer, for 16-bit q, K and V, and
// for float ones with TF32 products (Options::allow_tf32) or three TF32
// products per product (3xTF32, Options::emulate_fp32); fp32 accumulation
// and an fp32 online softmax.
//
// A team is 4 warps over 64 query rows of one (batch, head); warp w owns rows
// 16w .. 16w+15 for the whole key loop. Its query rows stay in registers as
// mma.sync A fragments (loaded once); per step of keys each warp computes
//   S = Q K^T      (16 x keys),
//   online softmax on S's accumulator registers (row max and sum across the
//                  four lanes of a row by shuffles),
//   O += P V       (16 x D: S's accumulator layout serves as the A fragments
//                  of the next product, so P never leaves registers).
// How operands are read and multiplied per element type is TensorOperands
// (KokkosMLA_TensorOps.hpp). K and V tiles arrive by asynchronous copies that
// overlap the arithmetic: V of this step while S is computed, K of the next
// step while the softmax and P V run; three barriers per step. Both tiles (35 KB for 16-bit types at
// D = 128, 34 KB for float) fit the 48 KB of shared memory a Kokkos team may
// have; a second buffer of each would not. Masks are applied only on tiles
// that cross the causal diagonal or the last key. Eight warps over 128 rows
// (K and V staged once for twice the queries) measured no faster: 2.88 vs
// 2.90 ms on (1,4096,128,128,512) bf16, and 0.095 vs 0.074 ms on
// (4,1024,16,64,256).

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TensorOps.hpp"

#if KOKKOSMLA_ENABLE_SM80
namespace KokkosMLA {
namespace Impl {

/// Where a team of a tensor-core flash kernel works: one (batch, head) pair
/// and one tile of its query rows (tile 0 first).
struct FlashTile {
  std::int64_t b, h, tile;
};

/// What the tensor-core flash kernels (this one and FlashSm90Kernel on
/// Hopper) share: their operands, and the order in which teams take tiles.
template <class T, int D>
struct FlashOperands {
  HeadRows<const T> q;  // (B, T, H, D)
  const T* k;           // (B, S, H, D)
  const T* v;           // (B, S, H, D)
  HeadRows<T> out;      // (B, T, H, D)
  LseRows<float> lse;   // (B, T, H), or empty when not asked for
  std::int64_t batch, queries, keys, heads;
  float scale;
  bool causal;
  std::int64_t head_group = 1;  ///< (batch, head) pairs whose tiles interleave (see locate)
  int scratch_level = 0;

  /// Pairs per group: as many as keep their K and V within `budget` bytes
  /// (32 MB, about two thirds of a Hopper or Ampere L2, unless a kernel says
  /// otherwise). Ordering tiles by head alone was 1.20x faster on
  /// (1,4096,128,128,512) bf16 than tile-major, but 1.10x slower on
  /// (1,4096,16,128,512), whose K and V fit L2 anyway: its last head's
  /// heavy tiles started last.
  static std::int64_t head_group_for(std::int64_t keys, std::int64_t budget = std::int64_t(32) << 20) {
    const std::int64_t per_pair = 2 * keys * D * std::int64_t(sizeof(T));
    return per_pair >= budget ? 1 : budget / per_pair;
  }

  /// The tile of team `league_rank` when each pair has `tiles` query tiles.
  /// Teams go through groups of head_group (batch, head) pairs, and within a
  /// group through its query tiles heaviest (last) first: the teams running
  /// at once share one group's K and V in L2, and each group ends on light tiles.
  KOKKOS_INLINE_FUNCTION FlashTile locate(std::int64_t league_rank, std::int64_t tiles) const {
    const std::int64_t pairs = batch * heads;
    const std::int64_t group = league_rank / (tiles * head_group);
    const std::int64_t within = league_rank % (tiles * head_group);
    const std::int64_t in_group =
        pairs - group * head_group < head_group ? pairs - group * head_group : head_group;
    const std::int64_t bh = group * head_group + within % in_group;
    return {bh / heads, bh % heads, tiles - 1 - within / in_group};
  }
};

/// T: the data's type; Products: how it is multiplied (T itself, or for
/// float data SplitTf32, 3xTF32).
template <class T, int D, class Products = T>
struct FlashTensorKernel : FlashOperands<T, D> {
  using Base = FlashOperands<T, D>;
  using Base::batch, Base::causal, Base::heads, Base::k, Base::keys, Base::lse, Base::out, Base::q,
      Base::queries, Base::scale, Base::scratch_level, Base::v;
  static_assert(D % 16 == 0 && D <= 128, "head_dim must be a multiple of 16, at most 128");
  using Ops = TensorOperands<Products, D>;
  using Element = typename Ops::Element;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kWarps;            // query rows per team, 16 per warp
  static constexpr int kKeys = Ops::kKeys;             // keys per step
  static constexpr int kPiece = 16 / sizeof(Element);  // elements per 16-byte copy
  static constexpr int kChunks = D / kPiece;           // 16-byte copies per row
  static constexpr int kScoreTiles = kKeys / 8;
  static constexpr int kOutTiles = D / 8;
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 2>;  // two teams per SM
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  static constexpr std::size_t kAlignment = 16;
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return std::size_t(kKeys) * (Ops::kLdK + Ops::kLdV) * sizeof(Element) + kAlignment;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t query_tiles() const { return (queries + kRows - 1) / kRows; }
  std::int64_t league_size() const { return query_tiles() * batch * heads; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    attend(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::FlashTensorKernel: this GPU's code was built without sm_80 instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  /// Starts copying keys k0 .. k0 + kKeys - 1 of one head into a tile with
  /// rows of ld elements (zeros past the last key) as one group: thread `rank`
  /// copies piece rank % kChunks of rows rank / kChunks + i * kThreads / kChunks.
  __device__ void stage(const Element* head, Element* tile, int ld, std::int64_t k0, int rank) const {
    constexpr int kRowsPerPass = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0, "whole passes");
    const int part = rank % kChunks, first = rank / kChunks;
    const std::int64_t stride = heads * D;
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kKeys / kRowsPerPass; ++i) {
      const int key = first + i * kRowsPerPass;
      const bool valid = k0 + key < keys;
      copy_async(tile + key * ld + part * kPiece, head + (valid ? (k0 + key) * stride + part * kPiece : 0),
                 valid);
    }
    commit_copies();
  }

  __device__ void attend(const Member& team) const {
    const int rank = team.team_rank(), warp = rank / 32, lane = rank % 32;
    const int g = lane / 4, t = lane % 4;  // fragment row and column pair
    const FlashTile at = this->locate(team.league_rank(), query_tiles());
    const std::int64_t b = at.b, h = at.h, q0 = at.tile * kRows;

    const auto* qh = reinterpret_cast<const Element*>(q.at(b * queries, h));
    const auto* kh = reinterpret_cast<const Element*>(k) + (b * keys * heads + h) * D;
    const auto* vh = reinterpret_cast<const Element*>(v) + (b * keys * heads + h) * D;
    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    auto* ks = reinterpret_cast<Element*>((reinterpret_cast<std::uintptr_t>(raw) + kAlignment - 1) &
                                          ~std::uintptr_t(kAlignment - 1));
    Element* vs = ks + kKeys * Ops::kLdK;

    const std::int64_t offset = keys - queries;  // query r sits at key position offset + r
    const std::int64_t last_row = (q0 + kRows < queries ? q0 + kRows : queries) - 1;
    const std::int64_t key_end = causal && offset + last_row + 1 < keys ? offset + last_row + 1 : keys;
    stage(kh, ks, Ops::kLdK, 0, rank);
    stage(vh, vs, Ops::kLdV, 0, rank);

    // This lane's rows g and g + 8 of the warp's 16, as A fragments over D.
    const std::int64_t row0 = q0 + warp * 16 + g, row1 = row0 + 8;
    typename Ops::QFragments qa;
    Ops::load_q(qa, row0 < queries ? qh + row0 * q.row : nullptr,
                row1 < queries ? qh + row1 * q.row : nullptr, t);

    float o[kOutTiles][4];
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    // Running max (in log2 units of the scaled logits) and this lane's partial sums.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float scale2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2(e))

    for (std::int64_t k0 = 0; k0 < key_end; k0 += kKeys) {
      wait_copies<1>();  // this step's K (its V may still be in flight)
      team.team_barrier();
      float s[kScoreTiles][4];
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kScoreTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      Ops::scores(s, qa, ks, lane);
      wait_copies<0>();     // this step's V
      team.team_barrier();  // V is visible and every warp is done with K: fetch the next step's
      if (k0 + kKeys < key_end) {
        stage(kh, ks, Ops::kLdK, k0 + kKeys, rank);
      } else {
        commit_copies();  // an empty group keeps the counting uniform
      }
      // No barrier between the softmax and P V: the compiler may overlap the
      // exponentials of later keys with the products of earlier ones.
      softmax_step(s, o, m, l, k0, offset, q0 + warp * 16, row0, t, scale2);
      Ops::accumulate(o, s, vs, lane);
      team.team_barrier();  // every warp is done with V: fetch the next step's
      if (k0 + kKeys < key_end) {
        stage(vh, vs, Ops::kLdV, k0 + kKeys, rank);
      } else {
        commit_copies();
      }
    }
    wait_copies<0>();
    finish(o, m, l, b, h, row0, t);
  }

  /// Scales and masks one step's scores, updates the running max and sums,
  /// rescales o, and leaves the unnormalised probabilities in s. Masks only
  /// where this warp's rows (from warp_row) meet the diagonal or the last key.
  __device__ void softmax_step(float (&s)[kScoreTiles][4], float (&o)[kOutTiles][4], float (&m)[2],
                               float (&l)[2], std::int64_t k0, std::int64_t offset, std::int64_t warp_row,
                               std::int64_t row0, int t, float scale2) const {
    const bool edge = k0 + kKeys > keys || (causal && k0 + kKeys - 1 > offset + warp_row);
    int visible[2] = {kKeys, kKeys};  // keys of this step that rows g and g + 8 see
    if (edge) {
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const std::int64_t row = row0 + 8 * r;
        const std::int64_t end = causal && offset + row + 1 < keys ? offset + row + 1 : keys;
        visible[r] = int(end - k0 < kKeys ? end - k0 : kKeys);
      }
    }
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kScoreTiles; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= scale2;
        if (edge && n * 8 + 2 * t + (e & 1) >= visible[e / 2]) s[n][e] = -INFINITY;
      }
    }
    float mx[2] = {m[0], m[1]};
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kScoreTiles; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
    }
    float correction[2];
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // Finite after the first step: every row sees key 0.
      correction[r] = fast_exp2(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= correction[r];
    }
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kScoreTiles; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] = fast_exp2(s[n][e] - m[e / 2]);
        l[e / 2] += s[n][e];
      }
    }
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) {
      o[n][0] *= correction[0], o[n][1] *= correction[0];
      o[n][2] *= correction[1], o[n][3] *= correction[1];
    }
  }

  /// Normalises and writes this lane's outputs of rows row0 and row0 + 8, and lse.
  __device__ void finish(const float (&o)[kOutTiles][4], const float (&m)[2], float (&l)[2], std::int64_t b,
                         std::int64_t h, std::int64_t row0, int t) const {
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const std::int64_t row = row0 + 8 * r;
      if (row >= queries) continue;
      const float inv = 1.f / l[r];
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kOutTiles; ++n)
        Ops::store(reinterpret_cast<Element*>(out.at(b * queries + row, h)) + n * 8 + 2 * t,
                   o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (lse && t == 0) lse.at(b * queries + row, h) = m[r] * 0.6931471805599453f + logf(l[r]);
    }
  }
#endif
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_ENABLE_SM80
#endif
