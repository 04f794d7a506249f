#ifndef KOKKOSMLA_MERGEKERNEL_HPP
#define KOKKOSMLA_MERGEKERNEL_HPP
// merge_states: one thread per (batch, token, head) row, so that each row's
// weights are computed once and every element is read before the same thread
// writes it (which makes in-place accumulation safe).

#include "KokkosMLA_Compat.hpp"

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
    // An empty side may hold anything in its output (even NaN): copy the other
    // side instead of weighting it by zero. Both empty: no keys, lse = -inf.
    if (la == negative_infinity<T>() || lb == negative_infinity<T>()) {
      const bool take_b = la == negative_infinity<T>();
      const T* from = take_b ? out_b : out_a;
      const bool both_empty = take_b && lb == negative_infinity<T>();
      for (std::int64_t j = 0; j < dim; ++j) out[at + j] = both_empty ? T(0) : from[at + j];
      lse[row] = take_b ? lb : la;
      return;
    }
    const T m = max_of(la, lb);
    const T wa = Impl::exp(la - m), wb = Impl::exp(lb - m);
    const T sum = wa + wb;  // in [1, 2]: one of the weights is exp(0)
    const T ca = wa / sum, cb = wb / sum;
    for (std::int64_t j = 0; j < dim; ++j) out[at + j] = ca * out_a[at + j] + cb * out_b[at + j];
    lse[row] = m + Impl::log(sum);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
