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
  const std::int64_t tokens = s.topk > 0 ? s.batch * s.queries : 0;
  listed_rows_ = workspace<std::int64_t, typename ExecSpace::memory_space>(
      "KokkosMLA::CachePlan::listed_rows", tokens * s.topk);
  listed_counts_ =
      workspace<int, typename ExecSpace::memory_space>("KokkosMLA::CachePlan::listed_counts", tokens);
}

template <class Scalar, class ExecSpace>
ListedKeys AbsorbedTensorPath<Scalar, ExecSpace>::listed() const {
  const CacheShape& s = problem_.shape;
  if (s.topk == 0) return {};
  return {listed_rows_.data(), listed_counts_.data(), s.topk};
}

/// Sparse attention's lists for the decode kernels: the cache rows (through
/// `keys`' block table) of each query token's entries of
/// CacheArguments::indices that name a key (0 <= position < seqlens(b); -1
/// marks an unused one), in their order, and their count. A team per query
/// token, one scan over its list.
template <class Keys>  // a LatentKeys
struct ListKeysKernel {
  const int* indices;  // (B Tq, topk)
  Keys keys;           // the cache's addressing: lengths, block table
  std::int64_t* rows;  // (B Tq, topk): ListedKeys::rows
  int* counts;         // (B Tq): ListedKeys::counts
  std::int64_t topk, tokens;
  using Member = Kokkos::TeamPolicy<Kokkos::Cuda>::member_type;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t row = team.league_rank(), b = row / tokens;
    const std::int64_t length = keys.length(b);
    const int* from = indices + row * topk;
    std::int64_t* to = rows + row * topk;
    int total = 0;
    Kokkos::parallel_scan(
        Kokkos::TeamThreadRange(team, int(topk)),
        [&](int j, int& before, bool final) {
          const int p = from[j];
          const bool names_a_key = p >= 0 && p < length;
          if (final && names_a_key) to[before] = keys.row(b, p);
          before += names_a_key ? 1 : 0;
        },
        total);
    Kokkos::single(Kokkos::PerTeam(team), [&] { counts[row] = total; });
  }
};

template <class Scalar, class ExecSpace>
void AbsorbedTensorPath<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& a) const {
  const char* caller = "KokkosMLA::CachePlan::execute";
  // The kernels copy cache rows in 16-byte pieces and read q_rope in pieces too.
  if (a.cache.storage != CacheStorage::Native) {
    require_aligned(caller, "cache.fp8.tokens", a.cache.fp8.tokens.data(), 16);  // tokens of 656 or 576 bytes
  } else {
    require_aligned(caller, "cache.latent", a.cache.latent.data(), 16);
    if (a.cache.latent.extent(2) * sizeof(Scalar) % 16 != 0)
      throw std::invalid_argument(std::string(caller) + ": cache.latent's rows (" +
                                  std::to_string(a.cache.latent.extent(2)) +
                                  " elements) must be a multiple of 16 bytes for the tensor-core path");
    if (a.cache.k_rope.size() > 0) require_aligned(caller, "cache.k_rope", a.cache.k_rope.data(), 16);
  }
  require_aligned(caller, "q_rope", a.q_rope.data(), q_rope_alignment_);

  const CacheShape& s = problem_.shape;
  const std::int64_t H = s.heads, D = s.head_dim, R = s.latent_dim, rows = s.batch * s.queries;
  Scalar* qa = qa_.data();
  using Const = HeadMatrices<const Scalar>;
  // float: fp32 GEMMs where fp32 is emulated (a few per cent of the
  // attention's products), TF32 ones under allow_tf32.
  const FloatGemm float_gemm = float_gemm_for<Scalar>(problem_.options);
  const HeadRows<const Scalar> w_uk = weight_rows(a.w_uk), w_uv = weight_rows(a.w_uv);
  tensor_gemm_heads<Scalar>(exec, H, rows, R, D, head_matrices(head_rows(a.q)), head_matrices(w_uk), true,
                            HeadMatrices<Scalar>{qa, H * R, R}, float_gemm);
  attend_absorbed(exec, a, qa);
  tensor_gemm_heads<Scalar>(exec, H, rows, D, R, Const{qa, H * R, R}, head_matrices(w_uv), false,
                            head_matrices(head_rows(a.out)), float_gemm);
}

template <class Scalar, class ExecSpace>
void AbsorbedTensorPath<Scalar, ExecSpace>::attend_absorbed(const ExecSpace& exec, const Call& a,
                                                            Scalar* qa) const {
  const CacheShape& s = problem_.shape;
  if (s.topk > 0) {
    const std::int64_t tokens = s.batch * s.queries;
    auto list = [&](auto keys) {
      Kokkos::parallel_for("KokkosMLA::CacheAttention::list_indices",
                           Kokkos::TeamPolicy<Kokkos::Cuda>(exec, int(tokens), 128),
                           ListKeysKernel<decltype(keys)>{a.indices.data(), keys, listed_rows_.data(),
                                                          listed_counts_.data(), s.topk, s.queries});
    };
    if (s.storage == CacheStorage::Native)
      list(cache_rows<Scalar>(a.cache, a.cache.latent));
    else
      list(cache_rows<std::uint8_t>(a.cache, a.cache.fp8.tokens));
  }
  attend_kernel(exec, a, qa);
}

template class AbsorbedTensorPath<float, Kokkos::Cuda>;
#if KOKKOSMLA_HAS_HALF
template class AbsorbedTensorPath<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class AbsorbedTensorPath<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
