#ifndef KOKKOSMLA_WIDENEDPATHS_HPP
#define KOKKOSMLA_WIDENEDPATHS_HPP
// 16-bit problems off the tensor-core paths (every backend): the inputs
// widened to float in one buffer, a float plan run on them, out rounded back.
// FP8 caches (every Scalar, every backend, for now): the tokens dequantised
// into a contiguous cache of the compute type, a plan of that type run on it.

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_GatherKernel.hpp"
#include "impl/KokkosMLA_Widen.hpp"
#include "impl/KokkosMLA_Fp8Kernels.hpp"
#include "impl/KokkosMLA_LatentKernels.hpp"

#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// A float plan (or one of T) and the buffer its widened arguments live in.
template <class FloatPlan, class MemorySpace, class T = float>
struct WidenedPlan {
  FloatPlan plan;
  Kokkos::View<T*, MemorySpace> buffer;

  std::size_t workspace_bytes() const { return buffer.span() * sizeof(T) + plan.workspace_bytes(); }
  std::string describe() const { return "widened to float " + plan.describe(); }
};

/// The float plan's options: it neither logs nor re-checks what the 16-bit
/// plan checked, and takes whichever float path fits.
inline Options inner_options(Options opt) {
  opt.verbose = false;
  opt.check_cache_indices = false;
  opt.path.reset();
  return opt;
}

template <class Scalar, class ExecSpace>
class WidenedPrefillPath final : public PlannedPrefill<Scalar, ExecSpace> {
  using memory_space = typename ExecSpace::memory_space;

 public:
  static constexpr bool available = is_half_precision<Scalar>::value;
  /// The last of the 16-bit paths.
  static bool applicable(const PrefillProblem&) { return true; }
  static Algorithm algorithm(const PrefillProblem& p) {
    return choose_algorithm<float, ExecSpace>(ExecSpace(), p.shape, p.options);
  }

  /// Buffer: float copies of q, latent, w_uk, w_uv and out, in that order.
  WidenedPrefillPath(const ExecSpace& exec, const PrefillProblem& p)
      : widened_{Plan<float, ExecSpace>(exec, p.shape, inner_options(p.options)),
                 Impl::workspace<float, memory_space>(
                     "KokkosMLA::Plan::widened",
                     2 * p.shape.batch * p.shape.queries * p.shape.heads * p.shape.head_dim +
                         p.shape.batch * p.shape.keys * p.shape.latent_dim +
                         2 * p.shape.latent_dim * p.shape.heads * p.shape.head_dim)} {}
  static constexpr Path id = Path::Widened;
  Path path() const override { return id; }
  Algorithm algorithm() const override { return widened_.plan.algorithm(); }
  std::string describe() const override { return widened_.describe(); }
  std::size_t workspace_bytes() const override { return widened_.workspace_bytes(); }

  void run(const ExecSpace& exec, const typename PlannedPrefill<Scalar, ExecSpace>::Call& c) const override {
    using Float = ViewTypes<float, memory_space>;
    const Shape& s = widened_.plan.shape();
    FloatPieces pieces{widened_.buffer.data()};
    const typename Float::ConstRank4 qw(
        pieces.widen_rows(exec, head_rows(c.q), s.batch * s.queries, s.heads, s.head_dim), s.batch, s.queries,
        s.heads, s.head_dim);
    const typename Float::ConstRank3 lw(
        pieces.widen_rows(exec, token_rows(c.latent), s.batch * s.keys, 1, s.latent_dim), s.batch, s.keys,
        s.latent_dim);
    const typename Float::ConstRank3 kw(pieces.widen_weights(exec, c.w_uk), s.latent_dim, s.heads,
                                        s.head_dim);
    const typename Float::ConstRank3 vw(pieces.widen_weights(exec, c.w_uv), s.latent_dim, s.heads,
                                        s.head_dim);
    const typename Float::Rank4 ow(pieces.take(std::int64_t(c.out.size())), s.batch, s.queries, s.heads,
                                   s.head_dim);
    if (c.lse)
      widened_.plan.execute(exec, qw, lw, kw, vw, ow, lse_view<memory_space>(c.lse));
    else
      widened_.plan.execute(exec, qw, lw, kw, vw, ow);
    convert_into_rows(exec, "KokkosMLA::narrow", ow.data(), head_rows(c.out), s.batch * s.queries, s.heads,
                      s.head_dim);
  }

 private:
  WidenedPlan<Plan<float, ExecSpace>, memory_space> widened_;
};

/// Cache attention by a plan of the compute type C on a contiguous copy of
/// the cache: with Fp8, an FP8 cache of any Scalar dequantised to C (queries,
/// weights and out used in place where Scalar is C); else a 16-bit cache off
/// the tensor-core paths, widened to float.
template <class Scalar, class ExecSpace, bool Fp8>
class WidenedCacheUnit final : public PlannedCache<Scalar, ExecSpace> {
  using memory_space = typename ExecSpace::memory_space;
  using C = compute_type<Scalar>;
  static constexpr bool widens = !std::is_same<Scalar, C>::value;  ///< q, weights and out copied to C

