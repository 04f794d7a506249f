// Plans and runs the three algorithms of attention().

#include <KokkosMLA_Attention.hpp>

#include "impl/KokkosMLA_CostModel.hpp"
#include "impl/KokkosMLA_Launch.hpp"

#include <climits>
#include <cmath>
#include <iostream>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

template <class ExecSpace, class T>
CostInputs cost_inputs(const ExecSpace& exec, const Shape& s, const Options& opt) {
  CostInputs in;
  in.shape = s;
  in.causal = opt.causal;
  in.backend = backend_of(exec);
  in.scalar_bytes = sizeof(T);
  in.fused = latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Fused>(s), s.keys, in.backend).tiles;
  in.attend = latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Attend>(s), s.keys, in.backend).tiles;
  in.flash = flash_tiles<ExecSpace, T>(s, in.backend).tiles;
  return in;
}

template <class Tiles>
void apply(LaunchConfig& c, const Fitted<Tiles>& f);

template <>
void apply(LaunchConfig& c, const Fitted<FlashTiles>& f) {
  c.query_tile = f.tiles.query_tile;
  c.key_tile = f.tiles.key_tile;
  c.scratch_level = f.level;
  c.scratch_bytes = f.bytes;
}

template <>
void apply(LaunchConfig& c, const Fitted<LatentTiles>& f) {
  c.query_tile = f.tiles.tokens;
  c.head_group = f.tiles.heads;
  c.key_tile = f.tiles.key_tile;
  c.weight_chunk = f.tiles.weight_chunk;
  c.scratch_level = f.level;
  c.scratch_bytes = f.bytes;
}

template <class ExecSpace, class T>
LaunchConfig plan_launch(const ExecSpace& exec, const Shape& s, const Options& opt) {
  const CostInputs in = cost_inputs<ExecSpace, T>(exec, s, opt);
  LaunchConfig c;
  c.algorithm = opt.algorithm == Algorithm::Auto ? cheapest(in) : opt.algorithm;
  c.team_size = in.backend.team_size;
  c.scratch_max0 = in.backend.scratch_max[0];
  switch (c.algorithm) {
    case Algorithm::Decompressed: {
      const FlashChoice f = flash_choice<ExecSpace, T>(s, in.backend);
      if (f.variant == FlashVariant::Portable) {
        apply(c, flash_tiles<ExecSpace, T>(s, in.backend));
        break;
      }
      c.flash_variant = int(f.variant);
      c.team_size = f.grid.team_threads;
      c.row_threads = f.grid.row_threads;
      c.query_tile = f.tiles.query_tile;
      c.key_tile = f.tiles.key_tile;
      c.scratch_level = 0;
      c.scratch_bytes = f.bytes;
      break;
    }
    case Algorithm::Absorbed:
      apply(c, latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Attend>(s), s.keys, in.backend));
      break;
    default:
      apply(c, latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Fused>(s), s.keys, in.backend));
      break;
  }
  return c;
}

template <class ExecSpace, class T, FlashVariant V>
void launch_flash_blocked(const ExecSpace& exec, const Shape& s, const LaunchConfig& c, T scale, bool causal,
                          const T* q, const T* k, const T* v, T* out, T* lse) {
  FlashBlockedOf<ExecSpace, T, V> f{q,
                                    k,
                                    v,
                                    out,
                                    lse,
                                    s.batch,
                                    s.queries,
                                    s.keys,
                                    s.heads,
                                    s.head_dim,
                                    FlashGrid{c.team_size, c.row_threads},
                                    scale,
                                    causal,
                                    0};
  launch(exec, "KokkosMLA::Decompressed::flash", f, c.team_size, c.scratch_bytes, true,
         typename FlashBlock<V>::bounds());
}

