#ifndef KOKKOSMLA_MERGEKERNEL_HPP
#define KOKKOSMLA_MERGEKERNEL_HPP
// merge_states: one thread per (batch, token, head) row, so that each row's
// weights are computed once and every element is read before the same thread
// writes it (which makes in-place accumulation safe). Attention sinks are the
// same merge with a part that has no value.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T>
struct MergeKernel {
  // Any strides. out and lse may be out_a / lse_a (or the b pair) themselves.
  StridedRows<const T> out_a, lse_a, out_b, lse_b;  // (B, T, H, dim), (B, T, H)
  StridedRows<T> out, lse;
  std::int64_t dim;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const T la = lse_a[row], lb = lse_b[row];
    LseMerge<T> merge;
    merge.see(la);
    merge.see(lb);
    const T wa = merge.add(la), wb = merge.add(lb);
    const T ca = merge.share(wa), cb = merge.share(wb);
    const T* const a = out_a.row(row / out.heads, row % out.heads);
    const T* const b = out_b.row(row / out.heads, row % out.heads);
    T* const o = out.row(row / out.heads, row % out.heads);
    for (std::int64_t j = 0; j < dim; ++j)
      o[j * out.column_stride] =
          side(la, ca, a[j * out_a.column_stride]) + side(lb, cb, b[j * out_b.column_stride]);
    lse[row] = merge.lse();
  }

  /// One side's term. A side with lse -inf holds no keys and may hold
  /// anything in its output, even NaN: it is left out. One with +inf (a row
  /// with no key, as attention reports it) holds 0, or NaN from non-finite
  /// inputs, which must reach the result: it adds 0 times its output.
  KOKKOS_INLINE_FUNCTION static T side(T lse_side, T share, T value) {
    if (lse_side == negative_infinity<T>()) return T(0);
    return lse_side == -negative_infinity<T>() ? T(0) * value : share * value;
  }
};

/// Attention sinks: each row merged with a part whose lse is its head's sink
/// and whose value is 0, so out shrinks by the row's share and lse grows to
/// log(exp(lse) + exp(sink)). A row with no key (lse +inf) keeps out 0, lse +inf.
template <class T, class C>
struct SinkKernel {
  HeadRows<T> out;  // (tokens, heads, dim)
  LseRows<C> lse;   // (tokens, heads)
  const C* sinks;   // (heads); row r is head r % heads
  std::int64_t heads, dim;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const C l = lse[row];
    if (l == -negative_infinity<C>()) return;
    const C sink = sinks[row % heads];
    LseMerge<C> merge;
    merge.see(l);
    merge.see(sink);
    const C w = merge.add(l);
    merge.add(sink);
    const C kept = merge.share(w);
    T* const o = out.at(row / heads, row % heads);
    for (std::int64_t j = 0; j < dim; ++j) o[j] = T(C(o[j]) * kept);
    lse[row] = merge.lse();
  }
};

template <class ExecSpace, class T, class C>
void add_sinks(const ExecSpace& exec, HeadRows<T> out, LseRows<C> lse, const C* sinks, std::int64_t rows,
               std::int64_t heads, std::int64_t dim) {
  Kokkos::parallel_for("KokkosMLA::CacheAttention::sinks",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows),
                       SinkKernel<T, C>{out, lse, sinks, heads, dim});
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
