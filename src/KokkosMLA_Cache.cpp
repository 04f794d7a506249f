// Plans and runs attention over a latent cache, and appends to it.

#include <KokkosMLA_Cache.hpp>

#include "impl/KokkosMLA_AppendKernel.hpp"
#include "impl/KokkosMLA_CacheChecks.hpp"
#include "impl/KokkosMLA_DecodeTensorKernel.hpp"
#include "impl/KokkosMLA_Launch.hpp"
#include "impl/KokkosMLA_ProjectKernel.hpp"
#include "impl/KokkosMLA_TensorGemm.hpp"
#include "impl/KokkosMLA_Tiling.hpp"
#include "impl/KokkosMLA_Widen.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// How a cache's rows are addressed; rope_dim > 0 without k_rope means packed.
template <class Scalar, class Cache>
LatentKeys<Scalar> keys_of(const Cache& cache, std::int64_t rank, std::int64_t rope_dim) {
  LatentKeys<Scalar> k;
  k.latent = cache.latent.data();
  k.latent_ld = std::int64_t(cache.latent.extent(2));
  if (rope_dim > 0) {
    const bool packed = cache.k_rope.size() == 0;
    k.rope = packed ? cache.latent.data() + rank : cache.k_rope.data();
    k.rope_ld = packed ? k.latent_ld : rope_dim;
  }
  k.block_table = cache.block_table.size() > 0 ? cache.block_table.data() : nullptr;
  k.table_ld = std::int64_t(cache.block_table.extent(1));
  k.page_size = std::int64_t(cache.latent.extent(1));
  k.lengths = cache.seqlens.data();
  k.keys = (k.block_table ? k.table_ld : 1) * k.page_size;
  return k;
}

/// The GPU kernel of cache attention: oa in registers, R <= 4 * team size.
template <class ExecSpace, class T, LatentStep Step>
using RegisterKernel = DecodeKernel<ExecSpace, T, Step, 4>;

/// A projection kernel of a cache problem's extents (pointers unset).
template <class ExecSpace, class T, bool Absorb>
ProjectKernel<ExecSpace, T, Absorb> project_kernel(const CacheShape& s) {
  ProjectKernel<ExecSpace, T, Absorb> k;
  k.rows = s.batch * s.queries;
  k.heads = s.heads;
  k.dim = s.head_dim;
  k.rank = s.latent_dim;
  return k;
}

/// A latent kernel of a cache problem's extents (cache pointers unset).
template <class ExecSpace, class T, LatentStep Step>
LatentKernel<ExecSpace, T, Step> cache_kernel(const CacheShape& s, int splits) {
  Shape plain;
  plain.batch = s.batch;
  plain.queries = s.queries;
  plain.keys = s.capacity;
  plain.heads = s.heads;
  plain.head_dim = s.head_dim;
  plain.latent_dim = s.latent_dim;
  LatentKernel<ExecSpace, T, Step> k = latent_kernel<ExecSpace, T, Step>(plain);
  k.rope_dim = s.rope_dim;
  k.splits = splits;
  return k;
}

/// Enough parts per sequence that the teams fill the device about twice
/// (a host: once per thread), each part at least four key tiles long.
int automatic_splits(const CacheShape& s, const LatentTiles& t, const Backend& be) {
  const std::int64_t teams =
      s.batch * ((s.queries + t.tokens - 1) / t.tokens) * ((s.heads + t.heads - 1) / t.heads);
  const std::int64_t wanted =
      be.host ? be.concurrency : 2 * std::int64_t(be.concurrency) / (be.team_size * 4);
  const std::int64_t by_length = std::max<std::int64_t>(1, s.capacity / (4 * std::int64_t(t.key_tile)));
  const std::int64_t splits = std::min<std::int64_t>({(wanted + teams - 1) / teams, by_length, 64});
  return int(std::max<std::int64_t>(1, splits));
}

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

/// Whether a 16-bit CachePlan on ExecSpace takes the tensor-core kernel.
template <class T, class ExecSpace>
bool tensor_decode(const CacheShape& s) {
#ifdef KOKKOSMLA_TENSOR_CORES
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value && is_half_precision<T>::value) {
    using Kernel = DecodeTensorKernel<T, 64>;
    return s.latent_dim == Kernel::kRank && (s.rope_dim == Kernel::kRope || s.rope_dim == 0);
  }
