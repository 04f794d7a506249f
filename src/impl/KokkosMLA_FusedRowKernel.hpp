#ifndef KOKKOSMLA_FUSEDROWKERNEL_HPP
#define KOKKOSMLA_FUSEDROWKERNEL_HPP
// Algorithm::Fused for short sequences: a team per query row (b, t, h), which
// absorbs its query, scores it against its sequence's visible latent rows,
// takes the softmax and up-projects, each step one pass of the team's
// threads over the step's outputs, with the weights and the latent read where
// they lie (each weight is read once by a row; a latent row twice). The
// general Fused kernel (KokkosMLA_LatentKernels.hpp) gives such rows a team
// each too, but runs its tiled steps (weight chunks and key tiles staged,
// team GEMMs, the online softmax) as a chain of about 2,000 instructions a
// warp; on the original example (2,32,4,16,24) this kernel took 0.010 ms on
// the H200 where that one took 0.017 (docs/performance.md).

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T>
struct FusedRowKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  /// The most keys a sequence may have: a row keeps its logits in scratch.
  static constexpr int kMaxKeys = 64;
  /// Threads of a GPU team: one warp, whose barriers cost little.
  static constexpr int kGpuThreads = 32;
  static constexpr bool needs_full_team = false;
  using bounds = Kokkos::LaunchBounds<>;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  HeadRows<const T> q;  // (B, T, H, D)
  const T* latent = nullptr;  // (B, S, R), rows latent_ld apart
  std::int64_t latent_ld = 0;
  HeadRows<const T> w_uk;  // (R, H, D)
  HeadRows<const T> w_uv;  // (R, H, D)
  HeadRows<T> out;         // (B, T, H, D)
  LseRows<T> lse;          // (B, T, H), or empty when not asked for
  std::int64_t batch = 0, queries = 0, keys = 0, heads = 0, dim = 0, rank = 0;
  T scale = 1;
  bool causal = true;
  int scratch_level = 0;

  std::int64_t league_size() const { return batch * queries * heads; }

  /// Scratch elements of a team: qa and oa (R each), then the logits.
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const { return std::size_t(2 * rank + kMaxKeys); }
  std::size_t scratch_bytes() const { return ScratchView::shmem_size(scratch_elements()); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t row = team.league_rank();  // (b T + t) H + h
    const std::int64_t token = row / heads, h = row % heads, b = token / queries, t = token % queries;
    // Query t sits at key position S - T + t (S >= T: every row sees a key).
    const int visible = int(causal ? keys - queries + t + 1 : keys);
    const ScratchView scratch(team.team_scratch(scratch_level), scratch_elements());
    T* const qa = scratch.data();
    T* const oa = qa + rank;
    T* const p = oa + rank;
    const T* const latent_b = latent + b * keys * latent_ld;

    absorb(team, q.at(token, h), w_uk, h, qa);
    const T max = logits(team, qa, latent_b, visible, p);
    const T sum = exponentials(team, max, visible, p);
    weighted_latent(team, p, latent_b, visible, sum, oa);
    up_project(team, oa, w_uv, h, out.at(token, h));
    if (lse) Kokkos::single(Kokkos::PerTeam(team), [&] { lse[row] = reported_lse(softmax_lse(max, sum)); });
  }

  /// qa = scale q_row . w_uk[:, h, :]^T, a thread per latent column.
  KOKKOS_INLINE_FUNCTION void absorb(const Member& team, const T* q_row, HeadRows<const T> w, std::int64_t h,
                                     T* qa) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(rank)), [&](const int r) {
      const T* const w_r = w.at(r, h);
      T s = 0;
      for (std::int64_t d = 0; d < dim; ++d) s += q_row[d] * w_r[d];
      qa[r] = scale * s;
    });
    team.team_barrier();
  }

  /// p[j] = qa . latent row j for the visible keys, a thread per key; returns their max.
  KOKKOS_INLINE_FUNCTION T logits(const Member& team, const T* qa, const T* latent_b, int visible,
                                  T* p) const {
    T max = negative_infinity<T>();
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, visible),
        [&](const int j, T& m) {
          const T* const row = latent_b + j * latent_ld;
          T s = 0;
          for (std::int64_t r = 0; r < rank; ++r) s += qa[r] * row[r];
          p[j] = s;
          m = max_of(m, s);
        },
        Kokkos::Max<T>(max));
    team.team_barrier();
    return max;
  }

  /// p[j] = exp(p[j] - max) (0 for all when max is -inf: no key has weight);
  /// returns their sum. A NaN logit makes the sum NaN.
  KOKKOS_INLINE_FUNCTION static T exponentials(const Member& team, T max, int visible, T* p) {
    const bool empty = max == negative_infinity<T>();
    T sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, visible),
        [&](const int j, T& s) {
          const T e = empty ? T(0) : Impl::exp(p[j] - max);
          p[j] = e;
          s += e;
        },
        sum);
    team.team_barrier();
    return sum;
  }

  /// oa = sum_j p[j] latent row j / sum, a thread per latent column.
  KOKKOS_INLINE_FUNCTION void weighted_latent(const Member& team, const T* p, const T* latent_b, int visible,
                                              T sum, T* oa) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(rank)), [&](const int r) {
      T s = 0;
      for (int j = 0; j < visible; ++j) s += p[j] * latent_b[j * latent_ld + r];
      oa[r] = normalized(s, sum);
    });
    team.team_barrier();
  }

  /// out_row = oa . w_uv[:, h, :], a thread per output column.
  KOKKOS_INLINE_FUNCTION void up_project(const Member& team, const T* oa, HeadRows<const T> w, std::int64_t h,
                                         T* out_row) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(dim)), [&](const int d) {
      T s = 0;
      for (std::int64_t r = 0; r < rank; ++r) s += oa[r] * w.at(r, h)[d];
      out_row[d] = s;
    });
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
