#ifndef KOKKOSMLA_DECODEBLOCKEDKERNEL_HPP
#define KOKKOSMLA_DECODEBLOCKEDKERNEL_HPP
// Cache attention for float and double on CUDA cores, written for a GPU's
// large team scratch: the Attend and Split steps of the latent kernel, on
// absorbed queries qa (B, Tq, H, R) that the plan computes before (and
// up-projects after). A team of 256 threads owns 16 query rows of one
// sequence (its heads and tokens, as the latent kernel's blocks) and one part
// of its keys, and stages whole rows [latent, RoPE key] of 32 keys at a time,
// R + Dr <= 576 wide: one staged tile serves all 16 rows.
//
// Both products are register-blocked over row-major tiles in scratch:
//   scores  S = [qa, scale q_rope] [latent, k_rope]^T: warp w sums the columns
//           of its eighth of the width (a split contraction: 16 x 32 scores
//           are too few for 256 threads' 4 x 4 blocks), lane (rb, kb) rows
//           rb + 4i and keys kb + 8j, 8 quad loads per 64 FMAs; the 8
//           partial sums meet in scratch;
//   softmax 16 threads per row, 2 keys each: the partial sums, the causal
//           mask, the row's tile max (by shuffles within the row's half
//           warp on CUDA, through scratch elsewhere), exp, P and the rows'
//           rescale factors into scratch;
//   P V     thread (tr, tc) keeps rows tr + 2m (m < 8) of output columns
//           4 tc .. 4 tc + 3 in registers: per 4 keys, 8 quads of P (the same
//           for the whole warp) and 4 quads of V for 128 FMAs.
// Key tiles are double-buffered: eight threads per key copy 128 contiguous
// bytes at a time, asynchronously on GPUs with cp.async (compute capability
// 8.0+, rows of whole aligned quads), so the next tile arrives while this one
// is computed; elsewhere the copy is synchronous.
//
// Scratch: 16 query rows and two tiles of 32 keys, R + Dr wide (rows padded
// so that quad loads from 8 rows hit distinct banks), the partial scores, P
// and the rows' rescale factors: 205 KiB for DeepSeek's 576-wide rows in
// float, which takes a Kokkos with the large-scratch opt-in, and leaves one
// team per multiprocessor. On the H200 the kernel is bound by issue slots at
// two warps per scheduler; 512-thread teams (four warps, 128 registers) and a
// software-pipelined score loop both measured slower, while the score loop
// unrolled twice, the maxima by shuffles (three barriers a tile, not four)
// and scratch read and written by ld/st.shared took 5 % off (docs/performance.md).
// Attend writes the normalised oa over qa; Split each part's oa and lse.

#include "KokkosMLA_FlashBlockedKernel.hpp"
#include "KokkosMLA_LatentKernels.hpp"
#include "KokkosMLA_TensorOps.hpp"

#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// Copies a quad from global memory to team scratch: asynchronously where
/// the GPU has cp.async (completed by wait_own_copies), at once elsewhere.
template <class T>
KOKKOS_INLINE_FUNCTION void copy_quad(T* to, const T* from) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  static_assert(sizeof(Quad<T>) % 16 == 0, "16-byte pieces");
  for (std::size_t piece = 0; piece < sizeof(Quad<T>); piece += 16)
    copy_async<CopyVia::L1>(reinterpret_cast<char*>(to) + piece, reinterpret_cast<const char*>(from) + piece,
                            true);
#else
  store_quad(to, load_quad(from));
#endif
}

/// A quad of team scratch: one ld.shared.v4 for float on GPUs with cp.async
/// (team-scratch pointers reach the compiler as generic ones, whose loads
/// wait on the long scoreboard), load_quad elsewhere.
template <class T>
KOKKOS_INLINE_FUNCTION Quad<T> scratch_quad(const T* p) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  if constexpr (std::is_same<T, float>::value) {
    Quad<T> x;
    load_shared(p, x.v);
    return x;
  }
#endif
  return load_quad(p);
}

