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
    // An empty side (weight 0) may hold anything in its output, even NaN: it
    // is left out, not multiplied by zero. Both empty: no keys, out 0, lse -inf.
    const T ca = wa / merge.total, cb = wb / merge.total;
    for (std::int64_t j = 0; j < dim; ++j)
      out[at + j] = (wa > T(0) ? ca * out_a[at + j] : T(0)) + (wb > T(0) ? cb * out_b[at + j] : T(0));
    lse[row] = merge.lse();
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
