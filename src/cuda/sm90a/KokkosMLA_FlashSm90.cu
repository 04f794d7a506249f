// The FlashSm90 path (see cuda/KokkosMLA_FlashSm90.hpp).

#include "cuda/KokkosMLA_FlashSm90.hpp"

#include "cuda/sm90a/KokkosMLA_FlashSm90Kernel.hpp"
#include "impl/KokkosMLA_Launch.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// The kernel's scratch per team for head dimension d.
template <class T>
std::size_t scratch_bytes(std::int64_t d) {
  return d == 64 ? FlashSm90Kernel<T, 64>::scratch_bytes() : FlashSm90Kernel<T, 128>::scratch_bytes();
}

template <class T, int D>
void launch_flash(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal, HeadRows<const T> q,
                  const T* k, const std::uint64_t* tile_maps, HeadRows<T> out, LseRows<float> lse) {
  using Kernel = FlashSm90Kernel<T, D>;
  Kernel f{q, k, k + kv_elements(s), out, lse, s.batch, s.queries, s.keys, s.heads, scale, causal};
  f.head_group = Kernel::head_group_for(s.keys);
  f.tile_maps = tile_maps;
  launch(exec, "KokkosMLA::Decompressed::flash_sm90", f, Kernel::kThreads, Kernel::scratch_bytes(), true,
         typename Kernel::bounds());
}

/// The TMA maps of the workspace's K and V (B, S, H, D) for the kernel of head dimension D.
template <class T, int D>
Kokkos::View<std::uint64_t*, Kokkos::CudaSpace> kv_maps(const Kokkos::Cuda& exec, const T* k, const Shape& s) {
  const tma::TensorShape shape = FlashSm90Kernel<T, D>::tile_shape(s.batch, s.keys, s.heads);
  return tma::device_maps(exec, "KokkosMLA::FlashSm90::tile_maps", {{k, shape}, {k + kv_elements(s), shape}});
}

}  // namespace

template <class Scalar, class ExecSpace>
bool FlashSm90Path<Scalar, ExecSpace>::applicable(const PrefillProblem& p) {
  // sm_90a code runs on compute capability 9.0 alone.
  using Kernel = FlashSm90Kernel<Scalar, 128>;
  const std::int64_t d = p.shape.head_dim;
  const Algorithm a = p.options.algorithm;
  return (a == Algorithm::Auto || a == Algorithm::Decompressed) && (d == 64 || d == 128) &&
         p.backend.compute_capability == 90 &&
         scratch_bytes<Scalar>(d) <=
             p.backend.scratch_budget(demand_of<typename Kernel::bounds>(Kernel::kThreads, kAnyTeamScratch));
}

template <class Scalar, class ExecSpace>
FlashSm90Path<Scalar, ExecSpace>::FlashSm90Path(const ExecSpace& exec, const PrefillProblem& p)
    : TensorPrefill<Scalar, ExecSpace>(p),
      // K and V stay at the workspace's address for the plan's life: their maps are made once.
      tile_maps_(p.shape.head_dim == 64 ? kv_maps<Scalar, 64>(exec, this->kv_.data(), p.shape)
                                        : kv_maps<Scalar, 128>(exec, this->kv_.data(), p.shape)) {}

template <class Scalar, class ExecSpace>
std::string FlashSm90Path<Scalar, ExecSpace>::describe() const {
  using Kernel = FlashSm90Kernel<Scalar, 128>;
  std::ostringstream o;
  o << "team_size=" << Kernel::kThreads << " query_tile=" << Kernel::kRows
    << " flash=Hopper warpgroups key_tile=" << Kernel::kKeys
    << " scratch=" << scratch_bytes<Scalar>(this->problem_.shape.head_dim) << "B@level0";
  return o.str();
}

template <class Scalar, class ExecSpace>
void FlashSm90Path<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& c) const {
  const Scalar* k = this->decompress(exec, c, FloatGemm::Tf32);
  const Shape& s = this->problem_.shape;
  const float scale = float(this->problem_.scale);
  const bool causal = this->problem_.options.causal;
  if (s.head_dim == 64)
    launch_flash<Scalar, 64>(exec, s, scale, causal, head_rows(c.q), k, tile_maps_.data(), head_rows(c.out),
                             c.lse);
  else
    launch_flash<Scalar, 128>(exec, s, scale, causal, head_rows(c.q), k, tile_maps_.data(), head_rows(c.out),
                              c.lse);
}

#if KOKKOSMLA_HAS_HALF
template class FlashSm90Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class FlashSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
