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
// Both products are register-blocked outer products over transposed tiles in
// scratch (column d of the rows is a contiguous run of 16 queries or 32 keys):
//   scores  S = [qa, scale q_rope] [latent, k_rope]^T: warp w sums the columns
//           of its eighth of the width (a split contraction: 16 x 32 scores
//           are too few for 256 threads' 4 x 4 blocks), each lane a 4 x 4
//           block of rows and keys, 2 quad loads per 16 FMAs; the 8 partial
//           sums meet in scratch;
//   softmax 16 threads per row, 2 keys each: the partial sums, the causal
//           mask, the row's tile max through scratch, exp, P into scratch;
//   P V     thread (tr, tc) keeps rows tr + 2m (m < 8) of output columns
//           tc + 128 g (g < 4) in registers: per 4 keys, 8 quads of P (the
//           same for the whole warp) and 4 quads of V for 128 FMAs.
// The next tile's rows are loaded into registers (18 quads per thread) while
// this one is computed and stored transposed after it: one team per
// multiprocessor keeps both the copy engine and the FMA units busy.
//
// Scratch: (R + Dr) x (16 + 4) queries, (R + Dr) x (32 + 4) keys (padding
// keeps transposed stores and quad loads free of bank conflicts), the
// partial scores, P and the row maxima: 148 KiB for DeepSeek's 576-wide rows
// in float. Attend writes the normalised oa over qa; Split each part's oa and lse.

#include "KokkosMLA_FlashBlockedKernel.hpp"
#include "KokkosMLA_LatentKernels.hpp"

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T, LatentStep Step>
struct DecodeBlockedKernel : LatentKernel<ExecSpace, T, Step> {
  static_assert(Step == LatentStep::Attend || Step == LatentStep::Split,
                "DecodeBlockedKernel runs Attend or Split");
  using Base = LatentKernel<ExecSpace, T, Step>;
  using typename Base::Block;
  using typename Base::KeyRange;
  using typename Base::Member;

  static constexpr int kThreads = 256;
  static constexpr int kRows = 16;         ///< query rows per team
  static constexpr int kKeys = 32;         ///< keys per tile
  static constexpr int kMaxRank = 512;     ///< output columns the threads cover
  static constexpr int kMaxWidth = 576;    ///< R + Dr the prefetch registers cover
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kGroups = kWarps;  ///< contraction groups of the scores, one warp each
  static constexpr int kKeyBlocks = kKeys / 4;
  static constexpr int kColumnThreads = 128;                  ///< threads across the output columns
  static constexpr int kRowSets = kThreads / kColumnThreads;  ///< 2: rows tr, tr + 2, ...
  static constexpr int kOutRows = kRows / kRowSets;           ///< 8 rows per thread
  static constexpr int kOutColumns = kMaxRank / kColumnThreads;
  static constexpr int kRowThreads = kThreads / kRows;  ///< softmax threads per row
  static constexpr int kQuadsPerWarp = kMaxWidth / 4 / kWarps;
  static constexpr int kLdQ = kRows + 4, kLdK = kKeys + 4;
  static_assert(kGroups * (kRows / 4) * kKeyBlocks == kThreads, "one 4 x 4 score block per lane and group");
  static_assert(2 * kRowThreads == kKeys, "two keys per softmax thread");
  static_assert(kQuadsPerWarp * 4 * kWarps == kMaxWidth, "a tile is one key per lane, quads split by warp");
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 1>;

  DecodeBlockedKernel() = default;
  explicit DecodeBlockedKernel(const Base& b) : Base(b) {}

  /// Whether R and Dr fit the team's columns and prefetch registers.
  static bool fits(std::int64_t rank, std::int64_t rope_dim) {
    return rank <= kMaxRank && rank + rope_dim <= kMaxWidth;
  }

  KOKKOS_INLINE_FUNCTION int quads() const { return int((this->rank + this->rope_dim + 3) / 4); }

