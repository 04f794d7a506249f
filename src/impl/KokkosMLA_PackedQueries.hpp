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

namespace KokkosMLA {
namespace Impl {

/// Row copies between packed (total, width) and padded (B, Tq, width) arrays.
template <class T, class MemorySpace>
struct PackedRowCopy {
  Kokkos::View<const int*, Kokkos::LayoutRight, MemorySpace> offsets;  // (B + 1)
  std::int64_t queries = 0;                                            // Tq of the padded array
  std::int64_t width = 0;                                              // elements per row
  const T* from = nullptr;
  T* to = nullptr;
  bool to_padded = true;  // packed -> padded (zeros in the padding), else padded -> packed

  /// The packed row of padded row (b, i), or -1 for padding.
  KOKKOS_INLINE_FUNCTION std::int64_t packed_row(std::int64_t b, std::int64_t i) const {
    const std::int64_t first = offsets(b), count = std::int64_t(offsets(b + 1)) - first;
    const std::int64_t j = i - (queries - count);
    return j >= 0 ? first + j : -1;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t e) const {
    const std::int64_t padded = e / width, k = e % width;
    const std::int64_t row = packed_row(padded / queries, padded % queries);
    if (to_padded)
      to[e] = row >= 0 ? from[row * width + k] : T(0);
    else if (row >= 0)
      to[row * width + k] = from[e];
  }
};

template <class Scalar, class ExecSpace>
class PackedQueries {
 public:
  using arguments = CacheArguments<Scalar, typename ExecSpace::memory_space>;

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
    copy(exec, a, a.q.data(), q_.data(), row_width(q_), true);
    p.q = q_;
    if (a.q_rope.size() > 0) {
      copy(exec, a, a.q_rope.data(), q_rope_.data(), row_width(q_rope_), true);
      p.q_rope = q_rope_;
    }
    p.out = out_;
    p.lse = a.lse.size() > 0 ? lse_ : typename arguments::Lse();
    return p;
  }

  /// Copies the valid rows of the padded results into a's out and lse.
  void unpad(const ExecSpace& exec, const arguments& a) const {
    copy(exec, a, out_.data(), a.out.data(), row_width(out_), false);
    if (a.lse.size() > 0) copy(exec, a, lse_.data(), a.lse.data(), std::int64_t(lse_.extent(2)), false);
  }

  std::size_t bytes() const {
    return (q_.span() + q_rope_.span() + out_.span()) * sizeof(Scalar) +
           lse_.span() * sizeof(typename arguments::Lse::value_type);
  }

 private:
  using Rank4 = Kokkos::View<Scalar****, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
  Rank4 q_, q_rope_, out_;
  typename arguments::Lse lse_;

  static std::int64_t row_width(const Rank4& v) { return std::int64_t(v.extent(2) * v.extent(3)); }

  template <class T>
  void copy(const ExecSpace& exec, const arguments& a, const T* from, T* to, std::int64_t width,
            bool to_padded) const {
    PackedRowCopy<T, typename ExecSpace::memory_space> f;
    f.offsets = a.query_offsets;
    f.queries = std::int64_t(q_.extent(1));
    f.width = width;
    f.from = from;
    f.to = to;
    f.to_padded = to_padded;
    const std::int64_t elements = std::int64_t(q_.extent(0)) * f.queries * width;
    Kokkos::parallel_for(
        to_padded ? "KokkosMLA::CachePlan::pad_queries" : "KokkosMLA::CachePlan::unpad_results",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, elements), f);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
