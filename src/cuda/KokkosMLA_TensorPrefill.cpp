// The tensor-core prefill paths' shared part (see the header).

#include "cuda/KokkosMLA_TensorPrefill.hpp"

#include "impl/KokkosMLA_StridedGemm.hpp"
#include "impl/KokkosMLA_TensorOps.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
TensorPrefill<Scalar, ExecSpace>::TensorPrefill(const PrefillProblem& p)
    : problem_(p),
      kv_(Impl::workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::Plan::workspace",
                                                                    2 * kv_elements(p.shape))) {}

template <class Scalar, class ExecSpace>
const Scalar* TensorPrefill<Scalar, ExecSpace>::decompress(const ExecSpace& exec, const Call& c,
                                                           FloatGemm float_gemm) const {
  const char* caller = "KokkosMLA::Plan::execute";
  require_aligned(caller, "q", c.q.data(), 2 * sizeof(Scalar));
  require_aligned(caller, "out", c.out.data(), 2 * sizeof(Scalar));
  const Shape& s = problem_.shape;
  const std::int64_t rows = s.batch * s.keys, cols = s.heads * s.head_dim;
  Scalar* k = kv_.data();
  Kokkos::Profiling::pushRegion("KokkosMLA::Decompressed::gemm");
  const Scalar* latent = c.latent.data();
  const std::int64_t ld = latent_row_stride(c.latent);  // a slice of a packed array is read in place
  gemm_weights(exec, rows, s.heads, s.head_dim, s.latent_dim, latent, ld, weight_rows(c.w_uk), k, cols,
               float_gemm);
  gemm_weights(exec, rows, s.heads, s.head_dim, s.latent_dim, latent, ld, weight_rows(c.w_uv),
               k + rows * cols, cols, float_gemm);
  Kokkos::Profiling::popRegion();
  return k;
}

template class TensorPrefill<float, Kokkos::Cuda>;
#if KOKKOSMLA_HAS_HALF
template class TensorPrefill<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class TensorPrefill<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
