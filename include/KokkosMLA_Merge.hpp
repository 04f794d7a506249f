#ifndef KOKKOSMLA_MERGE_HPP
#define KOKKOSMLA_MERGE_HPP

#include <KokkosMLA_Attention.hpp>

#include <cstdint>
#include <type_traits>

namespace KokkosMLA {

namespace Impl {

/// Throws std::invalid_argument naming the argument and extents.
void validate_merge(const char* caller, const ArgInfo& out_a, const ArgInfo& lse_a, const ArgInfo& out_b,
                    const ArgInfo& lse_b, const ArgInfo& out, const ArgInfo& lse);

/// The kernel on the views where they lie: B * T * H rows of dim values.
template <class Scalar, class ExecSpace>
void merge_rows(const ExecSpace& exec, StridedRows<const Scalar> out_a, StridedRows<const Scalar> lse_a,
                StridedRows<const Scalar> out_b, StridedRows<const Scalar> lse_b, StridedRows<Scalar> out,
                StridedRows<Scalar> lse, std::int64_t dim);

}  // namespace Impl

/// Combines two attention results of the same queries over disjoint key sets,
/// each an output (B, T, H, D) with its log-sum-exp (B, T, H) as attention()
/// writes them, into the result over the union of the keys:
///   m   = max(lse_a, lse_b)
///   out = (exp(lse_a - m) out_a + exp(lse_b - m) out_b) / (exp(lse_a - m) + exp(lse_b - m))
///   lse = m + log(exp(lse_a - m) + exp(lse_b - m))
/// A side with no keys contributes nothing: lse = +inf (how attention reports
/// a row that saw no key, out 0) or -inf (whatever its out holds); the result
/// is the other side exactly. A +inf side whose out holds NaN (non-finite
/// inputs) passes the NaN on. Both sides empty: out 0, lse +inf. out and lse may be out_a and lse_a (or the b
/// pair) themselves, to accumulate in place; any other overlap is rejected. Asynchronous on exec; throws
/// std::invalid_argument, before any launch, on mismatched extents.
/// Views may be LayoutRight, LayoutLeft or LayoutStride (slices of wider
/// arrays, of any strides): each is read and written where it lies.
template <class ExecSpace, class OA, class LA, class OB, class LB, class O, class L,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void merge_states(const ExecSpace& exec, const OA& out_a, const LA& lse_a, const OB& out_b, const LB& lse_b,
                  const O& out, const L& lse) {
  using Scalar = typename O::non_const_value_type;
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "KokkosMLA::merge_states: Scalar must be float or double");
  static_assert(Impl::is_supported_space<ExecSpace>,
                "KokkosMLA::merge_states: ExecSpace must be Kokkos::DefaultExecutionSpace or "
                "Kokkos::DefaultHostExecutionSpace");
  static_assert(Impl::check_view<Scalar, ExecSpace, OA, 4, false>() &&
                    Impl::check_view<Scalar, ExecSpace, LA, 3, false>() &&
                    Impl::check_view<Scalar, ExecSpace, OB, 4, false>() &&
                    Impl::check_view<Scalar, ExecSpace, LB, 3, false>() &&
                    Impl::check_view<Scalar, ExecSpace, O, 4, true>() &&
                    Impl::check_view<Scalar, ExecSpace, L, 3, true>(),
                "");
  using Impl::describe_any_layout;
  Impl::validate_merge("KokkosMLA::merge_states", describe_any_layout("out_a", out_a),
                       describe_any_layout("lse_a", lse_a), describe_any_layout("out_b", out_b),
                       describe_any_layout("lse_b", lse_b), describe_any_layout("out", out),
                       describe_any_layout("lse", lse));
  using Impl::strided_rows;
  auto read = [](const auto& v) { return strided_rows(typename std::decay_t<decltype(v)>::const_type(v)); };
  Impl::merge_rows<Scalar, ExecSpace>(exec, read(out_a), read(lse_a), read(out_b), read(lse_b),
                                      strided_rows(out), strided_rows(lse), std::int64_t(out.extent(3)));
}

/// One instance of the merge kernel's launch (extern here, made in src/KokkosMLA_Merge.cpp).
#define KOKKOSMLA_MERGE_INSTANCE(SCALAR, SPACE)                                                    \
  template void Impl::merge_rows<SCALAR, SPACE>(                                                   \
      const SPACE&, Impl::StridedRows<const SCALAR>, Impl::StridedRows<const SCALAR>,              \
      Impl::StridedRows<const SCALAR>, Impl::StridedRows<const SCALAR>, Impl::StridedRows<SCALAR>, \
      Impl::StridedRows<SCALAR>, std::int64_t)
extern KOKKOSMLA_MERGE_INSTANCE(float, Kokkos::DefaultExecutionSpace);
extern KOKKOSMLA_MERGE_INSTANCE(double, Kokkos::DefaultExecutionSpace);
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
extern KOKKOSMLA_MERGE_INSTANCE(float, Kokkos::DefaultHostExecutionSpace);
extern KOKKOSMLA_MERGE_INSTANCE(double, Kokkos::DefaultHostExecutionSpace);
#endif

}  // namespace KokkosMLA

#endif
