// The DecodeTensorSm80 path (see the header).

#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"

#include "impl/KokkosMLA_DecodeFp8TensorKernel.hpp"
#include "impl/KokkosMLA_TensorGemm.hpp"
#include "paths/KokkosMLA_CachePaths.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// The mma.sync decode kernels, with FP8 tokens in Fp8Keys-key steps:
/// Kernel<T, Rope, Storage, Listed> is DecodeFp8TensorKernel over FP8 tokens,
/// DecodeTensorKernel over 16-bit or float rows. 32-key steps go where the
/// team scratch holds them (50 KB for FlashMLA's tokens, with the opt-in;
/// 46 KB for per-tensor ones, on any Kokkos): half the barriers, score
/// exchanges and softmax steps a key. On the H200 (B = 128, H = 16, Tq = 1,
/// bf16 queries) 0.166 / 0.296 ms at S = 4096 / 8192 against 0.183 / 0.324
/// in 16-key steps (docs/performance.md).
template <int Fp8Keys>
struct Sm80DecodeKernels {
  template <class T, int Rope, CacheStorage Storage, bool Listed>
  using Kernel =
      std::conditional_t<Storage == CacheStorage::Native, DecodeTensorKernel<T, Rope, Storage, Listed>,
                         DecodeFp8TensorKernel<T, Storage, Listed, Fp8Keys>>;
};
template <class T, int Rope, CacheStorage Storage, bool Listed>
using Sm80DecodeKernel = Sm80DecodeKernels<16>::Kernel<T, Rope, Storage, Listed>;
template <class T, int Rope, CacheStorage Storage, bool Listed>
using Sm80DecodeKernel32 = Sm80DecodeKernels<32>::Kernel<T, Rope, Storage, Listed>;

/// f(Sm80DecodeKernels<32>()) when FP8 tokens go in 32-key steps, else f(Sm80DecodeKernels<16>()).
template <class F>
decltype(auto) with_sm80_kernels(bool fp8_in_32_key_steps, F&& f) {
  if (fp8_in_32_key_steps) return f(Sm80DecodeKernels<32>());
  return f(Sm80DecodeKernels<16>());
}

/// Parts per sequence for the kernels with_sm80_kernels picks.
template <class Scalar>
int sm80_decode_splits(const CacheProblem& p, bool fp8_in_32_key_steps) {
  return with_sm80_kernels(fp8_in_32_key_steps, [&](auto kernels) {
    using K = decltype(kernels);
    return decode_splits<K::template Kernel, Scalar>(p.shape, p.backend, p.options.kv_splits);
  });
}

/// Whether float on tensor cores gives way, by default, to attention by
/// cuBLAS GEMMs: wherever CacheGemm takes the problem (from its kMinRows
/// query rows a sequence), which on the H200 (B = 128, H = 128, same runs)
/// was faster:
///   - exact fp32 GEMMs in place of 3xTF32 (emulate_fp32), as accurate:
///     4.76 against 5.21 ms at Tq = 1, 8.21 against 10.41 at Tq = 2 (S = 4096);
///   - TF32 GEMMs (allow_tf32): 3.43 against 4.61 ms at Tq = 2 (S = 4096); at Tq = 1
///     (128 rows) this kernel was ahead (2.35 against 2.45 ms) until the
///     GEMMs' chunks took one key part: 1.76 against 2.15 ms at S = 4096,
///     3.45 against 4.19 at S = 8192.
/// The GEMMs read each token once for all of a sequence's rows; the kernel's
/// teams hold 16.
template <class Scalar>
bool gemms_preferred(const CacheProblem& p) {
  return std::is_same<Scalar, float>::value && !p.options.path &&
         CacheGemmPath<float, Kokkos::Cuda>::applicable(p);
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
    : DecodeTensorSm80Path(p, fp8_in_32_key_steps(p)) {}

template <class Scalar, class ExecSpace>
DecodeTensorSm80Path<Scalar, ExecSpace>::DecodeTensorSm80Path(const CacheProblem& p, bool fp8_32)
    : AbsorbedTensorPath<Scalar, ExecSpace>(p, sm80_decode_splits<Scalar>(p, fp8_32), 4), fp8_32_(fp8_32) {}

template <class Scalar, class ExecSpace>
std::string DecodeTensorSm80Path<Scalar, ExecSpace>::describe() const {
  using Kernel = DecodeTensorKernel<Scalar, 64>;
  const CacheShape& s = this->problem_.shape;
  std::ostringstream o;
  o << "on tensor cores splits=" << this->splits_ << " team_size=" << Kernel::kThreads;
  with_sm80_kernels(fp8_32_, [&](auto kernels) {
    using K = decltype(kernels);
    // The step of the kernel the cache's storage takes.
    const int key_tile = with_decode_kernel<K::template Kernel, Scalar>(
        s, [](auto kernel) { return decltype(kernel)::kKeys; });
    o << " key_tile=" << key_tile << " scratch=" << decode_scratch_bytes<K::template Kernel, Scalar>(s);
  });
  o << "B@level0 workspace=" << this->workspace_bytes() << "B";
  o << products_label<Scalar>(this->problem_.options);
  return o.str();
}

template <class Scalar, class ExecSpace>
void DecodeTensorSm80Path<Scalar, ExecSpace>::attend_kernel(const ExecSpace& exec, const Call& a,
                                                            Scalar* qa) const {
  const CacheProblem& p = this->problem_;
  auto attend = [&](auto products) {
    with_sm80_kernels(fp8_32_, [&](auto kernels) {
      using K = decltype(kernels);
      attend_in_parts<K::template Kernel, decltype(products)>(
          exec, "KokkosMLA::CacheAttention::attend_tensor", p.shape, this->splits_, float(p.scale),
          p.options.causal, a, qa, this->parts_.data(), this->listed());
    });
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
