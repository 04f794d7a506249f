#ifndef KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
#define KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
// The softmax between the two GEMMs of attention by GEMMs
// (DecompressedGemm): a block of query rows' scores, S = Q K^T for every
// head, becomes the probabilities P in place, and each row's lse is written.
// One team per row: the row (up to S keys) is read three times (its max, the
// exponentials and their sum, the division by the sum), the second and
// third time from cache, so the block costs one read and one write of memory.

#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T>
struct RowSoftmaxKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  T* scores;                     // (heads, rows, columns), row-major
  T* lse;                        // (B, T, H) of the problem, or null
  std::int64_t columns;          // keys the GEMM computed for the block (a row's visible ones and more)
  std::int64_t rows;             // query rows of the block, per head
  std::int64_t first_query;      // the block's first query t (of T)
  std::int64_t batch_index;      // the block's batch element b
  std::int64_t queries, keys;    // T and S of the problem
  std::int64_t heads;
  T scale;
  bool causal;
  int scratch_level = 0;         // none used; the launch helper asks for it

  std::int64_t league_size() const { return heads * rows; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t h = team.league_rank() / rows, r = team.league_rank() % rows;
    const std::int64_t t = first_query + r;
    // Causal: query t sees keys up to S - T + t (the keys end where the queries do).
    const std::int64_t seen = causal ? min_of(columns, keys - queries + t + 1) : columns;
    T* const row = scores + (h * rows + r) * columns;
    const T s = scale;

    T max = negative_infinity<T>();
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, seen), [&](const std::int64_t j, T& m) { m = max_of(m, s * row[j]); },
        Kokkos::Max<T>(max));
    T sum = 0;
    // Every computed column is written: those a causal row does not see become 0.
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, columns),
        [&](const std::int64_t j, T& partial) {
          const T p = j < seen ? Impl::exp(s * row[j] - max) : T(0);
          row[j] = p;
          partial += p;
        },
        sum);
    const T inverse = T(1) / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seen), [&](const std::int64_t j) { row[j] *= inverse; });
    if (lse)
      Kokkos::single(Kokkos::PerTeam(team),
                     [&]() { lse[((batch_index * queries) + t) * heads + h] = softmax_lse(max, sum); });
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