/// One value of team scratch, read and written by ld.shared / st.shared
/// for float on GPUs with cp.async (as scratch_quad), plainly elsewhere.
template <class T>
KOKKOS_INLINE_FUNCTION T scratch_value(const T* p) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  if constexpr (std::is_same<T, float>::value) return __uint_as_float(load_shared_word(shared_address(p)));
#endif
  return *p;
}
template <class T>
KOKKOS_INLINE_FUNCTION void set_scratch_value(T* p, T x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  if constexpr (std::is_same<T, float>::value) {
    store_shared_word(shared_address(p), __float_as_uint(x));
    return;
  }
#endif
  *p = x;
}

template <class ExecSpace, class T, LatentStep Step>
struct DecodeBlockedKernel : LatentKernel<ExecSpace, T, Step> {
  static_assert(Step == LatentStep::Attend || Step == LatentStep::Split,
                "DecodeBlockedKernel runs Attend or Split");
  using Base = LatentKernel<ExecSpace, T, Step>;
  using typename Base::Block;
  using typename Base::KeyRange;
  using typename Base::Member;

  static constexpr int kThreads = 256;
  static constexpr int kRows = 16;               ///< query rows per team
  static constexpr int kKeys = 32;               ///< keys per tile
  static constexpr int kMaxRank = 512;           ///< output columns the threads cover
  static constexpr int kMaxWidth = 576;          ///< R + Dr of DeepSeek; wider rows would outgrow the scratch
  static constexpr int kGroups = kThreads / 32;  ///< contraction groups of the scores, one warp each
  static constexpr int kRowBlocks = 4, kKeyBlocks = 8;  ///< a warp's lanes over rows and keys
  static constexpr int kColumnThreads = kMaxRank / 4;   ///< threads across the output columns, a quad each
  static constexpr int kRowSets = kThreads / kColumnThreads;  ///< 2: rows tr, tr + 2, ...
  static constexpr int kOutRows = kRows / kRowSets;           ///< 8 rows per thread
  static constexpr int kRowThreads = kThreads / kRows;        ///< softmax threads per row
  static constexpr int kCopiers = kThreads / kKeys;           ///< threads copying one key row
  static constexpr int kLdP = kKeys + 4;                      ///< P rows (+4: rows start in distinct banks)
  static constexpr int kLdPartial = kKeys + 8;  ///< partial rows: lanes (rb, kb) store to distinct banks
  static_assert(kRowBlocks * kKeyBlocks == 32 && 4 * kRowBlocks == kRows && 4 * kKeyBlocks == kKeys,
                "a lane's 4 x 4 scores of a warp's 16 x 32");
  static_assert(2 * kRowThreads == kKeys, "two keys per softmax thread");
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 1>;

  DecodeBlockedKernel() = default;
  explicit DecodeBlockedKernel(const Base& b) : Base(b) {}

  /// Whether R and Dr fit the team's columns.
  static bool fits(std::int64_t rank, std::int64_t rope_dim) {
    return rank <= kMaxRank && rank + rope_dim <= kMaxWidth;
  }

  KOKKOS_INLINE_FUNCTION int quads() const { return int((this->rank + this->rope_dim + 3) / 4); }
  /// Row stride of the query and key tiles: whole quads, then 4 mod 32
  /// elements, so that quads of 8 consecutive rows fall in distinct banks.
  KOKKOS_INLINE_FUNCTION static int row_ld(int quads) { return (4 * quads + 31) / 32 * 32 + 4; }

  /// Element offsets of the scratch arrays (each a whole number of quads).
  struct Layout {
    int ld;
    std::size_t q, k, partial, p, red, rescale, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(int quads) {
    Layout l;
    l.ld = row_ld(quads);
    l.q = 0;
    l.k = l.q + std::size_t(kRows) * l.ld;
    l.partial = l.k + 2 * std::size_t(kKeys) * l.ld;
    l.p = l.partial + std::size_t(kGroups) * kRows * kLdPartial;
    l.red = l.p + std::size_t(kRows) * kLdP;
    l.rescale = l.red + std::size_t(kRows) * kRowThreads;
    l.total = l.rescale + kRows;
    return l;
  }
  static constexpr std::size_t kAlignment = sizeof(Quad<T>);
  static std::size_t scratch_bytes_for(std::int64_t rank, std::int64_t rope_dim) {
    return layout(int((rank + rope_dim + 3) / 4)).total * sizeof(T) + kAlignment;
  }
  std::size_t scratch_bytes(const LatentTiles&) const {
    return scratch_bytes_for(this->rank, this->rope_dim);
  }

