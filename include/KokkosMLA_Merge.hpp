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

/// The kernel on raw row-major data: rows = B * T * H rows of dim values.
template <class Scalar, class ExecSpace>
void merge_rows(const ExecSpace& exec, const Scalar* out_a, const Scalar* lse_a, const Scalar* out_b,
                const Scalar* lse_b, Scalar* out, Scalar* lse, std::int64_t rows, std::int64_t dim);

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
/// arrays): those that are not row-major without gaps are read through
/// row-major copies made per call (out and lse copied back; the call then
/// waits for the copies to be read before it returns).
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
  // Named: the copies must live until the launches that read them are done.
  const auto out_a_rows = Impl::row_major(exec, out_a, true);
  const auto lse_a_rows = Impl::row_major(exec, lse_a, true);
  const auto out_b_rows = Impl::row_major(exec, out_b, true);
  const auto lse_b_rows = Impl::row_major(exec, lse_b, true);
  const auto out_rows = Impl::row_major(exec, out, false);
  const auto lse_rows = Impl::row_major(exec, lse, false);
  Impl::merge_rows<Scalar, ExecSpace>(
      exec, out_a_rows.data(), lse_a_rows.data(), out_b_rows.data(), lse_b_rows.data(), out_rows.data(),
      lse_rows.data(),
      std::int64_t(out.extent(0)) * std::int64_t(out.extent(1)) * std::int64_t(out.extent(2)),
      std::int64_t(out.extent(3)));
  if (out_rows.data() != out.data()) Kokkos::deep_copy(exec, out, out_rows);
  if (lse_rows.data() != lse.data()) Kokkos::deep_copy(exec, lse, lse_rows);
  if (out_a_rows.data() != out_a.data() || lse_a_rows.data() != lse_a.data() ||
      out_b_rows.data() != out_b.data() || lse_b_rows.data() != lse_b.data() ||
      out_rows.data() != out.data() || lse_rows.data() != lse.data())
    exec.fence();  // copies are freed here
}

#define KOKKOSMLA_DECLARE_MERGE_INSTANCES(SPACE)                                                       \
  extern template void Impl::merge_rows<float, SPACE>(const SPACE&, const float*, const float*,        \
                                                      const float*, const float*, float*, float*,      \
                                                      std::int64_t, std::int64_t);                     \
  extern template void Impl::merge_rows<double, SPACE>(const SPACE&, const double*, const double*,     \
                                                       const double*, const double*, double*, double*, \
                                                       std::int64_t, std::int64_t);
KOKKOSMLA_DECLARE_MERGE_INSTANCES(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_DECLARE_MERGE_INSTANCES(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA

#endif
