#ifndef KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
#define KOKKOSMLA_ROWSOFTMAXKERNEL_HPP
// The softmax between the two GEMMs of attention by GEMMs: a block of
// query rows' scores, S = Q K^T for every head (DecompressedGemm) or
// [q_abs, q_rope] [latent, k_rope]^T of every sequence (CacheGemm), becomes
// the probabilities P in place, and each row's lse is written.
// One team per row, two passes: the first reads the row once for its max
// and the sum of its exponentials together (online, as the flash kernels
// keep them), the second reads it again, from cache, and writes P. Each
// thread has kLoadsInFlight loads in flight a pass (a plain TeamThreadRange
// loop has one, and three passes of those moved the scores at about 1 TB/s
// on the H200), or kVectorsInFlight 16-byte vectors where the row's
// segments are whole aligned vectors (4-10 % off the fp32 prefills on an
// H100 against single values).

#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// Values of a row a thread of the softmax loads before it uses any, and
/// 16-byte vectors where the row is whole vectors (floats: 16 values).
constexpr int kLoadsInFlight = 8;
constexpr int kVectorsInFlight = 4;

/// CacheSoftmaxKernel's launch bounds: teams of at most 128 threads, eight
/// of them an SM, so at most 64 registers a thread. Unbounded, the compiler
/// took 96 there, and an H100 SM held a third of the warps it can; bounded,
/// the kernel took 150 us where it took 205. RowSoftmaxKernel (one segment a
/// row) runs unbounded: it took 56 registers, and bounded, 64 and longer.
using CacheSoftmaxBounds = Kokkos::LaunchBounds<128, 8>;

/// 16 bytes of a row, loaded and stored as one vector.
template <class T>
struct alignas(16) Vector16 {
  static constexpr int kValues = int(16 / sizeof(T));
  T v[kValues];
};

/// Whether n values of T are whole 16-byte vectors.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr bool whole_vectors(std::int64_t n) {
  return n % Vector16<T>::kValues == 0;
}

/// Threads of a softmax team for rows of `columns` (`vectors`: read by
/// 16-byte vectors, in_vectors): from one warp, doubled while a thread would
/// hold more than one group of values a pass (kLoadsInFlight values, or
/// kVectorsInFlight vectors), up to `most`. Short rows in large teams spend
/// their time in the team's reductions (on an H100, 16384 rows of 256
/// columns took 84 us in teams of 128 threads, a fifth of the copy rate),
/// and a group's masked values still cost their arithmetic.
template <class T>
int softmax_team_size(std::int64_t columns, bool vectors, int most) {
  const std::int64_t group = vectors ? kVectorsInFlight * Vector16<T>::kValues : kLoadsInFlight;
  int threads = 32;
  while (threads < most && threads * group < columns) threads *= 2;
  return threads < most ? threads : most;
}

/// A row of scores stored in equal segments: column j at
/// first[(j / length) * stride + j % length]. DecompressedGemm's rows are one
/// segment; CacheGemm's are split into key parts. A segment's columns count
/// in int: a block of scores is at most 1 GiB.
template <class T>
struct SegmentedRow {
  T* first;
  std::int64_t length;    // columns of a segment, contiguous
  std::int64_t stride;    // elements from one segment to the next
  std::int64_t segments;  // length x segments columns in all

  KOKKOS_INLINE_FUNCTION T* segment(std::int64_t i) const { return first + i * stride; }
  /// Columns of segment i among the first `columns` of the row.
  KOKKOS_INLINE_FUNCTION int held(std::int64_t i, std::int64_t columns) const {
    return int(max_of(std::int64_t(0), min_of(length, columns - i * length)));
  }
};

/// Whether every segment of a row is whole 16-byte vectors at 16-byte
/// boundaries, so that the softmax may load and store vectors.
template <class T>
KOKKOS_INLINE_FUNCTION bool in_vectors(const SegmentedRow<T>& row) {
  return reinterpret_cast<std::uintptr_t>(row.first) % 16 == 0 && whole_vectors<T>(row.length) &&
         whole_vectors<T>(row.stride);
}

/// Calls f(v, column) for each group of the thread's values among
/// data[0, count): v[u] (an array) holds column column(u), 0 past the
/// row's end; the loads of a group are issued together. With `vectors`
/// (in_vectors) 16 bytes a load, kVectorsInFlight loads a group, the vector
/// that holds the count's last column whole (its columns from count on
/// included); else one value a load, kLoadsInFlight a group. With `Write`,
/// v is stored back where it was loaded (every loaded vector; or the values
/// of columns below count).
template <bool Write, class Member, class T, class F>
KOKKOS_INLINE_FUNCTION void for_each_group(const Member& team, T* data, int count, bool vectors, const F& f) {
  const int n = team.team_size();
  if (vectors) {
    using V = Vector16<T>;
    constexpr int W = V::kValues, size = kVectorsInFlight * W;
    V* const at = reinterpret_cast<V*>(data);
    const int whole = (count + W - 1) / W;  // vectors holding columns below count
    for (int first = team.team_rank(); first < whole; first += kVectorsInFlight * n) {
      V x[kVectorsInFlight];
      KOKKOSMLA_UNROLL
      for (int u = 0; u < kVectorsInFlight; ++u) x[u] = first + u * n < whole ? at[first + u * n] : V{};
      T v[size];
      KOKKOSMLA_UNROLL
      for (int u = 0; u < size; ++u) v[u] = x[u / W].v[u % W];
      f(v, [&](int u) { return W * (first + u / W * n) + u % W; });
      if constexpr (Write) {
        KOKKOSMLA_UNROLL
        for (int u = 0; u < kVectorsInFlight; ++u) {
          KOKKOSMLA_UNROLL
          for (int e = 0; e < W; ++e) x[u].v[e] = v[u * W + e];
          if (first + u * n < whole) at[first + u * n] = x[u];
        }
      }
    }
    return;
  }
  for (int first = team.team_rank(); first < count; first += kLoadsInFlight * n) {
    T* const at = data + first;
    T v[kLoadsInFlight];
    KOKKOSMLA_UNROLL
    for (int u = 0; u < kLoadsInFlight; ++u) v[u] = first + u * n < count ? at[u * n] : T(0);
    f(v, [&](int u) { return first + u * n; });
    if constexpr (Write) {
      KOKKOSMLA_UNROLL
      for (int u = 0; u < kLoadsInFlight; ++u)
        if (first + u * n < count) at[u * n] = v[u];
    }
  }
}

