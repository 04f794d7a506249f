#ifndef KOKKOSMLA_PRECISION_HPP
#define KOKKOSMLA_PRECISION_HPP
/// The scalar types the library stores, and the types it computes in.
///
/// float and double everywhere. Kokkos' 16-bit types, Kokkos::Experimental::half_t
/// (fp16) and bhalf_t (bf16), where the Kokkos in use has them as real 16-bit
/// types: Kokkos makes them aliases of float on backends without native half
/// precision (every host-only build, and Kokkos 3.4 has no bhalf_t at all), and
/// there they compile out: KOKKOSMLA_HAS_HALF / KOKKOSMLA_HAS_BHALF are 0.
/// 16-bit inputs are computed with fp32 accumulation and an fp32 softmax; their
/// lse is fp32.

#include <Kokkos_Core.hpp>

#include <type_traits>

#if defined(KOKKOS_HALF_T_IS_FLOAT) && !KOKKOS_HALF_T_IS_FLOAT
#define KOKKOSMLA_HAS_HALF 1
#else
#define KOKKOSMLA_HAS_HALF 0
#endif
#if defined(KOKKOS_BHALF_T_IS_FLOAT) && !KOKKOS_BHALF_T_IS_FLOAT
#define KOKKOSMLA_HAS_BHALF 1
#else
#define KOKKOSMLA_HAS_BHALF 0
#endif

namespace KokkosMLA {

/// True for the 16-bit storage types this build has.
template <class T>
struct is_half_precision : std::false_type {};
#if KOKKOSMLA_HAS_HALF
template <>
struct is_half_precision<Kokkos::Experimental::half_t> : std::true_type {};
#endif
#if KOKKOSMLA_HAS_BHALF
template <>
struct is_half_precision<Kokkos::Experimental::bhalf_t> : std::true_type {};
#endif

/// The scalar types attention() and Plan take.
template <class T>
constexpr bool is_supported_scalar =
    std::is_same<T, float>::value || std::is_same<T, double>::value || is_half_precision<T>::value;

/// What a Scalar is computed in, and the type of its lse: float for the
/// 16-bit types, the type itself otherwise.
template <class T>
using compute_type = std::conditional_t<is_half_precision<T>::value, float, T>;

}  // namespace KokkosMLA

#endif
