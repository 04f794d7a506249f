#ifndef KOKKOSMLA_MERGEKERNEL_HPP
#define KOKKOSMLA_MERGEKERNEL_HPP
// merge_states: one thread per (batch, token, head) row, so that each row's
// weights are computed once and every element is read before the same thread
// writes it (which makes in-place accumulation safe).

#include "KokkosMLA_OnlineSoftmax.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T>
struct MergeKernel {
  // Not restrict: out and lse may be out_a / lse_a (or the b pair).
  const T* out_a;  // (rows, dim)
  const T* lse_a;  // (rows)
  const T* out_b;
  const T* lse_b;
  T* out;
  T* lse;
  std::int64_t dim;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const T la = lse_a[row], lb = lse_b[row];
    const std::int64_t at = row * dim;
    LseMerge<T> merge;
    merge.see(la);
    merge.see(lb);
    const T wa = merge.add(la), wb = merge.add(lb);
    const T ca = merge.share(wa), cb = merge.share(wb);
    for (std::int64_t j = 0; j < dim; ++j)
      out[at + j] = side(la, ca, out_a[at + j]) + side(lb, cb, out_b[at + j]);
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

}  // namespace Impl
}  // namespace KokkosMLA

#endif
