#ifndef KOKKOSMLA_COMPAT_HPP
#define KOKKOSMLA_COMPAT_HPP
// The one place that knows Kokkos and Kokkos Kernels versions apart
// (Debian's Trilinos-built 3.4 and current 4.x).

#include <Kokkos_Core.hpp>
#include <KokkosBlas3_gemm.hpp>

#include <array>
#include <cmath>
#include <limits>

// Fully unrolls a loop of constant trip count in CUDA device code, so that
// the register arrays it indexes stay in registers (host compilers unroll by
// their own measure, and GCC would warn about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define KOKKOSMLA_UNROLL _Pragma("unroll")
#else
#define KOKKOSMLA_UNROLL
#endif
// Unrolls a loop of run-time trip count by two in CUDA device code, so that
// the second iteration's loads can be issued before the first one's arithmetic.
#if defined(__CUDA_ARCH__)
#define KOKKOSMLA_UNROLL_TWICE _Pragma("unroll 2")
#else
#define KOKKOSMLA_UNROLL_TWICE
#endif

namespace KokkosMLA {
namespace Impl {

/// x, as a value the compiler cannot see through, so that what a thread
/// derives from it is computed where it is used. Kokkos' CUDA launch loops
/// over teams around the functor. The decode kernels pass their team rank
/// through this once a team; otherwise the compiler hoists every offset
/// derived from the rank out of that loop, into registers that live through
/// the whole kernel, and they spilled. In the prefill kernels it changed
/// nothing or cost time (docs/performance.md), so they do without it. Only
/// CUDA device code needs it.
KOKKOS_INLINE_FUNCTION int hidden_from_compiler(int x) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(x));
#endif
  return x;
}

template <class T>
KOKKOS_INLINE_FUNCTION T exp(T x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::exp(x);
#else
  return Kokkos::Experimental::exp(x);
#endif
}

template <class T>
KOKKOS_INLINE_FUNCTION T log(T x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::log(x);
#else
  return Kokkos::Experimental::log(x);
#endif
}

// Kokkos::min/max arrived after 3.4.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T min_of(T a, T b) {
  return b < a ? b : a;
}
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T max_of(T a, T b) {
  return a < b ? b : a;
}

template <class T>
KOKKOS_INLINE_FUNCTION constexpr T negative_infinity() {
  return T(-INFINITY);
}

template <class ExecSpace>
constexpr bool is_host_space() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}

/// Two instances of exec's space that may run concurrently (CUDA streams,
/// OpenMP thread partitions); before Kokkos 4, two handles on exec itself.
template <class ExecSpace>
std::array<ExecSpace, 2> two_instances(const ExecSpace& exec) {
#if KOKKOS_VERSION >= 40000
  return Kokkos::Experimental::partition_space(exec, 1, 1);
#else
  return {exec, exec};
#endif
}

/// C = A * B (B^T with b_mode "T") on exec's stream. Kokkos Kernels 4 takes
/// the instance; older releases run on the default instance, so order them
/// around it explicitly.
template <class ExecSpace, class AV, class BV, class CV>
void gemm(const ExecSpace& exec, const AV& A, const BV& B, const CV& C, const char* b_mode = "N",
          double alpha = 1) {
  using Scalar = typename CV::non_const_value_type;
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40100
  KokkosBlas::gemm(exec, "N", b_mode, Scalar(alpha), A, B, Scalar(0), C);
#else
  exec.fence();
  KokkosBlas::gemm("N", b_mode, Scalar(alpha), A, B, Scalar(0), C);
  typename ExecSpace::execution_space().fence();
#endif
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
