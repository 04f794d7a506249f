#ifndef KOKKOSMLA_STRIDEDGEMM_HPP
#define KOKKOSMLA_STRIDEDGEMM_HPP
// GEMMs on matrices whose rows lie further apart than their width: the
// Decompressed prefill's GEMMs on a latent that is a slice of a packed
// (B, S, R + Dr) array, and attention by GEMMs on one head's slice of
// (B, T, H, D) tensors. BLAS takes such an A as it lies (its row stride is the leading
// dimension), but Kokkos Kernels reaches BLAS only through gap-free
// LayoutRight or LayoutLeft views, and Kokkos makes no padded LayoutRight
// view of a slice. So this calls the BLAS itself where it knows one: cuBLAS
// on CUDA, Kokkos Kernels' host BLAS (its BLAS TPL: OpenBLAS, MKL, ...) on
// hosts; elsewhere Kokkos Kernels' own GEMM on a LayoutStride view.

#include "KokkosMLA_Backend.hpp"
#include "KokkosMLA_Compat.hpp"
#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TensorGemm.hpp"

#include <KokkosKernels_config.h>
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
#include <KokkosBlas_Host_tpl.hpp>
#endif

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// Whether the GEMMs below call cuBLAS on ExecSpace (CUDA builds with it).
template <class ExecSpace>
constexpr bool calls_cublas() {
#if KOKKOSMLA_ENABLE_CUBLAS
  return is_cuda_space<ExecSpace>();
#else
  return false;
#endif
}

/// Whether they call the host BLAS of Kokkos Kernels' BLAS TPL on ExecSpace.
template <class ExecSpace>
constexpr bool calls_host_blas() {
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
  return is_host_space<ExecSpace>();
#else
  return false;
#endif
}

/// c = a b for a row-major a (rows x inner) whose rows start lda >= inner
/// elements apart, b (inner x cols) whose rows start ldb >= cols apart, and
/// c (rows x cols) whose rows start ldc >= cols apart, on exec (float or double: exact
/// products, or TF32 for float on cuBLAS as float_gemm says; 16-bit types on cuBLAS).
template <class ExecSpace, class Scalar>
void gemm_strided_rows(const ExecSpace& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                       const Scalar* a, std::int64_t lda, const Scalar* b, std::int64_t ldb, Scalar* c,
                       std::int64_t ldc, FloatGemm float_gemm = FloatGemm::Fp32) {
  using Memory = typename ExecSpace::memory_space;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using Matrix = Kokkos::View<Scalar**, Kokkos::LayoutRight, Memory, Unmanaged>;
  using ConstMatrix = Kokkos::View<const Scalar**, Kokkos::LayoutRight, Memory, Unmanaged>;
  using StridedMatrix = Kokkos::View<const Scalar**, Kokkos::LayoutStride, Memory, Unmanaged>;
  using StridedOut = Kokkos::View<Scalar**, Kokkos::LayoutStride, Memory, Unmanaged>;
  (void)float_gemm;  // the host BLAS and Kokkos Kernels multiply in fp32
  fit_single_row_strides(rows, cols, inner, false, lda, ldb, ldc);
  if constexpr (calls_cublas<ExecSpace>()) {
#if KOKKOSMLA_ENABLE_CUBLAS
    tensor_gemm(exec, rows, cols, inner, a, lda, b, ldb, c, ldc, float_gemm);
#endif
  } else if constexpr (calls_host_blas<ExecSpace>()) {
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
    require_int_gemm_extents(cols, inner, lda);
    require_int_gemm_extents(cols, inner, ldb);
    require_int_gemm_extents(cols, inner, ldc);
    exec.fence();  // BLAS runs on this thread, after what exec was given before
    // Row-major c = a b is column-major c^T = b^T a^T.
    for_int_row_pieces(rows, [&](std::int64_t r0, int m) {
      KokkosBlas::Impl::HostBlas<Scalar>::gemm('N', 'N', int(cols), m, int(inner), Scalar(1), b, int(ldb),
                                               a + r0 * lda, int(lda), Scalar(0), c + r0 * ldc, int(ldc));
    });
#endif
  } else if (lda == inner && ldb == cols && ldc == cols) {
    gemm(exec, ConstMatrix(a, rows, inner), ConstMatrix(b, inner, cols), Matrix(c, rows, cols));
  } else {
    gemm(exec, StridedMatrix(a, Kokkos::LayoutStride(rows, lda, inner, 1)),
         StridedMatrix(b, Kokkos::LayoutStride(inner, ldb, cols, 1)),
         StridedOut(c, Kokkos::LayoutStride(rows, ldc, cols, 1)));
  }
}