/// The flash kernel the plan chose: a blocked variant on GPUs, else the portable one.
template <class ExecSpace, class T>
void launch_flash(const ExecSpace& exec, const Shape& s, const LaunchConfig& c, T scale, bool causal,
                  const T* q, const T* k, const T* v, T* out, T* lse) {
  const auto variant = FlashVariant(c.flash_variant);
  if constexpr (!is_host_space<ExecSpace>()) {
    if (variant == FlashVariant::Narrow)
      return launch_flash_blocked<ExecSpace, T, FlashVariant::Narrow>(exec, s, c, scale, causal, q, k, v, out,
                                                                      lse);
    if (variant == FlashVariant::Wide)
      return launch_flash_blocked<ExecSpace, T, FlashVariant::Wide>(exec, s, c, scale, causal, q, k, v, out,
                                                                    lse);
  }
  FlashAttentionKernel<ExecSpace, T> f{q,
                                       k,
                                       v,
                                       out,
                                       lse,
                                       s.batch,
                                       s.queries,
                                       s.keys,
                                       s.heads,
                                       s.head_dim,
                                       FlashTiles{c.query_tile, c.key_tile},
                                       scale,
                                       causal,
                                       c.scratch_level};
  launch(exec, "KokkosMLA::Decompressed::flash", f, c.team_size, c.scratch_bytes);
}

/// A latent kernel of the plan's shape and tiles on the caller's data.
template <class ExecSpace, class T, LatentStep Step>
LatentKernel<ExecSpace, T, Step> bound_latent_kernel(const Shape& s, const LaunchConfig& c, T scale,
                                                     bool causal, const T* q, const T* latent, const T* w_uk,
                                                     const T* w_uv, T* out, T* lse, T* workspace) {
  LatentKernel<ExecSpace, T, Step> k = latent_kernel<ExecSpace, T, Step>(s);
  k.tiles = latent_tiles_of(c);
  k.scale = scale;
  k.causal = causal;
  k.q = q;
  k.cache.latent = latent;
  k.w_uk = w_uk;
  k.w_uv = w_uv;
  k.out = out;
  k.lse = lse;
  k.workspace = workspace;
  return k;
}

}  // namespace

}  // namespace Impl

template <class Scalar, class ExecSpace>
Algorithm choose_algorithm(const ExecSpace& exec, const Shape& shape, const Options& opt) {
  Impl::validate_shape("KokkosMLA::choose_algorithm", shape);
  if (opt.algorithm != Algorithm::Auto) return opt.algorithm;
  return Impl::cheapest(Impl::cost_inputs<ExecSpace, Scalar>(exec, shape, opt));
}

template <class Scalar, class ExecSpace>
Plan<Scalar, ExecSpace>::Plan(const ExecSpace& exec, const Shape& shape, const Options& opt)
    : shape_(shape), options_(opt) {
  const char* caller = "KokkosMLA::Plan";
  Impl::validate_shape(caller, shape);
  Impl::validate_options(caller, opt);
  scale_ = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(shape.head_dim));
  config_ = Impl::plan_launch<ExecSpace, Scalar>(exec, shape, opt);
  std::int64_t elements = 0;
  if (config_.algorithm == Algorithm::Decompressed)
    elements = 2 * shape.batch * shape.keys * shape.heads * shape.head_dim;  // K and V
  if (config_.algorithm == Algorithm::Absorbed)
    elements = shape.batch * shape.queries * shape.heads * shape.latent_dim;  // qa, then oa
  if (elements > 0)
    workspace_ = Kokkos::View<Scalar*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::Plan::workspace"), elements);
  if (opt.verbose) std::cerr << "KokkosMLA: " << describe() << "\n";
}

template <class Scalar, class ExecSpace>
std::string Plan<Scalar, ExecSpace>::describe() const {
  std::ostringstream o;
  o << to_string(shape_) << " " << ExecSpace::name() << " algorithm=" << to_string(config_.algorithm)
    << " team_size=" << config_.team_size << " query_tile=" << config_.query_tile;
  if (config_.algorithm != Algorithm::Decompressed)
    o << " head_group=" << config_.head_group << " weight_chunk=" << config_.weight_chunk;
  if (config_.algorithm == Algorithm::Decompressed)
    o << " flash=" << to_string(Impl::FlashVariant(config_.flash_variant));
  o << " key_tile=" << config_.key_tile << " scratch=" << config_.scratch_bytes << "B@level"
    << config_.scratch_level << " workspace=" << workspace_bytes() << "B";
  return o.str();
}

