// The DecodeSm90 path (see cuda/KokkosMLA_DecodeSm90.hpp).

#include "cuda/KokkosMLA_DecodeSm90.hpp"

#include "cuda/sm90a/KokkosMLA_DecodeSm90Kernel.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

/// Query rows per sequence (per query token with sparse indices) from which
/// the wgmma kernel's 64-row teams beat the mma.sync kernel's 16-row ones:
/// on the H200 (B = 128, H = 16, S = 4096) 0.201 against 0.303 ms at 32 rows
/// (Tq = 2), 0.194 against 0.179 at 16 (Tq = 1); FP8 0.323 against 0.438
/// and 0.321 against 0.230.
constexpr std::int64_t kDecodeSm90MinRows = 32;

template <class Scalar, class ExecSpace>
bool DecodeSm90Path<Scalar, ExecSpace>::applicable(const CacheProblem& p) {
  // sm_90a code runs on compute capability 9.0 alone.
  const CacheShape& s = p.shape;
  const CacheShape rows = decode_shape(s);  // with sparse indices: heads alone
  return tensor_cache_widths(s) && rows.queries * rows.heads >= kDecodeSm90MinRows &&
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
