#ifndef KOKKOSMLA_TENSORGEMM_HPP
#define KOKKOSMLA_TENSORGEMM_HPP
// The tensor-core paths' GEMMs on CUDA (the prefill's K and V, the decode's
// per-head absorption and up-projection): cuBLAS with 16-bit inputs and
// outputs and fp32 accumulation (Kokkos Kernels' GEMM has no such
// mixed-precision path), or fp32 with TF32 products.

#include <KokkosMLA_Precision.hpp>
#include <KokkosMLA_config.hpp>

namespace KokkosMLA {
namespace Impl {

/// How a float GEMM multiplies: TF32 products on the tensor cores, or fp32.
enum class FloatGemm { Tf32, Fp32 };

}  // namespace Impl
}  // namespace KokkosMLA

#if KOKKOSMLA_ENABLE_CUBLAS
namespace KokkosMLA {
namespace Impl {

/// c = a b for row-major a (rows x inner, its rows lda elements apart),
/// b (inner x cols), c (rows x cols), on exec's stream, with fp32
/// accumulation. T is half_t or bhalf_t (tensor cores), or float (as
/// float_gemm says).
template <class T>
void tensor_gemm(const Kokkos::Cuda& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                 const T* a, std::int64_t lda, const T* b, T* c, FloatGemm float_gemm = FloatGemm::Tf32);

/// A row-major matrix of each head: head h's starts at data + h * step, its
/// rows ld elements apart.
template <class T>
struct HeadMatrices {
  T* data;
  std::int64_t ld, step;
};

/// For every head h < heads, c_h = a_h b_h (b_h inner x cols) or, with
/// transpose_b, a_h b_h^T (b_h cols x inner); a_h is rows x inner and c_h
/// rows x cols. One batched cuBLAS call on exec's stream, fp32 accumulation
/// (float T: as float_gemm says).
template <class T>
void tensor_gemm_heads(const Kokkos::Cuda& exec, std::int64_t heads, std::int64_t rows, std::int64_t cols,
                       std::int64_t inner, HeadMatrices<const T> a, HeadMatrices<const T> b, bool transpose_b,
                       HeadMatrices<T> c, FloatGemm float_gemm = FloatGemm::Fp32);

}  // namespace Impl
}  // namespace KokkosMLA
#endif

#endif
