#ifndef KOKKOSMLA_TENSORPREFILL_HPP
#define KOKKOSMLA_TENSORPREFILL_HPP
// What the tensor-core prefill paths (FlashTensorSm80, FlashSm90) share: K
// and V, each (B, S, H, D), by cuBLAS (fp32 accumulation, rounded to the
// storage type) into the plan's workspace, before a path's own flash kernel.
// Defined in KokkosMLA_TensorPrefill.cpp, built where KOKKOSMLA_ENABLE_SM80.

#include "impl/KokkosMLA_TensorGemm.hpp"
#include "paths/KokkosMLA_PathUnit.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class TensorPrefill : public PlannedPrefill<Scalar, ExecSpace> {
 public:
  using Call = typename PlannedPrefill<Scalar, ExecSpace>::Call;
  static Algorithm algorithm(const PrefillProblem&) { return Algorithm::Decompressed; }
  Algorithm algorithm() const override { return Algorithm::Decompressed; }
  std::size_t workspace_bytes() const override { return kv_.span() * sizeof(Scalar); }

 protected:
  explicit TensorPrefill(const PrefillProblem& p);
  /// Checks that q and out hold element pairs (the kernels read and write
  /// pairs), then computes K and V with float GEMMs as float_gemm says;
  /// returns K, with V right after it.
  const Scalar* decompress(const ExecSpace& exec, const Call& call, FloatGemm float_gemm) const;

  PrefillProblem problem_;
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> kv_;  ///< K, then V
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
