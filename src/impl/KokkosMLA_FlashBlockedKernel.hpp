#ifndef KOKKOSMLA_FLASHBLOCKEDKERNEL_HPP
#define KOKKOSMLA_FLASHBLOCKEDKERNEL_HPP
// Flash attention with register-resident accumulators: the fast variant of
// FlashAttentionKernel. Each thread of the team owns the same rows of the
// query tile for the whole key loop, so its output block, running max and
// partial row sums stay in registers instead of team scratch. The kernel is
// written per thread (team_rank / team_size, no TeamThreadRange in the hot
// loops) because a TeamThreadRange body cannot keep registers across calls.
//
// Thread (tr, tc) of a TR x TC grid (rank = tr * TC + tc) owns
//   - query rows tr + m * TR, m < MR (strided: neighbouring threads touch
//     neighbouring rows, which keeps scratch reads free of bank conflicts),
//   - score columns (keys) tc + n * TC, n < NR,
//   - output column quads 4 * (tc + g * TC) .. + 3, g < G.
// So a team covers TR * MR queries and TC * NR keys per step, and head
// dimensions up to 4 * TC * G. Rows of Q and K are read as quads along the
// head dimension and rows of P as quads along the keys, so both products load
// one quad per operand and do 4 * MR * NR (resp. 4 * MR * 4 * G) FMAs per
// MR + NR (resp. MR + 4 * G) loads.
//
// Per key tile: stage K, barrier, scores and per-thread row maxima, barrier,
// scores into probabilities and stage V (over K's buffer), barrier, O += P V,
// barrier. K and V share one buffer so that a 128-wide fp32 query
// tile of 32 rows still fits CUDA's 48 KB of level-0 scratch.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TeamOps.hpp"

namespace KokkosMLA {
namespace Impl {

/// Four consecutive elements, aligned so that a GPU reads them with one
/// vector load.
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

/// p must be aligned like Quad<T> on the device; the host reads elementwise
/// because its scratch is only guaranteed element alignment.
template <class T>
KOKKOS_INLINE_FUNCTION Quad<T> load_quad(const T* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Quad<T>*>(p);
#else
  Quad<T> r;
  for (int e = 0; e < 4; ++e) r.v[e] = p[e];
  return r;
#endif
}

template <class T>
KOKKOS_INLINE_FUNCTION void store_quad(T* p, const Quad<T>& x) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<Quad<T>*>(p) = x;
#else
  for (int e = 0; e < 4; ++e) p[e] = x.v[e];
#endif
}

/// Team shape of the blocked kernel, chosen at plan time.
struct FlashGrid {
  int team_threads = 1;  ///< threads the layout uses (the team may not be smaller)
  int row_threads = 1;   ///< TC: threads that share a query row
};

template <class ExecSpace, class T, int MR, int NR, int G, int U>
struct FlashBlockedKernel {
  static_assert(NR % 4 == 0, "P is read in quads along the keys");
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  HeadRows<const T> q;  // (B, T, H, D)
  const T* k;           // (B, S, H, D)
  const T* v;           // (B, S, H, D)
  HeadRows<T> out;      // (B, T, H, D)
  LseRows<T> lse;       // (B, T, H), or empty when not asked for
  std::int64_t batch, queries, keys, heads, dim;
  FlashGrid grid;
  T scale;
  bool causal;
  int scratch_level = 0;

