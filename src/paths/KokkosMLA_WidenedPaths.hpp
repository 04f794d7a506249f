#ifndef KOKKOSMLA_WIDENEDPATHS_HPP
#define KOKKOSMLA_WIDENEDPATHS_HPP
// 16-bit problems off the tensor-core paths (every backend): the inputs
// widened to float in one buffer, a float plan run on them, out rounded back.

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_Widen.hpp"
#include "impl/KokkosMLA_LatentKernels.hpp"

namespace KokkosMLA {
namespace Impl {

/// A float plan and the float buffer its widened arguments live in.
template <class FloatPlan, class MemorySpace>
struct WidenedPlan {
  FloatPlan plan;
  Kokkos::View<float*, MemorySpace> buffer;

  std::size_t workspace_bytes() const { return buffer.span() * sizeof(float) + plan.workspace_bytes(); }
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
    auto widen = [&](const auto& v) { return pieces.widen(exec, v.data(), std::int64_t(v.size())); };
    const typename Float::ConstRank4 qw(widen(c.q), s.batch, s.queries, s.heads, s.head_dim);
    const typename Float::ConstRank3 lw(widen(c.latent), s.batch, s.keys, s.latent_dim);
    const typename Float::ConstRank3 kw(widen(c.w_uk), s.latent_dim, s.heads, s.head_dim);
    const typename Float::ConstRank3 vw(widen(c.w_uv), s.latent_dim, s.heads, s.head_dim);
    const typename Float::Rank4 ow(pieces.take(std::int64_t(c.out.size())), s.batch, s.queries, s.heads,
                                   s.head_dim);
    if (c.lse)
      widened_.plan.execute(
          exec, qw, lw, kw, vw, ow,
          Kokkos::View<float***, Kokkos::LayoutRight, memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
              c.lse, s.batch, s.queries, s.heads));
    else
      widened_.plan.execute(exec, qw, lw, kw, vw, ow);
    convert(exec, "KokkosMLA::narrow", ow.data(), c.out.data(), std::int64_t(c.out.size()));
  }

 private:
  WidenedPlan<Plan<float, ExecSpace>, memory_space> widened_;
};

/// A 16-bit cache's tokens, gathered into a contiguous float cache (B,
/// capacity, R + Dr) as [latent, RoPE key] rows; zeros past each sequence's length.
template <class T>
struct GatherKernel {
  LatentKeys<T> from;
  float* to;
  std::int64_t capacity, rank, width;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t b = i / (capacity * width), s = i / width % capacity, c = i % width;
    if (s >= from.length(b)) {
      to[i] = 0.f;
      return;
    }
    const std::int64_t row = from.row(b, s);
    to[i] =
        float(c < rank ? from.latent[row * from.latent_ld + c] : from.rope[row * from.rope_ld + c - rank]);
  }
};

template <class Scalar, class ExecSpace>
class WidenedCachePath final : public PlannedCache<Scalar, ExecSpace> {
  using memory_space = typename ExecSpace::memory_space;

 public:
  static constexpr bool available = is_half_precision<Scalar>::value;
  static bool applicable(const CacheProblem&) { return true; }

  /// Buffer: float copies of q, q_rope, the cache (gathered), w_uk, w_uv and out, in that order.
  WidenedCachePath(const ExecSpace& exec, const CacheProblem& p)
      : widened_{
            CachePlan<float, ExecSpace>(exec, unpacked(p.shape), inner_options(p.options)),
            Impl::workspace<float, memory_space>(
                "KokkosMLA::CachePlan::widened",
                p.shape.batch * p.shape.queries * p.shape.heads * (2 * p.shape.head_dim + p.shape.rope_dim) +
                    p.shape.batch * p.shape.capacity * (p.shape.latent_dim + p.shape.rope_dim) +
                    2 * p.shape.latent_dim * p.shape.heads * p.shape.head_dim)} {}
  static constexpr Path id = Path::Widened;
  Path path() const override { return id; }
  int splits() const override { return widened_.plan.splits(); }
  std::string describe() const override { return widened_.describe(); }
  std::size_t workspace_bytes() const override { return widened_.workspace_bytes(); }

  void run(const ExecSpace& exec, const typename PlannedCache<Scalar, ExecSpace>::Call& a) const override {
    const CacheShape& s = widened_.plan.shape();
    using Float = CacheArguments<float, memory_space>;
    FloatPieces pieces{widened_.buffer.data()};
    auto widen = [&](const Scalar* from, std::int64_t n) { return pieces.widen(exec, from, n); };
    const std::int64_t rows = s.batch * s.queries * s.heads, width = s.latent_dim + s.rope_dim;
    Float f;
    f.q = typename Float::ConstRank4(widen(a.q.data(), rows * s.head_dim), s.batch, s.queries, s.heads,
                                     s.head_dim);
    if (s.rope_dim > 0)
      f.q_rope = typename Float::ConstRank4(widen(a.q_rope.data(), rows * s.rope_dim), s.batch, s.queries,
                                            s.heads, s.rope_dim);
    const std::int64_t tokens = s.batch * s.capacity * width;
    float* const gathered = pieces.take(tokens);
    Kokkos::parallel_for("KokkosMLA::widen_cache",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, tokens),
                         GatherKernel<Scalar>{latent_keys<Scalar>(a.cache, s.latent_dim, s.rope_dim),
                                              gathered, s.capacity, s.latent_dim, width});
    f.cache.latent = typename LatentCache<float, memory_space>::Tokens(gathered, s.batch, s.capacity, width);
    f.cache.seqlens = a.cache.seqlens;
    const std::int64_t weights = s.latent_dim * s.heads * s.head_dim;
    f.w_uk = typename Float::ConstRank3(widen(a.w_uk.data(), weights), s.latent_dim, s.heads, s.head_dim);
    f.w_uv = typename Float::ConstRank3(widen(a.w_uv.data(), weights), s.latent_dim, s.heads, s.head_dim);
    f.out = typename Float::Rank4(pieces.take(rows * s.head_dim), s.batch, s.queries, s.heads, s.head_dim);
    f.lse = a.lse;
    f.indices = a.indices;  // sinks: added by the outer plan
    widened_.plan.execute(exec, f);
    convert(exec, "KokkosMLA::narrow", f.out.data(), a.out.data(), rows * s.head_dim);
  }

 private:
  /// The float plan's shape: packed queries reach it already padded by the outer plan.
  static CacheShape unpacked(CacheShape s) {
    s.packed_queries = false;
    return s;
  }
  WidenedPlan<CachePlan<float, ExecSpace>, memory_space> widened_;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
