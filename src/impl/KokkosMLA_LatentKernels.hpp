#ifndef KOKKOSMLA_LATENTKERNELS_HPP
#define KOKKOSMLA_LATENTKERNELS_HPP
// Attention in the latent space (Algorithm::Fused and Algorithm::Absorbed).
//
// A team owns a block of rows: `heads` consecutive heads times `tokens`
// consecutive query tokens of one batch element, stored head-major (row
// g * tokens + i is head h0 + g, token t0 + i). Every row reads the same
// latent tiles, so one staged tile serves all heads of the team. Three steps:
//   absorb:     qa = scale * q . w_uk[:, h, :]^T   (rows x R), w_uk staged in chunks
//   attend:     oa = softmax(qa . latent^T) latent (rows x R), online softmax;
//               also the rows' log-sum-exp when lse is asked for
//   up_project: out = oa . w_uv[:, h, :]          (rows x D), w_uv staged in chunks
// The Fused kernel runs all three in one launch with qa and oa in scratch; the
// Absorbed algorithm runs one kernel per step through a (B, T, H, R) workspace.

#include "KokkosMLA_TeamOps.hpp"

namespace KokkosMLA {
namespace Impl {

struct LatentTiles {
  int tokens = 1;        ///< query tokens per team
  int heads = 1;         ///< heads per team
  int key_tile = 1;      ///< latent rows staged per step
  int weight_chunk = 1;  ///< rows of w_uk / w_uv staged per step
  KOKKOS_INLINE_FUNCTION int rows() const { return tokens * heads; }
};

/// Which steps a kernel runs, and so which scratch arrays it needs.
enum class LatentStep { Fused, Absorb, Attend, UpProject };

template <class ExecSpace, class T, LatentStep Step>
struct LatentKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr bool absorbs = Step == LatentStep::Fused || Step == LatentStep::Absorb;
  static constexpr bool attends = Step == LatentStep::Fused || Step == LatentStep::Attend;
  static constexpr bool projects = Step == LatentStep::Fused || Step == LatentStep::UpProject;

  const T* q;       // (B, T, H, D)
  const T* latent;  // (B, S, R)
  const T* w_uk;    // (R, H, D)
  const T* w_uv;    // (R, H, D)
  T* out;           // (B, T, H, D)
  T* lse;           // (B, T, H), or null when not asked for
  T* workspace;     // (B, T, H, R): qa after Absorb, oa after Attend (in place)
  std::int64_t batch, queries, keys, heads, dim, rank;
  LatentTiles tiles;
  T scale;
  bool causal;
  int scratch_level;

  /// Element offsets of the team's scratch arrays; a step's unused ones are empty.
  struct Layout {
    std::size_t rows_d, stage, qa, oa, p, max, sum, rescale, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(const LatentTiles& t, std::int64_t d, std::int64_t r) {
    const std::size_t rows = std::size_t(t.rows());
    // Weight chunks and latent tiles are never live at once: they share `stage`.
    const std::size_t weights = (absorbs || projects) ? std::size_t(t.weight_chunk) * (d + 1) : 0;
    const std::size_t keys = attends ? std::size_t(t.key_tile) * (r + 1) : 0;
    ScratchLayout<T> c;
    Layout l;
    l.rows_d = c.take((absorbs || projects) ? rows * d : 0);  // q rows, then out rows
    l.stage = c.take(max_of(weights, keys));
    l.qa = c.take((absorbs || attends) ? rows * r : 0);
    l.oa = c.take((attends || projects) ? rows * r : 0);
    l.p = c.take(attends ? rows * t.key_tile : 0);
    l.max = c.take(attends ? rows : 0);
    l.sum = c.take(attends ? rows : 0);
    l.rescale = c.take(attends ? rows : 0);
    l.total = c.used;
    return l;
  }
  static std::size_t scratch_bytes(const LatentTiles& t, std::int64_t d, std::int64_t r) {
    return ScratchView::shmem_size(layout(t, d, r).total);
  }