#endif
  (void)s;
  return false;
}

#ifdef KOKKOSMLA_TENSOR_CORES
/// Parts per sequence for the tensor-core kernel. Its teams (kTeamsPerSM per
/// SM, all parts of equal length) run in waves: the count whose last wave is
/// fullest, among those that fill the GPU, parts at least 256 keys long;
/// each extra part costs 2 % (its fp32 oa is written and merged).
template <class T>
int tensor_splits(const CacheShape& s, const Backend& be, int requested) {
  constexpr int most = DecodeMergeKernel<T>::kMaxSplits;
  if (requested > 0) return std::min(requested, most);
  using Kernel = DecodeTensorKernel<T, 64>;  // the same teams without RoPE
  const double teams = double(s.batch * ((s.queries * s.heads + Kernel::kRows - 1) / Kernel::kRows));
  const double slots = double(Kernel::kTeamsPerSM) * be.concurrency / 2048;  // 2048 threads per SM
  const std::int64_t longest = std::max<std::int64_t>(1, std::min<std::int64_t>(most, s.capacity / 256));
  int best = 1;
  double best_cost = INFINITY;
  for (int parts = 1; parts <= longest; ++parts) {
    const double waves = teams * parts / slots;
    const double cost = (std::ceil(waves) / waves) * (1 + 0.02 * (parts - 1)) * (waves < 0.9 ? 2 : 1);
    if (cost < best_cost) best = parts, best_cost = cost;
  }
  return best;
}

/// The tensor-core attention between absorption and up-projection: qa (B Tq
/// H, R) in, oa out in its place, in parts merged by lse.
template <class T, int Rope>
void attend_in_parts(const Kokkos::Cuda& exec, const CacheShape& s, int splits, float scale, bool causal,
                     const CacheArguments<T, Kokkos::Cuda::memory_space>& a, T* qa, float* parts) {
  DecodeTensorKernel<T, Rope> k;
  k.qa = qa;
  k.q_rope = a.q_rope.data();
  k.cache = keys_of<T>(a.cache, s.latent_dim, s.rope_dim);
  k.oa = qa;  // each team reads its rows' qa before it writes their oa
  k.parts = parts;
  k.lse = a.lse.size() > 0 ? a.lse.data() : nullptr;
  k.batch = s.batch;
  k.queries = s.queries;
  k.heads = s.heads;
  k.splits = splits;
  k.scale = scale;
  k.causal = causal;
  attend_decode_tensor(exec, k);
}

/// The tensor-core path: absorb (cuBLAS), attend in parts, merge, up-project (cuBLAS).
template <class T>
void run_decode_tensor(const Kokkos::Cuda& exec, const CacheShape& s, int splits, float scale, bool causal,
                       const CacheArguments<T, Kokkos::Cuda::memory_space>& a, T* qa, float* parts) {
  const char* caller = "KokkosMLA::CachePlan::execute";
  // The kernel copies cache rows in 16-byte pieces and reads q_rope in pairs.
  require_aligned(caller, "cache.latent", a.cache.latent.data(), 16);
  if (a.cache.latent.extent(2) % 8 != 0)
    throw std::invalid_argument(std::string(caller) + ": cache.latent's rows (" +
                                std::to_string(a.cache.latent.extent(2)) +
                                " elements) must be a multiple of 16 bytes for the tensor-core path");
  if (a.cache.k_rope.size() > 0) require_aligned(caller, "cache.k_rope", a.cache.k_rope.data(), 16);
  require_aligned(caller, "q_rope", a.q_rope.data(), 4);

  const std::int64_t H = s.heads, D = s.head_dim, R = s.latent_dim, rows = s.batch * s.queries;
  using Const = HeadMatrices<const T>;
  tensor_gemm_heads<T>(exec, H, rows, R, D, Const{a.q.data(), H * D, D}, Const{a.w_uk.data(), H * D, D}, true,
                       HeadMatrices<T>{qa, H * R, R});
  if (s.rope_dim > 0)
    attend_in_parts<T, 64>(exec, s, splits, scale, causal, a, qa, parts);
  else
    attend_in_parts<T, 0>(exec, s, splits, scale, causal, a, qa, parts);
  tensor_gemm_heads<T>(exec, H, rows, D, R, Const{qa, H * R, R}, Const{a.w_uv.data(), H * D, D}, false,
                       HeadMatrices<T>{a.out.data(), H * D, D});
}
#endif

}  // namespace

