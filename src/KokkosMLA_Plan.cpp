// Plans and runs the three algorithms of attention().

#include <KokkosMLA_Attention.hpp>

#include "impl/KokkosMLA_CostModel.hpp"
#include "impl/KokkosMLA_Launch.hpp"
#include "impl/KokkosMLA_FlashTensorKernel.hpp"
#include "impl/KokkosMLA_TensorGemm.hpp"
#include "impl/KokkosMLA_Widen.hpp"

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

/// Whether a Plan<Scalar, ExecSpace> takes the tensor-core path: 16-bit types,
/// or float with allow_tf32, on a CUDA build for compute capability 8.0 or
/// newer; the Decompressed algorithm (Auto picks it: the others would attend
/// over the latent width on the portable kernels), and a head dimension the
/// kernel is built for.
template <class Scalar, class ExecSpace>
bool tensor_path(const Shape& s, const Options& opt) {
#ifdef KOKKOSMLA_TENSOR_CORES
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value &&
                (is_half_precision<Scalar>::value || std::is_same<Scalar, float>::value))
    return (is_half_precision<Scalar>::value || opt.allow_tf32) &&
           (opt.algorithm == Algorithm::Auto || opt.algorithm == Algorithm::Decompressed) &&
           (s.head_dim == 64 || s.head_dim == 128);
#endif
  (void)s, (void)opt;
  return false;
}

/// The tensor-core kernel's team, tiles and scratch, for describe().
template <class T>
LaunchConfig tensor_config(const Shape& s) {
  LaunchConfig c;
  c.algorithm = Algorithm::Decompressed;
  c.flash_variant = int(FlashVariant::Tensor);
#ifdef KOKKOSMLA_TENSOR_CORES
  using Kernel = FlashTensorKernel<T, 128>;
  c.team_size = Kernel::kThreads;
  c.query_tile = Kernel::kRows;
  c.key_tile = Kernel::kKeys;
  c.scratch_bytes = s.head_dim == 64 ? FlashTensorKernel<T, 64>::scratch_bytes() : Kernel::scratch_bytes();
#endif
  (void)s;
  return c;
}

#ifdef KOKKOSMLA_TENSOR_CORES
template <class T, int D>
void launch_flash_tensor(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal, const T* q,
                         const T* k, const T* v, T* out, float* lse) {
  using Kernel = FlashTensorKernel<T, D>;
  Kernel f{q, k, v, out, lse, s.batch, s.queries, s.keys, s.heads, scale, causal};
  f.head_group = Kernel::head_group_for(s.keys);
  launch(exec, "KokkosMLA::Decompressed::flash_tensor", f, Kernel::kThreads, Kernel::scratch_bytes(), true,
         typename Kernel::bounds());
}

/// K and V by cuBLAS into the workspace, then the tensor-core flash kernel.
template <class T>
void run_tensor(const Kokkos::Cuda& exec, const Shape& s, float scale, bool causal, const T* q,
                const T* latent, const T* w_uk, const T* w_uv, T* out, float* lse, T* workspace) {
  // The kernel reads q and writes out in pairs of elements.
  require_aligned("KokkosMLA::Plan::execute", "q", q, 2 * sizeof(T));
  require_aligned("KokkosMLA::Plan::execute", "out", out, 2 * sizeof(T));
  const std::int64_t rows = s.batch * s.keys, cols = s.heads * s.head_dim;
  T* k = workspace;
  T* v = workspace + rows * cols;
  Kokkos::Profiling::pushRegion("KokkosMLA::Decompressed::gemm");
  tensor_gemm(exec, rows, cols, s.latent_dim, latent, w_uk, k);
  tensor_gemm(exec, rows, cols, s.latent_dim, latent, w_uv, v);
  Kokkos::Profiling::popRegion();
  if (s.head_dim == 64)
    launch_flash_tensor<T, 64>(exec, s, scale, causal, q, k, v, out, lse);
  else
    launch_flash_tensor<T, 128>(exec, s, scale, causal, q, k, v, out, lse);
}
#endif

}  // namespace

}  // namespace Impl

