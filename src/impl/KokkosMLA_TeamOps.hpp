#ifndef KOKKOSMLA_TEAMOPS_HPP
#define KOKKOSMLA_TEAMOPS_HPP
// Team-level building blocks shared by every attention kernel: a register-
// blocked matrix product on tiles, the online-softmax row update, and tile
// copies. All take raw pointers with leading dimensions so that one routine
// serves scratch and global memory alike, and all work for any team size
// (Serial's is 1) and any tile extents.

#include "KokkosMLA_Backend.hpp"
#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// A row-major matrix: element (i, j) at ptr[i * ld + j].
template <class T>
struct Mat {
  T* ptr;
  std::int64_t ld;
  KOKKOS_INLINE_FUNCTION T& operator()(int i, int j) const { return ptr[i * ld + j]; }
};

/// Read B(k, j) from a row-major K x N matrix.
template <class T>
struct PlainB {
  const T* ptr;
  std::int64_t ld;
  KOKKOS_INLINE_FUNCTION T operator()(int k, int j) const { return ptr[k * ld + j]; }
};

/// Read B(k, j) from a row-major N x K matrix (B is its transpose).
template <class T>
struct TransposedB {
  const T* ptr;
  std::int64_t ld;
  KOKKOS_INLINE_FUNCTION T operator()(int k, int j) const { return ptr[j * ld + k]; }
};

/// C(i, j) = (accumulate ? row_scale[i] * C(i, j) : 0) + alpha * sum_k A(i, k) B(k, j)
/// for an M x N block, split among the team's threads in MR x NR register blocks.
/// A thread owns rows ti + m * mt and columns tj + n * nt (strided, not
/// contiguous) so that neighbouring threads touch neighbouring rows/columns:
/// that keeps scratch accesses free of bank conflicts. row_scale may be null.
template <int MR, int NR, class Member, class T, class BAccess>
KOKKOS_INLINE_FUNCTION void team_gemm_blocked(const Member& team, int M, int N, int K, T alpha,
                                              Mat<const T> A, BAccess B, Mat<T> C, const T* row_scale,
                                              bool accumulate) {
  const int mt = (M + MR - 1) / MR;
  const int nt = (N + NR - 1) / NR;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mt * nt), [&](const int tile) {
    const int ti = tile / nt;
    const int tj = tile % nt;
    int rows[MR], cols[NR];
    // Out-of-range rows/columns read a valid element and are never stored.
    for (int m = 0; m < MR; ++m) rows[m] = min_of(ti + m * mt, M - 1);
    for (int n = 0; n < NR; ++n) cols[n] = min_of(tj + n * nt, N - 1);
    T acc[MR][NR] = {};
    for (int k = 0; k < K; ++k) {
      T a[MR], b[NR];
      for (int m = 0; m < MR; ++m) a[m] = A(rows[m], k);
      for (int n = 0; n < NR; ++n) b[n] = B(k, cols[n]);
      for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n) acc[m][n] += a[m] * b[n];
    }
    for (int m = 0; m < MR; ++m) {
      const int i = ti + m * mt;
      if (i >= M) break;
      const T keep = accumulate ? (row_scale ? row_scale[i] : T(1)) : T(0);
      for (int n = 0; n < NR; ++n) {
        const int j = tj + n * nt;
        if (j >= N) break;
        C(i, j) = (accumulate ? keep * C(i, j) : T(0)) + alpha * acc[m][n];
      }
    }
  });
}

/// The team product with the largest register block (4x4, 2x2 or 1x1) that
/// still gives every thread of the team work. Ends with a team barrier.
template <class Member, class T, class BAccess>
KOKKOS_INLINE_FUNCTION void team_gemm(const Member& team, int M, int N, int K, T alpha, Mat<const T> A,
                                      BAccess B, Mat<T> C, const T* row_scale, bool accumulate) {
  const int threads = team.team_size();
  if (((M + 3) / 4) * ((N + 3) / 4) >= threads)
    team_gemm_blocked<4, 4>(team, M, N, K, alpha, A, B, C, row_scale, accumulate);
  else if (((M + 1) / 2) * ((N + 1) / 2) >= threads)
    team_gemm_blocked<2, 2>(team, M, N, K, alpha, A, B, C, row_scale, accumulate);
  else
    team_gemm_blocked<1, 1>(team, M, N, K, alpha, A, B, C, row_scale, accumulate);
  team.team_barrier();
}