  /// Element offsets of the scratch arrays (each a whole number of quads).
  struct Layout {
    std::size_t q, k, partial, p, red, tile_max, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(int quads) {
    const std::size_t width = 4 * std::size_t(quads);
    Layout l;
    l.q = 0;
    l.k = l.q + width * kLdQ;
    l.partial = l.k + width * kLdK;
    l.p = l.partial + std::size_t(kGroups) * kRows * kKeys;
    l.red = l.p + std::size_t(kRows) * kLdK;
    l.tile_max = l.red + std::size_t(kRows) * kRowThreads;
    l.total = l.tile_max + kRows;
    return l;
  }
  static constexpr std::size_t kAlignment = sizeof(Quad<T>);
  static std::size_t scratch_bytes_for(std::int64_t rank, std::int64_t rope_dim) {
    return layout(int((rank + rope_dim + 3) / 4)).total * sizeof(T) + kAlignment;
  }
  std::size_t scratch_bytes(const LatentTiles&) const {
    return scratch_bytes_for(this->rank, this->rope_dim);
  }

  /// Whether cache rows can be read as quads: both parts whole quads at quad-aligned addresses.
  bool quad_rows() const {
    auto aligned = [](const T* p, std::int64_t ld) {
      return ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(p) % sizeof(Quad<T>) == 0;
    };
    return this->rank % 4 == 0 && this->rope_dim % 4 == 0 && aligned(this->cache.latent, this->cache.latent_ld) &&
           (this->rope_dim == 0 || aligned(this->cache.rope, this->cache.rope_ld));
  }
  bool quad_cache = false;  ///< set by the plan from quad_rows() per call

  /// Quad q of cache row `row`: latent columns, then RoPE columns, zeros past R + Dr.
  KOKKOS_INLINE_FUNCTION Quad<T> cache_quad(std::int64_t row, int q) const {
    const int d = 4 * q, r = int(this->rank);
    const auto& c = this->cache;
    if (quad_cache) return d < r ? load_quad(c.latent + row * c.latent_ld + d) : load_quad(c.rope + row * c.rope_ld + d - r);
    Quad<T> x;
    for (int e = 0; e < 4; ++e) {
      const int j = d + e;
      x.v[e] = j < r ? c.latent[row * c.latent_ld + j]
               : j < r + this->rope_dim ? c.rope[row * c.rope_ld + j - r]
                                        : T(0);
    }
    return x;
  }

  /// Loads keys s0 .. s0 + n - 1 of sequence b into registers: lane l takes
  /// key l, warp w quads w * kQuadsPerWarp .. (zeros past n and R + Dr).
  KOKKOS_INLINE_FUNCTION void load_tile(std::int64_t b, std::int64_t s0, int n, int rank,
                                        Quad<T> (&x)[kQuadsPerWarp]) const {
    const int key = rank % 32, q0 = (rank / 32) * kQuadsPerWarp, nq = quads();
    const std::int64_t row = key < n ? this->cache.row(b, s0 + key) : 0;
    KOKKOSMLA_UNROLL
    for (int u = 0; u < kQuadsPerWarp; ++u) {
      if (key < n && q0 + u < nq) {
        x[u] = cache_quad(row, q0 + u);
      } else {
        for (int e = 0; e < 4; ++e) x[u].v[e] = T(0);
      }
    }
  }

  /// Stores loaded keys transposed: column d of the tile is kt[d * kLdK + key].
  KOKKOS_INLINE_FUNCTION void store_tile(const Quad<T> (&x)[kQuadsPerWarp], int rank, T* kt) const {
    const int key = rank % 32, q0 = (rank / 32) * kQuadsPerWarp, nq = quads();
    KOKKOSMLA_UNROLL
    for (int u = 0; u < kQuadsPerWarp; ++u) {
      if (q0 + u < nq) {
        for (int e = 0; e < 4; ++e) kt[(4 * (q0 + u) + e) * kLdK + key] = x[u].v[e];
      }
    }
  }

