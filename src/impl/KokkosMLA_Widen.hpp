#ifndef KOKKOSMLA_WIDEN_HPP
#define KOKKOSMLA_WIDEN_HPP
// Conversions between a storage type and its compute type, for 16-bit plans
// that run through a float plan (every backend without the tensor-core path).

#include <KokkosMLA_Precision.hpp>

#include "KokkosMLA_HeadRows.hpp"

#include <cstdint>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// x as To: itself where the types agree, else through float (16-bit types
/// convert to and from float).
template <class To, class From>
KOKKOS_INLINE_FUNCTION To convert_value(From x) {
  if constexpr (std::is_same<From, To>::value)
    return x;
  else
    return static_cast<To>(static_cast<float>(x));
}

/// Rows (r, h) of `from` into rows (r, h) of `to` (both HeadRows), width values each.
template <class From, class To>
struct ConvertRowsKernel {
  HeadRows<const From> from;
  HeadRows<To> to;
  std::int64_t heads, width;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t c = i % width, h = (i / width) % heads, r = i / (width * heads);
    to.at(r, h)[c] = convert_value<To>(from.at(r, h)[c]);
  }
};

/// Rows (r, h) of `to` = rows (r, h) of `from`, converted to To, on exec.
template <class ExecSpace, class From, class To>
void convert_rows(const ExecSpace& exec, const char* label, HeadRows<const From> from, HeadRows<To> to,
                  std::int64_t rows, std::int64_t heads, std::int64_t width) {
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows * heads * width),
      ConvertRowsKernel<From, To>{from, to, heads, width});
}

/// Rows (r, h) of `to` = the row-major (rows, heads, width) `from`, rounded to To, on exec.
template <class ExecSpace, class From, class To>
void convert_into_rows(const ExecSpace& exec, const char* label, const From* from, HeadRows<To> to,
                       std::int64_t rows, std::int64_t heads, std::int64_t width) {
  convert_rows(exec, label, packed_rows(from, heads, width), to, rows, heads, width);
}

/// A widened plan's float buffer, handed out piece by piece in order.
struct FloatPieces {
  float* at;

  /// The next n floats.
  float* take(std::int64_t n) {
    float* piece = at;
    at += n;
    return piece;
  }
  /// The next rows * heads * width floats, holding rows (r, h) of from widened.
  template <class ExecSpace, class From>
  float* widen_rows(const ExecSpace& exec, HeadRows<const From> from, std::int64_t rows, std::int64_t heads,
                    std::int64_t width) {
    float* piece = take(rows * heads * width);
    convert_rows(exec, "KokkosMLA::widen", from, packed_rows(piece, heads, width), rows, heads, width);
    return piece;
  }
  /// The next R * H * D floats, holding the (R, H, D) weights w widened.
  template <class ExecSpace, class W>
  float* widen_weights(const ExecSpace& exec, const W& w) {
    return widen_rows(exec, weight_rows(w), std::int64_t(w.extent(0)), std::int64_t(w.extent(1)),
                      std::int64_t(w.extent(2)));
  }
};

/// The name of a scalar type in logs.
template <class T>
const char* scalar_name() {
  if (std::is_same<T, float>::value) return "float";
  if (std::is_same<T, double>::value) return "double";
#if KOKKOSMLA_HAS_HALF
  if (std::is_same<T, Kokkos::Experimental::half_t>::value) return "fp16";
#endif
#if KOKKOSMLA_HAS_BHALF
  if (std::is_same<T, Kokkos::Experimental::bhalf_t>::value) return "bf16";
#endif
  return "?";
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
