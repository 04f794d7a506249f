#ifndef KOKKOSMLA_DECODESM90_HPP
#define KOKKOSMLA_DECODESM90_HPP
// Cache attention on Hopper's warpgroup products (sm_90a), 16-bit types,
// latent_dim 512 with rope_dim 64 or 0: queries absorbed and outputs
// up-projected by cuBLAS (AbsorbedTensorPath), attention in parts by the
// wgmma decode kernel (src/cuda/sm90a/KokkosMLA_DecodeSm90Kernel.hpp),
// 64 query rows per team, merged by lse. It needs compute capability 9.0 and
// the large team scratch of a Kokkos with the CUDA shared-memory opt-in.
// Defined in src/cuda/sm90a/KokkosMLA_DecodeSm90.cu, built where
// KOKKOSMLA_ENABLE_SM90A.

#include "cuda/KokkosMLA_AbsorbedTensorPath.hpp"

#include <vector>

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class DecodeSm90Path final : public AbsorbedTensorPath<Scalar, ExecSpace> {
 public:
  static constexpr bool available =
      KOKKOSMLA_ENABLE_SM90A && is_cuda_space<ExecSpace>() && is_half_precision<Scalar>::value;
  static bool applicable(const CacheProblem& p);
  /// Whether the kernel's teams run in pairs that share each FP8 tile's
  /// dequantisation: dense FP8 caches, whole 128-row blocks of one query token.
  static bool teams_in_pairs(const CacheShape& s);
  using Call = typename PlannedCache<Scalar, ExecSpace>::Call;

  DecodeSm90Path(const ExecSpace& exec, const CacheProblem& p);
  static constexpr Path id = Path::DecodeSm90;
  Path path() const override { return id; }
  std::string describe() const override;
  void attend_kernel(const ExecSpace& exec, const Call& call, Scalar* qa) const override;

 private:
  /// The TMA maps of a cache's key rows (its latent rows, then its RoPE
  /// rows), made on the first call over that cache and kept for the plan's
  /// life, so that a CUDA graph captured over a cache stays valid.
  struct KeyRowMaps {
    const void* latent;
    std::int64_t latent_ld;
    const void* rope;
    std::int64_t rope_ld, rows;
    Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> maps;
    bool same_cache(const KeyRowMaps& o) const {
      return latent == o.latent && latent_ld == o.latent_ld && rope == o.rope && rope_ld == o.rope_ld &&
             rows == o.rows;
    }
  };
  /// Caches whose maps a plan keeps; past them, tiles are copied by cp.async.
  static constexpr std::size_t kMostCaches = 8;
  const std::uint64_t* key_row_maps(const ExecSpace& exec, const Call& call) const;
  mutable std::vector<KeyRowMaps> key_row_maps_;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
