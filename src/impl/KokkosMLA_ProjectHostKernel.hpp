#ifndef KOKKOSMLA_PROJECTHOSTKERNEL_HPP
#define KOKKOSMLA_PROJECTHOSTKERNEL_HPP
// The per-head projections of cache attention on CPUs (ProjectKernel's
// products, for CacheHost): one team of one thread per (head, block of up to
// HostFlash::kRows query rows of all sequences), on the core's vector unit
// through HostFlash's two products, the rows across the lanes:
//   absorb:     to[r, h, :] = alpha * from[r, h, :] . w[:, h, :]^T  (D -> R): the
//               score product with the rows of w[:, h, :] as keys, 64 at a time;
//   up-project: to[r, h, :] = alpha * from[r, h, :] . w[:, h, :]    (R -> D): the
//               P V product with from's columns as P, 64 at a time.

#include "KokkosMLA_HostFlash.hpp"

#include <Kokkos_Core.hpp>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T, bool Absorb>
struct ProjectHostKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Flash = HostFlash<T>;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  HeadRows<const T> from;  // (rows, heads, in_width)
  HeadRows<T> to;          // (rows, heads, out_width)
  HeadRows<const T> w;     // (R, heads, D)
  std::int64_t rows = 0, heads = 0, dim = 0, rank = 0;
  T alpha = 1;
  int scratch_level = 0;

  Flash flash() const { return Flash(int(min_of<std::int64_t>(Flash::kRows, rows)), int(dim), int(dim)); }
  std::size_t scratch_bytes() const { return ScratchView::shmem_size(flash().scratch_elements()); }
  std::int64_t row_blocks() const { return (rows + Flash::kRows - 1) / Flash::kRows; }
  std::int64_t league_size() const { return heads * row_blocks(); }

  void operator()(const Member& team) const {
    const std::int64_t h = team.league_rank() % heads;
    const std::int64_t r0 = team.league_rank() / heads * Flash::kRows;
    const int n_rows = int(min_of<std::int64_t>(Flash::kRows, rows - r0)), d = int(dim);
    const Flash f = flash();
    ScratchView scratch(team.team_scratch(scratch_level), f.scratch_elements());
    const typename Flash::Tiles t = f.tiles(scratch.data());
    f.start(t);
    auto in = [&](int i) { return from.at(r0 + i, h); };
    auto out = [&](int i) { return to.at(r0 + i, h); };
    const T* weight_rows[Flash::kKeys];
    if (Absorb) {
      f.put_queries(t, n_rows, in, 0, d, alpha);
    } else {
      for (int i = 0; i < f.row_pad; ++i) t.factor[i] = T(1);
    }
    for (std::int64_t c0 = 0; c0 < rank; c0 += Flash::kKeys) {
      const int n = int(min_of<std::int64_t>(Flash::kKeys, rank - c0));
      for (int j = 0; j < n; ++j) weight_rows[j] = w.at(c0 + j, h);
      if (Absorb) {
        f.scores(t, weight_rows, n, 0, d, false);
        for (int i = 0; i < n_rows; ++i)
          for (int j = 0; j < n; ++j) out(i)[c0 + j] = t.st[j * f.row_pad + i];
      } else {
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < f.row_pad; ++i)
            t.st[j * f.row_pad + i] = i < n_rows ? alpha * in(i)[c0 + j] : T(0);
        f.accumulate(t, weight_rows, n);
      }
    }
    if (!Absorb)
      for (int i = 0; i < n_rows; ++i)
        for (int c = 0; c < d; ++c) out(i)[c] = t.o[i * f.out_ld + c];
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
