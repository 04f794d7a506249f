#ifndef KOKKOSMLA_HEADROWS_HPP
#define KOKKOSMLA_HEADROWS_HPP
// How every kernel addresses a (B, T, H, width) tensor such as q: by token
// row (b * T + t) and head, each head's width values contiguous. Row-major
// tensors have strides H * width and width; a slice of a wider array (the
// first 128 of a (B, T, H, 192) query projection's columns) has larger ones
// and is read where it lies, without a copy.

#include <KokkosMLA_Attention.hpp>
#include <Kokkos_Core.hpp>

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class T>
struct HeadRows {
  T* ptr = nullptr;
  std::int64_t row = 0;   ///< elements from token row r to r + 1
  std::int64_t head = 0;  ///< elements from head h to h + 1
  KOKKOS_INLINE_FUNCTION T* at(std::int64_t r, std::int64_t h) const { return ptr + r * row + h * head; }
};

/// The rows of a row-major (..., H, width) tensor at p.
template <class T>
KOKKOS_INLINE_FUNCTION HeadRows<T> packed_rows(T* p, std::int64_t heads, std::int64_t width) {
  return {p, heads * width, width};
}

/// The same rows, read-only.
template <class T>
KOKKOS_INLINE_FUNCTION HeadRows<const T> read_only(HeadRows<T> r) {
  return {r.ptr, r.row, r.head};
}

/// Read-only rows handed to a routine that moves rows both ways (it only
/// reads these).
template <class T>
KOKKOS_INLINE_FUNCTION HeadRows<T> as_mutable(HeadRows<const T> r) {
  return {const_cast<T*>(r.ptr), r.row, r.head};
}

/// The token rows of a rank-3 (B, T, width) view (one head), rows evenly
/// spaced and unit-stride (Impl::evenly_spaced_rows).
template <class V>
HeadRows<typename V::value_type> token_rows(const V& v) {
  static_assert(int(V::rank) == 3, "a (B, T, width) view");
  return {v.data(), std::int64_t(token_row_stride(v)), 0};
}

/// The rows of a rank-4 view whose (b, t) rows are evenly spaced and whose
/// last stride is one (what Impl::reads_in_place accepts, or row-major).
template <class V>
HeadRows<typename V::value_type> head_rows(const V& v) {
  static_assert(int(V::rank) == 4, "a (B, T, H, width) view");
  return {v.data(), std::int64_t(token_row_stride(v)), std::int64_t(v.stride(2))};
}

/// The rows r and heads h of an (R, H, D) weight view with unit stride
/// within a head (what Impl::reads_weights_in_place accepts, or row-major).
template <class V>
HeadRows<typename V::value_type> weight_rows(const V& v) {
  static_assert(int(V::rank) == 3, "an (R, H, D) view");
  return {v.data(), std::int64_t(v.stride(0)), std::int64_t(v.stride(1))};
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