 public:
  static constexpr bool available = Fp8 ? is_supported_scalar<Scalar> : is_half_precision<Scalar>::value;
  /// With Fp8 every FP8 cache (first in the list); else the last of the 16-bit paths.
  static bool applicable(const CacheProblem& p) { return Fp8 == (p.shape.storage != CacheStorage::Native); }

  /// Buffer: the cache gathered (B, capacity, R + Dr), then, where Scalar is
  /// not C, copies of q, q_rope, w_uk, w_uv and out.
  WidenedCacheUnit(const ExecSpace& exec, const CacheProblem& p)
      : widened_{CachePlan<C, ExecSpace>(exec, native(p.shape), inner_options(p.options)),
                 Impl::workspace<C, memory_space>(
                     "KokkosMLA::CachePlan::widened",
                     p.shape.batch * p.shape.capacity * (p.shape.latent_dim + p.shape.rope_dim) +
                         (widens ? p.shape.batch * p.shape.queries * p.shape.heads *
                                           (2 * p.shape.head_dim + p.shape.rope_dim) +
                                       2 * p.shape.latent_dim * p.shape.heads * p.shape.head_dim
                                 : 0))},
        storage_(p.shape.storage) {}
  static constexpr Path id = Path::Widened;
  Path path() const override { return id; }
  int splits() const override { return widened_.plan.splits(); }
  std::string describe() const override {
    return Fp8 ? to_string(storage_) + " cache dequantised to " + scalar_name<C>() + " " +
                     widened_.plan.describe()
               : widened_.describe();
  }
  std::size_t workspace_bytes() const override { return widened_.workspace_bytes(); }

  void run(const ExecSpace& exec, const typename PlannedCache<Scalar, ExecSpace>::Call& a) const override {
    const CacheShape& s = widened_.plan.shape();
    using Inner = CacheArguments<C, memory_space>;  // row-major views of the widened pieces
    const std::int64_t rows = s.batch * s.queries * s.heads, width = s.latent_dim + s.rope_dim;
    const std::int64_t tokens = s.batch * s.capacity * width;
    C* const gathered = widened_.buffer.data();
    const Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>> each(exec, 0, tokens);
    if constexpr (Fp8)
      Kokkos::parallel_for(
          "KokkosMLA::dequantize_cache", each,
          Fp8GatherKernel<C>{cache_rows<std::uint8_t>(a.cache, a.cache.fp8.tokens),
                             Fp8Format::of(a.cache, s.latent_dim, s.rope_dim), gathered, s.capacity, width});
    else
      gather_tokens(
          exec, "KokkosMLA::widen_cache",
          GatherKernel<ExecSpace, Scalar, float>{latent_keys<Scalar>(a.cache, s.latent_dim, s.rope_dim),
                                                 gathered, s.capacity, s.latent_dim, width, 0, s.batch});
    CacheArguments<C, memory_space, Kokkos::LayoutStride> f;
    f.cache.latent = typename LatentCache<C, memory_space>::Tokens(gathered, s.batch, s.capacity, width);
    f.cache.seqlens = a.cache.seqlens;
    f.lse = a.lse;
    f.indices = a.indices;  // sinks: added by the outer plan
    if constexpr (widens) {
      FloatPieces pieces{gathered + tokens};
      auto widen_queries = [&](const auto& v, std::int64_t columns) {
        return typename Inner::ConstRank4(
            pieces.widen_rows(exec, head_rows(v), s.batch * s.queries, s.heads, columns), s.batch, s.queries,
            s.heads, columns);
      };
      f.q = widen_queries(a.q, s.head_dim);
      if (s.rope_dim > 0) f.q_rope = widen_queries(a.q_rope, s.rope_dim);
      f.w_uk =
          typename Inner::ConstRank3(pieces.widen_weights(exec, a.w_uk), s.latent_dim, s.heads, s.head_dim);
      f.w_uv =
          typename Inner::ConstRank3(pieces.widen_weights(exec, a.w_uv), s.latent_dim, s.heads, s.head_dim);
      f.out = typename Inner::Rank4(pieces.take(rows * s.head_dim), s.batch, s.queries, s.heads, s.head_dim);
      widened_.plan.execute(exec, f);
      convert_into_rows(exec, "KokkosMLA::narrow", f.out.data(), head_rows(a.out), s.batch * s.queries,
                        s.heads, s.head_dim);
    } else {
      f.q = a.q;
      f.q_rope = a.q_rope;
      f.w_uk = a.w_uk;
      f.w_uv = a.w_uv;
      f.out = a.out;
      widened_.plan.execute(exec, f);
    }
  }

 private:
  /// The inner plan's shape: a cache of C, and queries already padded by the
  /// outer plan where they were packed.
  static CacheShape native(CacheShape s) {
    s.storage = CacheStorage::Native;
    s.packed_queries = false;
    return s;
  }
  WidenedPlan<CachePlan<C, ExecSpace>, memory_space, C> widened_;
  CacheStorage storage_;
};

/// 16-bit caches off the tensor-core paths.
template <class Scalar, class ExecSpace>
using WidenedCachePath = WidenedCacheUnit<Scalar, ExecSpace, false>;
/// FP8 caches, on every backend until FP8 kernels read them directly.
template <class Scalar, class ExecSpace>
using Fp8CachePath = WidenedCacheUnit<Scalar, ExecSpace, true>;

}  // namespace Impl
}  // namespace KokkosMLA

#endif
