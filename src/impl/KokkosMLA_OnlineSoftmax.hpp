#ifndef KOKKOSMLA_ONLINESOFTMAX_HPP
#define KOKKOSMLA_ONLINESOFTMAX_HPP
// The numerically delicate pieces of the attention kernels, in one place: the
// online-softmax rescale of a row's accumulators when its running max moves,
// the row's log-sum-exp, and the merge of partial results over disjoint key
// sets by their log-sum-exp (split-KV combines and merge_states). The
// tensor-core kernels keep the same state in registers in log2 units.

#include "KokkosMLA_Compat.hpp"

namespace KokkosMLA {
namespace Impl {

/// Factor by which a row's sum and accumulators are rescaled when its running
/// max moves from old_max to new_max; 1 while the row has seen no key (both
/// -inf: exp(-inf - -inf) would be NaN).
template <class T>
KOKKOS_INLINE_FUNCTION T softmax_rescale(T old_max, T new_max) {
  return new_max == negative_infinity<T>() ? T(1) : Impl::exp(old_max - new_max);
}

/// The natural log of a row's softmax denominator in unshifted terms, from
/// its running max and sum; -inf for a row that saw no key, NaN for one
/// whose sum is NaN (a max that passed over NaN logits may still be -inf).
template <class T>
KOKKOS_INLINE_FUNCTION T softmax_lse(T max, T sum) {
  return max == negative_infinity<T>() && sum == sum ? max : max + Impl::log(sum);
}

/// The lse a caller sees for a row with no key: +inf (FlashMLA's convention),
/// its out being 0. Inside the library (split parts) such a row's lse is -inf.
template <class T>
KOKKOS_INLINE_FUNCTION T reported_lse(T lse) {
  return lse == negative_infinity<T>() ? -negative_infinity<T>() : lse;
}

/// out / sum, or 0 for a row with no key (sum 0; a NaN sum stays NaN).
template <class T>
KOKKOS_INLINE_FUNCTION T normalized(T out, T sum) {
  return sum == T(0) ? T(0) : out / sum;
}

/// The running max of a row's logits, NaN once a logit is NaN: a row with
/// a NaN logit must not pass for a row that saw no key (out 0).
template <class T>
KOKKOS_INLINE_FUNCTION T running_max(T max, T logit) {
  return logit != logit ? logit : max_of(max, logit);
}

/// Merges the parts of one row by their log-sum-exp: part p's result gets
/// weight(lse_p) / total. Feed every part's lse to see() first, then to add().
/// A part with no key (lse -inf inside the library, +inf as reported) weighs
/// 0: callers leave a -inf part's result out, whatever it holds, and add a
/// reported empty part's (0, or NaN from non-finite inputs) times 0. A NaN lse
/// makes the total NaN.
template <class T>
struct LseMerge {
  T top = negative_infinity<T>();
  T total = T(0);

  KOKKOS_INLINE_FUNCTION static bool empty(T lse_p) {
    return lse_p == negative_infinity<T>() || lse_p == -negative_infinity<T>();
  }
  KOKKOS_INLINE_FUNCTION void see(T lse_p) {
    if (!empty(lse_p)) top = max_of(top, lse_p);
  }
  /// Unnormalised: exp(lse_p - top), 0 for an empty part.
  KOKKOS_INLINE_FUNCTION T weight(T lse_p) const { return empty(lse_p) ? T(0) : Impl::exp(lse_p - top); }
  /// Adds part p to the total; returns its unnormalised weight.
  KOKKOS_INLINE_FUNCTION T add(T lse_p) {
    const T w = weight(lse_p);
    total += w;
    return w;
  }
  /// Part p's normalised weight; 0 when no part saw a key (a NaN total stays NaN).
  KOKKOS_INLINE_FUNCTION T share(T w) const { return total == T(0) ? T(0) : w / total; }
  /// The merged row's log-sum-exp as reported: +inf when no part saw a key.
  KOKKOS_INLINE_FUNCTION T lse() const {
    return total == T(0) ? -negative_infinity<T>() : top + Impl::log(total);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