  /// Tile extents and scratch offsets (in elements) derived from the grid.
  struct Layout {
    int tr, tc;      // thread grid
    int rows, cols;  // queries and keys per tile
    int dpad;        // head dimension rounded up to quads (zero-filled)
    int ld, pld;     // leading dimensions of Q / K / V rows and of P rows
    std::size_t q, kv, p, red, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(const FlashGrid& g, std::int64_t d) {
    Layout l;
    l.tc = g.row_threads;
    l.tr = g.team_threads / g.row_threads;
    l.rows = l.tr * MR;
    l.cols = l.tc * NR;
    l.dpad = int((d + 3) / 4 * 4);
    // +4: consecutive rows start 4 banks apart, so the quads that a warp reads
    // from up to 8 distinct rows fall into distinct banks.
    l.ld = l.dpad + 4;
    // P is written by the TC threads of a row at consecutive columns: padding
    // rows by TC rounded up to quads (at least one quad) keeps rows apart.
    l.pld = l.cols + max_of(4, (l.tc + 3) / 4 * 4);
    // Every array starts at a whole quad (ScratchLayout aligns to 16 bytes only).
    std::size_t used = 0;
    auto take = [&](std::size_t n) {
      const std::size_t at = used;
      used += (n + 3) / 4 * 4;
      return at;
    };
    l.q = take(std::size_t(l.rows) * l.ld);
    l.kv = take(std::size_t(l.cols) * l.ld);
    l.p = take(std::size_t(l.rows) * l.pld);
    l.red = take(std::size_t(l.rows) * l.tc);
    l.total = used;
    return l;
  }
  static constexpr std::size_t alignment = sizeof(Quad<T>);
  static std::size_t scratch_bytes(const FlashGrid& g, std::int64_t d) {
    return layout(g, d).total * sizeof(T) + alignment;
  }
  /// Whether a thread's output quads cover the head dimension.
  static bool covers(const FlashGrid& g, std::int64_t d) {
    return (d + 3) / 4 <= std::int64_t(g.row_threads) * G;
  }

  std::int64_t league_size() const { return batch * heads * query_tiles(layout(grid, dim)); }
  KOKKOS_INLINE_FUNCTION int query_tiles(const Layout& l) const {
    return int((queries + l.rows - 1) / l.rows);
  }

  /// Walks a block of quads in steps of the team size without a division per
  /// quad: the thread's start and its (row, column) stride are fixed.
  struct Walk {
    int r0, c0, dr, dc, width;
  };
  KOKKOS_INLINE_FUNCTION static Walk walk(int rank, int threads, int width) {
    return {rank / width, rank % width, threads / width, threads % width, width};
  }
  KOKKOS_INLINE_FUNCTION static void advance(const Walk& w, int& r, int& c) {
    c += w.dc;
    r += w.dr;
    if (c >= w.width) {
      c -= w.width;
      ++r;
    }
  }

  /// Quads staged per batch (U): all of a batch's global loads are issued
  /// before the first store waits for one, so a tile whose quads per thread
  /// fit one batch costs about one memory latency.
  static constexpr int batch_quads = U;