/// For every head h < heads, c_h = alpha a_h b_h (b_h inner x cols) or,
/// with transpose_b, alpha a_h b_h^T (b_h cols x inner), on exec (float or
/// double; exact products, or TF32 products for float on cuBLAS as
/// float_gemm says): a_h is rows x inner and c_h rows x cols, each head's
/// matrix row-major with its own row stride (HeadMatrices), as one head's
/// slice of a (..., H, D) tensor is. One batched cuBLAS call on CUDA; a host
/// BLAS call per head where Kokkos Kernels has its BLAS TPL; else Kokkos
/// Kernels' GEMM per head on LayoutStride views.
template <class ExecSpace, class Scalar>
void gemm_heads(const ExecSpace& exec, std::int64_t heads, std::int64_t rows, std::int64_t cols,
                std::int64_t inner, HeadMatrices<const Scalar> a, HeadMatrices<const Scalar> b,
                bool transpose_b, HeadMatrices<Scalar> c, FloatGemm float_gemm = FloatGemm::Fp32,
                double alpha = 1) {
  using Memory = typename ExecSpace::memory_space;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  (void)float_gemm;  // the host BLAS and Kokkos Kernels multiply in fp32
  fit_single_row_strides(rows, cols, inner, transpose_b, a.ld, b.ld, c.ld);
  if constexpr (calls_cublas<ExecSpace>()) {
#if KOKKOSMLA_ENABLE_CUBLAS
    tensor_gemm_heads(exec, heads, rows, cols, inner, a, b, transpose_b, c, float_gemm, alpha);
#endif
  } else if constexpr (calls_host_blas<ExecSpace>()) {
#ifdef KOKKOSKERNELS_ENABLE_TPL_BLAS
    require_int_head_gemm_extents({rows, cols, inner, a.ld, b.ld, c.ld});
    exec.fence();  // BLAS runs on this thread, after what exec was given before
    // Row-major c = a op(b) is column-major c^T = op(b)^T a^T.
    for (std::int64_t h = 0; h < heads; ++h)
      KokkosBlas::Impl::HostBlas<Scalar>::gemm(
          transpose_b ? 'T' : 'N', 'N', int(cols), int(rows), int(inner), Scalar(alpha), b.data + h * b.step,
          int(b.ld), a.data + h * a.step, int(a.ld), Scalar(0), c.data + h * c.step, int(c.ld));
#endif
  } else {
    using Strided = Kokkos::View<const Scalar**, Kokkos::LayoutStride, Memory, Unmanaged>;
    using Out = Kokkos::View<Scalar**, Kokkos::LayoutStride, Memory, Unmanaged>;
    for (std::int64_t h = 0; h < heads; ++h) {
      const Strided bh = transpose_b ? Strided(b.data + h * b.step, Kokkos::LayoutStride(cols, b.ld, inner, 1))
                                     : Strided(b.data + h * b.step, Kokkos::LayoutStride(inner, b.ld, cols, 1));
      gemm(exec, Strided(a.data + h * a.step, Kokkos::LayoutStride(rows, a.ld, inner, 1)), bh,
           Out(c.data + h * c.step, Kokkos::LayoutStride(rows, c.ld, cols, 1)), transpose_b ? "T" : "N",
           alpha);
    }
  }
}

