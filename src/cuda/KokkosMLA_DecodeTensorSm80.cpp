// The DecodeTensorSm80 path (see the header).

#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"

#include "impl/KokkosMLA_DecodeFp8TensorKernel.hpp"
#include "impl/KokkosMLA_TensorGemm.hpp"
#include "paths/KokkosMLA_CachePaths.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// The mma.sync decode kernel of a cache: DecodeFp8TensorKernel over FP8
/// tokens (in Fp8Keys-key steps), DecodeTensorKernel over 16-bit or float rows.
template <class T, int Rope, CacheStorage Storage, bool Listed, int Fp8Keys>
using Sm80DecodeKernelOf =
    std::conditional_t<Storage == CacheStorage::Native, DecodeTensorKernel<T, Rope, Storage, Listed>,
                       DecodeFp8TensorKernel<T, Storage, Listed, Fp8Keys>>;
template <class T, int Rope, CacheStorage Storage, bool Listed>
using Sm80DecodeKernel = Sm80DecodeKernelOf<T, Rope, Storage, Listed, 16>;
/// FP8 tokens in 32-key steps, where the team scratch holds them (50 KB for
/// FlashMLA's tokens, with the opt-in; 46 KB for per-tensor ones, on any Kokkos):
/// half the barriers, score exchanges and softmax steps a key. On the H200
/// (B = 128, H = 16, Tq = 1, bf16 queries) 0.166 / 0.296 ms at S = 4096 /
/// 8192 against 0.183 / 0.324 in 16-key steps (docs/performance.md).
template <class T, int Rope, CacheStorage Storage, bool Listed>
using Sm80DecodeKernel32 = Sm80DecodeKernelOf<T, Rope, Storage, Listed, 32>;

/// Whether float on tensor cores gives way, by default, to attention by
/// cuBLAS GEMMs (CacheGemm, from 128 query rows a sequence), which on the
/// H200 (B = 128, H = 128, S = 4096, same runs) was faster:
///   - exact fp32 GEMMs in place of 3xTF32 (emulate_fp32), as accurate:
///     4.76 against 5.21 ms at Tq = 1, 8.21 against 10.41 at Tq = 2;
///   - TF32 GEMMs (allow_tf32) from 256 rows: 3.43 against 4.61 ms at
///     Tq = 2 (at Tq = 1, 128 rows, this kernel: 2.35 against 2.45).
/// The GEMMs read each token once for all of a sequence's rows; the kernel's
/// teams hold 16.
constexpr std::int64_t kTf32GemmRows = 256;

template <class Scalar>
bool gemms_preferred(const CacheProblem& p) {
  if (!std::is_same<Scalar, float>::value || p.options.path ||
      !CacheGemmPath<float, Kokkos::Cuda>::applicable(p))
    return false;
  return p.options.emulate_fp32 || p.shape.queries * p.shape.heads >= kTf32GemmRows;
}

}  // namespace

template <class Scalar, class ExecSpace>
bool DecodeTensorSm80Path<Scalar, ExecSpace>::applicable(const CacheProblem& p) {
  // FP8 tokens are read with 16-bit queries only (DecodeFp8TensorKernel).
  const bool storage_taken = is_half_precision<Scalar>::value || p.shape.storage == CacheStorage::Native;
  return tensor_products_allowed<Scalar>(p.options) && storage_taken && tensor_cache_widths(p.shape) &&
         !gemms_preferred<Scalar>(p) && p.backend.compute_capability >= 80 &&
         decode_scratch_bytes<Sm80DecodeKernel, Scalar>(p.shape) <=
             decode_scratch_budget<Sm80DecodeKernel, Scalar>(p.backend);
}

template <class Scalar, class ExecSpace>
bool DecodeTensorSm80Path<Scalar, ExecSpace>::fp8_in_32_key_steps(const CacheProblem& p) {
  return p.shape.storage != CacheStorage::Native &&
         decode_scratch_bytes<Sm80DecodeKernel32, Scalar>(p.shape) <=
             decode_scratch_budget<Sm80DecodeKernel32, Scalar>(p.backend);
}

template <class Scalar, class ExecSpace>
DecodeTensorSm80Path<Scalar, ExecSpace>::DecodeTensorSm80Path(const ExecSpace&, const CacheProblem& p)
    : AbsorbedTensorPath<Scalar, ExecSpace>(
          p,
          fp8_in_32_key_steps(p)
              ? decode_splits<Sm80DecodeKernel32, Scalar>(p.shape, p.backend, p.options.kv_splits)
              : decode_splits<Sm80DecodeKernel, Scalar>(p.shape, p.backend, p.options.kv_splits),
          4),
      fp8_32_(fp8_in_32_key_steps(p)) {}

template <class Scalar, class ExecSpace>
std::string DecodeTensorSm80Path<Scalar, ExecSpace>::describe() const {
  using Kernel = DecodeTensorKernel<Scalar, 64>;
  const CacheShape& s = this->problem_.shape;
  std::ostringstream o;
  o << "on tensor cores splits=" << this->splits_ << " team_size=" << Kernel::kThreads
    << " key_tile=" << (fp8_32_ ? 32 : Kernel::kKeys) << " scratch="
    << (fp8_32_ ? decode_scratch_bytes<Sm80DecodeKernel32, Scalar>(s)
                : decode_scratch_bytes<Sm80DecodeKernel, Scalar>(s))
    << "B@level0 workspace=" << this->workspace_bytes() << "B";
  o << products_label<Scalar>(this->problem_.options);
  return o.str();
}

template <class Scalar, class ExecSpace>
void DecodeTensorSm80Path<Scalar, ExecSpace>::attend_kernel(const ExecSpace& exec, const Call& a,
                                                            Scalar* qa) const {
  const CacheProblem& p = this->problem_;
  auto attend = [&](auto products) {
    constexpr const char* label = "KokkosMLA::CacheAttention::attend_tensor";
    if (fp8_32_)
      return attend_in_parts<Sm80DecodeKernel32, decltype(products)>(exec, label, p.shape, this->splits_,
                                                                     float(p.scale), p.options.causal, a, qa,
                                                                     this->parts_.data(), this->listed());
    attend_in_parts<Sm80DecodeKernel, decltype(products)>(exec, label, p.shape, this->splits_, float(p.scale),
                                                          p.options.causal, a, qa, this->parts_.data(),
                                                          this->listed());
  };
  if constexpr (std::is_same<Scalar, float>::value) {
    if (split_tf32<Scalar>(p.options)) return attend(SplitTf32());
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