  /// Whether cache rows can be copied as quads: both parts whole quads at quad-aligned addresses.
  bool quad_rows() const {
    auto aligned = [](const T* p, std::int64_t ld) {
      return ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(p) % sizeof(Quad<T>) == 0;
    };
    return this->rank % 4 == 0 && this->rope_dim % 4 == 0 &&
           aligned(this->cache.latent, this->cache.latent_ld) &&
           (this->rope_dim == 0 || aligned(this->cache.rope, this->cache.rope_ld));
  }
  bool quad_cache = false;  ///< set from quad_rows() for each call

  /// Starts copying keys s0 .. s0 + n - 1 of sequence b into a tile (zeros
  /// for keys from n on): thread `rank` copies key rank / 8, quads rank % 8 + 8u.
  KOKKOS_INLINE_FUNCTION void stage_tile(std::int64_t b, std::int64_t s0, int n, int rank, int ld,
                                         T* tile) const {
    const int key = rank / kCopiers, nq = quads(), r = int(this->rank), w = r + int(this->rope_dim);
    T* const to = tile + key * ld;
    if (key >= n) {
      for (int q = rank % kCopiers; q < nq; q += kCopiers) store_quad(to + 4 * q, Quad<T>{});
      return;
    }
    const auto& c = this->cache;
    const std::int64_t row = c.row(b, s0 + key);
    const T* const latent = c.latent + row * c.latent_ld;
    const T* const rope = c.rope + row * c.rope_ld;
    if (quad_cache) {
      for (int q = rank % kCopiers; q < nq; q += kCopiers)
        copy_quad(to + 4 * q, 4 * q < r ? latent + 4 * q : rope + 4 * q - r);
      return;
    }
    for (int q = rank % kCopiers; q < nq; q += kCopiers)
      for (int e = 0; e < 4; ++e) {
        const int d = 4 * q + e;
        to[d] = d < r ? latent[d] : d < w ? rope[d - r] : T(0);
      }
  }

  /// Row i of [qa, scale q_rope] into qs, zeros past the block's rows and R + Dr.
  KOKKOS_INLINE_FUNCTION void stage_queries(const Member& team, const Block& k, int ld, T* qs) const {
    const int rows = k.rows(), r = int(this->rank), w = r + int(this->rope_dim), width = 4 * quads();
    for (int e = team.team_rank(); e < kRows * width; e += team.team_size()) {
      const int i = e / width, d = e % width;
      T x = T(0);
      if (i < rows && d < w) {
        const std::int64_t at = this->row_index(k, i);
        x = d < r ? this->workspace[at * r + d] : this->scale * this->query_rope(k, i)[d - r];
      }
      qs[i * ld + d] = x;
    }
  }

