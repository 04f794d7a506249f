#ifndef KOKKOSMLA_WIDEN_HPP
#define KOKKOSMLA_WIDEN_HPP
// Conversions between a storage type and its compute type, for 16-bit plans
// that run through a float plan (every backend without the tensor-core path).

#include <KokkosMLA_Precision.hpp>

#include "KokkosMLA_HeadRows.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class From, class To>
struct ConvertKernel {
  const From* from;
  To* to;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    to[i] = static_cast<To>(static_cast<float>(from[i]));
  }
};

/// Rows (r, h) of `from` (HeadRows) into a row-major (rows, heads, width) `to`.
template <class From, class To>
struct ConvertRowsKernel {
  HeadRows<const From> from;
  To* to;
  std::int64_t heads, width;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t c = i % width, h = (i / width) % heads, r = i / (width * heads);
    to[i] = static_cast<To>(static_cast<float>(from.at(r, h)[c]));
  }
};

/// A row-major (rows, heads, width) `from` into rows (r, h) of `to` (HeadRows).
template <class From, class To>
struct ConvertIntoRowsKernel {
  const From* from;
  HeadRows<To> to;
  std::int64_t heads, width;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t c = i % width, h = (i / width) % heads, r = i / (width * heads);
    to.at(r, h)[c] = static_cast<To>(static_cast<float>(from[i]));
  }
};

/// Rows (r, h) of `to` = the row-major (rows, heads, width) `from`, rounded to To, on exec.
template <class ExecSpace, class From, class To>
void convert_into_rows(const ExecSpace& exec, const char* label, const From* from, HeadRows<To> to,
                       std::int64_t rows, std::int64_t heads, std::int64_t width) {
  Kokkos::parallel_for(label,
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows * heads * width),
                       ConvertIntoRowsKernel<From, To>{from, to, heads, width});
}

/// to[i] = from[i] for i < n, rounded to To, on exec.
template <class ExecSpace, class From, class To>
void convert(const ExecSpace& exec, const char* label, const From* from, To* to, std::int64_t n) {
  Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                       ConvertKernel<From, To>{from, to});
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
  /// The next n floats, holding from[0 .. n) widened on exec.
  template <class ExecSpace, class From>
  float* widen(const ExecSpace& exec, const From* from, std::int64_t n) {
    float* piece = take(n);
    convert(exec, "KokkosMLA::widen", from, piece, n);
    return piece;
  }
  /// The next rows * heads * width floats, holding rows (r, h) of from widened.
  template <class ExecSpace, class From>
  float* widen_rows(const ExecSpace& exec, HeadRows<const From> from, std::int64_t rows, std::int64_t heads,
                    std::int64_t width) {
    float* piece = take(rows * heads * width);
    Kokkos::parallel_for(
        "KokkosMLA::widen",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows * heads * width),
        ConvertRowsKernel<From, float>{from, piece, heads, width});
    return piece;
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
