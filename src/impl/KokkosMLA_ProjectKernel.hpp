#ifndef KOKKOSMLA_PROJECTKERNEL_HPP
#define KOKKOSMLA_PROJECTKERNEL_HPP
// The per-head projections of decoding as one batched product over all rows
// of all sequences: for every head h,
//   absorb:     to[r, h, :] = alpha * from[r, h, :] . w[:, h, :]^T   (D -> R)
//   up-project: to[r, h, :] = alpha * from[r, h, :] . w[:, h, :]     (R -> D)
// where r runs over the B * Tq query rows. Grouping rows of different
// sequences under one head is what makes these real matrix products: a
// team inside one sequence would have a single row per head when decoding.
// One team per (head, block of rows, block of output columns); the input
// rows and the weight slice stream through scratch in chunks of the inner
// dimension, the output block accumulates in scratch.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TeamOps.hpp"

namespace KokkosMLA {
namespace Impl {

struct ProjectTiles {
  int rows = 1;     ///< query rows per team
  int columns = 1;  ///< output columns per team
  int chunk = 1;    ///< inner-dimension chunk staged per step
};

template <class ExecSpace, class T, bool Absorb>
struct ProjectKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr bool needs_full_team = false;
  using bounds = Kokkos::LaunchBounds<>;

  HeadRows<const T> from;  // (rows, heads, in_width)
  HeadRows<T> to;          // (rows, heads, out_width)
  HeadRows<const T> w;     // (R, heads, D)
  std::int64_t rows = 0, heads = 0, dim = 0, rank = 0;
  ProjectTiles tiles;
  T alpha = 1;
  int scratch_level = 0;

  /// Elements a GPU thread loads before it stores any in the tile copies
  /// (team_copy_in_batches); host teams copy element by element.
  static constexpr int kCopyBatch = is_host_space<ExecSpace>() ? 1 : 8;

  KOKKOS_INLINE_FUNCTION std::int64_t in_width() const { return Absorb ? dim : rank; }
  KOKKOS_INLINE_FUNCTION std::int64_t out_width() const { return Absorb ? rank : dim; }

  struct Layout {
    std::size_t a, b, c, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(const ProjectTiles& t) {
    ScratchLayout<T> s;
    Layout l;
    l.a = s.take(std::size_t(t.rows) * (t.chunk + 1));
    // The weight chunk: chunk x columns when up-projecting, its transpose when absorbing.
    l.b = s.take(max_of(std::size_t(t.chunk) * (t.columns + 1), std::size_t(t.columns) * (t.chunk + 1)));
    l.c = s.take(std::size_t(t.rows) * t.columns);
    l.total = s.used;
    return l;
  }
  std::size_t scratch_bytes(const ProjectTiles& t) const { return ScratchView::shmem_size(layout(t).total); }

  KOKKOS_INLINE_FUNCTION int row_blocks() const { return int((rows + tiles.rows - 1) / tiles.rows); }
  KOKKOS_INLINE_FUNCTION int column_blocks() const {
    return int((out_width() + tiles.columns - 1) / tiles.columns);
  }
  std::int64_t league_size() const { return heads * row_blocks() * column_blocks(); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t league = team.league_rank();
    const int ncb = column_blocks(), nrb = row_blocks();
    const std::int64_t c0 = std::int64_t(league % ncb) * tiles.columns;
    const std::int64_t r0 = std::int64_t((league / ncb) % nrb) * tiles.rows;
    const std::int64_t h = league / (std::int64_t(ncb) * nrb);
    const int m = int(min_of<std::int64_t>(tiles.rows, rows - r0));
    const int n = int(min_of<std::int64_t>(tiles.columns, out_width() - c0));
    const Layout l = layout(tiles);
    ScratchView scratch(team.team_scratch(scratch_level), l.total);
    const Mat<T> a{scratch.data() + l.a, tiles.chunk + 1};
    T* const b = scratch.data() + l.b;
    const Mat<T> c{scratch.data() + l.c, tiles.columns};
    for (std::int64_t k0 = 0; k0 < in_width(); k0 += tiles.chunk) {
      const int kc = int(min_of<std::int64_t>(tiles.chunk, in_width() - k0));
      team_copy_in_batches<kCopyBatch>(team, m, kc, Mat<const T>{from.at(r0, h) + k0, from.row}, a);
      // Rows of w[:, h, :] are contiguous along D: copy them as they lie (coalesced).
      if (Absorb) {  // B(k, j) = w[c0 + j, h, k0 + k]
        team_copy_in_batches<kCopyBatch>(team, n, kc, Mat<const T>{w.at(c0, h) + k0, w.row},
                                         Mat<T>{b, tiles.chunk + 1});
        team_gemm(team, m, n, kc, alpha, Mat<const T>{a.ptr, a.ld}, TransposedB<T>{b, tiles.chunk + 1}, c,
                  static_cast<const T*>(nullptr), k0 > 0);
      } else {  // B(k, j) = w[k0 + k, h, c0 + j]
        team_copy_in_batches<kCopyBatch>(team, kc, n, Mat<const T>{w.at(k0, h) + c0, w.row},
                                         Mat<T>{b, tiles.columns + 1});
        team_gemm(team, m, n, kc, alpha, Mat<const T>{a.ptr, a.ld}, PlainB<T>{b, tiles.columns + 1}, c,
                  static_cast<const T*>(nullptr), k0 > 0);
      }
    }
    team_copy_in_batches<kCopyBatch>(team, m, n, Mat<const T>{c.ptr, c.ld},
                                     Mat<T>{to.at(r0, h) + c0, to.row});
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
