#ifndef KOKKOSMLA_FLASHSM90_HPP
#define KOKKOSMLA_FLASHSM90_HPP
// Prefill on Hopper's warpgroup products (sm_90a), head_dim 64 or 128, for
// 16-bit types and for float with Options::allow_tf32 (TF32 products; 3xTF32
// stays on FlashTensorSm80): K and V by cuBLAS (TensorPrefill), then the
// wgmma flash kernel (src/cuda/sm90a/KokkosMLA_FlashSm90Kernel.hpp), 128
// query rows a team, tiles copied by TMA. Float's TF32 products read V
// transposed, so the path keeps V^T beside the workspace. It needs compute
// capability 9.0 and the large team scratch of a Kokkos with the CUDA
// shared-memory opt-in. Defined in src/cuda/sm90a/KokkosMLA_FlashSm90.cu,
// built where KOKKOSMLA_ENABLE_SM90A.

#include "cuda/KokkosMLA_TensorPrefill.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class FlashSm90Path final : public TensorPrefill<Scalar, ExecSpace> {
 public:
  static constexpr bool available =
      KOKKOSMLA_ENABLE_SM90A && is_cuda_space<ExecSpace>() &&
      (is_half_precision<Scalar>::value || std::is_same<Scalar, float>::value);
  static bool applicable(const PrefillProblem& p);
  using Call = typename TensorPrefill<Scalar, ExecSpace>::Call;

  FlashSm90Path(const ExecSpace& exec, const PrefillProblem& p);
  static constexpr Path id = Path::FlashSm90;
  Path path() const override { return id; }
  std::string describe() const override;
  void run(const ExecSpace& exec, const Call& call) const override;
  std::size_t workspace_bytes() const override {
    return TensorPrefill<Scalar, ExecSpace>::workspace_bytes() + values_t_.span() * sizeof(Scalar);
  }

 private:
  /// V^T for float's TF32 products (empty for 16-bit types).
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> values_t_;
  /// The kernel's TMA maps of the workspace's K and V (or V^T), made once.
  Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> tile_maps_;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
