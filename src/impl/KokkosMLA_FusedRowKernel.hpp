#ifndef KOKKOSMLA_FUSEDROWKERNEL_HPP
#define KOKKOSMLA_FUSEDROWKERNEL_HPP
// Algorithm::Fused for short sequences: a team per query row (b, t, h), which
// absorbs its query, scores it against its sequence's visible latent rows,
// takes the softmax and up-projects, each step one pass of the team's
// threads over the step's outputs. The general Fused kernel
// (KokkosMLA_LatentKernels.hpp) gives such rows a team each too, but runs its
// tiled steps (weight chunks and key tiles staged, team GEMMs, the online
// softmax) as a chain of about 2,000 instructions a warp; on the original
// example (2,32,4,16,24) this kernel took 0.010 ms on the H200 where that one
// took 0.017, and 0.0085 with its operands staged (docs/performance.md).
//
// Where a row's operands are small (the query row, its head's w_uk and w_uv
// slices and the visible latent rows: at most kMaxStagedBytes), the team
// first copies them all into scratch, on GPUs by asynchronous copies that
// are all in flight at once, so that the row waits for memory once and not
// at each step's first reads; the steps then read scratch. Larger rows are
// read where they lie (each weight once by a row, a latent row twice).

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"
#include "KokkosMLA_TensorOps.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// Copies `Bytes` (one element, or a 16-byte piece of aligned ones) into
/// team scratch: on GPUs with cp.async without waiting for them (they land
/// by wait_own_copies), elsewhere at once.
template <int Bytes, class T>
KOKKOS_INLINE_FUNCTION void copy_async_into_scratch(T* to, const T* from) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared_address(to)), "l"(from), "n"(Bytes)
               : "memory");
#else
  for (int i = 0; i < Bytes / int(sizeof(T)); ++i) to[i] = from[i];
#endif
}

/// Every thread's v joined by Reducer (Kokkos::Max<T> or Kokkos::Sum<T>),
/// given to every thread. A one-warp CUDA team shuffles; Kokkos' team
/// reductions work out the team's shape by divisions and pass through
/// scratch behind barriers, about 150 instructions a reduction there.
template <class Reducer, class Member, class T>
KOKKOS_INLINE_FUNCTION T team_all(const Member& team, T v) {
#ifdef __CUDA_ARCH__
  if (team.team_size() == 32 && blockDim.x == 1) {
    for (int lanes = 16; lanes > 0; lanes /= 2) Reducer(v).join(v, T(__shfl_xor_sync(0xffffffffu, v, lanes)));
    return v;
  }
#endif
  team.team_reduce(Reducer(v));
  return v;
}