template <class Scalar, class MemorySpace>
CacheShape validate_cache_arguments(const char* caller, const CacheArguments<Scalar, MemorySpace>& a,
                                    bool check_indices) {
  const CacheShape s = validate_cache_extents(caller, describe_cache(a));
  if (check_indices) check_cache_indices(caller, typename MemorySpace::execution_space(), a.cache, s.queries);
  return s;
}

}  // namespace Impl

/// A 16-bit plan off the tensor-core path: the float plan it runs and float
/// copies of q, q_rope, the cache (gathered), w_uk, w_uv and out, in that order.
template <class Scalar, class ExecSpace>
struct CachePlan<Scalar, ExecSpace>::Widened {
  CachePlan<float, ExecSpace> plan;
  Kokkos::View<float*, memory_space> buffer;

  Widened(const ExecSpace& exec, const CacheShape& s, Options opt)
      : plan(exec, s, (opt.verbose = false, opt.check_cache_indices = false, opt)) {
    const std::int64_t rows = s.batch * s.queries * s.heads;
    buffer = Kokkos::View<float*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::CachePlan::widened"),
        rows * (2 * s.head_dim + s.rope_dim) + s.batch * s.capacity * (s.latent_dim + s.rope_dim) +
            2 * s.latent_dim * s.heads * s.head_dim);
  }
};

template <class Scalar, class ExecSpace>
CachePlan<Scalar, ExecSpace>::CachePlan(const ExecSpace& exec, const CacheShape& shape, const Options& opt)
    : shape_(shape), options_(opt) {
  using namespace Impl;
  const char* caller = "KokkosMLA::CachePlan";
  validate_cache_shape(caller, shape);
  validate_options(caller, opt);
  if (opt.kv_splits < 0) throw std::invalid_argument(std::string(caller) + ": kv_splits < 0");
  scale_ = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(shape.head_dim + shape.rope_dim));
  if constexpr (is_half_precision<Scalar>::value) {
    if (tensor_decode<Scalar, ExecSpace>(shape)) {
#ifdef KOKKOSMLA_TENSOR_CORES
      using Kernel = DecodeTensorKernel<Scalar, 64>;
      tensor_ = true;
      splits_ = tensor_splits<Scalar>(shape, backend_of(exec), opt.kv_splits);
      config_.team_size = Kernel::kThreads;
      config_.key_tile = Kernel::kKeys;
      config_.scratch_bytes =
          shape.rope_dim > 0 ? Kernel::scratch_bytes() : DecodeTensorKernel<Scalar, 0>::scratch_bytes();
      const std::int64_t rows = shape.batch * shape.queries * shape.heads;
      workspace_ = Kokkos::View<Scalar*, memory_space>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::CachePlan::workspace"),
          rows * shape.latent_dim);  // qa, then oa
      if (splits_ > 1)
        parts_ = Kokkos::View<float*, memory_space>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::CachePlan::parts"),
            splits_ * rows * (shape.latent_dim + 1));
