// Plans and runs attention over a latent cache, and appends to it. A
// CachePlan takes the first applicable path of Impl::CachePaths
// (src/paths/KokkosMLA_PathLists.hpp).

#include <KokkosMLA_Cache.hpp>

#include "impl/KokkosMLA_AppendKernel.hpp"
#include "impl/KokkosMLA_CacheChecks.hpp"
#include "impl/KokkosMLA_Fp8Kernels.hpp"
#include "impl/KokkosMLA_MergeKernel.hpp"
#include "impl/KokkosMLA_PackedQueries.hpp"
#include "impl/KokkosMLA_Widen.hpp"
#include "paths/KokkosMLA_PathLists.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class MemorySpace, class Layout>
CacheShape validate_cache_arguments(const char* caller, const CacheArguments<Scalar, MemorySpace, Layout>& a,
                                    bool check_indices) {
  CacheShape s = validate_cache_extents(caller, describe_cache(a));
  const typename MemorySpace::execution_space exec;
  if (check_indices) check_cache_indices(caller, exec, a.cache, 0);
  if (check_indices && s.topk > 0) check_sparse_indices(caller, exec, a);
  // Packed queries: the most of one sequence where the offsets are read,
  // else their total (a bound: every sequence padded to it).
  if (s.packed_queries) {
    if (check_indices) s.queries = std::max<std::int64_t>(1, check_query_offsets(caller, exec, a, -1));
    s.queries = std::min(s.queries, s.capacity);
    validate_cache_shape(caller, s);
  }
  return s;
}

}  // namespace Impl

template <class Scalar, class ExecSpace>
CachePlan<Scalar, ExecSpace>::CachePlan(const ExecSpace& exec, const CacheShape& shape, const Options& opt)
    : shape_(shape), options_(opt) {
  using namespace Impl;
  const char* caller = "KokkosMLA::CachePlan";
  validate_cache_shape(caller, shape);
  validate_options(caller, opt);
  if (opt.kv_splits < 0) throw std::invalid_argument(std::string(caller) + ": kv_splits < 0");
  // FP8 tokens are read by the Widened unit and the tensor-core decode units
  // alone; another path forced on them would read the tokens as Scalar.
  if (shape.storage != CacheStorage::Native && opt.path && *opt.path != Path::Widened &&
      *opt.path != Path::DecodeTensorSm80 && *opt.path != Path::DecodeSm90)
    throw std::invalid_argument(std::string(caller) + ": Options::path = " + to_string(*opt.path) + " but " +
                                to_string(shape.storage) +
                                " caches take the Widened path or a tensor-core decode path");
  scale_ = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(shape.head_dim + shape.rope_dim));
  CacheProblem p;
  p.shape = shape;
  p.options = opt;
  p.backend = backend_of(exec);
  p.scale = scale_;
  path_ = CachePaths::plan<PlannedCache<Scalar, ExecSpace>, Scalar>(exec, p);
  if (shape.packed_queries) packed_ = std::make_shared<const PackedQueries<Scalar, ExecSpace>>(shape);
  sink_lse_ =
      decltype(sink_lse_)("KokkosMLA::CachePlan::sink_lse", shape.batch * shape.queries * shape.heads);
  if (opt.verbose) std::cerr << "KokkosMLA: " << describe() << "\n";
}

template <class Scalar, class ExecSpace>
int CachePlan<Scalar, ExecSpace>::splits() const {
  return path_->splits();
}

template <class Scalar, class ExecSpace>
Path CachePlan<Scalar, ExecSpace>::path() const {
  return path_->path();
}

template <class Scalar, class ExecSpace>
std::size_t CachePlan<Scalar, ExecSpace>::workspace_bytes() const {
  return path_->workspace_bytes() + (packed_ ? packed_->bytes() : 0) +
         sink_lse_.span() * sizeof(typename decltype(sink_lse_)::value_type);
}