template <class ExecSpace, class T>
struct FusedRowKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  /// The most keys a sequence may have: a row keeps its logits in scratch.
  static constexpr int kMaxKeys = 64;
  /// Threads of a GPU team: one warp, whose barriers cost little.
  static constexpr int kGpuThreads = 32;
  /// The most bytes of a row's operands that its team stages.
  static constexpr std::size_t kMaxStagedBytes = 24 * 1024;
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
  bool staged = false;     ///< the team copies its row's operands into scratch first
  bool in_pieces = false;  ///< and in 16-byte pieces: every row it stages starts on a 16-byte boundary
  int scratch_level = 0;

  std::int64_t league_size() const { return batch * queries * heads; }

  /// Elements of a 16-byte piece.
  static constexpr int kPiece = 16 / int(sizeof(T));
  /// Elements a team stages: the query row, w_uk and w_uv of its head, S
  /// latent rows, and room to start them on a 16-byte boundary.
  KOKKOS_INLINE_FUNCTION static std::int64_t staged_elements(std::int64_t keys, std::int64_t dim,
                                                             std::int64_t rank) {
    return kPiece + dim + 2 * rank * dim + keys * rank;
  }
  /// Whether a row's operands are few enough to stage.
  static bool stages(std::int64_t keys, std::int64_t dim, std::int64_t rank) {
    return std::size_t(staged_elements(keys, dim, rank)) * sizeof(T) <= kMaxStagedBytes;
  }

  /// Whether every row a team stages starts on a 16-byte boundary and holds
  /// whole 16-byte pieces (for in_pieces).
  bool rows_are_pieces() const {
    const auto whole = [](std::int64_t n) { return n % kPiece == 0; };
    const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    const auto rows_whole = [&](const HeadRows<const T>& r) {
      return aligned(r.ptr) && whole(r.row) && whole(r.head);
    };
    return whole(dim) && whole(rank) && aligned(latent) && whole(latent_ld) && rows_whole(q) &&
           rows_whole(w_uk) && rows_whole(w_uv);
  }

  /// Scratch elements of a team: qa and oa (R each), the logits, then what it stages.
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_elements(std::int64_t keys, std::int64_t dim,
                                                             std::int64_t rank, bool staged) {
    return std::size_t(2 * rank + kMaxKeys + (staged ? staged_elements(keys, dim, rank) : 0));
  }
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const {
    return scratch_elements(keys, dim, rank, staged);
  }
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
    const T* q_row = q.at(token, h);
    // The head's weight rows and the sequence's latent rows: row r at at(r, 0).
    HeadRows<const T> wk{w_uk.at(0, h), w_uk.row}, wv{w_uv.at(0, h), w_uv.row};
    HeadRows<const T> lat{latent + b * keys * latent_ld, latent_ld};
    if (staged) {
      T* const to = aligned_to_piece(p + kMaxKeys);
      q_row = stage(team, {q_row, dim}, 1, dim, to).ptr;
      wk = stage(team, wk, rank, dim, to + dim);
      wv = stage(team, wv, rank, dim, to + dim + rank * dim);
      lat = stage(team, lat, visible, rank, to + dim + 2 * rank * dim);
      wait_own_copies();
      team.team_barrier();
    }

    absorb(team, q_row, wk, qa);
    const T max = logits(team, qa, lat, visible, p);
    const T sum = exponentials(team, max, visible, p);
    weighted_latent(team, p, lat, visible, sum, oa);
    up_project(team, oa, wv, out.at(token, h));
    if (lse) Kokkos::single(Kokkos::PerTeam(team), [&] { lse[row] = reported_lse(softmax_lse(max, sum)); });
  }

  /// The first 16-byte boundary at or after p.
  KOKKOS_INLINE_FUNCTION static T* aligned_to_piece(T* p) {
    return reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(p) + 15) & ~std::uintptr_t(15));
  }

  /// Starts copying rows x cols of `from` into consecutive rows from `to`, a
  /// thread per row (in 16-byte pieces where in_pieces, else by elements),
  /// so that a thread's copies need one address each; returns those rows.
  KOKKOS_INLINE_FUNCTION HeadRows<const T> stage(const Member& team, HeadRows<const T> from,
                                                 std::int64_t rows, std::int64_t cols, T* to) const {
    for (int r = team.team_rank(); r < int(rows); r += team.team_size()) {
      const T* const source = from.at(r, 0);
      T* const row = to + r * cols;
      if (in_pieces)
        for (int c = 0; c < int(cols); c += kPiece) copy_async_into_scratch<16>(row + c, source + c);
      else
        for (int c = 0; c < int(cols); ++c) copy_async_into_scratch<int(sizeof(T))>(row + c, source + c);
    }
    return {to, cols};
  }

  /// qa = scale q_row . w^T (w: R rows of D), a thread per latent column.
  KOKKOS_INLINE_FUNCTION void absorb(const Member& team, const T* q_row, HeadRows<const T> w, T* qa) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(rank)), [&](const int r) {
      const T* const w_r = w.at(r, 0);
      T s = 0;
      for (std::int64_t d = 0; d < dim; ++d) s += q_row[d] * w_r[d];
      qa[r] = scale * s;
    });
    team.team_barrier();
  }

  /// p[j] = qa . latent row j for the visible keys, a thread per key; returns their max.
  /// A thread keeps its own keys through exponentials: no barrier between.
  KOKKOS_INLINE_FUNCTION T logits(const Member& team, const T* qa, HeadRows<const T> lat, int visible,
                                  T* p) const {
    T max = negative_infinity<T>();
    for (int j = team.team_rank(); j < visible; j += team.team_size()) {
      const T* const row = lat.at(j, 0);
      T s = 0;
      for (std::int64_t r = 0; r < rank; ++r) s += qa[r] * row[r];
      p[j] = s;
      max = max_of(max, s);
    }
    return team_all<Kokkos::Max<T>>(team, max);
  }

  /// p[j] = exp(p[j] - max) (0 for all when max is -inf: no key has weight)
  /// for the thread's own keys; returns their sum over the team. A NaN logit
  /// makes the sum NaN.
  KOKKOS_INLINE_FUNCTION static T exponentials(const Member& team, T max, int visible, T* p) {
    const bool empty = max == negative_infinity<T>();
    T sum = 0;
    for (int j = team.team_rank(); j < visible; j += team.team_size()) {
      const T e = empty ? T(0) : Impl::exp(p[j] - max);
      p[j] = e;
      sum += e;
    }
    sum = team_all<Kokkos::Sum<T>>(team, sum);
    team.team_barrier();  // weighted_latent reads every thread's keys
    return sum;
  }

  /// oa = sum_j p[j] latent row j / sum, a thread per latent column.
  KOKKOS_INLINE_FUNCTION void weighted_latent(const Member& team, const T* p, HeadRows<const T> lat,
                                              int visible, T sum, T* oa) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(rank)), [&](const int r) {
      T s = 0;
      for (int j = 0; j < visible; ++j) s += p[j] * lat.at(j, 0)[r];
      oa[r] = normalized(s, sum);
    });
    team.team_barrier();
  }

  /// out_row = oa . w (w: R rows of D), a thread per output column.
  KOKKOS_INLINE_FUNCTION void up_project(const Member& team, const T* oa, HeadRows<const T> w,
                                         T* out_row) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, int(dim)), [&](const int d) {
      T s = 0;
      for (std::int64_t r = 0; r < rank; ++r) s += oa[r] * w.at(r, 0)[d];
      out_row[d] = s;
    });
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