  /// dst rows x dpad = src for r < valid_rows and c < dim, zero elsewhere: the
  /// padding must be finite, as products with it (0 * V, Q . 0) are summed.
  /// aligned: src rows are whole quads at quad-aligned addresses.
  KOKKOS_INLINE_FUNCTION void stage(const Walk& w, const Layout& l, const T* src, std::int64_t src_ld,
                                    int valid_rows, int rows, bool aligned, T* dst) const {
    const int d = int(dim);
    int r = w.r0, c = w.c0;
    while (r < rows) {
      Quad<T> x[batch_quads];
      const int r_batch = r, c_batch = c;
      for (int u = 0; u < batch_quads; ++u) {
        for (int e = 0; e < 4; ++e) x[u].v[e] = T(0);
        if (r < valid_rows) {
          const T* from = src + r * src_ld + 4 * c;
          if (aligned)
            x[u] = load_quad(from);
          else
            for (int e = 0; e < 4; ++e)
              if (4 * c + e < d) x[u].v[e] = from[e];
        }
        advance(w, r, c);
      }
      // Walk the batch again rather than keep its addresses in registers.
      r = r_batch;
      c = c_batch;
      for (int u = 0; u < batch_quads; ++u) {
        if (r < rows) store_quad(dst + r * l.ld + 4 * c, x[u]);
        advance(w, r, c);
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Layout l = layout(grid, dim);
    const int nqt = query_tiles(l);
    const std::int64_t league = team.league_rank();
    // The last query tiles see the most keys under causality: start them first.
    const int qt = nqt - 1 - int(league % nqt);
    const std::int64_t h = (league / nqt) % heads;
    const std::int64_t b = league / (std::int64_t(nqt) * heads);
    const std::int64_t t0 = std::int64_t(qt) * l.rows;
    const int rows = int(min_of<std::int64_t>(l.rows, queries - t0));
    const std::int64_t offset = keys - queries;  // query t sits at key position offset + t
    const std::int64_t row_stride = heads * dim;

    T* const base = static_cast<T*>(
        team.team_scratch(scratch_level).get_shmem_aligned(l.total * sizeof(T), std::ptrdiff_t(alignment)));
    T* const qs = base + l.q;
    T* const kvs = base + l.kv;
    T* const ps = base + l.p;
    T* const red = base + l.red;

    const int rank = team.team_rank();
    const Walk w = walk(rank, team.team_size(), l.dpad / 4);
    auto quad_aligned = [&](const T* p) {
      return dim % 4 == 0 && reinterpret_cast<std::uintptr_t>(p) % sizeof(Quad<T>) == 0;
    };
    const bool q_aligned = quad_aligned(q.ptr) && q.row % 4 == 0 && q.head % 4 == 0,
               kv_aligned = quad_aligned(k) && quad_aligned(v);
    const int tr = rank / l.tc, tc = rank % l.tc;
    const bool active = tr < l.tr;  // threads past the grid only stage tiles

    int row[MR], col[NR];
    for (int m = 0; m < MR; ++m) row[m] = tr + m * l.tr;
    for (int n = 0; n < NR; ++n) col[n] = tc + n * l.tc;
    int groups = 0;  // output quads of this thread inside dpad
    for (int g = 0; g < G; ++g) groups += 4 * (tc + g * l.tc) < l.dpad ? 1 : 0;

    T o[MR][G][4] = {};
    T row_max[MR], row_sum[MR];  // row_sum: this thread's columns only
    for (int m = 0; m < MR; ++m) {
      row_max[m] = negative_infinity<T>();
      row_sum[m] = T(0);
    }

    stage(w, l, q.at(b * queries + t0, h), q.row, rows, l.rows, q_aligned, qs);
    const std::int64_t key_end = causal ? min_of(keys, offset + t0 + rows) : keys;
    for (std::int64_t s0 = 0; s0 < key_end; s0 += l.cols) {
      const int n_keys = int(min_of<std::int64_t>(l.cols, key_end - s0));
      const std::int64_t kv0 = ((b * keys + s0) * heads + h) * dim;
      stage(w, l, k + kv0, row_stride, n_keys, l.cols, kv_aligned, kvs);
      team.team_barrier();

      T s[MR][NR] = {};
      if (active) {
        scores(l, qs, kvs, row, col, s);
        for (int m = 0; m < MR; ++m) {
          // Row i may see key positions up to offset + t0 + i (all keys when not causal).
          const std::int64_t last = causal ? offset + t0 + row[m] - s0 : std::int64_t(n_keys) - 1;
          const int visible = int(min_of<std::int64_t>(n_keys, last + 1));
          T local_max = negative_infinity<T>();
          for (int n = 0; n < NR; ++n) {
            s[m][n] = col[n] < visible ? s[m][n] * scale : negative_infinity<T>();
            local_max = max_of(local_max, s[m][n]);
          }
          red[row[m] * l.tc + tc] = local_max;
        }
      }
      team.team_barrier();

      if (active) {
        for (int m = 0; m < MR; ++m) {
          T tile_max = negative_infinity<T>();
          for (int c = 0; c < l.tc; ++c) tile_max = max_of(tile_max, red[row[m] * l.tc + c]);
          const T new_max = max_of(row_max[m], tile_max);
          // A row that has seen no key yet keeps max = -inf; avoid exp(-inf - -inf).
          const bool empty = new_max == negative_infinity<T>();
          const T rescale = softmax_rescale(row_max[m], new_max);
          T sum = 0;
          for (int n = 0; n < NR; ++n) {
            const T p = (empty || s[m][n] == negative_infinity<T>()) ? T(0) : Impl::exp(s[m][n] - new_max);
            ps[row[m] * l.pld + col[n]] = p;
            sum += p;
          }
          row_sum[m] = row_sum[m] * rescale + sum;
          row_max[m] = new_max;
          for (int g = 0; g < G; ++g)
            for (int e = 0; e < 4; ++e) o[m][g][e] *= rescale;
        }
      }
      // V over K (all threads are past the scores); after the softmax, whose
      // scores would otherwise hold registers during the copy.
      stage(w, l, v + kv0, row_stride, n_keys, l.cols, kv_aligned, kvs);
      team.team_barrier();

      if (active) accumulate(l, ps, kvs, (n_keys + 3) / 4 * 4, row, tc, groups, o);
      team.team_barrier();
    }

    // Full row sums: the TC threads of a row hold disjoint columns.
    if (active)
      for (int m = 0; m < MR; ++m) red[row[m] * l.tc + tc] = row_sum[m];
    team.team_barrier();
    if (!active) return;
    for (int m = 0; m < MR; ++m) {
      if (row[m] >= rows) break;
      T sum = 0;
      for (int c = 0; c < l.tc; ++c) sum += red[row[m] * l.tc + c];
      const std::int64_t t = b * queries + t0 + row[m];  // token index over the batch
      T* const out_row = out.at(t, h);
      for (int g = 0; g < G; ++g) {
        if (g >= groups) break;
        const int c0 = 4 * (tc + g * l.tc);
        for (int e = 0; e < 4; ++e)
          if (c0 + e < dim) out_row[c0 + e] = o[m][g][e] / sum;
      }
      // The log of the row's softmax denominator in unshifted terms, as
      // merging partial results over disjoint key sets needs.
      if (lse && tc == 0) lse.at(t, h) = softmax_lse(row_max[m], sum);
    }
  }

  /// s[m][n] = Q(row[m], :) . K(col[n], :), over the zero-padded head dimension.
  KOKKOS_INLINE_FUNCTION static void scores(const Layout& l, const T* qs, const T* ks, const int (&row)[MR],
                                            const int (&col)[NR], T (&s)[MR][NR]) {
    for (int d = 0; d < l.dpad; d += 4) {
      Quad<T> a[MR], b[NR];
      for (int m = 0; m < MR; ++m) a[m] = load_quad(qs + row[m] * l.ld + d);
      for (int n = 0; n < NR; ++n) b[n] = load_quad(ks + col[n] * l.ld + d);
      for (int e = 0; e < 4; ++e)
        for (int m = 0; m < MR; ++m)
          for (int n = 0; n < NR; ++n) s[m][n] += a[m].v[e] * b[n].v[e];
    }
  }

  /// o[m][g] += P(row[m], :n) V(:n, quad g); n is a multiple of 4, and P and V
  /// are zero past the tile's keys.
  KOKKOS_INLINE_FUNCTION static void accumulate(const Layout& l, const T* ps, const T* vs, int n,
                                                const int (&row)[MR], int tc, int groups, T (&o)[MR][G][4]) {
    for (int j = 0; j < n; j += 4) {
      Quad<T> p[MR];
      for (int m = 0; m < MR; ++m) p[m] = load_quad(ps + row[m] * l.pld + j);
      for (int jj = 0; jj < 4; ++jj)
        for (int g = 0; g < G; ++g) {
          if (g >= groups) break;
          const Quad<T> x = load_quad(vs + (j + jj) * l.ld + 4 * (tc + g * l.tc));
          for (int m = 0; m < MR; ++m)
            for (int e = 0; e < 4; ++e) o[m][g][e] += p[m].v[jj] * x.v[e];
        }
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