  /// qt[d * kLdQ + i] = row i of [qa, scale q_rope], zeros past the block's rows and R + Dr.
  KOKKOS_INLINE_FUNCTION void stage_queries(const Member& team, const Block& k, T* qt) const {
    const int rows = k.rows(), r = int(this->rank), w = r + int(this->rope_dim), width = 4 * quads();
    for (int e = team.team_rank(); e < kRows * width; e += team.team_size()) {
      const int i = e % kRows, d = e / kRows;
      T x = T(0);
      if (i < rows && d < w) {
        const std::int64_t at = this->row_index(k, i);
        x = d < r ? this->workspace[at * r + d] : this->scale * this->q_rope[at * this->rope_dim + d - r];
      }
      qt[d * kLdQ + i] = x;
    }
  }

  /// Warp `group`'s partial scores over its share of the width: lane (rb, kb)
  /// sums rows 4 rb .. + 3 against keys 4 kb .. + 3, written to partial[group][row][key].
  KOKKOS_INLINE_FUNCTION void partial_scores(const T* qt, const T* kt, int rank, T* partial) const {
    const int group = rank / 32, lane = rank % 32, rb = lane / kKeyBlocks, kb = lane % kKeyBlocks;
    const int nq = quads(), span = (nq + kGroups - 1) / kGroups;
    const int d0 = 4 * min_of(nq, group * span), d1 = 4 * min_of(nq, (group + 1) * span);
    T s[4][4] = {};
    for (int d = d0; d < d1; ++d) {
      const Quad<T> a = load_quad(qt + d * kLdQ + 4 * rb), b = load_quad(kt + d * kLdK + 4 * kb);
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) {
        KOKKOSMLA_UNROLL
        for (int j = 0; j < 4; ++j) s[i][j] += a.v[i] * b.v[j];
      }
    }
    KOKKOSMLA_UNROLL
    for (int i = 0; i < 4; ++i)
      store_quad(partial + (group * kRows + 4 * rb + i) * kKeys + 4 * kb, Quad<T>{{s[i][0], s[i][1], s[i][2], s[i][3]}});
  }