  /// Warp `group`'s partial scores over its share of the width: lane (rb, kb)
  /// sums rows rb + 4i against keys kb + 8j, into partial[group][row][key].
  KOKKOS_INLINE_FUNCTION void partial_scores(const T* qs, const T* ks, int ld, int rank, T* partial) const {
    const int group = rank / 32, lane = rank % 32, rb = lane / kKeyBlocks, kb = lane % kKeyBlocks;
    const int nq = quads(), span = (nq + kGroups - 1) / kGroups;
    const int q0 = min_of(nq, group * span), q1 = min_of(nq, (group + 1) * span);
    T s[4][4] = {};
    KOKKOSMLA_UNROLL_TWICE
    for (int q = q0; q < q1; ++q) {
      Quad<T> a[4], b[4];
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) a[i] = scratch_quad(qs + (rb + kRowBlocks * i) * ld + 4 * q);
      KOKKOSMLA_UNROLL
      for (int j = 0; j < 4; ++j) b[j] = scratch_quad(ks + (kb + kKeyBlocks * j) * ld + 4 * q);
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        KOKKOSMLA_UNROLL
        for (int i = 0; i < 4; ++i) {
          KOKKOSMLA_UNROLL
          for (int j = 0; j < 4; ++j) s[i][j] += a[i].v[e] * b[j].v[e];
        }
      }
    }
    KOKKOSMLA_UNROLL
    for (int i = 0; i < 4; ++i) {
      KOKKOSMLA_UNROLL
      for (int j = 0; j < 4; ++j)
        set_scratch_value(partial + (group * kRows + rb + kRowBlocks * i) * kLdPartial + kb + kKeyBlocks * j,
                          s[i][j]);
    }
  }

  /// The max of the tile's scores of a row over its kRowThreads threads
  /// (`mine`: this thread's): on CUDA by shuffles within the row's 16
  /// lanes (a half warp), elsewhere through the row's slots in `red`
  /// behind a team barrier.
  KOKKOS_INLINE_FUNCTION static T row_tile_max(const Member& team, T mine, T* red, int sc) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    static_assert(kRowThreads == 16 && kThreads % 32 == 0, "a row's threads are a half warp");
    (void)team, (void)red, (void)sc;
    KOKKOSMLA_UNROLL
    for (int offset = kRowThreads / 2; offset > 0; offset /= 2)
      mine = running_max(mine, __shfl_xor_sync(0xffffffffu, mine, offset));
    return mine;
#else
    red[sc] = mine;
    team.team_barrier();
    T top = negative_infinity<T>();
    for (int c = 0; c < kRowThreads; ++c) top = running_max(top, red[c]);
    return top;