#endif
    } else {
      widened_ = std::make_shared<const Widened>(exec, shape, opt);
      splits_ = widened_->plan.splits();
    }
  } else {
    plan_native(exec);
  }
  if (opt.verbose) std::cerr << "KokkosMLA: " << describe() << "\n";
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::plan_native(const ExecSpace& exec) {
  if constexpr (!is_half_precision<Scalar>::value) {
    using namespace Impl;
    const CacheShape& shape = shape_;
    const Backend be = backend_of(exec);
    // Split and Fused attend alike; the tiles of one serve both.
    const auto prototype = cache_kernel<ExecSpace, Scalar, LatentStep::Split>(shape, 1);
    Fitted<LatentTiles> f = latent_tiles(prototype, shape.capacity, be);
    {
      // The register kernel when its rows and columns fit: on GPUs for R up to
      // 4 * 128, on hosts (one thread per team) only for R <= 4.
      const RegisterKernel<ExecSpace, Scalar, LatentStep::Split> registers(prototype);
      const Fitted<LatentTiles> d = decode_tiles(registers, shape.capacity, be);
      if (d.level == 0 && registers.fits(d.tiles, be.team_size)) {
        f = d;
        in_registers_ = true;
      }
    }
    config_.algorithm = Algorithm::Fused;
    config_.team_size = be.team_size;
    config_.scratch_max0 = be.scratch_max[0];
    apply(config_, f);
    splits_ = options_.kv_splits > 0 ? options_.kv_splits : automatic_splits(shape, f.tiles, be);
    const std::int64_t rows = shape.batch * shape.queries * shape.heads;
    // The register path keeps qa (then oa) of every row; split-KV each part's oa rows and lse.
    const std::int64_t elements = (in_registers_ ? rows * shape.latent_dim : 0) +
                                  (splits_ > 1 ? splits_ * rows * (shape.latent_dim + 1) : 0);
    if (elements > 0)
      workspace_ = Kokkos::View<Scalar*, memory_space>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::CachePlan::workspace"), elements);
    if (in_registers_) {
      const Fitted<ProjectTiles> absorb = project_tiles(project_kernel<ExecSpace, Scalar, true>(shape), be);
      const Fitted<ProjectTiles> up = project_tiles(project_kernel<ExecSpace, Scalar, false>(shape), be);
      // One set of tiles for both: the smaller of each.
      config_.project_rows = std::min(absorb.tiles.rows, up.tiles.rows);
      config_.project_columns = std::min(absorb.tiles.columns, up.tiles.columns);
      config_.project_chunk = std::min(absorb.tiles.chunk, up.tiles.chunk);
    }
  } else {
    (void)exec;
  }
}

template <class Scalar, class ExecSpace>
std::size_t CachePlan<Scalar, ExecSpace>::workspace_bytes() const {
  std::size_t bytes = workspace_.span() * sizeof(Scalar) + parts_.span() * sizeof(float);
  if (widened_) bytes += widened_->buffer.span() * sizeof(float) + widened_->plan.workspace_bytes();
  return bytes;
}

