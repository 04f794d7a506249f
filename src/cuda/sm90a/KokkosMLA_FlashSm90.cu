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

/// K and V bytes of the (batch, head) pairs whose tiles interleave: half of
/// FlashOperands' default, measured 1-2 % faster on an H100 (bf16
/// (1,4096,128,128,512) 1.48 -> 1.46 ms, (1,8192,16,128,512) 0.622 -> 0.617;
/// 8 MB the same, 48 MB slower; docs/performance.md).
constexpr std::int64_t kHeadGroupBytes = std::int64_t(16) << 20;

template <class T, int D>
void launch_flash(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal, HeadRows<const T> q,
                  const T* k, const std::uint64_t* tile_maps, HeadRows<T> out, LseRows<float> lse) {
  using Kernel = FlashSm90Kernel<T, D>;
  Kernel f{q, k, k + kv_elements(s), out, lse, s.batch, s.queries, s.keys, s.heads, scale, causal};
  f.head_group = Kernel::head_group_for(s.keys, kHeadGroupBytes);
  f.tile_maps = tile_maps;
  launch(exec, "KokkosMLA::Decompressed::flash_sm90", f, Kernel::kThreads, Kernel::scratch_bytes(), true,
         typename Kernel::bounds());
}

/// The TMA maps of the workspace's K and V (B, S, H, D) for the kernel of
/// head dimension D, or of K and V^T (values_t) for float.
template <class T, int D>
Kokkos::View<std::uint64_t*, Kokkos::CudaSpace> kv_maps(const Kokkos::Cuda& exec, const T* k, const T* values_t,
                                                         const Shape& s) {
  using Kernel = FlashSm90Kernel<T, D>;
  const tma::TensorShape shape = Kernel::tile_shape(s.batch, s.keys, s.heads);
  if (Kernel::kTf32)
    return tma::device_maps(exec, "KokkosMLA::FlashSm90::tile_maps",
                            {{k, shape}, {values_t, Kernel::value_shape(s.batch, s.keys, s.heads)}});
  return tma::device_maps(exec, "KokkosMLA::FlashSm90::tile_maps", {{k, shape}, {k + kv_elements(s), shape}});
}

/// V (B, S, H, D) into V^T (B, H, D, padded) for the TF32 kernel: key s of a
/// row at wgmma::tf32_value_position(s), rounded to TF32, zeros from S on. A
/// team moves 32 keys of one (batch, head) through scratch, so that both
/// the reads (rows of D) and the writes (rows of 32 keys) are coalesced.
template <int D>
struct TransposeValuesKernel {
  static constexpr int kKeys = 32, kLd = D + 1;  // +1: the column reads hit distinct banks
  using Member = Kokkos::TeamPolicy<Kokkos::Cuda>::member_type;
  const float* v;
  float* values_t;
  std::int64_t batch, keys, heads, padded;
  int scratch_level = 0;

  std::int64_t league_size() const { return batch * heads * (padded / kKeys); }
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() { return kKeys * kLd * sizeof(float); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef __CUDA_ARCH__
    const std::int64_t blocks = padded / kKeys, r = team.league_rank();
    const std::int64_t s0 = (r % blocks) * kKeys, h = (r / blocks) % heads, b = r / (blocks * heads);
    float* tile = static_cast<float*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kKeys * D), [&](int i) {
      const std::int64_t s = s0 + i / D;
      tile[(i / D) * kLd + i % D] = s < keys ? v[((b * keys + s) * heads + h) * D + i % D] : 0.f;
    });
    team.team_barrier();
    float* rows = values_t + (b * heads + h) * D * padded + s0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kKeys * D), [&](int i) {
      const int d = i / kKeys, key = i % kKeys;
      rows[d * padded + wgmma::tf32_value_position(key)] = rounded_to_tf32(tile[key * kLd + d]);
    });
#else
    (void)team;
#endif
  }
};

template <int D>
void transpose_values(const Kokkos::Cuda& exec, const Shape& s, const float* v, float* values_t) {
  const TransposeValuesKernel<D> f{v, values_t, s.batch, s.keys, s.heads,
                                   FlashSm90Kernel<float, D>::padded_keys(s.keys)};
  launch(exec, "KokkosMLA::Decompressed::transpose_values", f, 256, f.scratch_bytes());
}

/// Elements of V^T for a float plan of shape s (none for 16-bit types).
template <class T>
std::int64_t values_t_elements(const Shape& s) {
  if (!std::is_same<T, float>::value) return 0;
  return s.batch * s.heads * s.head_dim * FlashSm90Kernel<float, 64>::padded_keys(s.keys);
}

}  // namespace

template <class Scalar, class ExecSpace>
bool FlashSm90Path<Scalar, ExecSpace>::applicable(const PrefillProblem& p) {
  // sm_90a code runs on compute capability 9.0 alone.
  using Kernel = FlashSm90Kernel<Scalar, 128>;
  const std::int64_t d = p.shape.head_dim;
  const Algorithm a = p.options.algorithm;
  // Float takes TF32 products alone here: 3xTF32 on warpgroup products measured 15x PyTorch's fp32
  // error (docs/performance.md), so it runs on FlashTensorSm80.
  return tensor_products_allowed<Scalar>(p.options) && !split_tf32<Scalar>(p.options) &&
         (a == Algorithm::Auto || a == Algorithm::Decompressed) && (d == 64 || d == 128) &&
         p.backend.compute_capability == 90 &&
         scratch_bytes<Scalar>(d) <=
             p.backend.scratch_budget(demand_of<typename Kernel::bounds>(Kernel::kThreads, kAnyTeamScratch));
}

template <class Scalar, class ExecSpace>
FlashSm90Path<Scalar, ExecSpace>::FlashSm90Path(const ExecSpace& exec, const PrefillProblem& p)
    : TensorPrefill<Scalar, ExecSpace>(p),
      values_t_(Impl::workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::Plan::values_t",
                                                                          values_t_elements<Scalar>(p.shape))),
      // K and V stay at the workspace's address for the plan's life: their maps are made once.
      tile_maps_(p.shape.head_dim == 64
                     ? kv_maps<Scalar, 64>(exec, this->kv_.data(), values_t_.data(), p.shape)
                     : kv_maps<Scalar, 128>(exec, this->kv_.data(), values_t_.data(), p.shape)) {}

template <class Scalar, class ExecSpace>
std::string FlashSm90Path<Scalar, ExecSpace>::describe() const {
  using Kernel = FlashSm90Kernel<Scalar, 128>;
  std::ostringstream o;
  o << "team_size=" << Kernel::kThreads << " query_tile=" << Kernel::kRows << " flash=Hopper warpgroups"
    << products_label<Scalar>(this->problem_.options) << " key_tile=" << Kernel::kKeys
    << " scratch=" << scratch_bytes<Scalar>(this->problem_.shape.head_dim) << "B@level0";
  return o.str();
}

template <class Scalar, class ExecSpace>
void FlashSm90Path<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& c) const {
  const Scalar* k = this->decompress(exec, c, FloatGemm::Tf32);
  const Shape& s = this->problem_.shape;
  if constexpr (std::is_same<Scalar, float>::value) {
    if (s.head_dim == 64)
      transpose_values<64>(exec, s, k + kv_elements(s), values_t_.data());
    else
      transpose_values<128>(exec, s, k + kv_elements(s), values_t_.data());
  }
  const float scale = float(this->problem_.scale);
  const bool causal = this->problem_.options.causal;
  if (s.head_dim == 64)
    launch_flash<Scalar, 64>(exec, s, scale, causal, head_rows(c.q), k, tile_maps_.data(), head_rows(c.out),
                             c.lse);
  else
    launch_flash<Scalar, 128>(exec, s, scale, causal, head_rows(c.q), k, tile_maps_.data(), head_rows(c.out),
                              c.lse);
}

template class FlashSm90Path<float, Kokkos::Cuda>;
#if KOKKOSMLA_HAS_HALF
template class FlashSm90Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class FlashSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
