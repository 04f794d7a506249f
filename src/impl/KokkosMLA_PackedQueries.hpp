#ifndef KOKKOSMLA_PACKEDQUERIES_HPP
#define KOKKOSMLA_PACKEDQUERIES_HPP
// Variable query counts (CacheArguments::query_offsets): a CachePlan made for
// packed queries pads each sequence's queries to the plan's Tq, right-aligned
// (sequence b's n_b queries become rows Tq - n_b .. Tq - 1, so query j still
// sits at position seqlens(b) - n_b + j), runs its path on the padded
// arguments, and copies the valid rows of out and lse back into the packed
// ones. The leading padding rows are zero queries whose results are dropped:
// the cost is that of Tq queries per sequence, which suits speculative
// decoding's few drafts; every path takes packed queries this way.

#include <KokkosMLA_Cache.hpp>

#include "KokkosMLA_HeadRows.hpp"

namespace KokkosMLA {
namespace Impl {

/// Row copies between packed (total, heads, head_width) rows, which may be
/// strided (HeadRows), and padded (B, Tq, heads, head_width) row-major arrays.
template <class T, class MemorySpace>
struct PackedRowCopy {
  Kokkos::View<const int*, Kokkos::LayoutRight, MemorySpace> offsets;  // (B + 1)
  std::int64_t queries = 0;                                            // Tq of the padded array
  std::int64_t heads = 0, head_width = 0;
  HeadRows<T> packed;
  T* padded = nullptr;
  bool to_padded = true;  // packed -> padded (zeros in the padding), else padded -> packed

  /// The packed row of padded row (b, i), or -1 for padding.
  KOKKOS_INLINE_FUNCTION std::int64_t packed_row(std::int64_t b, std::int64_t i) const {
    const std::int64_t first = offsets(b), count = std::int64_t(offsets(b + 1)) - first;
    const std::int64_t j = i - (queries - count);
    return j >= 0 ? first + j : -1;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t e) const {
    const std::int64_t width = heads * head_width, padded_row = e / width, k = e % width;
    const std::int64_t row = packed_row(padded_row / queries, padded_row % queries);
    T* const at = row >= 0 ? packed.at(row, k / head_width) + k % head_width : nullptr;
    if (to_padded)
      padded[e] = at ? *at : T(0);
    else if (at)
      *at = padded[e];
  }
};

template <class Scalar, class ExecSpace>
class PackedQueries {
 public:
  using arguments = CacheArguments<Scalar, typename ExecSpace::memory_space, Kokkos::LayoutStride>;

  /// Padded buffers for `shape` (packed_queries, queries = the most per sequence).
  explicit PackedQueries(const CacheShape& s)
      : q_("KokkosMLA::CachePlan::padded_q", s.batch, s.queries, s.heads, s.head_dim),
        out_("KokkosMLA::CachePlan::padded_out", s.batch, s.queries, s.heads, s.head_dim),
        lse_("KokkosMLA::CachePlan::padded_lse", s.batch, s.queries, s.heads) {
    if (s.rope_dim > 0)
      q_rope_ = Rank4("KokkosMLA::CachePlan::padded_q_rope", s.batch, s.queries, s.heads, s.rope_dim);
  }

  /// a with its queries copied into the padded buffers (the results go there too).
  arguments padded(const ExecSpace& exec, const arguments& a) const {
    arguments p = a;
    p.query_offsets = {};
    copy(exec, a, as_mutable(head_rows(a.q)), q_, true);
    p.q = q_;
    if (a.q_rope.size() > 0) {
      copy(exec, a, as_mutable(head_rows(a.q_rope)), q_rope_, true);
      p.q_rope = q_rope_;
    }
    p.out = out_;
    p.lse = {};
    if (a.lse.size() > 0) p.lse = lse_;
    return p;
  }

  /// Copies the valid rows of the padded results into a's out and lse.
  void unpad(const ExecSpace& exec, const arguments& a) const {
    copy(exec, a, head_rows(a.out), out_, false);
    if (a.lse.size() > 0) {
      const HeadRows<typename arguments::Lse::value_type> lse = {a.lse.data(), std::int64_t(a.lse.stride(1)),
                                                                 std::int64_t(a.lse.stride(2))};
      copy(exec, a, lse, lse_, false);
    }
  }

  std::size_t bytes() const {
    return (q_.span() + q_rope_.span() + out_.span()) * sizeof(Scalar) +
           lse_.span() * sizeof(typename arguments::Lse::value_type);
  }

 private:
  using Rank4 = Kokkos::View<Scalar****, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
  Rank4 q_, q_rope_, out_;
  Kokkos::View<compute_type<Scalar>***, Kokkos::LayoutRight, typename ExecSpace::memory_space> lse_;

  /// Between packed rows and padded (B, Tq, H, width) or (B, Tq, H) buffers.
  template <class T, class Padded>
  void copy(const ExecSpace& exec, const arguments& a, HeadRows<T> packed, const Padded& padded,
            bool to_padded) const {
    PackedRowCopy<T, typename ExecSpace::memory_space> f;
    f.offsets = a.query_offsets;
    f.queries = std::int64_t(q_.extent(1));
    f.heads = std::int64_t(padded.extent(2));
    f.head_width = int(Padded::rank) == 4 ? std::int64_t(padded.extent(3)) : 1;
    f.packed = packed;
    f.padded = padded.data();
    f.to_padded = to_padded;
    const std::int64_t elements = std::int64_t(q_.extent(0)) * f.queries * f.heads * f.head_width;
    Kokkos::parallel_for(
        to_padded ? "KokkosMLA::CachePlan::pad_queries" : "KokkosMLA::CachePlan::unpad_results",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, elements), f);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
