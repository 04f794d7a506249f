#ifndef KOKKOSMLA_TENSORGEMM_HPP
#define KOKKOSMLA_TENSORGEMM_HPP
// The tensor-core path's K and V on CUDA: cuBLAS with 16-bit inputs and
// outputs and fp32 accumulation (Kokkos Kernels' GEMM has no such
// mixed-precision path), or fp32 with TF32 products.

#include "KokkosMLA_TensorOps.hpp"

#ifdef KOKKOSMLA_TENSOR_CORES
namespace KokkosMLA {
namespace Impl {

/// c = a b for row-major a (rows x inner), b (inner x cols), c (rows x cols),
/// on exec's stream, on tensor cores with fp32 accumulation. T is half_t,
/// bhalf_t, or float (TF32 products).
template <class T>
void tensor_gemm(const Kokkos::Cuda& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                 const T* a, const T* b, T* c);

}  // namespace Impl
}  // namespace KokkosMLA
#endif

#endif
