#ifndef KOKKOSMLA_GATHERKERNEL_HPP
#define KOKKOSMLA_GATHERKERNEL_HPP
// A latent cache's tokens (contiguous or paged, RoPE keys apart or packed)
// gathered into a contiguous (sequences, capacity, R + Dr) array of [latent,
// RoPE key] rows: for the Widened path, which runs a float plan on it, and
// for attention by GEMMs (CacheGemm), whose GEMMs read it by strides.

#include "KokkosMLA_LatentKernels.hpp"
#include "KokkosMLA_Launch.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// Sequences first_sequence .. first_sequence + sequences - 1 of `from`
/// into `to`, converted to C; zeros past each sequence's length, so that no
/// value the cache holds there (NaN in an idle slot) reaches a product. A
/// team per token row, its threads along the row: the row's address is
/// worked out once (64-bit divisions per value took the gather of a B = 128,
/// S = 4096 cache to milliseconds on the H200), and reads and writes are
/// coalesced. A GPU thread loads all its values of the row before it stores
/// any: the compiler cannot tell `to` from the cache, so element by element
/// each load waited behind the previous store, one read in flight a thread.
template <class ExecSpace, class T, class C>
struct GatherKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  /// Threads of a GPU team, and values each loads before it stores: a
  /// 576-wide row in one pass. Host teams (one thread) copy value by value.
  static constexpr int kGpuThreads = 64;
  static constexpr int kBatch = is_host_space<ExecSpace>() ? 1 : 9;

  LatentKeys<T> from;
  C* to;
  std::int64_t capacity, rank, width;
  std::int64_t first_sequence = 0, sequences = 0;
  int scratch_level = 0;  // none used; the launch helper asks for it

  std::int64_t league_size() const { return sequences * capacity; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t i = team.league_rank();
    const std::int64_t b = first_sequence + i / capacity, s = i % capacity;
    C* const row_to = to + i * width;
    if (s >= from.length(b)) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, width), [&](const std::int64_t c) { row_to[c] = C(0); });
      return;
    }
    const std::int64_t row = from.row(b, s);
    const T* const latent = from.latent + row * from.latent_ld;
    const std::int64_t rope_at = row * from.rope_ld - rank;  // value c >= rank at from.rope[rope_at + c]
    const int groups = int((width + kBatch - 1) / kBatch);   // group g: values g, g + groups, ...
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const int g) {
      C v[kBatch] = {};
      KOKKOSMLA_UNROLL
      for (int u = 0; u < kBatch; ++u) {
        const std::int64_t c = g + std::int64_t(u) * groups;
        if (c < width) v[u] = C(c < rank ? latent[c] : from.rope[rope_at + c]);
      }
      KOKKOSMLA_UNROLL
      for (int u = 0; u < kBatch; ++u) {
        const std::int64_t c = g + std::int64_t(u) * groups;
        if (c < width) row_to[c] = v[u];
      }
    });
  }
};

/// Gathers k's sequences on exec (GatherKernel).
template <class ExecSpace, class T, class C>
void gather_tokens(const ExecSpace& exec, const char* label, const GatherKernel<ExecSpace, T, C>& k) {
  launch(exec, label, k, GatherKernel<ExecSpace, T, C>::kGpuThreads, 0);
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
