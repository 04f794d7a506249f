#ifndef KOKKOSMLA_FLASHHOSTKERNEL_HPP
#define KOKKOSMLA_FLASHHOSTKERNEL_HPP
// Flash attention over decompressed keys and values on CPUs (the second half
// of Algorithm::Decompressed on host backends): one team of one thread per
// (batch, head, query tile of HostFlash::kRows rows), its tiles in team
// scratch, the products on the core's vector unit (KokkosMLA_HostFlash.hpp).
// K and V rows are read where the decompression GEMM left them.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_HostFlash.hpp"

#include <Kokkos_Core.hpp>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T>
struct FlashHostKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Flash = HostFlash<T>;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int kRows = Flash::kRows;

  HeadRows<const T> q;  // (B, T, H, D)
  const T* k;           // (B, S, H, D)
  const T* v;           // (B, S, H, D)
  HeadRows<T> out;      // (B, T, H, D)
  LseRows<T> lse;       // (B, T, H), or empty when not asked for
  std::int64_t batch, queries, keys, heads, dim;
  T scale;
  bool causal;
  int scratch_level = 0;

  /// K and V rows of one head lie H D elements apart: staged (HostFlash).
  Flash flash() const { return Flash(int(min_of<std::int64_t>(kRows, queries)), int(dim), int(dim), true); }
  std::size_t scratch_bytes() const { return ScratchView::shmem_size(flash().scratch_elements()); }
  int query_tiles() const { return int((queries + kRows - 1) / kRows); }
  std::int64_t league_size() const { return batch * heads * query_tiles(); }

  void operator()(const Member& team) const {
    const int nqt = query_tiles();
    const std::int64_t league = team.league_rank();
    // The last query tiles see the most keys under causality: start them first.
    const int qt = nqt - 1 - int(league % nqt);
    const std::int64_t h = (league / nqt) % heads;
    const std::int64_t b = league / (std::int64_t(nqt) * heads);
    const std::int64_t t0 = std::int64_t(qt) * kRows;
    const int rows = int(min_of<std::int64_t>(kRows, queries - t0));
    const std::int64_t offset = keys - queries;  // query t sits at key position offset + t
    const int d = int(dim);

    const Flash f = flash();
    ScratchView scratch(team.team_scratch(scratch_level), f.scratch_elements());
    const typename Flash::Tiles t = f.tiles(scratch.data());
    f.start(t);
    const T to_log2 = scale * T(1.4426950408889634);  // the kernel's exponentials are base 2
    for (int i = 0; i < rows; ++i) {
      f.put_query(t, i, q.at(b * queries + t0 + i, h), 0, d, to_log2);
      t.last[i] = typename Flash::I(causal ? offset + t0 + i : keys - 1);
    }

    const std::int64_t key_end = causal ? min_of(keys, offset + t0 + rows) : keys;
    const T* key_rows[Flash::kKeys];
    const T* value_rows[Flash::kKeys];
    for (std::int64_t s0 = 0; s0 < key_end; s0 += Flash::kKeys) {
      const int n = int(min_of<std::int64_t>(Flash::kKeys, key_end - s0));
      for (int j = 0; j < n; ++j) {
        const std::int64_t at = ((b * keys + s0 + j) * heads + h) * dim;
        key_rows[j] = k + at;
        value_rows[j] = v + at;
        t.positions[j] = typename Flash::I(s0 + j);
      }
      f.stage(key_rows, n, d, t.keys, key_rows);
      f.stage(value_rows, n, d, t.values, value_rows);
      f.scores(t, key_rows, n, 0, d, false);
      f.softmax(t, n);
      f.accumulate(t, value_rows, n);
    }
    for (int i = 0; i < rows; ++i) {
      const std::int64_t token = b * queries + t0 + i;
      f.finish_row(t, i, out.at(token, h));
      if (lse) lse.at(token, h) = reported_lse(Flash::row_lse(t, i));
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