  KOKKOS_INLINE_FUNCTION int token_tiles() const { return int((queries + tiles.tokens - 1) / tiles.tokens); }
  KOKKOS_INLINE_FUNCTION int head_groups() const { return int((heads + tiles.heads - 1) / tiles.heads); }
  int league_size() const { return int(batch * head_groups() * token_tiles()); }

  /// The rows a team owns.
  struct Block {
    std::int64_t b, t0, h0;
    int tokens, heads;
    KOKKOS_INLINE_FUNCTION int rows() const { return tokens * heads; }
  };
  KOKKOS_INLINE_FUNCTION Block block_of(std::int64_t league) const {
    const int ntt = token_tiles(), nhg = head_groups();
    // The last token tiles see the most keys under causality: start them first.
    const int tt = ntt - 1 - int(league % ntt);
    const int hg = int((league / ntt) % nhg);
    Block k;
    k.b = league / (std::int64_t(ntt) * nhg);
    k.t0 = std::int64_t(tt) * tiles.tokens;
    k.h0 = std::int64_t(hg) * tiles.heads;
    k.tokens = int(min_of<std::int64_t>(tiles.tokens, queries - k.t0));
    k.heads = int(min_of<std::int64_t>(tiles.heads, heads - k.h0));
    return k;
  }

  /// Copies the block's rows between a (B, T, H, width) tensor and a rows x width
  /// matrix in scratch, one head's tokens at a time (those rows are evenly strided).
  template <bool ToScratch>
  KOKKOS_INLINE_FUNCTION void move_rows(const Member& team, const Block& k, T* tensor, std::int64_t width,
                                        Mat<T> rows) const {
    for (int g = 0; g < k.heads; ++g) {
      const Mat<T> global{tensor + ((k.b * queries + k.t0) * heads + k.h0 + g) * width, heads * width};
      const Mat<T> local{rows.ptr + std::int64_t(g) * k.tokens * rows.ld, rows.ld};
      if (ToScratch)
        team_copy(team, k.tokens, int(width), Mat<const T>{global.ptr, global.ld}, local);
      else
        team_copy(team, k.tokens, int(width), Mat<const T>{local.ptr, local.ld}, global);
    }
  }

  /// qa = scale * q_rows . w_uk[:, h, :]^T, head by head, w_uk staged in chunks.
  KOKKOS_INLINE_FUNCTION void absorb(const Member& team, const Block& k, Mat<T> q_rows, T* stage,
                                     Mat<T> qa) const {
    const int d = int(dim);
    for (int g = 0; g < k.heads; ++g) {
      const std::int64_t row0 = std::int64_t(g) * k.tokens;
      for (std::int64_t r0 = 0; r0 < rank; r0 += tiles.weight_chunk) {
        const int n = int(min_of<std::int64_t>(tiles.weight_chunk, rank - r0));
        team_copy(team, n, d, Mat<const T>{w_uk + (r0 * heads + k.h0 + g) * dim, heads * dim},
                  Mat<T>{stage, dim + 1});
        team_gemm(team, k.tokens, n, d, scale, Mat<const T>{q_rows.ptr + row0 * q_rows.ld, q_rows.ld},
                  TransposedB<T>{stage, dim + 1}, Mat<T>{qa.ptr + row0 * qa.ld + r0, qa.ld},
                  static_cast<const T*>(nullptr), false);
      }
    }
  }