/// The same product for few outputs and a long inner dimension (decoding's
/// scores: a few head rows against a few keys, over R): when the 2x2 output
/// blocks leave threads idle, each block gets a group of threads that split K
/// (neighbours take neighbouring k, so scratch reads stay conflict-free), and
/// one thread per output sums the group's partial sums. partial holds
/// 4 * team_size values. accumulate adds to C (no row scale). Ends with a barrier.
template <class Member, class T, class BAccess>
KOKKOS_INLINE_FUNCTION void team_gemm_long_k(const Member& team, int M, int N, int K, T alpha, Mat<const T> A,
                                             BAccess B, Mat<T> C, bool accumulate, T* partial) {
  const int mb = (M + 1) / 2, nb = (N + 1) / 2, blocks = mb * nb, threads = team.team_size();
  int group = 1;
  while (blocks * group * 2 <= threads && group * 2 <= K) group *= 2;
  if (group == 1) {
    team_gemm(team, M, N, K, alpha, A, B, C, static_cast<const T*>(nullptr), accumulate);
    return;
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, blocks * group), [&](const int e) {
    const int blk = e / group, i0 = 2 * (blk / nb), j0 = 2 * (blk % nb);
    // An odd last row or column repeats its neighbour; its sums are never read.
    const int i1 = min_of(i0 + 1, M - 1), j1 = min_of(j0 + 1, N - 1);
    T c00 = 0, c01 = 0, c10 = 0, c11 = 0;
    for (int k = e % group; k < K; k += group) {
      const T a0 = A(i0, k), a1 = A(i1, k), b0 = B(k, j0), b1 = B(k, j1);
      c00 += a0 * b0;
      c01 += a0 * b1;
      c10 += a1 * b0;
      c11 += a1 * b1;
    }
    T* out = partial + 4 * e;
    out[0] = c00;
    out[1] = c01;
    out[2] = c10;
    out[3] = c11;
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, M * N), [&](const int o) {
    const int i = o / N, j = o % N, blk = (i / 2) * nb + j / 2, sub = 2 * (i % 2) + j % 2;
    T sum = 0;
    for (int g = 0; g < group; ++g) sum += partial[4 * (blk * group + g) + sub];
    C(i, j) = (accumulate ? C(i, j) : T(0)) + alpha * sum;
  });
  team.team_barrier();
}

/// Copies a rows x cols block read through from(i, j) (a matrix, or rows
/// gathered from the pages of a cache); ends with a team barrier.
template <class Member, class From, class T>
KOKKOS_INLINE_FUNCTION void team_gather(const Member& team, int rows, int cols, From from, Mat<T> to) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * cols), [&](const int e) {
    const int i = e / cols, j = e % cols;
    to(i, j) = from(i, j);
  });
  team.team_barrier();
}

/// The same copy with each thread taking Batch elements `groups` apart
/// (neighbouring threads, neighbouring elements) and loading them all before
/// it stores any: where the compiler cannot tell the destination from the
/// source, it keeps each load behind the previous store, and element by
/// element a thread then waits for memory once an element.
template <int Batch, class Member, class T>
KOKKOS_INLINE_FUNCTION void team_copy_in_batches(const Member& team, int rows, int cols, Mat<const T> from,
                                                 Mat<T> to) {
  const int n = rows * cols, groups = (n + Batch - 1) / Batch;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const int g) {
    T v[Batch] = {};
    KOKKOSMLA_UNROLL
    for (int u = 0; u < Batch; ++u) {
      const int e = g + u * groups;
      if (e < n) v[u] = from(e / cols, e % cols);
    }
    KOKKOSMLA_UNROLL
    for (int u = 0; u < Batch; ++u) {
      const int e = g + u * groups;
      if (e < n) to(e / cols, e % cols) = v[u];
    }
  });
  team.team_barrier();
}