/// A 16-bit plan off the tensor-core path: the float plan it runs and float
/// copies of q, latent, w_uk, w_uv and out, in that order.
template <class Scalar, class ExecSpace>
struct Plan<Scalar, ExecSpace>::Widened {
  Plan<float, ExecSpace> plan;
  Kokkos::View<float*, memory_space> buffer;

  Widened(const ExecSpace& exec, const Shape& s, Options opt) : plan(exec, s, (opt.verbose = false, opt)) {
    const std::int64_t q = s.batch * s.queries * s.heads * s.head_dim;
    const std::int64_t weights = 2 * s.latent_dim * s.heads * s.head_dim;
    buffer = Kokkos::View<float*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::Plan::widened"),
        2 * q + s.batch * s.keys * s.latent_dim + weights);
  }
};

template <class Scalar, class ExecSpace>
Algorithm choose_algorithm(const ExecSpace& exec, const Shape& shape, const Options& opt) {
  Impl::validate_shape("KokkosMLA::choose_algorithm", shape);
  if (opt.algorithm != Algorithm::Auto) return opt.algorithm;
  if (Impl::tensor_path<Scalar, ExecSpace>(shape, opt)) return Algorithm::Decompressed;
  if constexpr (is_half_precision<Scalar>::value) {
    return choose_algorithm<float, ExecSpace>(exec, shape, opt);
  } else {
    return Impl::cheapest(Impl::cost_inputs<ExecSpace, Scalar>(exec, shape, opt));
  }
}

template <class Scalar, class ExecSpace>
Plan<Scalar, ExecSpace>::Plan(const ExecSpace& exec, const Shape& shape, const Options& opt)
    : shape_(shape), options_(opt) {
  const char* caller = "KokkosMLA::Plan";
  Impl::validate_shape(caller, shape);
  Impl::validate_options(caller, opt);
  scale_ = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(shape.head_dim));
  if (Impl::tensor_path<Scalar, ExecSpace>(shape, opt)) {
    config_ = Impl::tensor_config<Scalar>(shape);
  } else if constexpr (is_half_precision<Scalar>::value) {
    widened_ = std::make_shared<const Widened>(exec, shape, opt);
    config_.algorithm = widened_->plan.algorithm();
  } else {
    config_ = Impl::plan_launch<ExecSpace, Scalar>(exec, shape, opt);
  }
  std::int64_t elements = 0;
  if (!widened_ && config_.algorithm == Algorithm::Decompressed)
    elements = 2 * shape.batch * shape.keys * shape.heads * shape.head_dim;  // K and V
  if (!widened_ && config_.algorithm == Algorithm::Absorbed)
    elements = shape.batch * shape.queries * shape.heads * shape.latent_dim;  // qa, then oa
  if (elements > 0)
    workspace_ = Kokkos::View<Scalar*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::Plan::workspace"), elements);
  if (opt.verbose) std::cerr << "KokkosMLA: " << describe() << "\n";
}

template <class Scalar, class ExecSpace>
std::size_t Plan<Scalar, ExecSpace>::workspace_bytes() const {
  std::size_t bytes = workspace_.span() * sizeof(Scalar);
  if (widened_) bytes += widened_->buffer.span() * sizeof(float) + widened_->plan.workspace_bytes();
  return bytes;
}

template <class Scalar, class ExecSpace>
std::string Plan<Scalar, ExecSpace>::describe() const {
  std::ostringstream o;
  const bool tensor = config_.flash_variant == int(Impl::FlashVariant::Tensor);
  o << (tensor && std::is_same<Scalar, float>::value ? "tf32" : Impl::scalar_name<Scalar>()) << " ";
  if (widened_) {
    o << "widened to " << widened_->plan.describe();
    return o.str();
  }
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
                                  compute_type<Scalar>* lse) const {
#ifdef KOKKOSMLA_TENSOR_CORES
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value && !std::is_same<Scalar, double>::value) {
    if (config_.flash_variant == int(Impl::FlashVariant::Tensor))
      return Impl::run_tensor(exec, shape_, float(scale_), options_.causal, q.data(), latent.data(),
                              w_uk.data(), w_uv.data(), out.data(), lse, workspace_.data());
  }
