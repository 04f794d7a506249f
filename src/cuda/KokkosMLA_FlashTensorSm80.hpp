#ifndef KOKKOSMLA_FLASHTENSORSM80_HPP
#define KOKKOSMLA_FLASHTENSORSM80_HPP
// Prefill on tensor cores (compute capability 8.0+): K and V by cuBLAS
// (TensorPrefill), then the mma.sync flash kernel
// (src/impl/KokkosMLA_FlashTensorKernel.hpp). 16-bit types, and float with
// Options::allow_tf32 (TF32 products) or Options::emulate_fp32 (3xTF32
// products, fp32 GEMMs); head_dim 64 or 128. Defined in
// KokkosMLA_FlashTensorSm80.cpp, built where KOKKOSMLA_ENABLE_SM80.

#include "cuda/KokkosMLA_TensorPrefill.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class FlashTensorSm80Path final : public TensorPrefill<Scalar, ExecSpace> {
 public:
  static constexpr bool available = KOKKOSMLA_ENABLE_SM80 && is_cuda_space<ExecSpace>() &&
                                    (is_half_precision<Scalar>::value || std::is_same<Scalar, float>::value);
  static bool applicable(const PrefillProblem& p);
  using Call = typename TensorPrefill<Scalar, ExecSpace>::Call;

  FlashTensorSm80Path(const ExecSpace& exec, const PrefillProblem& p);
  static constexpr Path id = Path::FlashTensorSm80;
  Path path() const override { return id; }
  std::string describe() const override;
  void run(const ExecSpace& exec, const Call& call) const override;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
