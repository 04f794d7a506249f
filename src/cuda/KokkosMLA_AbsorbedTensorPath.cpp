// The shared part of the 16-bit tensor-core cache paths (see the header).

#include "cuda/KokkosMLA_AbsorbedTensorPath.hpp"

#include "impl/KokkosMLA_TensorGemm.hpp"
#include "impl/KokkosMLA_TensorOps.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
AbsorbedTensorPath<Scalar, ExecSpace>::AbsorbedTensorPath(const CacheProblem& p, int splits,
                                                          std::size_t q_rope_alignment)
    : problem_(p), splits_(splits), q_rope_alignment_(q_rope_alignment) {
  const CacheShape& s = p.shape;
  const std::int64_t rows = s.batch * s.queries * s.heads;
  qa_ = workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::CachePlan::workspace",
                                                            rows * s.latent_dim);
  parts_ = workspace<float, typename ExecSpace::memory_space>(
      "KokkosMLA::CachePlan::parts", splits_ > 1 ? splits_ * rows * (s.latent_dim + 1) : 0);
}

template <class Scalar, class ExecSpace>
void AbsorbedTensorPath<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& a) const {
  const char* caller = "KokkosMLA::CachePlan::execute";
  // The kernels copy cache rows in 16-byte pieces and read q_rope in pieces too.
  require_aligned(caller, "cache.latent", a.cache.latent.data(), 16);
  if (a.cache.latent.extent(2) % 8 != 0)
    throw std::invalid_argument(std::string(caller) + ": cache.latent's rows (" +
                                std::to_string(a.cache.latent.extent(2)) +
                                " elements) must be a multiple of 16 bytes for the tensor-core path");
  if (a.cache.k_rope.size() > 0) require_aligned(caller, "cache.k_rope", a.cache.k_rope.data(), 16);
  require_aligned(caller, "q_rope", a.q_rope.data(), q_rope_alignment_);

  const CacheShape& s = problem_.shape;
  const std::int64_t H = s.heads, D = s.head_dim, R = s.latent_dim, rows = s.batch * s.queries;
  Scalar* qa = qa_.data();
  using Const = HeadMatrices<const Scalar>;
  tensor_gemm_heads<Scalar>(exec, H, rows, R, D, Const{a.q.data(), H * D, D}, Const{a.w_uk.data(), H * D, D},
                            true, HeadMatrices<Scalar>{qa, H * R, R});
  this->attend_absorbed(exec, a, qa);
  tensor_gemm_heads<Scalar>(exec, H, rows, D, R, Const{qa, H * R, R}, Const{a.w_uv.data(), H * D, D}, false,
                            HeadMatrices<Scalar>{a.out.data(), H * D, D});
}

#if KOKKOSMLA_HAS_HALF
template class AbsorbedTensorPath<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class AbsorbedTensorPath<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
