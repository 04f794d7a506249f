#ifndef KOKKOSMLA_FLASHHOSTKERNEL_HPP
#define KOKKOSMLA_FLASHHOSTKERNEL_HPP
// Flash attention over decompressed keys and values on CPUs (the second half
// of Algorithm::Decompressed on host backends): one team of one thread per
// (batch, head, query tile of kGroups row groups of HostFlash::kRows rows),
// its tiles in team scratch, the products on the core's vector unit
// (KokkosMLA_HostFlash.hpp). K and V rows are read where the decompression
// GEMM left them, (B, S, H, D) with rows key_row_stride apart. Each key tile
// serves every row group of the team before the next is read, so that a
// head's keys and values (2 S D elements, more than a core's L2 at long S)
// come from memory once per kGroups * kRows queries.

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
  static constexpr int kRows = Flash::kRows;  ///< query rows of a row group
  static constexpr int kGroups = 4;           ///< row groups of a team, sharing each key tile
  static constexpr int kTeamRows = kGroups * kRows;

  HeadRows<const T> q;  // (B, T, H, D)
  const T* k;           // (B, S, H, D), rows key_row_stride apart
  const T* v;           // (B, S, H, D), rows key_row_stride apart
  HeadRows<T> out;      // (B, T, H, D)
  LseRows<T> lse;       // (B, T, H), or empty when not asked for
  std::int64_t batch, queries, keys, heads, dim;
  T scale;
  bool causal;
  int scratch_level = 0;

  /// Elements between consecutive rows of K (and of V): H D rounded up to
  /// whole 64-byte lines, and one line more where that count is even. Rows
  /// an odd number of lines apart spread a tile's 64 rows over every L1 set;
  /// rows a multiple of 4 KiB apart (H D = 1024 or 2048 floats) would all
  /// share one set's dozen or so lines.
  static std::int64_t key_row_stride(std::int64_t heads, std::int64_t dim) {
    constexpr std::int64_t line = Flash::kLine;
    const std::int64_t lines = (heads * dim + line - 1) / line;
    return (lines % 2 == 0 ? lines + 1 : lines) * line;
  }

  /// A row group's tiles.
  Flash flash() const { return Flash(int(min_of<std::int64_t>(kRows, queries)), int(dim), int(dim)); }
  int groups() const { return int(min_of<std::int64_t>(kGroups, (queries + kRows - 1) / kRows)); }
  std::size_t scratch_elements() const { return std::size_t(groups()) * flash().scratch_elements(); }
  std::size_t scratch_bytes() const { return ScratchView::shmem_size(scratch_elements()); }
  int query_tiles() const { return int((queries + kTeamRows - 1) / kTeamRows); }
  std::int64_t league_size() const { return batch * heads * query_tiles(); }

  void operator()(const Member& team) const {
    const int nqt = query_tiles();
    const std::int64_t league = team.league_rank();
    // The last query tiles see the most keys under causality: start them first.
    const int qt = nqt - 1 - int(league % nqt);
    const std::int64_t h = (league / nqt) % heads;
    const std::int64_t b = league / (std::int64_t(nqt) * heads);
    const std::int64_t t0 = std::int64_t(qt) * kTeamRows;
    const int team_rows = int(min_of<std::int64_t>(kTeamRows, queries - t0));
    const int ng = (team_rows + kRows - 1) / kRows;
    const std::int64_t offset = keys - queries;  // query t sits at key position offset + t
    const int d = int(dim);
    const std::int64_t row_stride = key_row_stride(heads, dim);

    const Flash f = flash();
    ScratchView scratch(team.team_scratch(scratch_level), scratch_elements());
    typename Flash::Tiles t[kGroups];
    int rows[kGroups] = {};              // query rows of each group
    std::int64_t key_end[kGroups] = {};  // keys a group's rows see
    T* at = scratch.data();
    const T to_log2 = scale * T(1.4426950408889634);  // the kernel's exponentials are base 2
    for (int g = 0; g < ng; ++g) {
      t[g] = f.tiles(at);
      at += f.scratch_elements();
      t[g].positions = t[0].positions;  // one tile's key positions serve every group
      f.start(t[g]);
      const std::int64_t r0 = t0 + g * kRows;
      rows[g] = int(min_of<std::int64_t>(kRows, queries - r0));
      f.put_queries(
          t[g], rows[g], [&](int i) { return q.at(b * queries + r0 + i, h); }, 0, d, to_log2);
      for (int i = 0; i < rows[g]; ++i) t[g].last[i] = typename Flash::I(causal ? offset + r0 + i : keys - 1);
      key_end[g] = causal ? min_of(keys, offset + r0 + rows[g]) : keys;
    }
    const std::int64_t team_key_end = key_end[ng - 1];  // the last group's rows see the most keys

    const T* key_rows[Flash::kKeys];
    const T* value_rows[Flash::kKeys];
    for (std::int64_t s0 = 0; s0 < team_key_end; s0 += Flash::kKeys) {
      const int n = int(min_of<std::int64_t>(Flash::kKeys, team_key_end - s0));
      for (int j = 0; j < n; ++j) {
        const std::int64_t at_key = (b * keys + s0 + j) * row_stride + h * dim;
        key_rows[j] = k + at_key;
        value_rows[j] = v + at_key;
        t[0].positions[j] = typename Flash::I(s0 + j);
      }
      for (int g = 0; g < ng; ++g) {
        if (s0 >= key_end[g]) continue;  // past every key of the group's rows
        const int seen = int(min_of<std::int64_t>(n, key_end[g] - s0));
        f.scores(t[g], key_rows, seen, 0, d, false);
        f.softmax(t[g], seen);
        f.accumulate(t[g], value_rows, seen);
      }
    }
    for (int g = 0; g < ng; ++g)
      for (int i = 0; i < rows[g]; ++i) {
        const std::int64_t token = b * queries + t0 + g * kRows + i;
        f.finish_row(t[g], i, out.at(token, h));
        if (lse) lse.at(token, h) = reported_lse(Flash::row_lse(t[g], i));
      }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