template <class Scalar, class ExecSpace>
void Plan<Scalar, ExecSpace>::run(const ExecSpace& exec, const typename views::ConstRank4& q,
                                  const typename views::ConstRank3& latent,
                                  const typename views::ConstRank3& w_uk,
                                  const typename views::ConstRank3& w_uv, const typename views::Rank4& out,
                                  Scalar* lse) const {
  using namespace Impl;
  const Shape& s = shape_;
  const Scalar scale = Scalar(scale_);
  const bool causal = options_.causal;
  Scalar* ws = workspace_.data();
  switch (config_.algorithm) {
    case Algorithm::Auto:
    case Algorithm::Fused:
      launch_tiled(exec, "KokkosMLA::Fused",
                   bound_latent_kernel<ExecSpace, Scalar, LatentStep::Fused>(
                       s, config_, scale, causal, q.data(), latent.data(), w_uk.data(), w_uv.data(),
                       out.data(), lse, nullptr),
                   config_);
      break;
    case Algorithm::Absorbed: {
      // Only the attend step has the softmax state, so only it writes lse.
      auto args = [&](auto step) {
        constexpr LatentStep step_value = decltype(step)::value;
        return bound_latent_kernel<ExecSpace, Scalar, step_value>(
            s, config_, scale, causal, q.data(), latent.data(), w_uk.data(), w_uv.data(), out.data(),
            step_value == LatentStep::Attend ? lse : nullptr, ws);
      };
      using Step = LatentStep;
      launch_tiled(exec, "KokkosMLA::Absorbed::absorb", args(std::integral_constant<Step, Step::Absorb>()),
                   config_);
      launch_tiled(exec, "KokkosMLA::Absorbed::attend", args(std::integral_constant<Step, Step::Attend>()),
                   config_);
      launch_tiled(exec, "KokkosMLA::Absorbed::up_project",
                   args(std::integral_constant<Step, Step::UpProject>()), config_);
      break;
    }
    case Algorithm::Decompressed: {
      using Matrix =
          Kokkos::View<Scalar**, Kokkos::LayoutRight, memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
      using ConstMatrix = Kokkos::View<const Scalar**, Kokkos::LayoutRight, memory_space,
                                       Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
      // In LayoutRight, latent is a (B*S) x R matrix and w_uk an R x (H*D) one:
      // their product is K as (B, S, H, D), one GEMM for all heads.
      const std::int64_t rows = s.batch * s.keys, cols = s.heads * s.head_dim;
      const ConstMatrix lat(latent.data(), rows, s.latent_dim);
      const Matrix k(ws, rows, cols), v(ws + rows * cols, rows, cols);
      // Kokkos Kernels names its own kernels; the region tells tools they belong to this library.
      Kokkos::Profiling::pushRegion("KokkosMLA::Decompressed::gemm");
      Impl::gemm(exec, lat, ConstMatrix(w_uk.data(), s.latent_dim, cols), k);
      Impl::gemm(exec, lat, ConstMatrix(w_uv.data(), s.latent_dim, cols), v);
      Kokkos::Profiling::popRegion();
      launch_flash(exec, s, config_, scale, causal, q.data(), k.data(), v.data(), out.data(), lse);
      break;
    }
  }
}

#define KOKKOSMLA_INSTANTIATE(SPACE)                                                             \
  template class Plan<float, SPACE>;                                                             \
  template class Plan<double, SPACE>;                                                            \
  template Algorithm choose_algorithm<float, SPACE>(const SPACE&, const Shape&, const Options&); \
  template Algorithm choose_algorithm<double, SPACE>(const SPACE&, const Shape&, const Options&);
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA
