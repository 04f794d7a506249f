#ifndef KOKKOSMLA_STRIDEDGEMM_HPP
#define KOKKOSMLA_STRIDEDGEMM_HPP
// C = A B where A's rows lie further apart than its width: the Decompressed
// prefill's GEMMs on a latent that is a slice of a packed (B, S, R + Dr)
// array. BLAS takes such an A as it lies (its row stride is the leading
// dimension), but Kokkos Kernels reaches BLAS only through gap-free
// LayoutRight or LayoutLeft views, and Kokkos makes no padded LayoutRight
// view of a slice. So this calls the BLAS itself where it knows one: cuBLAS
// on CUDA, Kokkos Kernels' host BLAS (its BLAS TPL: OpenBLAS, MKL, ...) on
// hosts; elsewhere Kokkos Kernels' own GEMM on a LayoutStride view.

#include "KokkosMLA_Backend.hpp"
#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_TensorGemm.hpp"

#include <KokkosKernels_config.h>
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
#include <KokkosBlas_Host_tpl.hpp>
#endif

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// c = a b for a row-major a (rows x inner) whose rows start lda >= inner
/// elements apart, b (inner x cols) and c (rows x cols) row-major without
/// gaps, on exec (float or double; exact products).
template <class ExecSpace, class Scalar>
void gemm_strided_rows(const ExecSpace& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                       const Scalar* a, std::int64_t lda, const Scalar* b, Scalar* c) {
  using Memory = typename ExecSpace::memory_space;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using Matrix = Kokkos::View<Scalar**, Kokkos::LayoutRight, Memory, Unmanaged>;
  using ConstMatrix = Kokkos::View<const Scalar**, Kokkos::LayoutRight, Memory, Unmanaged>;
#if KOKKOSMLA_ENABLE_CUBLAS
  constexpr bool cublas = is_cuda_space<ExecSpace>();
#else
  constexpr bool cublas = false;
#endif
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
  constexpr bool host_blas = is_host_space<ExecSpace>();
#else
  constexpr bool host_blas = false;
#endif
  if constexpr (cublas) {
#if KOKKOSMLA_ENABLE_CUBLAS
    tensor_gemm(exec, rows, cols, inner, a, lda, b, c, FloatGemm::Fp32);
#endif
  } else if constexpr (host_blas) {
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
    require_int_gemm_extents(cols, inner, lda);
    exec.fence();  // BLAS runs on this thread, after what exec was given before
    // Row-major c = a b is column-major c^T = b^T a^T.
    for_int_row_pieces(rows, [&](std::int64_t r0, int m) {
      KokkosBlas::Impl::HostBlas<Scalar>::gemm('N', 'N', int(cols), m, int(inner), Scalar(1), b, int(cols),
                                               a + r0 * lda, int(lda), Scalar(0), c + r0 * cols, int(cols));
    });
#endif
  } else if (lda == inner) {
    gemm(exec, ConstMatrix(a, rows, inner), ConstMatrix(b, inner, cols), Matrix(c, rows, cols));
  } else {
    using StridedMatrix = Kokkos::View<const Scalar**, Kokkos::LayoutStride, Memory, Unmanaged>;
    gemm(exec, StridedMatrix(a, Kokkos::LayoutStride(rows, lda, inner, 1)), ConstMatrix(b, inner, cols),
         Matrix(c, rows, cols));
  }
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
