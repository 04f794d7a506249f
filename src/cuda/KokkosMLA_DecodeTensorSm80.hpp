#ifndef KOKKOSMLA_DECODETENSORSM80_HPP
#define KOKKOSMLA_DECODETENSORSM80_HPP
// Cache attention on tensor cores (compute capability 8.0+), latent_dim 512
// with rope_dim 64 or 0: queries absorbed and outputs up-projected by cuBLAS
// (AbsorbedTensorPath), attention in parts by the mma.sync decode kernel,
// merged by lse (src/impl/KokkosMLA_DecodeTensorKernel.hpp; over FP8 tokens,
// src/impl/KokkosMLA_DecodeFp8TensorKernel.hpp). 16-bit types,
// and float with Options::emulate_fp32 (3xTF32 products, fp32 GEMMs) or
// Options::allow_tf32 (TF32 products and GEMMs) on native caches, where the
// Kokkos lets a team have the 78 KB its fp32 tiles take. Defined in
// KokkosMLA_DecodeTensorSm80.cpp, built where KOKKOSMLA_ENABLE_SM80.

#include "cuda/KokkosMLA_AbsorbedTensorPath.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class DecodeTensorSm80Path final : public AbsorbedTensorPath<Scalar, ExecSpace> {
 public:
  static constexpr bool available = KOKKOSMLA_ENABLE_SM80 && is_cuda_space<ExecSpace>() &&
                                    (is_half_precision<Scalar>::value || std::is_same<Scalar, float>::value);
  static bool applicable(const CacheProblem& p);
  using Call = typename PlannedCache<Scalar, ExecSpace>::Call;

  DecodeTensorSm80Path(const ExecSpace& exec, const CacheProblem& p);
  static constexpr Path id = Path::DecodeTensorSm80;
  Path path() const override { return id; }
  std::string describe() const override;
  void attend_kernel(const ExecSpace& exec, const Call& call, Scalar* qa) const override;

 private:
  /// FP8 tokens in 32-key steps (where the team scratch holds them), not 16.
  static bool fp8_in_32_key_steps(const CacheProblem& p);
  DecodeTensorSm80Path(const CacheProblem& p, bool fp8_32);
  bool fp8_32_ = false;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
