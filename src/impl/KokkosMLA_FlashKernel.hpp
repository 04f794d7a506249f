#ifndef KOKKOSMLA_FLASHKERNEL_HPP
#define KOKKOSMLA_FLASHKERNEL_HPP
// Flash attention over decompressed keys and values (the second half of
// Algorithm::Decompressed). One team per (batch, head, query tile): the query
// tile stays in scratch, key/value tiles stream through it, and an online
// softmax keeps only a running max and sum per row, so no T x S matrix exists.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TeamOps.hpp"

namespace KokkosMLA {
namespace Impl {

struct FlashTiles {
  int query_tile = 1;
  int key_tile = 1;
};

template <class ExecSpace, class T>
struct FlashAttentionKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  HeadRows<const T> q;  // (B, T, H, D)
  const T* k;           // (B, S, H, D)
  const T* v;           // (B, S, H, D)
  HeadRows<T> out;      // (B, T, H, D)
  LseRows<T> lse;       // (B, T, H), or empty when not asked for
  std::int64_t batch, queries, keys, heads, dim;
  FlashTiles tiles;
  T scale;
  bool causal;
  int scratch_level;

  /// Element offsets of the team's scratch arrays.
  struct Layout {
    std::size_t q, k, v, p, o, max, sum, rescale, total;
  };
  KOKKOS_INLINE_FUNCTION static Layout layout(const FlashTiles& t, std::int64_t d) {
    ScratchLayout<T> c;
    Layout l;
    l.q = c.take(t.query_tile * d);
    l.k = c.take(t.key_tile * (d + 1));  // +1 column: conflict-free row reads in Q K^T
    l.v = c.take(t.key_tile * d);
    l.p = c.take(std::size_t(t.query_tile) * t.key_tile);
    l.o = c.take(t.query_tile * d);
    l.max = c.take(t.query_tile);
    l.sum = c.take(t.query_tile);
    l.rescale = c.take(t.query_tile);
    l.total = c.used;
    return l;
  }
  static std::size_t scratch_bytes(const FlashTiles& t, std::int64_t d) {
    return ScratchView::shmem_size(layout(t, d).total);
  }

  std::int64_t league_size() const { return batch * heads * query_tiles(); }
  KOKKOS_INLINE_FUNCTION int query_tiles() const {
    return int((queries + tiles.query_tile - 1) / tiles.query_tile);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int nqt = query_tiles();
    const std::int64_t league = team.league_rank();
    // The last query tiles see the most keys under causality: start them first.
    const int qt = nqt - 1 - int(league % nqt);
    const std::int64_t h = (league / nqt) % heads;
    const std::int64_t b = league / (std::int64_t(nqt) * heads);
    const std::int64_t t0 = std::int64_t(qt) * tiles.query_tile;
    const int rows = int(min_of<std::int64_t>(tiles.query_tile, queries - t0));
    const std::int64_t offset = keys - queries;  // query t sits at key position offset + t
    const std::int64_t row_stride = heads * dim;
    const int d = int(dim);

    const Layout l = layout(tiles, dim);
    ScratchView scratch(team.team_scratch(scratch_level), l.total);
    T* base = scratch.data();
    const Mat<T> qs{base + l.q, dim}, ks{base + l.k, dim + 1}, vs{base + l.v, dim};
    const Mat<T> ps{base + l.p, tiles.key_tile}, os{base + l.o, dim};
    const SoftmaxRows<T> st{base + l.max, base + l.sum, base + l.rescale};

    team_copy(team, rows, d, Mat<const T>{q.at(b * queries + t0, h), q.row}, qs);
    softmax_init(team, rows, st);
    const std::int64_t key_end = causal ? min_of(keys, offset + t0 + rows) : keys;
    auto last_key = [&](int i) { return causal ? offset + t0 + i : keys - 1; };
    for (std::int64_t s0 = 0; s0 < key_end; s0 += tiles.key_tile) {
      const int n = int(min_of<std::int64_t>(tiles.key_tile, key_end - s0));
      const std::int64_t kv0 = ((b * keys + s0) * heads + h) * dim;
      team_copy(team, n, d, Mat<const T>{k + kv0, row_stride}, ks);
      team_copy(team, n, d, Mat<const T>{v + kv0, row_stride}, vs);
      team_gemm(team, rows, n, d, scale, Mat<const T>{qs.ptr, qs.ld}, TransposedB<T>{ks.ptr, ks.ld}, ps,
                static_cast<const T*>(nullptr), false);
      softmax_update(team, rows, n, s0, last_key, ps, st);
      team_gemm(team, rows, d, n, T(1), Mat<const T>{ps.ptr, ps.ld}, PlainB<T>{vs.ptr, vs.ld}, os, st.rescale,
                s0 > 0);
    }
    softmax_normalize(team, rows, d, os, st);
    if (lse) {
      const LseRows<T> lse_of = lse;  // row i is token t0 + i
      const std::int64_t token = b * queries + t0;
      softmax_log_sum_exp(team, rows, st, [=](int i) -> T& { return lse_of.at(token + i, h); });
    }
    team_copy(team, rows, d, Mat<const T>{os.ptr, os.ld}, Mat<T>{out.at(b * queries + t0, h), out.row});
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