  /// oa = softmax_causal(qa . latent^T) . latent, normalised; latent staged in tiles.
  KOKKOS_INLINE_FUNCTION void attend(const Member& team, const Block& k, Mat<T> qa, T* stage, Mat<T> p,
                                     SoftmaxRows<T> st, Mat<T> oa) const {
    const int rows = k.rows(), r = int(rank);
    const std::int64_t offset = keys - queries;  // query t sits at key position offset + t
    const std::int64_t key_end = causal ? min_of(keys, offset + k.t0 + k.tokens) : keys;
    auto last_key = [&](int i) { return causal ? offset + k.t0 + i % k.tokens : keys - 1; };
    softmax_init(team, rows, st);
    for (std::int64_t s0 = 0; s0 < key_end; s0 += tiles.key_tile) {
      const int n = int(min_of<std::int64_t>(tiles.key_tile, key_end - s0));
      team_copy(team, n, r, Mat<const T>{latent + (k.b * keys + s0) * rank, rank}, Mat<T>{stage, rank + 1});
      team_gemm(team, rows, n, r, T(1), Mat<const T>{qa.ptr, qa.ld}, TransposedB<T>{stage, rank + 1}, p,
                static_cast<const T*>(nullptr), false);
      softmax_update(team, rows, n, s0, last_key, p, st);
      team_gemm(team, rows, r, n, T(1), Mat<const T>{p.ptr, p.ld}, PlainB<T>{stage, rank + 1}, oa, st.rescale,
                s0 > 0);
    }
    softmax_normalize(team, rows, r, oa, st);
    if (lse) {
      // Row i is token t0 + i % tokens of head h0 + i / tokens.
      T* const lse_block = lse + (k.b * queries + k.t0) * heads + k.h0;
      const std::int64_t h_count = heads;
      const int tokens = k.tokens;
      softmax_log_sum_exp(team, rows, st,
                          [=](int i) -> T& { return lse_block[(i % tokens) * h_count + i / tokens]; });
    }
  }

  /// out_rows = oa . w_uv[:, h, :], head by head, w_uv staged in chunks.
  KOKKOS_INLINE_FUNCTION void up_project(const Member& team, const Block& k, Mat<T> oa, T* stage,
                                         Mat<T> out_rows) const {
    const int d = int(dim);
    for (int g = 0; g < k.heads; ++g) {
      const std::int64_t row0 = std::int64_t(g) * k.tokens;
      for (std::int64_t r0 = 0; r0 < rank; r0 += tiles.weight_chunk) {
        const int n = int(min_of<std::int64_t>(tiles.weight_chunk, rank - r0));
        team_copy(team, n, d, Mat<const T>{w_uv + (r0 * heads + k.h0 + g) * dim, heads * dim},
                  Mat<T>{stage, dim});
        team_gemm(team, k.tokens, d, n, T(1), Mat<const T>{oa.ptr + row0 * oa.ld + r0, oa.ld},
                  PlainB<T>{stage, dim}, Mat<T>{out_rows.ptr + row0 * out_rows.ld, out_rows.ld},
                  static_cast<const T*>(nullptr), r0 > 0);
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Block k = block_of(team.league_rank());
    const Layout l = layout(tiles, dim, rank);
    ScratchView scratch(team.team_scratch(scratch_level), l.total);
    T* base = scratch.data();
    const Mat<T> rows_d{base + l.rows_d, dim}, qa{base + l.qa, rank}, oa{base + l.oa, rank};
    const Mat<T> p{base + l.p, tiles.key_tile};
    const SoftmaxRows<T> st{base + l.max, base + l.sum, base + l.rescale};
    T* stage = base + l.stage;

    if (absorbs) {
      move_rows<true>(team, k, const_cast<T*>(q), dim, rows_d);
      absorb(team, k, rows_d, stage, qa);
    }
    if (Step == LatentStep::Absorb) move_rows<false>(team, k, workspace, rank, qa);
    if (Step == LatentStep::Attend) move_rows<true>(team, k, workspace, rank, qa);
    if (attends) attend(team, k, qa, stage, p, st, oa);
    if (Step == LatentStep::Attend) move_rows<false>(team, k, workspace, rank, oa);
    if (Step == LatentStep::UpProject) move_rows<true>(team, k, workspace, rank, oa);
    if (projects) {
      up_project(team, k, oa, stage, rows_d);
      move_rows<false>(team, k, out, dim, rows_d);
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
