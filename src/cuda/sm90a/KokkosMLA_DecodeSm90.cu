// The DecodeSm90 path (see cuda/KokkosMLA_DecodeSm90.hpp).

#include "cuda/KokkosMLA_DecodeSm90.hpp"

#include "cuda/sm90a/KokkosMLA_DecodeSm90Kernel.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
bool DecodeSm90Path<Scalar, ExecSpace>::applicable(const CacheProblem& p) {
  // sm_90a code runs on compute capability 9.0 alone. Below one team's 64
  // query rows per sequence (per query token with sparse indices) the mma.sync kernel, 16 rows a team, is
  // faster (B = 128, S = 4096 on the H200: 0.17 against 0.31 ms at H = 16).
  const CacheShape& s = p.shape;
  const CacheShape rows = decode_shape(s);  // with sparse indices: heads alone
  return tensor_cache_widths(s) && rows.queries * rows.heads >= DecodeSm90Kernel<Scalar, 64>::kRows &&
         p.backend.compute_capability == 90 &&
         decode_scratch_bytes<DecodeSm90Kernel, Scalar>(s) <=
             decode_scratch_budget<DecodeSm90Kernel, Scalar>(p.backend);
}

template <class Scalar, class ExecSpace>
DecodeSm90Path<Scalar, ExecSpace>::DecodeSm90Path(const ExecSpace&, const CacheProblem& p)
    : AbsorbedTensorPath<Scalar, ExecSpace>(
          p, decode_splits<DecodeSm90Kernel, Scalar>(p.shape, p.backend, p.options.kv_splits), 16) {}

template <class Scalar, class ExecSpace>
std::string DecodeSm90Path<Scalar, ExecSpace>::describe() const {
  using Kernel = DecodeSm90Kernel<Scalar, 64>;
  std::ostringstream o;
  o << "on Hopper warpgroups splits=" << this->splits_ << " team_size=" << Kernel::kThreads
    << " rows=" << Kernel::kRows << " key_tile=" << Kernel::kKeys
    << " scratch=" << decode_scratch_bytes<DecodeSm90Kernel, Scalar>(this->problem_.shape)
    << "B@level0 workspace=" << this->workspace_bytes() << "B";
  return o.str();
}

template <class Scalar, class ExecSpace>
void DecodeSm90Path<Scalar, ExecSpace>::attend_kernel(const ExecSpace& exec, const Call& a,
                                                      Scalar* qa) const {
  attend_in_parts<DecodeSm90Kernel, Scalar>(
      exec, "KokkosMLA::CacheAttention::attend_sm90", this->problem_.shape, this->splits_,
      float(this->problem_.scale), this->problem_.options.causal, a, qa, this->parts_.data(), this->listed());
}

#if KOKKOSMLA_HAS_HALF
template class DecodeSm90Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class DecodeSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
