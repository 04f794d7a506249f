// The DecodeTensorSm80 path (see the header).

#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"

#include "impl/KokkosMLA_DecodeTensorKernel.hpp"
#include "impl/KokkosMLA_Splits.hpp"
#include "impl/KokkosMLA_TensorGemm.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// The kernel's scratch per team, with or without RoPE keys.
template <class T>
std::size_t scratch_bytes(std::int64_t rope_dim) {
  return rope_dim > 0 ? DecodeTensorKernel<T, 64>::scratch_bytes()
                      : DecodeTensorKernel<T, 0>::scratch_bytes();
}

/// Parts per sequence (split_count): its teams, 16 query rows each, at
/// kTeamsPerSM per SM, parts at least 256 keys long, at most what the merge takes.
template <class T>
int tensor_splits(const CacheShape& s, const Backend& be, int requested) {
  using Kernel = DecodeTensorKernel<T, 64>;  // the same teams without RoPE
  SplitInputs in;
  in.teams_per_part = double(s.batch * ((s.queries * s.heads + Kernel::kRows - 1) / Kernel::kRows));
  in.slots = be.resident_teams(demand_of<typename Kernel::bounds>(Kernel::kThreads, kAnyTeamScratch),
                               scratch_bytes<T>(s.rope_dim));
  in.capacity = s.capacity;
  in.min_part = 256;
  in.most = in.most_requested = DecodeMergeKernel<T>::kMaxSplits;
  return split_count(in, requested);
}

/// The attention between absorption and up-projection: qa (B Tq H, R) in,
/// oa out in its place, in parts merged by lse.
template <class T, int Rope>
void attend_in_parts(const Kokkos::Cuda& exec, const CacheShape& s, int splits, float scale, bool causal,
                     const CacheArguments<T, Kokkos::Cuda::memory_space>& a, T* qa, float* parts) {
  DecodeTensorKernel<T, Rope> k;
  k.qa = qa;
  k.q_rope = a.q_rope.data();
  k.cache = latent_keys<T>(a.cache, s.latent_dim, s.rope_dim);
  k.oa = qa;  // each team reads its rows' qa before it writes their oa
  k.parts = parts;
  k.lse = a.lse.size() > 0 ? a.lse.data() : nullptr;
  k.batch = s.batch;
  k.queries = s.queries;
  k.heads = s.heads;
  k.splits = splits;
  k.scale = scale;
  k.causal = causal;
  attend_decode_tensor(exec, k);
}

}  // namespace

template <class Scalar, class ExecSpace>
bool DecodeTensorSm80Path<Scalar, ExecSpace>::applicable(const CacheProblem& p) {
  using Kernel = DecodeTensorKernel<Scalar, 64>;
  const CacheShape& s = p.shape;
  return s.topk == 0 && s.latent_dim == Kernel::kRank && (s.rope_dim == Kernel::kRope || s.rope_dim == 0) &&
         p.backend.compute_capability >= 80 &&
         scratch_bytes<Scalar>(s.rope_dim) <=
             p.backend.scratch_budget(demand_of<typename Kernel::bounds>(Kernel::kThreads, kAnyTeamScratch));
}

template <class Scalar, class ExecSpace>
DecodeTensorSm80Path<Scalar, ExecSpace>::DecodeTensorSm80Path(const ExecSpace&, const CacheProblem& p)
    : problem_(p), splits_(tensor_splits<Scalar>(p.shape, p.backend, p.options.kv_splits)) {
  const CacheShape& s = p.shape;
  const std::int64_t rows = s.batch * s.queries * s.heads;
  qa_ = workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::CachePlan::workspace",
                                                            rows * s.latent_dim);
  parts_ = workspace<float, typename ExecSpace::memory_space>(
      "KokkosMLA::CachePlan::parts", splits_ > 1 ? splits_ * rows * (s.latent_dim + 1) : 0);
}

template <class Scalar, class ExecSpace>
std::string DecodeTensorSm80Path<Scalar, ExecSpace>::describe() const {
  using Kernel = DecodeTensorKernel<Scalar, 64>;
  std::ostringstream o;
  o << "on tensor cores splits=" << splits_ << " team_size=" << Kernel::kThreads
    << " key_tile=" << Kernel::kKeys << " scratch=" << scratch_bytes<Scalar>(problem_.shape.rope_dim)
    << "B@level0 workspace=" << workspace_bytes() << "B";
  return o.str();
}

template <class Scalar, class ExecSpace>
void DecodeTensorSm80Path<Scalar, ExecSpace>::attend_absorbed(const ExecSpace& exec, const Call& a,
                                                              Scalar* qa) const {
  const CacheShape& s = problem_.shape;
  const float scale = float(problem_.scale);
  const bool causal = problem_.options.causal;
  if (s.rope_dim > 0)
    attend_in_parts<Scalar, 64>(exec, s, splits_, scale, causal, a, qa, parts_.data());
  else
    attend_in_parts<Scalar, 0>(exec, s, splits_, scale, causal, a, qa, parts_.data());
}

template <class Scalar, class ExecSpace>
void DecodeTensorSm80Path<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& a) const {
  const char* caller = "KokkosMLA::CachePlan::execute";
  // The kernel copies cache rows in 16-byte pieces and reads q_rope in pairs.
  require_aligned(caller, "cache.latent", a.cache.latent.data(), 16);
  if (a.cache.latent.extent(2) % 8 != 0)
    throw std::invalid_argument(std::string(caller) + ": cache.latent's rows (" +
                                std::to_string(a.cache.latent.extent(2)) +
                                " elements) must be a multiple of 16 bytes for the tensor-core path");
  if (a.cache.k_rope.size() > 0) require_aligned(caller, "cache.k_rope", a.cache.k_rope.data(), 16);
  require_aligned(caller, "q_rope", a.q_rope.data(), 4);

  const CacheShape& s = problem_.shape;
  const std::int64_t H = s.heads, D = s.head_dim, R = s.latent_dim, rows = s.batch * s.queries;
  Scalar* qa = qa_.data();
  using Const = HeadMatrices<const Scalar>;
  tensor_gemm_heads<Scalar>(exec, H, rows, R, D, Const{a.q.data(), H * D, D}, Const{a.w_uk.data(), H * D, D},
                            true, HeadMatrices<Scalar>{qa, H * R, R});
  attend_absorbed(exec, a, qa);
  tensor_gemm_heads<Scalar>(exec, H, rows, D, R, Const{qa, H * R, R}, Const{a.w_uv.data(), H * D, D}, false,
                            HeadMatrices<Scalar>{a.out.data(), H * D, D});
}

#if KOKKOSMLA_HAS_HALF
template class DecodeTensorSm80Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class DecodeTensorSm80Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