  /// o[m][g] += P(row tr + 2m, :) V(:, column tc + 128 g), V being the latent
  /// columns of the transposed tile; P is zero past the tile's keys.
  KOKKOS_INLINE_FUNCTION void accumulate(const T* p, const T* kt, int tr, int tc,
                                         T (&o)[kOutRows][kOutColumns]) const {
    const int r = int(this->rank);
    for (int j = 0; j < kKeys; j += 4) {
      Quad<T> pm[kOutRows];
      KOKKOSMLA_UNROLL
      for (int m = 0; m < kOutRows; ++m) pm[m] = load_quad(p + (tr + kRowSets * m) * kLdK + j);
      KOKKOSMLA_UNROLL
      for (int g = 0; g < kOutColumns; ++g) {
        const int c = tc + kColumnThreads * g;
        if (c >= r) break;
        const Quad<T> v = load_quad(kt + c * kLdK + j);
        KOKKOSMLA_UNROLL
        for (int m = 0; m < kOutRows; ++m)
          o[m][g] += pm[m].v[0] * v.v[0] + pm[m].v[1] * v.v[1] + pm[m].v[2] * v.v[2] + pm[m].v[3] * v.v[3];
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Block k = this->block_of(team.league_rank());
    const Layout l = layout(quads());
    T* const base = static_cast<T*>(team.team_scratch(this->scratch_level)
                                        .get_shmem_aligned(l.total * sizeof(T), std::ptrdiff_t(kAlignment)));
    T* const qt = base + l.q;
    T* const kt = base + l.k;
    T* const partial = base + l.partial;
    T* const p = base + l.p;
    T* const red = base + l.red;
    T* const tile_max = base + l.tile_max;
    const int rank = team.team_rank(), rows = k.rows();

    // Softmax role: row si, keys 2 sc and 2 sc + 1 of each tile; running max
    // and this thread's share of the row's sum.
    const int si = rank / kRowThreads, sc = rank % kRowThreads;
    const std::int64_t last = si < rows ? this->last_key(k, si) : -1;  // a row past the block sees nothing
    T row_max = negative_infinity<T>(), row_sum = T(0);
    // Output role: rows tr + 2m, columns tc + 128 g.
    const int tr = rank / kColumnThreads, tc = rank % kColumnThreads;
    T o[kOutRows][kOutColumns] = {};
    T out_max[kOutRows];
    for (int m = 0; m < kOutRows; ++m) out_max[m] = negative_infinity<T>();

    stage_queries(team, k, qt);
    const KeyRange range = this->key_range(k);
    Quad<T> next[kQuadsPerWarp];
    if (range.begin < range.end) {
      load_tile(k.b, range.begin, int(min_of<std::int64_t>(kKeys, range.end - range.begin)), rank, next);
      store_tile(next, rank, kt);
    }
    team.team_barrier();
    for (std::int64_t s0 = range.begin; s0 < range.end; s0 += kKeys) {
      const std::int64_t s1 = s0 + kKeys;
      const bool more = s1 < range.end;
      if (more) load_tile(k.b, s1, int(min_of<std::int64_t>(kKeys, range.end - s1)), rank, next);

      partial_scores(qt, kt, rank, partial);
      team.team_barrier();

      T s[2];
      T local_max = negative_infinity<T>();
      for (int j = 0; j < 2; ++j) {
        const int key = 2 * sc + j;
        T x = T(0);
        for (int g = 0; g < kGroups; ++g) x += partial[(g * kRows + si) * kKeys + key];
        s[j] = s0 + key <= last && s0 + key < range.end ? x : negative_infinity<T>();
        local_max = running_max(local_max, s[j]);
      }
      red[si * kRowThreads + sc] = local_max;
      team.team_barrier();

      T new_max = row_max;
      for (int c = 0; c < kRowThreads; ++c) new_max = running_max(new_max, red[si * kRowThreads + c]);
      T sum = T(0);
      for (int j = 0; j < 2; ++j) {
        const T x = s[j] == negative_infinity<T>() ? T(0) : Impl::exp(s[j] - new_max);
        p[si * kLdK + 2 * sc + j] = x;
        sum += x;
      }
      row_sum = row_sum * softmax_rescale(row_max, new_max) + sum;
      row_max = new_max;
      if (sc == 0) tile_max[si] = new_max;
      team.team_barrier();

      for (int m = 0; m < kOutRows; ++m) {
        const T now = tile_max[tr + kRowSets * m];
        const T rescale = softmax_rescale(out_max[m], now);
        out_max[m] = now;
        for (int g = 0; g < kOutColumns; ++g) o[m][g] *= rescale;
      }
      accumulate(p, kt, tr, tc, o);
      team.team_barrier();  // every thread is done with this tile, P and the maxima
      if (more) {
        store_tile(next, rank, kt);
        team.team_barrier();
      }
    }

    red[si * kRowThreads + sc] = row_sum;
    team.team_barrier();
    finish(k, red, tr, tc, out_max, o);
  }

  /// Writes the normalised oa of this thread's rows and columns, and each
  /// row's lse (the part's, -inf for no key, in a split step; as reported otherwise).
  KOKKOS_INLINE_FUNCTION void finish(const Block& k, const T* sums, int tr, int tc, const T (&out_max)[kOutRows],
                                     const T (&o)[kOutRows][kOutColumns]) const {
    const int rows = k.rows(), r = int(this->rank);
    T* const result = Step == LatentStep::Split ? this->part_oa(k.part) : this->workspace;
    for (int m = 0; m < kOutRows; ++m) {
      const int i = tr + kRowSets * m;
      if (i >= rows) break;
      T sum = T(0);
      for (int c = 0; c < kRowThreads; ++c) sum += sums[i * kRowThreads + c];
      const std::int64_t at = this->row_index(k, i);
      for (int g = 0; g < kOutColumns; ++g) {
        const int c = tc + kColumnThreads * g;
        if (c < r) result[at * r + c] = normalized(o[m][g], sum);
      }
      if (tc == 0) {
        const T lse_i = softmax_lse(out_max[m], sum);
        if (Step == LatentStep::Split)
          this->part_lse(k.part)[at] = lse_i;
        else if (this->lse)
          this->lse[at] = reported_lse(lse_i);
      }
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
