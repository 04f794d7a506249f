#ifndef KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
#define KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
// The softmax between the two GEMMs of attention by GEMMs: a block of
// query rows' scores, S = Q K^T for every head (DecompressedGemm) or
// [q_abs, q_rope] [latent, k_rope]^T of every sequence (CacheGemm), becomes
// the probabilities P in place, and each row's lse is written.
// One team per row: the row (up to S keys) is read three times (its max, the
// exponentials and their sum, the division by the sum), the second and
// third time from cache, so the block costs one read and one write of memory.

#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// One row of scores (columns of them, the first `seen` visible; column j
/// at at(j)) becomes its probabilities in place, those it does not see 0
/// (every value of a row that sees nothing); returns the row's lse (-inf
/// where it sees nothing).
template <class Member, class T, class At>
KOKKOS_INLINE_FUNCTION T softmax_in_place(const Member& team, const At& at, std::int64_t seen,
                                          std::int64_t columns, T scale) {
  T max = negative_infinity<T>();
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, seen), [&](const std::int64_t j, T& m) { m = max_of(m, scale * at(j)); },
      Kokkos::Max<T>(max));
  T sum = 0;
  // Every computed column is written: those the row does not see become 0.
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, columns),
      [&](const std::int64_t j, T& partial) {
        const T p = j < seen ? Impl::exp(scale * at(j) - max) : T(0);
        at(j) = p;
        partial += p;
      },
      sum);
  const T inverse = T(1) / sum;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seen), [&](const std::int64_t j) { at(j) *= inverse; });
  return softmax_lse(max, sum);
}

template <class ExecSpace, class T>
struct RowSoftmaxKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  T* scores;                   // (heads, rows, columns), row-major
  LseRows<T> lse;              // (B, T, H) of the problem, or empty
  std::int64_t columns;        // keys the GEMM computed for the block (a row's visible ones and more)
  std::int64_t rows;           // query rows of the block, per head
  std::int64_t first_query;    // the block's first query t (of T)
  std::int64_t batch_index;    // the block's batch element b
  std::int64_t queries, keys;  // T and S of the problem
  std::int64_t heads;
  T scale;
  bool causal;
  int scratch_level = 0;  // none used; the launch helper asks for it

  std::int64_t league_size() const { return heads * rows; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t h = team.league_rank() / rows, r = team.league_rank() % rows;
    const std::int64_t t = first_query + r;
    // Causal: query t sees keys up to S - T + t (the keys end where the queries do).
    const std::int64_t seen = causal ? min_of(columns, keys - queries + t + 1) : columns;
    T* const row = scores + (h * rows + r) * columns;
    const T lse_row = softmax_in_place(
        team, [=](std::int64_t j) -> T& { return row[j]; }, seen, columns, scale);
    if (lse) Kokkos::single(Kokkos::PerTeam(team), [&]() { lse.at(batch_index * queries + t, h) = lse_row; });
  }
};

/// The rows of CacheGemm's scores: per sequence b of a chunk, Tq x H rows
/// (t, h) over its keys, in parts of `part` keys: part j of every row of b
/// together, (sequences, parts, Tq x H, part) row-major. Query t of b sits at
/// position seqlens(b) - Tq + t; a row that sees no key (an idle slot) gets
/// P = 0 and lse +inf.
template <class ExecSpace, class T>
struct CacheSoftmaxKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  T* scores;
  LseRows<T> lse;               // (B, Tq, H) of the problem, or empty
  const int* seqlens;           // (B) keys each sequence holds
  std::int64_t first_sequence;  // the chunk's first sequence b
  std::int64_t sequences;       // in the chunk
  std::int64_t queries, heads;
  std::int64_t part, parts;  // keys of a part, parts of a row (part x parts >= capacity)
  std::int64_t capacity;
  T scale;
  bool causal;
  int scratch_level = 0;  // none used; the launch helper asks for it

  std::int64_t league_size() const { return sequences * queries * heads; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t rows = queries * heads, i = team.league_rank();
    const std::int64_t b = i / rows, r = i % rows, t = r / heads, h = r % heads;
    const std::int64_t length = seqlens[first_sequence + b];
    const std::int64_t seen =
        max_of(std::int64_t(0), min_of(capacity, causal ? length - queries + t + 1 : length));
    T* const row = scores + (b * parts * rows + r) * part;  // its first part
    // Key j in part j / part; positions are below 2^30 (validated): 32-bit division is enough.
    const int size = int(part);
    const std::int64_t stride = rows * part;  // one part to the next
    const auto at = [=](std::int64_t j) -> T& { return row[(int(j) / size) * stride + int(j) % size]; };
    const T lse_row = softmax_in_place(team, at, seen, parts * part, scale);
    if (lse)
      Kokkos::single(Kokkos::PerTeam(team),
                     [&]() { lse.at((first_sequence + b) * queries + t, h) = reported_lse(lse_row); });
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