/// Copies a rows x cols block; ends with a team barrier.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void team_copy(const Member& team, int rows, int cols, Mat<const T> from, Mat<T> to) {
  team_gather(team, rows, cols, from, to);
}

/// Online-softmax state of the rows of a team: running max, running sum, and
/// the factor by which the previous accumulator must be rescaled.
template <class T>
struct SoftmaxRows {
  T* max;
  T* sum;
  T* rescale;
};

template <class Member, class T>
KOKKOS_INLINE_FUNCTION void softmax_init(const Member& team, int rows, SoftmaxRows<T> st) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
    st.max[i] = negative_infinity<T>();
    st.sum[i] = T(0);
  });
  team.team_barrier();
}

/// Turns scaled logits P (rows x keys) into unnormalised probabilities
/// relative to the updated running max, masking keys past each row's causal
/// limit: row i may see key positions <= row_last_key(i). Ends with a barrier.
template <class Member, class T, class LastKey>
KOKKOS_INLINE_FUNCTION void softmax_update(const Member& team, int rows, int keys, std::int64_t first_key,
                                           LastKey row_last_key, Mat<T> P, SoftmaxRows<T> st) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
    const std::int64_t last = row_last_key(i);
    const int visible = int(max_of(std::int64_t(0), min_of(std::int64_t(keys), last - first_key + 1)));
    T tile_max = negative_infinity<T>();
    for (int j = 0; j < visible; ++j) tile_max = running_max(tile_max, P(i, j));
    const T old_max = st.max[i];
    const T new_max = running_max(old_max, tile_max);
    // A row that has seen no key yet keeps max = -inf; avoid exp(-inf - -inf).
    const bool empty = new_max == negative_infinity<T>();
    T sum = 0;
    for (int j = 0; j < keys; ++j) {
      const T p = (j < visible && !empty) ? Impl::exp(P(i, j) - new_max) : T(0);
      P(i, j) = p;
      sum += p;
    }
    const T rescale = softmax_rescale(old_max, new_max);
    st.rescale[i] = rescale;
    st.sum[i] = st.sum[i] * rescale + sum;
    st.max[i] = new_max;
  });
  team.team_barrier();
}

/// O(i, :) /= sum[i] (0 for a row that saw no key); ends with a barrier.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void softmax_normalize(const Member& team, int rows, int cols, Mat<T> O,
                                              SoftmaxRows<T> st) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * cols), [&](const int e) {
    const int i = e / cols, j = e % cols;
    O(i, j) = normalized(O(i, j), st.sum[i]);
  });
  team.team_barrier();
}

/// lse_of(i) = max[i] + log(sum[i]), the log of the row's softmax denominator
/// in unshifted terms, which is what merging partial results over disjoint key
/// sets needs. Read it after softmax_normalize and before the state is reused.
/// A row that saw no key gets -inf, or +inf where the lse is reported to the
/// caller (reported_lse). Ends with a barrier.
template <class Member, class T, class LseOf>
KOKKOS_INLINE_FUNCTION void softmax_log_sum_exp(const Member& team, int rows, SoftmaxRows<T> st, LseOf lse_of,
                                                bool reported = false) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
    const T lse = softmax_lse(st.max[i], st.sum[i]);
    lse_of(i) = reported ? reported_lse(lse) : lse;
  });
  team.team_barrier();
}

/// Lays out one team's scratch as consecutive arrays, each aligned to 16
/// bytes: the same offsets size the buffer on the host and carve it on the device.
template <class T>
struct ScratchLayout {
  std::size_t used = 0;
  KOKKOS_INLINE_FUNCTION std::size_t take(std::size_t n) {
    constexpr std::size_t per16 = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const std::size_t at = used;
    used += (n + per16 - 1) / per16 * per16;
    return at;
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