template <class Scalar, class ExecSpace>
std::string CachePlan<Scalar, ExecSpace>::describe() const {
  std::ostringstream o;
  if (is_half_precision<Scalar>::value) o << Impl::scalar_name<Scalar>() << " ";
  if (widened_) {
    o << "widened to float " << widened_->plan.describe();
    return o.str();
  }
  o << to_string(shape_) << " " << ExecSpace::name() << " cache attention";
  if (tensor_) {
    o << " on tensor cores splits=" << splits_ << " team_size=" << config_.team_size
      << " key_tile=" << config_.key_tile << " scratch=" << config_.scratch_bytes
      << "B@level0 workspace=" << workspace_bytes() << "B";
    return o.str();
  }
  o << (in_registers_ ? " (accumulators in registers)" : "") << " splits=" << splits_
    << " team_size=" << config_.team_size << " query_tile=" << config_.query_tile
    << " head_group=" << config_.head_group << " weight_chunk=" << config_.weight_chunk
    << " key_tile=" << config_.key_tile << " scratch=" << config_.scratch_bytes << "B@level"
    << config_.scratch_level << " workspace=" << workspace_bytes() << "B";
  return o.str();
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::execute(const ExecSpace& exec, const arguments& a) const {
  using namespace Impl;
  const char* caller = "KokkosMLA::CachePlan::execute";
  require_same_cache_shape(caller, shape_, validate_cache_extents(caller, describe_cache(a)));
  if (options_.check_cache_indices) check_cache_indices(caller, exec, a.cache, shape_.queries);
  if constexpr (is_half_precision<Scalar>::value) {
#ifdef KOKKOSMLA_TENSOR_CORES
    if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value) {
      if (tensor_)
        return run_decode_tensor(exec, shape_, splits_, float(scale_), options_.causal, a, workspace_.data(),
                                 parts_.data());
    }
#endif
    run_widened(exec, a);
  } else {
    run_native(exec, a);
  }
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::run_widened(const ExecSpace& exec, const arguments& a) const {
  if constexpr (is_half_precision<Scalar>::value) {
    using namespace Impl;
    const CacheShape& s = shape_;
    using Float = CacheArguments<float, memory_space>;
    FloatPieces pieces{widened_->buffer.data()};
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
                         GatherKernel<Scalar>{keys_of<Scalar>(a.cache, s.latent_dim, s.rope_dim), gathered,
                                              s.capacity, s.latent_dim, width});
    f.cache.latent = typename LatentCache<float, memory_space>::Tokens(gathered, s.batch, s.capacity, width);
    f.cache.seqlens = a.cache.seqlens;
    const std::int64_t weights = s.latent_dim * s.heads * s.head_dim;
    f.w_uk = typename Float::ConstRank3(widen(a.w_uk.data(), weights), s.latent_dim, s.heads, s.head_dim);
    f.w_uv = typename Float::ConstRank3(widen(a.w_uv.data(), weights), s.latent_dim, s.heads, s.head_dim);
    f.out = typename Float::Rank4(pieces.take(rows * s.head_dim), s.batch, s.queries, s.heads, s.head_dim);
    f.lse = a.lse;
    widened_->plan.execute(exec, f);
    convert(exec, "KokkosMLA::narrow", f.out.data(), a.out.data(), rows * s.head_dim);
  } else {
    (void)exec, (void)a;
  }
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::run_native(const ExecSpace& exec, const arguments& a) const {
  if constexpr (!is_half_precision<Scalar>::value) {
    using namespace Impl;
    const std::int64_t qa_elements = shape_.batch * shape_.queries * shape_.heads * shape_.latent_dim;
    auto bind = [&](auto step) {
      constexpr LatentStep Step = decltype(step)::value;
      LatentKernel<ExecSpace, Scalar, Step> k = cache_kernel<ExecSpace, Scalar, Step>(shape_, splits_);
      k.cache = keys_of<Scalar>(a.cache, shape_.latent_dim, shape_.rope_dim);
      k.tiles = latent_tiles_of(config_);
      k.scale = Scalar(scale_);
      k.causal = options_.causal;
      k.q = a.q.data();
      k.q_rope = a.q_rope.data();
      k.w_uk = a.w_uk.data();
      k.w_uv = a.w_uv.data();
      k.out = a.out.data();
      k.lse = a.lse.size() > 0 ? a.lse.data() : nullptr;
      // The register path keeps every row's qa (then oa) first, the split parts after.
      k.workspace = workspace_.data();
      k.parts = workspace_.data() + (in_registers_ ? qa_elements : 0);
      return k;
    };
    using Step = LatentStep;
    if (!in_registers_) {
      // One kernel absorbs, attends and up-projects; split-KV adds one that merges and up-projects.
      if (splits_ == 1) {
        launch_tiled(exec, "KokkosMLA::CacheAttention", bind(std::integral_constant<Step, Step::Fused>()),
                     config_);
      } else {
        launch_tiled(exec, "KokkosMLA::CacheAttention::split",
                     bind(std::integral_constant<Step, Step::Split>()), config_);
        launch_tiled(exec, "KokkosMLA::CacheAttention::combine",
                     bind(std::integral_constant<Step, Step::Combine>()), config_);
      }
      return;
    }
    // The register path: absorb every row, attend (in parts, then merged), up-project every row.
    auto project = [&](auto absorbs, const char* label, const Scalar* from, Scalar* to, const Scalar* w,
                       Scalar alpha) {
      auto k = project_kernel<ExecSpace, Scalar, decltype(absorbs)::value>(shape_);
      k.tiles = {config_.project_rows, config_.project_columns, config_.project_chunk};
      k.from = from;
      k.to = to;
      k.w = w;
      k.alpha = alpha;
      launch_tiled(exec, label, k, config_);
    };
    Scalar* const qa = workspace_.data();  // then oa: (B, Tq, H, R)
    project(std::true_type(), "KokkosMLA::CacheAttention::absorb", a.q.data(), qa, a.w_uk.data(),
            Scalar(scale_));
    if (splits_ == 1) {
      launch_tiled(
          exec, "KokkosMLA::CacheAttention::attend",
          RegisterKernel<ExecSpace, Scalar, Step::Attend>(bind(std::integral_constant<Step, Step::Attend>())),
          config_);
    } else {
      launch_tiled(
          exec, "KokkosMLA::CacheAttention::split",
          RegisterKernel<ExecSpace, Scalar, Step::Split>(bind(std::integral_constant<Step, Step::Split>())),
          config_);
      launch_tiled(exec, "KokkosMLA::CacheAttention::merge",
                   bind(std::integral_constant<Step, Step::Merge>()), config_);
    }
    project(std::false_type(), "KokkosMLA::CacheAttention::up_project", qa, a.out.data(), a.w_uv.data(),
            Scalar(1));
  } else {
    (void)exec, (void)a;
  }
}

template <class Scalar, class ExecSpace>
void append_to_cache(
    const ExecSpace& exec, const LatentCache<Scalar, typename ExecSpace::memory_space>& cache,
    const typename CacheArguments<Scalar, typename ExecSpace::memory_space>::ConstRank3& new_latent,
    const typename CacheArguments<Scalar, typename ExecSpace::memory_space>::ConstRank3& new_k_rope,
    const Options& opt) {
  using namespace Impl;
  const char* caller = "KokkosMLA::append_to_cache";
  const std::int64_t tokens = validate_append_extents(
      caller, describe("cache.latent", cache.latent), describe("cache.k_rope", cache.k_rope),
      describe("cache.block_table", cache.block_table), describe("cache.seqlens", cache.seqlens),
      describe("new_latent", new_latent), describe("new_k_rope", new_k_rope));
  if (opt.check_cache_indices) check_cache_indices(caller, exec, cache, tokens);
  const std::int64_t rank = std::int64_t(new_latent.extent(2));
  const std::int64_t rope_dim = new_k_rope.size() > 0 ? std::int64_t(new_k_rope.extent(2)) : 0;
  AppendKernel<Scalar> k;
  k.at = keys_of<Scalar>(cache, rank, rope_dim);
  k.latent = cache.latent.data();
  k.rope = const_cast<Scalar*>(k.at.rope);  // the cache's own rows, writable
  k.new_latent = new_latent.data();
  k.new_rope = rope_dim > 0 ? new_k_rope.data() : nullptr;
  k.tokens = tokens;
  k.rank = rank;
  k.rope_dim = rope_dim;
  const std::int64_t elements = std::int64_t(new_latent.extent(0)) * tokens * (rank + rope_dim);
  Kokkos::parallel_for("KokkosMLA::append_to_cache",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, elements), k);
}