template <class Scalar, class ExecSpace>
std::string CachePlan<Scalar, ExecSpace>::describe() const {
  std::ostringstream o;
  o << Impl::scalar_name<Scalar>() << " " << to_string(shape_) << " " << ExecSpace::name()
    << " cache attention path=" << to_string(path()) << " " << path_->describe();
  return o.str();
}

template <class Scalar, class ExecSpace>
template <class Arguments>
void CachePlan<Scalar, ExecSpace>::check(const ExecSpace& exec, const Arguments& a) const {
  using namespace Impl;
  const char* caller = "KokkosMLA::CachePlan::execute";
  require_cache_shape_fits(caller, shape_, validate_cache_extents(caller, describe_cache(a)));
  // Any length from 0 on: rows that see no key (idle slots, sequences shorter than Tq) get out 0, lse +inf.
  if (options_.check_cache_indices) {
    check_cache_indices(caller, exec, a.cache, 0);
    if (packed_) check_query_offsets(caller, exec, a, shape_.queries);
    if (shape_.topk > 0) check_sparse_indices(caller, exec, a);
  }
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::execute(const ExecSpace& exec, const arguments& a) const {
  check(exec, a);
  run(exec, Impl::strided(a));
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::execute_strided(
    const ExecSpace& exec, const CacheArguments<Scalar, memory_space, Kokkos::LayoutStride>& a) const {
  using Impl::row_major;
  check(exec, a);
  // The arguments as the paths read them: themselves where they can (lse
  // always: the kernels write it at any strides), else copies in the plan's buffers.
  const auto q = Impl::rows_view(exec, a.q, &copies_, 0);
  const auto q_rope = Impl::rows_view(exec, a.q_rope, &copies_, 1);
  const auto w_uk = Impl::weights_view(exec, a.w_uk, &copies_, 2);
  const auto w_uv = Impl::weights_view(exec, a.w_uv, &copies_, 3);
  const auto out = Impl::output_rows(exec, a.out, &copies_, 4);
  CacheArguments<Scalar, memory_space, Kokkos::LayoutStride> r;
  r.q = q;
  r.q_rope = q_rope;
  r.cache = a.cache;
  r.w_uk = w_uk;
  r.w_uv = w_uv;
  r.out = out;
  r.lse = a.lse;
  r.query_offsets = a.query_offsets;
  r.indices = a.indices;
  r.sinks = a.sinks;
  run(exec, r);
  if (out.data() != a.out.data()) Kokkos::deep_copy(exec, a.out, out);
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::run(
    const ExecSpace& exec, const CacheArguments<Scalar, memory_space, Kokkos::LayoutStride>& a) const {
  using namespace Impl;
  // Sinks need every row's lse: the caller's, or the plan's own.
  auto r = a;
  if (a.sinks.size() > 0 && a.lse.size() == 0)
    r.lse = typename arguments::Lse(sink_lse_.data(), a.out.extent(0), a.out.extent(1), a.out.extent(2));
  if (packed_) {
    path_->run(exec, packed_->padded(exec, r));
    packed_->unpad(exec, r);
  } else {
    path_->run(exec, r);
  }
  if (a.sinks.size() > 0)
    add_sinks(exec, head_rows(r.out), lse_rows(r.lse), a.sinks.data(),
              std::int64_t(r.out.extent(0) * r.out.extent(1) * r.out.extent(2)), shape_.heads,
              shape_.head_dim);
}

template <class Scalar, class ExecSpace>
void CachePlan<Scalar, ExecSpace>::impl_attend_absorbed(const ExecSpace& exec, const arguments& a,
                                                        Scalar* qa) const {
  path_->attend_absorbed(exec, Impl::strided(a), qa);
}

namespace Impl {

template <class Scalar, class ExecSpace, class Rows>
void append_rows(const ExecSpace& exec, const LatentCache<Scalar, typename ExecSpace::memory_space>& cache,
                 const Rows& new_latent, const Rows& new_k_rope, std::int64_t tokens) {
  const std::int64_t rank = std::int64_t(new_latent.extent(2));
  const std::int64_t rope_dim = new_k_rope.size() > 0 ? std::int64_t(new_k_rope.extent(2)) : 0;
  const std::int64_t sequences = std::int64_t(new_latent.extent(0));
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  if (cache.storage != CacheStorage::Native) {
    Fp8AppendKernel<Scalar> k;
    k.at = cache_rows<std::uint8_t>(cache, cache.fp8.tokens);
    k.bytes = cache.fp8.tokens.data();
    k.format = Fp8Format::of(cache, rank, rope_dim);
    k.power_of_two_scales = cache.fp8.power_of_two_scales;
    k.new_latent = token_rows(new_latent);
    k.new_rope = token_rows(new_k_rope);
    k.tokens = tokens;
    Kokkos::parallel_for("KokkosMLA::append_to_cache::quantize",
                         Range(exec, 0, sequences * tokens * (k.format.blocks() + 1)), k);
    return;
  }
  AppendKernel<Scalar> k;
  k.at = latent_keys<Scalar>(cache, rank, rope_dim);
  k.latent = cache.latent.data();
  k.rope = const_cast<Scalar*>(k.at.rope);  // the cache's own rows, writable
  k.new_latent = token_rows(new_latent);
  k.new_rope = token_rows(new_k_rope);
  k.tokens = tokens;
  k.rank = rank;
  k.rope_dim = rope_dim;
  Kokkos::parallel_for("KokkosMLA::append_to_cache", Range(exec, 0, sequences * tokens * (rank + rope_dim)),
                       k);
}

template <class Scalar, class ExecSpace>
void append_strided(
    const ExecSpace& exec, const LatentCache<Scalar, typename ExecSpace::memory_space>& cache,
    const Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>& given_latent,
    const Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>& given_rope,
    const Options& opt) {
  const char* caller = "KokkosMLA::append_to_cache";
  const std::int64_t tokens = validate_append_extents(
      caller, describe("cache.latent", cache.latent), describe("cache.k_rope", cache.k_rope),
      describe("cache.block_table", cache.block_table), describe("cache.seqlens", cache.seqlens),
      describe_any_layout("new_latent", given_latent), describe_any_layout("new_k_rope", given_rope),
      describe_storage(cache));
  if (opt.check_cache_indices) check_cache_indices(caller, exec, cache, tokens);
  // The new tokens where the kernels read them by token row, else copies.
  using Strided = Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>;
  auto by_rows = [&](const Strided& v) {
    return evenly_spaced_rows(v) ? v : Strided(row_major(exec, v, true));
  };
  const Strided new_latent = by_rows(given_latent), new_k_rope = by_rows(given_rope);
  append_rows(exec, cache, new_latent, new_k_rope, tokens);
  if (new_latent.data() != given_latent.data() || new_k_rope.data() != given_rope.data())
    exec.fence();  // the copies are freed here
}

}  // namespace Impl

#define KOKKOSMLA_INSTANTIATE_CACHE_ONE(SCALAR, SPACE)                                              \
  template class CachePlan<SCALAR, SPACE>;                                                          \
  template CacheShape Impl::validate_cache_arguments(                                               \
      const char*, const CacheArguments<SCALAR, SPACE::memory_space>&, bool);                       \
  template CacheShape Impl::validate_cache_arguments(                                               \
      const char*, const CacheArguments<SCALAR, SPACE::memory_space, Kokkos::LayoutStride>&, bool); \
  template void Impl::append_strided(                                                               \
      const SPACE&, const LatentCache<SCALAR, SPACE::memory_space>&,                                \
      const Kokkos::View<const SCALAR***, Kokkos::LayoutStride, SPACE::memory_space>&,              \
      const Kokkos::View<const SCALAR***, Kokkos::LayoutStride, SPACE::memory_space>&, const Options&);
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