#endif
  }

  /// o[m] += P(row tr + 2m, :) V(:, 4 tc .. 4 tc + 3), V being the tile's
  /// first R columns; P is zero past the tile's keys.
  KOKKOS_INLINE_FUNCTION static void accumulate(const T* p, const T* ks, int ld, int tr, int tc,
                                                Quad<T> (&o)[kOutRows]) {
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kKeys; j += 4) {
      Quad<T> pm[kOutRows];
      KOKKOSMLA_UNROLL
      for (int m = 0; m < kOutRows; ++m) pm[m] = scratch_quad(p + (tr + kRowSets * m) * kLdP + j);
      KOKKOSMLA_UNROLL
      for (int jj = 0; jj < 4; ++jj) {
        const Quad<T> v = scratch_quad(ks + (j + jj) * ld + 4 * tc);
        KOKKOSMLA_UNROLL
        for (int m = 0; m < kOutRows; ++m) {
          KOKKOSMLA_UNROLL
          for (int e = 0; e < 4; ++e) o[m].v[e] += pm[m].v[jj] * v.v[e];
        }
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Block k = this->block_of(team.league_rank());
    const Layout l = layout(quads());
    T* const base = static_cast<T*>(team.team_scratch(this->scratch_level)
                                        .get_shmem_aligned(l.total * sizeof(T), std::ptrdiff_t(kAlignment)));
    T* const qs = base + l.q;
    T* const partial = base + l.partial;
    T* const p = base + l.p;
    T* const red = base + l.red;
    T* const rescale = base + l.rescale;
    const int rank = team.team_rank(), rows = k.rows(), ld = l.ld;

    // Softmax role: row si, keys 2 sc and 2 sc + 1 of each tile; the running
    // max and this thread's share of the row's sum.
    const int si = rank / kRowThreads, sc = rank % kRowThreads;
    const std::int64_t last = si < rows ? this->last_key(k, si) : -1;  // a row past the block sees nothing
    T row_max = negative_infinity<T>(), row_sum = T(0);
    // Output role: rows tr + 2m, columns 4 tc .. 4 tc + 3 (none past R).
    const int tr = rank / kColumnThreads, tc = rank % kColumnThreads;
    const bool outputs = 4 * tc < this->rank;
    Quad<T> o[kOutRows] = {};

    stage_queries(team, k, ld, qs);
    const KeyRange range = this->key_range(k);
    auto tile = [&](std::int64_t s0) { return base + l.k + ((s0 - range.begin) / kKeys % 2) * kKeys * ld; };
    auto keys_from = [&](std::int64_t s0) { return int(min_of<std::int64_t>(kKeys, range.end - s0)); };
    if (range.begin < range.end)
      stage_tile(k.b, range.begin, keys_from(range.begin), rank, ld, tile(range.begin));
    for (std::int64_t s0 = range.begin; s0 < range.end; s0 += kKeys) {
      wait_own_copies();
      team.team_barrier();  // this tile (and the queries) landed; every thread is done with the previous one
      const T* const ks = tile(s0);
      if (s0 + kKeys < range.end)
        stage_tile(k.b, s0 + kKeys, keys_from(s0 + kKeys), rank, ld, tile(s0 + kKeys));

      partial_scores(qs, ks, ld, rank, partial);
      team.team_barrier();

      T s[2];
      T local_max = negative_infinity<T>();
      for (int j = 0; j < 2; ++j) {
        const int key = 2 * sc + j;
        T x = T(0);
        for (int g = 0; g < kGroups; ++g) x += scratch_value(partial + (g * kRows + si) * kLdPartial + key);
        s[j] = s0 + key <= last && s0 + key < range.end ? x : negative_infinity<T>();
        local_max = running_max(local_max, s[j]);
      }
      const T new_max = running_max(row_max, row_tile_max(team, local_max, red + si * kRowThreads, sc));
      T sum = T(0);
      for (int j = 0; j < 2; ++j) {
        const T x = s[j] == negative_infinity<T>() ? T(0) : Impl::exp(s[j] - new_max);
        set_scratch_value(p + si * kLdP + 2 * sc + j, x);
        sum += x;
      }
      const T factor = softmax_rescale(row_max, new_max);
      row_sum = row_sum * factor + sum;
      row_max = new_max;
      if (sc == 0) set_scratch_value(rescale + si, factor);
      team.team_barrier();

      if (outputs) {
        for (int m = 0; m < kOutRows; ++m) {
          const T factor_m = scratch_value(rescale + tr + kRowSets * m);
          for (int e = 0; e < 4; ++e) o[m].v[e] *= factor_m;
        }
        accumulate(p, ks, ld, tr, tc, o);
      }
    }

    // Each row's sum and lse (its last readers of red passed the loop's last barrier).
    red[si * kRowThreads + sc] = row_sum;
    team.team_barrier();
    if (sc == 0) {
      T sum = T(0);
      for (int c = 0; c < kRowThreads; ++c) sum += red[si * kRowThreads + c];
      red[si * kRowThreads] = sum;
      rescale[si] = softmax_lse(row_max, sum);
    }
    team.team_barrier();
    if (outputs) finish(k, red, rescale, tr, tc, o);
  }

  /// Writes the normalised oa of this thread's rows and columns, and each
  /// row's lse (the part's, -inf for no key, in a split step; as reported
  /// otherwise), from the rows' sums (at sums[i * kRowThreads]) and lse.
  KOKKOS_INLINE_FUNCTION void finish(const Block& k, const T* sums, const T* row_lse, int tr, int tc,
                                     const Quad<T> (&o)[kOutRows]) const {
    const int rows = k.rows(), r = int(this->rank);
    T* const result = this->attended(k);
    for (int m = 0; m < kOutRows; ++m) {
      const int i = tr + kRowSets * m;
      if (i >= rows) break;
      const T sum = sums[i * kRowThreads];
      const std::int64_t at = this->row_index(k, i);
      for (int e = 0; e < 4; ++e)
        if (4 * tc + e < r) result[at * r + 4 * tc + e] = normalized(o[m].v[e], sum);
      if (tc == 0) this->store_row_lse(k, at, row_lse[i]);
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
