#ifndef KOKKOSMLA_HOSTVECTOR_HPP
#define KOKKOSMLA_HOSTVECTOR_HPP
// A CPU core's vector register as the host kernels use it: GNU vector
// extensions (GCC, Clang and the compilers built on them), as wide as the
// instruction set the library is compiled for (-march, which Kokkos' host
// ARCH option sets): 64 bytes with AVX-512, 32 with AVX, else 16 (SSE2,
// NEON). Host compilers do not turn the tile products' register blocks into
// wide FMAs by themselves (4 x 32 floats: 2-3 GFLOP/s on one core, written
// with these vectors 204, OpenBLAS' sgemm 90 on the same 64 x 64 x 128
// product, AVX-512), so the blocks are written with them.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#define KOKKOSMLA_HOST_VECTOR_BYTES 64
#elif defined(__AVX__)
#define KOKKOSMLA_HOST_VECTOR_BYTES 32
#else
#define KOKKOSMLA_HOST_VECTOR_BYTES 16
#endif

// Unrolls the loop that follows by 4 where the compiler takes GCC's pragma
// (GCC, Clang and the compilers built on them); nvcc's front end, which
// sees host code of CUDA builds first, does not, and leaves the loop as is.
#if defined(__CUDACC__)
#define KOKKOSMLA_HOST_UNROLL_4
#else
#define KOKKOSMLA_HOST_UNROLL_4 _Pragma("GCC unroll 4")
#endif

namespace KokkosMLA {
namespace Impl {

/// The vector of T (V), the mask a comparison of two of them gives (M), and
/// the integer of M's lanes (I).
template <class T>
struct HostVector;
template <>
struct HostVector<float> {
  typedef float V __attribute__((vector_size(KOKKOSMLA_HOST_VECTOR_BYTES)));
  typedef std::int32_t M __attribute__((vector_size(KOKKOSMLA_HOST_VECTOR_BYTES)));
  using I = std::int32_t;
};
template <>
struct HostVector<double> {
  typedef double V __attribute__((vector_size(KOKKOSMLA_HOST_VECTOR_BYTES)));
  typedef std::int64_t M __attribute__((vector_size(KOKKOSMLA_HOST_VECTOR_BYTES)));
  using I = std::int64_t;
};

template <class T>
constexpr int host_lanes() {
  return KOKKOSMLA_HOST_VECTOR_BYTES / int(sizeof(T));
}

/// Unaligned load and store (memcpy: no aliasing or alignment assumption).
template <class T>
inline typename HostVector<T>::V load_vector(const T* p) {
  typename HostVector<T>::V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_vector(T* p, typename HostVector<T>::V v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline typename HostVector<T>::V splat(T x) {
  return typename HostVector<T>::V{} + x;
}

/// Lane by lane, m ? a : b (m from a comparison: all bits set or none).
template <class V, class M>
inline V select(M m, V a, V b) {
  return V((m & M(a)) | (~m & M(b)));
}
template <class V>
inline V max_vector(V a, V b) {
  return select(a > b, a, b);  // NaN lanes of a are left out; the exponentials carry them
}

/// 2^x lane by lane: 0 below -126 (so for -inf), NaN for NaN (its lanes
/// computed on -126, so that every conversion and shift stays in range). Float: 2^round(x)
/// times a degree-7 Taylor polynomial of 2^f on |f| <= 1/2 (relative error
/// under 6e-9 before rounding); double: std::exp2 per lane.
inline HostVector<float>::V exp2_vector(HostVector<float>::V x) {
  using V = HostVector<float>::V;
  using M = HostVector<float>::M;
  const M underflow = x < splat(-126.0f), nan = x != x;
  V y = select(x > splat(127.0f), splat(127.0f), x);
  y = select(underflow | nan, splat(-126.0f), y);  // every lane converts to an integer in range
  // floor(y + 1/2) by truncation, one down where truncation went up (negative y).
  const V half_up = y + 0.5f;
  M n = __builtin_convertvector(half_up, M);
  n += M(__builtin_convertvector(n, V) > half_up);                        // true lanes are -1
  const V f = (y - __builtin_convertvector(n, V)) * 0.6931471805599453f;  // natural units
  V p = splat(1.0f / 5040);
  p = p * f + 1.0f / 720;
  p = p * f + 1.0f / 120;
  p = p * f + 1.0f / 24;
  p = p * f + 1.0f / 6;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const M bits = (n + 127) << 23;
  const V scaled = p * V(bits);
  return select(nan, x, V(M(scaled) & ~underflow));
}
inline HostVector<double>::V exp2_vector(HostVector<double>::V x) {
  for (int l = 0; l < host_lanes<double>(); ++l) x[l] = std::exp2(x[l]);
  return x;
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