#endif
  if (widened_)
    run_widened(exec, q, latent, w_uk, w_uv, out, lse);
  else
    run_native(exec, q, latent, w_uk, w_uv, out, lse);
}

template <class Scalar, class ExecSpace>
void Plan<Scalar, ExecSpace>::run_widened(const ExecSpace& exec, const typename views::ConstRank4& q,
                                          const typename views::ConstRank3& latent,
                                          const typename views::ConstRank3& w_uk,
                                          const typename views::ConstRank3& w_uv,
                                          const typename views::Rank4& out, compute_type<Scalar>* lse) const {
  if constexpr (is_half_precision<Scalar>::value) {
    using Float = Impl::ViewTypes<float, memory_space>;
    const Shape& s = shape_;
    Impl::FloatPieces pieces{widened_->buffer.data()};
    auto widen = [&](const auto& v) { return pieces.widen(exec, v.data(), std::int64_t(v.size())); };
    const typename Float::ConstRank4 qw(widen(q), s.batch, s.queries, s.heads, s.head_dim);
    const typename Float::ConstRank3 lw(widen(latent), s.batch, s.keys, s.latent_dim);
    const typename Float::ConstRank3 kw(widen(w_uk), s.latent_dim, s.heads, s.head_dim);
    const typename Float::ConstRank3 vw(widen(w_uv), s.latent_dim, s.heads, s.head_dim);
    const typename Float::Rank4 ow(pieces.take(std::int64_t(out.size())), s.batch, s.queries, s.heads,
                                   s.head_dim);
    if (lse)
      widened_->plan.execute(
          exec, qw, lw, kw, vw, ow,
          Kokkos::View<float***, Kokkos::LayoutRight, memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
              lse, s.batch, s.queries, s.heads));
    else
      widened_->plan.execute(exec, qw, lw, kw, vw, ow);
    Impl::convert(exec, "KokkosMLA::narrow", ow.data(), out.data(), std::int64_t(out.size()));
  } else {
    (void)exec, (void)q, (void)latent, (void)w_uk, (void)w_uv, (void)out, (void)lse;
  }
}

template <class Scalar, class ExecSpace>
void Plan<Scalar, ExecSpace>::run_native(const ExecSpace& exec, const typename views::ConstRank4& q,
                                         const typename views::ConstRank3& latent,
                                         const typename views::ConstRank3& w_uk,
                                         const typename views::ConstRank3& w_uv,
                                         const typename views::Rank4& out, compute_type<Scalar>* lse) const {
  if constexpr (!is_half_precision<Scalar>::value) {
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
        using Matrix = Kokkos::View<Scalar**, Kokkos::LayoutRight, memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
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
  } else {
    (void)exec, (void)q, (void)latent, (void)w_uk, (void)w_uv, (void)out, (void)lse;
  }
}

#define KOKKOSMLA_INSTANTIATE_ONE(SCALAR, SPACE) \
  template class Plan<SCALAR, SPACE>;            \
  template Algorithm choose_algorithm<SCALAR, SPACE>(const SPACE&, const Shape&, const Options&);
#if KOKKOSMLA_HAS_HALF
#define KOKKOSMLA_INSTANTIATE_HALF(SPACE) KOKKOSMLA_INSTANTIATE_ONE(Kokkos::Experimental::half_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_HALF(SPACE)
#endif
#if KOKKOSMLA_HAS_BHALF
#define KOKKOSMLA_INSTANTIATE_BHALF(SPACE) KOKKOSMLA_INSTANTIATE_ONE(Kokkos::Experimental::bhalf_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_BHALF(SPACE)
#endif
#define KOKKOSMLA_INSTANTIATE(SPACE)       \
  KOKKOSMLA_INSTANTIATE_ONE(float, SPACE)  \
  KOKKOSMLA_INSTANTIATE_ONE(double, SPACE) \
  KOKKOSMLA_INSTANTIATE_HALF(SPACE) KOKKOSMLA_INSTANTIATE_BHALF(SPACE)
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA
