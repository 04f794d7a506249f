// The DecodeSm90 path (see cuda/KokkosMLA_DecodeSm90.hpp).

#include "cuda/KokkosMLA_DecodeSm90.hpp"

#include "cuda/sm90a/KokkosMLA_DecodeSm90Kernel.hpp"

#include <cuda_runtime.h>

#include <sstream>

namespace KokkosMLA {
namespace Impl {

/// Query rows per sequence (per query token with sparse indices) from which
/// the wgmma kernel's 64-row teams beat the mma.sync kernel's 16-row ones:
/// on the H200 (B = 128, H = 16, S = 4096) 0.201 against 0.303 ms at 32 rows
/// (Tq = 2), 0.194 against 0.179 at 16 (Tq = 1); FP8 0.323 against 0.438
/// and 0.321 against 0.230. With TMA tiles (edee1ac), at 16 rows: bf16 a tie
/// at S = 4096 (0.170 against 0.171 ms), 0.320 against 0.310 at S = 8192;
/// FP8 0.318 against 0.233.
constexpr std::int64_t kDecodeSm90MinRows = 32;

/// FP8 tokens, whose dequantisation bounds the kernel at 64 rows and more,
/// in pairs (PairedTeams) where H is a multiple of 128, so that the two
/// teams of a pair (rows 128j .. 128j + 127) belong to one token and see
/// the same keys. Not over sparse lists, where pairs measured 2 % slower on
/// an H100 at H = 128 (docs/performance.md, "FP8 teams in pairs").
template <class Scalar, class ExecSpace>
bool DecodeSm90Path<Scalar, ExecSpace>::teams_in_pairs(const CacheShape& s) {
  return s.storage != CacheStorage::Native && s.topk == 0 && s.heads % 128 == 0;
}

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
  const CacheShape& s = this->problem_.shape;
  // The team of the kernel the cache's storage takes (FP8 tokens: a third warpgroup).
  const int team_size =
      with_decode_kernel<DecodeSm90Kernel, Scalar>(s, [](auto k) { return decltype(k)::kThreads; });
  using Kernel = DecodeSm90Kernel<Scalar, 64>;
  std::ostringstream o;
  o << "on Hopper warpgroups splits=" << this->splits_ << " team_size=" << team_size
    << " rows=" << Kernel::kRows << " key_tile=" << Kernel::kKeys
    << (teams_in_pairs(s) ? " teams_in_pairs" : "")
    << " scratch=" << decode_scratch_bytes<DecodeSm90Kernel, Scalar>(s)
    << "B@level0 workspace=" << this->workspace_bytes() << "B";
  return o.str();
}

/// The maps of a call's cache, or null where its tiles are copied by
/// cp.async: FP8 tokens, sparse lists, pages that do not hold whole 64-key
/// tiles, rows TMA cannot address (unaligned, or 2^31 and more), more caches
/// than the plan keeps maps for, and a cache first met while a CUDA graph
/// is being captured on exec's stream (its maps would be copied from the host).
template <class Scalar, class ExecSpace>
const std::uint64_t* DecodeSm90Path<Scalar, ExecSpace>::key_row_maps(const ExecSpace& exec,
                                                                     const Call& a) const {
  using Kernel = DecodeSm90Kernel<Scalar, 64>;
  const CacheShape& s = this->problem_.shape;
  if (s.storage != CacheStorage::Native || s.topk > 0) return nullptr;
  const LatentKeys<Scalar> keys = latent_keys<Scalar>(a.cache, s.latent_dim, s.rope_dim);
  const std::int64_t rows = std::int64_t(a.cache.latent.extent(0) * a.cache.latent.extent(1));
  auto addressable = [](const void* p, std::int64_t ld) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && ld * sizeof(Scalar) % 16 == 0;
  };
  if ((keys.block_table && keys.page_size % Kernel::kKeys != 0) || rows >= (std::int64_t(1) << 31) ||
      !addressable(keys.latent, keys.latent_ld) || (s.rope_dim > 0 && !addressable(keys.rope, keys.rope_ld)))
    return nullptr;
  KeyRowMaps found{keys.latent, keys.latent_ld, keys.rope, keys.rope_ld, rows, {}};
  for (const KeyRowMaps& m : key_row_maps_)
    if (m.same_cache(found)) return m.maps.data();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(exec.cuda_stream(), &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone || key_row_maps_.size() == kMostCaches)
    return nullptr;
  const char* label = "KokkosMLA::DecodeSm90::key_row_maps";
  const tma::Tensor latent{keys.latent, Kernel::key_row_shape(rows, s.latent_dim, keys.latent_ld)};
  found.maps = s.rope_dim > 0 ? tma::device_maps(exec, label,
                                                 {latent, {keys.rope, Kernel::key_row_shape(rows, s.rope_dim,
                                                                                            keys.rope_ld)}})
                              : tma::device_maps(exec, label, {latent});
  key_row_maps_.push_back(found);
  return found.maps.data();
}

template <class Scalar, class ExecSpace>
void DecodeSm90Path<Scalar, ExecSpace>::attend_kernel(const ExecSpace& exec, const Call& a,
                                                      Scalar* qa) const {
  const CacheProblem& p = this->problem_;
  const std::uint64_t* maps = key_row_maps(exec, a);
  const bool in_pairs = teams_in_pairs(p.shape);
  auto attend = [&](const Kokkos::Cuda& e, const char* label, auto kernel) {
    using Kernel = decltype(kernel);
    kernel.tile_maps = maps;
    if constexpr (Kernel::kFp8 && !Kernel::kListed) {  // the kernels that teams_in_pairs may pick
      if (in_pairs) return attend_decode(e, label, PairedTeams<Kernel>(kernel));
    }
    attend_decode(e, label, kernel);
  };
  attend_in_parts<DecodeSm90Kernel, Scalar>(exec, "KokkosMLA::CacheAttention::attend_sm90", p.shape,
                                            this->splits_, float(p.scale), p.options.causal, a, qa,
                                            this->parts_.data(), this->listed(), attend);
}

#if KOKKOSMLA_HAS_HALF
template class DecodeSm90Path<Kokkos::Experimental::half_t, Kokkos::Cuda>;
#endif
#if KOKKOSMLA_HAS_BHALF
template class DecodeSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
#endif

}  // namespace Impl
}  // namespace KokkosMLA