/// One row of scores (the first `seen` columns visible) becomes its
/// probabilities in place, the columns it does not see 0 (every column of a
/// row that sees nothing); returns the row's lse (-inf where it sees nothing).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION T softmax_in_place(const Member& team, const SegmentedRow<T>& row, std::int64_t seen,
                                          T scale) {
  const bool vectors = in_vectors(row);
  // This thread's max and sum of exp(logit - max) over its visible columns.
  T max = negative_infinity<T>(), sum = 0;
  for (std::int64_t i = 0; i < row.segments; ++i) {
    const int count = row.held(i, seen);
    for_each_group<false>(team, row.segment(i), count, vectors, [&](auto& v, auto column) {
      constexpr int size = int(sizeof(v) / sizeof(v[0]));
      T group_max = max;
      KOKKOSMLA_UNROLL
      for (int u = 0; u < size; ++u)
        if (column(u) < count) group_max = max_of(group_max, scale * v[u]);
      sum *= softmax_rescale(max, group_max);
      max = group_max;
      KOKKOSMLA_UNROLL
      for (int u = 0; u < size; ++u)
        if (column(u) < count) sum += Impl::exp(scale * v[u] - max);
    });
  }
  T row_max = max;
  team.team_reduce(Kokkos::Max<T>(row_max));
  T row_sum = sum == T(0) ? T(0) : sum * softmax_rescale(max, row_max);
  team.team_reduce(Kokkos::Sum<T>(row_sum));
  const T inverse = T(1) / row_sum;
  // Every column is written: those the row does not see become 0.
  for (std::int64_t i = 0; i < row.segments; ++i) {
    T* const data = row.segment(i);
    const int visible = row.held(i, seen);
    for_each_group<true>(team, data, visible, vectors, [&](auto& v, auto column) {
      constexpr int size = int(sizeof(v) / sizeof(v[0]));
      KOKKOSMLA_UNROLL
      for (int u = 0; u < size; ++u)
        v[u] = column(u) < visible ? Impl::exp(scale * v[u] - row_max) * inverse : T(0);
    });
    // By vectors, the loop above wrote the rest of the last one it loaded.
    constexpr int W = Vector16<T>::kValues;
    const int written = vectors ? (visible + W - 1) / W * W : visible;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, written, int(row.length)),
                         [&](int j) { data[j] = T(0); });
  }
  return softmax_lse(row_max, row_sum);
}

template <class ExecSpace, class T>
struct RowSoftmaxKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  T* scores;                   // (batches, heads, rows, columns), row-major
  LseRows<T> lse;              // (B, T, H) of the problem, or empty
  std::int64_t columns;        // keys the GEMM computed for the block (a row's visible ones and more)
  std::int64_t rows;           // query rows of the block, per batch element and head
  std::int64_t first_query;    // the block's first query t (of T)
  std::int64_t first_batch;    // the block's first batch element b
  std::int64_t batches;        // batch elements of the block
  std::int64_t queries, keys;  // T and S of the problem
  std::int64_t heads;
  T scale;
  bool causal;
  int scratch_level = 0;  // none used; the launch helper asks for it

  std::int64_t league_size() const { return batches * heads * rows; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    // In 32 bits (a block's rows number below 2^28), and with one batch
    // element (the matrix is the head) no second division: on the H200 two
    // 64-bit divisions cost the (1,4096,16,128,512) prefill 3 %.
    const int rank = team.league_rank(), per_matrix = int(rows), matrix = rank / per_matrix;
    const int r = rank % per_matrix, h = batches > 1 ? matrix % int(heads) : matrix;
    const std::int64_t b = first_batch + (batches > 1 ? matrix / int(heads) : 0), t = first_query + r;
    // Causal: query t sees keys up to S - T + t (the keys end where the queries do).
    const std::int64_t seen = causal ? min_of(columns, keys - queries + t + 1) : columns;
    const SegmentedRow<T> row{scores + (std::int64_t(matrix) * rows + r) * columns, columns, columns, 1};
    const T lse_row = softmax_in_place(team, row, seen, scale);
    if (lse) Kokkos::single(Kokkos::PerTeam(team), [&]() { lse.at(b * queries + t, h) = lse_row; });
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
    // Key j in part j / part, the parts rows x part apart.
    const SegmentedRow<T> row{scores + (b * parts * rows + r) * part, part, rows * part, parts};
    const T lse_row = softmax_in_place(team, row, seen, scale);
    if (lse)
      Kokkos::single(Kokkos::PerTeam(team),
                     [&]() { lse.at((first_sequence + b) * queries + t, h) = reported_lse(lse_row); });
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