#define KOKKOSMLA_INSTANTIATE_CACHE_ONE(SCALAR, SPACE)                                          \
  template class CachePlan<SCALAR, SPACE>;                                                      \
  template CacheShape Impl::validate_cache_arguments(                                           \
      const char*, const CacheArguments<SCALAR, SPACE::memory_space>&, bool);                   \
  template void append_to_cache(const SPACE&, const LatentCache<SCALAR, SPACE::memory_space>&,  \
                                const CacheArguments<SCALAR, SPACE::memory_space>::ConstRank3&, \
                                const CacheArguments<SCALAR, SPACE::memory_space>::ConstRank3&, \
                                const Options&);
#if KOKKOSMLA_HAS_HALF
#define KOKKOSMLA_INSTANTIATE_CACHE_HALF(SPACE) \
  KOKKOSMLA_INSTANTIATE_CACHE_ONE(Kokkos::Experimental::half_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_CACHE_HALF(SPACE)
#endif
#if KOKKOSMLA_HAS_BHALF
#define KOKKOSMLA_INSTANTIATE_CACHE_BHALF(SPACE) \
  KOKKOSMLA_INSTANTIATE_CACHE_ONE(Kokkos::Experimental::bhalf_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_CACHE_BHALF(SPACE)
#endif
#define KOKKOSMLA_INSTANTIATE_CACHE(SPACE)       \
  KOKKOSMLA_INSTANTIATE_CACHE_ONE(float, SPACE)  \
  KOKKOSMLA_INSTANTIATE_CACHE_ONE(double, SPACE) \
  KOKKOSMLA_INSTANTIATE_CACHE_HALF(SPACE) KOKKOSMLA_INSTANTIATE_CACHE_BHALF(SPACE)
KOKKOSMLA_INSTANTIATE_CACHE(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_INSTANTIATE_CACHE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA
