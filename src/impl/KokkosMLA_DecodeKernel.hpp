#ifndef KOKKOSMLA_DECODEKERNEL_HPP
#define KOKKOSMLA_DECODEKERNEL_HPP
// Cache attention with the output accumulator oa in registers instead of
// team scratch: the Attend and Split steps of the latent kernel.
//
// The absorbed queries qa come from a workspace (ProjectKernel computes them
// for all sequences at once, as does the up-projection after), so scratch
// holds only the query rows (qa and the scaled RoPE queries side by side,
// R + Dr wide) and one key tile (latent and RoPE keys side by side): a team
// takes up to kMaxRows head rows within a GPU's 48 KB. Per key tile: each
// thread loads the columns c = thread + j * team_size it owns of every key
// into registers and stages them in scratch; the scores as a split-K product
// over scratch; the softmax update; and P . latent accumulated from the
// thread's own registers into its columns (j < Columns) of every row. Attend
// writes the normalised oa over qa in the workspace; Split writes each part's
// oa and lse.
// It needs team_size * Columns >= R and at most kMaxRows rows per team; the
// plan falls back to LatentKernel otherwise (on hosts, whose teams are one
// thread, unless R <= Columns).

#include "KokkosMLA_LatentKernels.hpp"

#include <type_traits>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T, LatentStep Step, int Columns>
struct DecodeKernel : LatentKernel<ExecSpace, T, Step> {
  static_assert(Step == LatentStep::Attend || Step == LatentStep::Split, "DecodeKernel runs Attend or Split");
  using Base = LatentKernel<ExecSpace, T, Step>;
  using typename Base::Block;
  using typename Base::KeyRange;
  using typename Base::Member;
  using typename Base::ScratchView;
  static constexpr int kMaxRows = 8;
  static constexpr int kMaxKeys = 8;                 ///< keys per tile
  static constexpr int kStageColumns = Columns + 2;  ///< columns a thread loads: R + Dr <= threads * this
  // Each thread owns Columns columns: fewer threads than planned would leave
  // columns out. On GPUs, registers capped so that 3 teams share an SM.
  static constexpr bool needs_full_team = true;
  using bounds = std::conditional_t<is_host_space<ExecSpace>(), Kokkos::LaunchBounds<>,
                                    Kokkos::LaunchBounds<preferred_team_size<ExecSpace>(), 3>>;

  DecodeKernel() = default;
  explicit DecodeKernel(const Base& b) : Base(b) {}

  KOKKOS_INLINE_FUNCTION std::int64_t width() const { return this->rank + this->rope_dim; }

  struct Layout {
    std::size_t query, tile, p, max, sum, rescale, partial, total;
  };
  KOKKOS_INLINE_FUNCTION Layout layout(const LatentTiles& t) const {
    const std::size_t rows = std::size_t(t.rows());
    ScratchLayout<T> c;
    Layout l;
    l.query = c.take(rows * width());
    l.tile = c.take(std::size_t(t.key_tile) * (width() + 1));
    l.p = c.take(rows * t.key_tile);
    l.max = c.take(rows);
    l.sum = c.take(rows);
    l.rescale = c.take(rows);
    l.partial = c.take(4 * std::size_t(this->team_threads));
    l.total = c.used;
    return l;
  }
  std::size_t scratch_bytes(const LatentTiles& t) const { return ScratchView::shmem_size(layout(t).total); }
  /// Whether a team of `threads` can run these extents and tiles.
  bool fits(const LatentTiles& t, int threads) const {
    return t.rows() <= kMaxRows && t.key_tile <= kMaxKeys && std::int64_t(threads) * Columns >= this->rank &&
           std::int64_t(threads) * kStageColumns >= width();
  }

