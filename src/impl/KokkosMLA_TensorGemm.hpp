#ifndef KOKKOSMLA_TENSORGEMM_HPP
#define KOKKOSMLA_TENSORGEMM_HPP
// The tensor-core paths' GEMMs on CUDA (the prefill's K and V, the decode's
// per-head absorption and up-projection): cuBLAS with 16-bit inputs and
// outputs and fp32 accumulation (Kokkos Kernels' GEMM has no such
// mixed-precision path), or fp32 with TF32 products.

#include <KokkosMLA_Options.hpp>
#include <KokkosMLA_Precision.hpp>
#include <KokkosMLA_config.hpp>

#include "KokkosMLA_HeadRows.hpp"

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// How a float GEMM multiplies: TF32 products on the tensor cores, or fp32.
enum class FloatGemm { Tf32, Fp32 };

/// Whether a plan of Scalar takes the tensor cores under opt: 16-bit types
/// always, float with Options::allow_tf32 or Options::emulate_fp32.
template <class Scalar>
bool tensor_products_allowed(const Options& opt) {
  return is_half_precision<Scalar>::value || opt.allow_tf32 || opt.emulate_fp32;
}

/// Whether a float plan multiplies as 3xTF32 (Options::emulate_fp32).
template <class Scalar>
bool split_tf32(const Options& opt) {
  return std::is_same<Scalar, float>::value && opt.emulate_fp32;
}

/// The float GEMMs beside a tensor-core kernel: fp32 where fp32 is emulated, TF32 otherwise.
template <class Scalar>
FloatGemm float_gemm_for(const Options& opt) {
  return split_tf32<Scalar>(opt) ? FloatGemm::Fp32 : FloatGemm::Tf32;
}

/// A tensor-core path's products in its describe(): " products=3xtf32" or
/// " products=tf32" for float plans, nothing for 16-bit ones.
template <class Scalar>
const char* products_label(const Options& opt) {
  if (!std::is_same<Scalar, float>::value) return "";
  return split_tf32<Scalar>(opt) ? " products=3xtf32" : " products=tf32";
}

/// BLAS takes int extents: throws std::invalid_argument unless a row-major
/// GEMM's columns, inner extent and leading dimension fit one.
inline void require_int_gemm_extents(std::int64_t cols, std::int64_t inner, std::int64_t lda) {
  if (cols > INT_MAX || inner > INT_MAX || lda > INT_MAX)
    throw std::invalid_argument("KokkosMLA: GEMM extents beyond int: cols " + std::to_string(cols) +
                                ", inner " + std::to_string(inner) + ", lda " + std::to_string(lda));
}

/// BLAS takes int extents: throws std::invalid_argument unless every extent
/// and leading dimension of a per-head GEMM (gemm_heads) fits one.
inline void require_int_head_gemm_extents(std::initializer_list<std::int64_t> extents) {
  for (std::int64_t x : extents)
    if (x > INT_MAX)
      throw std::invalid_argument("KokkosMLA: per-head GEMM extent beyond int: " + std::to_string(x));
}

/// Calls gemm(r0, m) for the rows r0 .. r0 + m - 1 of a row-major GEMM of
/// `rows` rows, in pieces whose row count m fits an int.
template <class Gemm>
void for_int_row_pieces(std::int64_t rows, Gemm&& gemm) {
  const std::int64_t piece = INT_MAX / 2;
  for (std::int64_t r0 = 0; r0 < rows; r0 += piece) gemm(r0, int(rows - r0 < piece ? rows - r0 : piece));
}

/// A row-major matrix of each head: head h's starts at data + h * step, its
/// rows ld elements apart.
template <class T>
struct HeadMatrices {
  T* data;
  std::int64_t ld, step;
};

/// The head matrices of rows laid out as HeadRows: head h's rows r.row apart, heads r.head apart.
template <class T>
HeadMatrices<T> head_matrices(HeadRows<T> r) {
  return {r.ptr, r.row, r.head};
}

/// A row-major matrix of each (group g, head h): it starts at data +
/// g group_step + h step, its rows ld elements apart, as one head's slice of
/// each batch element's rows of a (B, T, H, D) tensor lies.
template <class T>
struct GroupedMatrices {
  T* data;
  std::int64_t ld, step, group_step;
  HeadMatrices<T> group(std::int64_t g) const { return {data + g * group_step, ld, step}; }
};

/// The row strides of a row-major GEMM c (rows x cols) = a (rows x inner)
/// op(b) (b inner x cols, or cols x inner transposed) as BLAS takes them: a
/// matrix of one row may have any row stride (one row of a LayoutLeft view,
/// or a weight of one latent row and one head, gives 1), but BLAS checks
/// every leading dimension against the row's width, so such a matrix gets its width.
inline void fit_single_row_strides(std::int64_t rows, std::int64_t cols, std::int64_t inner, bool transpose_b,
                                   std::int64_t& lda, std::int64_t& ldb, std::int64_t& ldc) {
  if (rows == 1) {
    lda = inner;
    ldc = cols;
  }
  if (transpose_b ? cols == 1 : inner == 1) ldb = transpose_b ? inner : cols;
}

}  // namespace Impl
}  // namespace KokkosMLA

#if KOKKOSMLA_ENABLE_CUBLAS
namespace KokkosMLA {
namespace Impl {

/// c = a b for row-major a (rows x inner, its rows lda elements apart),
/// b (inner x cols, its rows ldb apart), c (rows x cols, its rows ldc apart), on exec's stream, with fp32
/// accumulation. T is half_t or bhalf_t (tensor cores), float (as
/// float_gemm says), or double (fp64: the Decompressed prefill's GEMMs,
/// gemm_strided_rows).
template <class T>
void tensor_gemm(const Kokkos::Cuda& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                 const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                 FloatGemm float_gemm = FloatGemm::Tf32);

/// For every head h < heads, c_h = alpha a_h b_h (b_h inner x cols) or, with
/// transpose_b, alpha a_h b_h^T (b_h cols x inner); a_h is rows x inner and c_h
/// rows x cols. One batched cuBLAS call on exec's stream, fp32 accumulation
/// (float T: as float_gemm says; double: fp64).
template <class T>
void tensor_gemm_heads(const Kokkos::Cuda& exec, std::int64_t heads, std::int64_t rows, std::int64_t cols,
                       std::int64_t inner, HeadMatrices<const T> a, HeadMatrices<const T> b, bool transpose_b,
                       HeadMatrices<T> c, FloatGemm float_gemm = FloatGemm::Fp32, double alpha = 1);

/// For every i < count, c_i = a_i b_i (b_i inner x cols) or, with
/// transpose_b, a_i b_i^T (b_i cols x inner), for the row-major matrices at
/// the device pointers a[i] (rows x inner, rows lda apart), b[i] and c[i]
/// (rows x cols): one batched cuBLAS call on exec's stream (float T: as
/// float_gemm says; double: fp64).
template <class T>
void tensor_gemm_pointers(const Kokkos::Cuda& exec, std::int64_t count, std::int64_t rows, std::int64_t cols,
                          std::int64_t inner, const T* const* a, std::int64_t lda, const T* const* b,
                          std::int64_t ldb, bool transpose_b, T* const* c, std::int64_t ldc,
                          FloatGemm float_gemm = FloatGemm::Fp32);

}  // namespace Impl
}  // namespace KokkosMLA
#endif

#endif
