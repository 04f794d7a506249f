// The DecodeTensorSm80 path (see the header).

#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"

#include "impl/KokkosMLA_DecodeTensorKernel.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// float plans take the tensor cores only when asked to (TF32 or its 3xTF32
/// emulation of fp32), and only on native caches.
template <class Scalar>
bool products_allowed(const CacheProblem& p) {
  if constexpr (std::is_same<Scalar, float>::value)
    return (p.options.emulate_fp32 || p.options.allow_tf32) && p.shape.storage == CacheStorage::Native;
  else
    return true;
}

/// With float data, 3xTF32 where fp32 is emulated.
template <class Scalar>
bool split_products(const Options& opt) {
  return std::is_same<Scalar, float>::value && opt.emulate_fp32;
}

}  // namespace

template <class Scalar, class ExecSpace>
bool DecodeTensorSm80Path<Scalar, ExecSpace>::applicable(const CacheProblem& p) {
  return products_allowed<Scalar>(p) && tensor_cache_widths(p.shape) && p.backend.compute_capability >= 80 &&
         decode_scratch_bytes<DecodeTensorKernel, Scalar>(p.shape) <=
             decode_scratch_budget<DecodeTensorKernel, Scalar>(p.backend);
}

template <class Scalar, class ExecSpace>
DecodeTensorSm80Path<Scalar, ExecSpace>::DecodeTensorSm80Path(const ExecSpace&, const CacheProblem& p)
    : AbsorbedTensorPath<Scalar, ExecSpace>(
          p, decode_splits<DecodeTensorKernel, Scalar>(p.shape, p.backend, p.options.kv_splits), 4) {}

template <class Scalar, class ExecSpace>
std::string DecodeTensorSm80Path<Scalar, ExecSpace>::describe() const {
  using Kernel = DecodeTensorKernel<Scalar, 64>;
  std::ostringstream o;
  o << "on tensor cores splits=" << this->splits_ << " team_size=" << Kernel::kThreads
    << " key_tile=" << Kernel::kKeys
    << " scratch=" << decode_scratch_bytes<DecodeTensorKernel, Scalar>(this->problem_.shape)
    << "B@level0 workspace=" << this->workspace_bytes() << "B";
  if (std::is_same<Scalar, float>::value)
    o << (split_products<Scalar>(this->problem_.options) ? " products=3xtf32" : " products=tf32");
  return o.str();
}

template <class Scalar, class ExecSpace>
void DecodeTensorSm80Path<Scalar, ExecSpace>::attend_kernel(const ExecSpace& exec, const Call& a,
                                                            Scalar* qa) const {
  const CacheProblem& p = this->problem_;
  auto attend = [&](auto products) {
    attend_in_parts<DecodeTensorKernel, decltype(products)>(
        exec, "KokkosMLA::CacheAttention::attend_tensor", p.shape, this->splits_, float(p.scale),
        p.options.causal, a, qa, this->parts_.data(), this->listed());
  };
  if constexpr (std::is_same<Scalar, float>::value) {
    if (split_products<Scalar>(p.options)) return attend(SplitTf32());
  }
  attend(Scalar());
}

template class DecodeTensorSm80Path<float, Kokkos::Cuda>;
#if KOKKOSMLA_HAS_HALF
template class DecodeTensorSm80Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class DecodeTensorSm80Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
