// The FlashTensorSm80 path (see the header).

#include "cuda/KokkosMLA_FlashTensorSm80.hpp"

#include "impl/KokkosMLA_FlashTensorKernel.hpp"
#include "impl/KokkosMLA_Launch.hpp"
#include "impl/KokkosMLA_Widen.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

template <class T, int D, class Products = T>
void launch_flash_tensor(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal,
                         HeadRows<const T> q, const T* k, const T* v, HeadRows<T> out, LseRows<float> lse) {
  using Kernel = FlashTensorKernel<T, D, Products>;
  Kernel f{q, k, v, out, lse, s.batch, s.queries, s.keys, s.heads, scale, causal};
  f.head_group = Kernel::head_group_for(s.keys);
  launch(exec, "KokkosMLA::Decompressed::flash_tensor", f, Kernel::kThreads, Kernel::scratch_bytes(), true,
         typename Kernel::bounds());
}

/// The kernel for the problem's head dimension, 64 or 128.
template <class T, class Products = T>
void launch_for_head_dim(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal,
                         HeadRows<const T> q, const T* k, const T* v, HeadRows<T> out, LseRows<float> lse) {
  if (s.head_dim == 64)
    launch_flash_tensor<T, 64, Products>(exec, s, scale, causal, q, k, v, out, lse);
  else
    launch_flash_tensor<T, 128, Products>(exec, s, scale, causal, q, k, v, out, lse);
}

/// The kernel's scratch per team for head dimension d.
template <class T>
std::size_t scratch_bytes(std::int64_t d) {
  return d == 64 ? FlashTensorKernel<T, 64>::scratch_bytes() : FlashTensorKernel<T, 128>::scratch_bytes();
}

}  // namespace

template <class Scalar, class ExecSpace>
bool FlashTensorSm80Path<Scalar, ExecSpace>::applicable(const PrefillProblem& p) {
  using Kernel = FlashTensorKernel<Scalar, 128>;
  const Options& opt = p.options;
  const std::int64_t d = p.shape.head_dim;
  return tensor_products_allowed<Scalar>(opt) &&
         (opt.algorithm == Algorithm::Auto || opt.algorithm == Algorithm::Decompressed) &&
         (d == 64 || d == 128) && p.backend.compute_capability >= 80 &&
         scratch_bytes<Scalar>(d) <=
             p.backend.scratch_budget(demand_of<typename Kernel::bounds>(Kernel::kThreads, kAnyTeamScratch));
}

template <class Scalar, class ExecSpace>
FlashTensorSm80Path<Scalar, ExecSpace>::FlashTensorSm80Path(const ExecSpace&, const PrefillProblem& p)
    : TensorPrefill<Scalar, ExecSpace>(p) {}

template <class Scalar, class ExecSpace>
std::string FlashTensorSm80Path<Scalar, ExecSpace>::describe() const {
  using Kernel = FlashTensorKernel<Scalar, 128>;
  std::ostringstream o;
  o << "team_size=" << Kernel::kThreads << " query_tile=" << Kernel::kRows << " flash=tensor-core"
    << products_label<Scalar>(this->problem_.options) << " key_tile=" << Kernel::kKeys
    << " scratch=" << scratch_bytes<Scalar>(this->problem_.shape.head_dim) << "B@level0";
  return o.str();
}

template <class Scalar, class ExecSpace>
void FlashTensorSm80Path<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& c) const {
  const Shape& s = this->problem_.shape;
  const bool split = split_tf32<Scalar>(this->problem_.options);
  const Scalar* k = this->decompress(exec, c, float_gemm_for<Scalar>(this->problem_.options));
  const Scalar* v = k + kv_elements(s);
  const float scale = float(this->problem_.scale);
  const bool causal = this->problem_.options.causal;
  if constexpr (std::is_same<Scalar, float>::value) {
    if (split) {
      launch_for_head_dim<float, SplitTf32>(exec, s, scale, causal, head_rows(c.q), k, v, head_rows(c.out),
                                            c.lse);
      return;
    }
  }
  launch_for_head_dim<Scalar>(exec, s, scale, causal, head_rows(c.q), k, v, head_rows(c.out), c.lse);
}

template class FlashTensorSm80Path<float, Kokkos::Cuda>;
#if KOKKOSMLA_HAS_HALF
template class FlashTensorSm80Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class FlashTensorSm80Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