/// Writes the device addresses of a grouped GEMM's matrices (gemm_groups):
/// a's of every (group, head), then b's, then c's, `count` each.
template <class T>
struct GroupedGemmPointers {
  std::uintptr_t* to;
  GroupedMatrices<const T> a, b;
  GroupedMatrices<T> c;
  std::int64_t heads, count;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t g = i / heads, h = i % heads;
    to[i] = reinterpret_cast<std::uintptr_t>(a.data + g * a.group_step + h * a.step);
    to[count + i] = reinterpret_cast<std::uintptr_t>(b.data + g * b.group_step + h * b.step);
    to[2 * count + i] = reinterpret_cast<std::uintptr_t>(c.data + g * c.group_step + h * c.step);
  }
};

/// Elements of the pointer workspace gemm_groups takes for groups x heads matrices.
inline std::int64_t grouped_gemm_pointers(std::int64_t groups, std::int64_t heads) {
  return 3 * groups * heads;
}

/// For every group g < groups and head h < heads, c_gh = a_gh b_gh or, with
/// transpose_b, a_gh b_gh^T (as gemm_heads, each group's heads at their
/// steps): on cuBLAS one batched call over every (group, head), whose
/// matrices' addresses are first written into `pointers` (at least
/// grouped_gemm_pointers elements) on exec, so that the call neither waits
/// for the host nor copies from it; elsewhere, and for one group, one
/// gemm_heads call a group.
template <class ExecSpace, class Scalar>
void gemm_groups(const ExecSpace& exec, std::int64_t groups, std::int64_t heads, std::int64_t rows,
                 std::int64_t cols, std::int64_t inner, GroupedMatrices<const Scalar> a,
                 GroupedMatrices<const Scalar> b, bool transpose_b, GroupedMatrices<Scalar> c,
                 const Kokkos::View<std::uintptr_t*, typename ExecSpace::memory_space>& pointers,
                 FloatGemm float_gemm = FloatGemm::Fp32) {
  if constexpr (calls_cublas<ExecSpace>()) {
#if KOKKOSMLA_ENABLE_CUBLAS
    const std::int64_t count = groups * heads;
    if (groups > 1 && std::int64_t(pointers.extent(0)) >= grouped_gemm_pointers(groups, heads)) {
      std::uintptr_t* const p = pointers.data();
      Kokkos::parallel_for("KokkosMLA::gemm_groups::pointers",
                           Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, count),
                           GroupedGemmPointers<Scalar>{p, a, b, c, heads, count});
      tensor_gemm_pointers(exec, count, rows, cols, inner, reinterpret_cast<const Scalar* const*>(p), a.ld,
                           reinterpret_cast<const Scalar* const*>(p + count), b.ld, transpose_b,
                           reinterpret_cast<Scalar* const*>(p + 2 * count), c.ld, float_gemm);
      return;
    }
#endif
  }
  (void)pointers;
  for (std::int64_t g = 0; g < groups; ++g)
    gemm_heads(exec, heads, rows, cols, inner, a.group(g), b.group(g), transpose_b, c.group(g), float_gemm);
}

/// The Decompressed prefill's up-projection: c (rows, H, D) = a w, c's rows
/// ldc >= H D elements apart, for a row-major a (rows x inner, its rows lda apart) and weights w
/// (inner, H, D) whose rows and heads lie at w.row and w.head (HeadRows): one
/// GEMM where the heads lie D apart (w an inner x (H D) matrix of leading
/// dimension w.row), else one per head (the halves of one (R, H, 2 D)
/// array, say).
template <class ExecSpace, class Scalar>
void gemm_weights(const ExecSpace& exec, std::int64_t rows, std::int64_t heads, std::int64_t dim,
                  std::int64_t inner, const Scalar* a, std::int64_t lda, HeadRows<const Scalar> w, Scalar* c,
                  std::int64_t ldc, FloatGemm float_gemm = FloatGemm::Fp32) {
  if (w.head == dim || heads == 1)
    gemm_strided_rows(exec, rows, heads * dim, inner, a, lda, w.ptr, w.row, c, ldc, float_gemm);
  else
    gemm_heads<ExecSpace, Scalar>(exec, heads, rows, dim, inner, {a, lda, 0}, head_matrices(w), false,
                                  {c, ldc, dim}, float_gemm);
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