  /// oa (normalised, into query's first R columns) = softmax(query . keys^T) . latent.
  KOKKOS_INLINE_FUNCTION void attend(const Member& team, const Block& k, Mat<T> query, Mat<T> tile, Mat<T> p,
                                     SoftmaxRows<T> st, T* partial) const {
    const int rows = k.rows(), r = int(this->rank), w = int(width());
    const int thread = team.team_rank(), threads = team.team_size();
    auto visible = [&](int i) { return this->last_key(k, i); };
    const KeyRange range = this->key_range(k);
    T acc[kMaxRows][Columns];
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kMaxRows; ++i) {
      KOKKOSMLA_UNROLL
      for (int j = 0; j < Columns; ++j) acc[i][j] = T(0);
    }
    softmax_init(team, rows, st);
    for (std::int64_t s0 = range.begin; s0 < range.end; s0 += this->tiles.key_tile) {
      const int n = int(min_of<std::int64_t>(this->tiles.key_tile, range.end - s0));
      // Each thread loads its columns of every key of the tile at once (one
      // memory latency), keeps them for P . latent, and stages them for the scores.
      T v[kMaxKeys][kStageColumns];
      KOKKOSMLA_UNROLL
      for (int s = 0; s < kMaxKeys; ++s) {
        const std::int64_t row = s < n ? this->cache.row(k.b, s0 + s) : 0;
        KOKKOSMLA_UNROLL
        for (int j = 0; j < kStageColumns; ++j) {
          const int c = thread + j * threads;
          v[s][j] = s >= n || c >= w ? T(0)
                    : c < r          ? this->cache.latent[row * this->cache.latent_ld + c]
                                     : this->cache.rope[row * this->cache.rope_ld + c - r];
        }
      }
      KOKKOSMLA_UNROLL
      for (int s = 0; s < kMaxKeys; ++s) {
        KOKKOSMLA_UNROLL
        for (int j = 0; j < kStageColumns; ++j) {
          const int c = thread + j * threads;
          if (s < n && c < w) tile(s, c) = v[s][j];
        }
      }
      team.team_barrier();
      team_gemm_long_k(team, rows, n, w, T(1), Mat<const T>{query.ptr, query.ld},
                       TransposedB<T>{tile.ptr, tile.ld}, p, false, partial);
      softmax_update(team, rows, n, s0, visible, p, st);
      KOKKOSMLA_UNROLL
      for (int i = 0; i < kMaxRows; ++i) {
        const T rescale = i < rows ? st.rescale[i] : T(0);
        KOKKOSMLA_UNROLL
        for (int j = 0; j < Columns; ++j) acc[i][j] *= rescale;
      }
      KOKKOSMLA_UNROLL
      for (int s = 0; s < kMaxKeys; ++s) {
        KOKKOSMLA_UNROLL
        for (int j = 0; j < Columns; ++j) {
          const int c = thread + j * threads;
          const T value = s < n && c < r ? v[s][j] : T(0);
          KOKKOSMLA_UNROLL
          for (int i = 0; i < kMaxRows; ++i)
            if (i < rows && s < n) acc[i][j] += p(i, s) * value;
        }
      }
      team.team_barrier();  // the next tile overwrites this one
    }
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kMaxRows; ++i) {
      KOKKOSMLA_UNROLL
      for (int j = 0; j < Columns; ++j) {
        const int c = thread + j * threads;
        if (i < rows && c < r) query(i, c) = normalized(acc[i][j], st.sum[i]);
      }
    }
    team.team_barrier();
    this->store_lse(team, k, rows, st);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Block k = this->block_of(team.league_rank());
    const Layout l = layout(this->tiles);
    ScratchView scratch(team.team_scratch(this->scratch_level), l.total);
    T* base = scratch.data();
    const Mat<T> query{base + l.query, width()}, tile{base + l.tile, width() + 1};
    const Mat<T> p{base + l.p, this->tiles.key_tile};
    const SoftmaxRows<T> st{base + l.max, base + l.sum, base + l.rescale};

    this->template move_rows<true>(team, k, this->workspace, this->rank, query);
    if (this->rope_dim > 0) {
      const Mat<T> rope_part{query.ptr + this->rank, query.ld};
      this->read_rows(team, k, this->q_rope, this->rope_dim, rope_part);
      const int dr = int(this->rope_dim);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k.rows() * dr),
                           [&](const int e) { rope_part(e / dr, e % dr) *= this->scale; });
      team.team_barrier();
    }
    attend(team, k, query, tile, p, st, base + l.partial);
    T* const result = Step == LatentStep::Split ? this->part_oa(k.part) : this->workspace;
    this->template move_rows<false>(team, k, result, this->rank, query);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
