#ifndef KOKKOSMLA_CACHECHECKS_HPP
#define KOKKOSMLA_CACHECHECKS_HPP
// Host-side checks of cache-attention and append arguments (KokkosMLA_Validate.cpp).

#include <KokkosMLA_Cache.hpp>

namespace KokkosMLA {
namespace Impl {

/// An absent optional view (default-constructed) has no data and no elements.
inline bool absent(const ArgInfo& a) { return a.data == nullptr && a.bytes == 0; }

/// What the checks need of a cache's storage: its FP8 tokens and scales.
struct StorageInfo {
  CacheStorage storage = CacheStorage::Native;
  ArgInfo tokens;
  float latent_scale = 1, rope_scale = 1;
  bool power_of_two_scales = false;
};

template <class Cache>
StorageInfo describe_storage(const Cache& c) {
  return {c.storage, describe("cache.fp8.tokens", c.fp8.tokens), c.fp8.latent_scale, c.fp8.rope_scale,
          c.fp8.power_of_two_scales};
}

/// Extent i of the view that holds a cache's tokens: fp8.tokens for an FP8 storage, else latent.
template <class Cache>
std::int64_t stored_extent(const Cache& c, int i) {
  return std::int64_t(c.storage == CacheStorage::Native ? c.latent.extent(i) : c.fp8.tokens.extent(i));
}

struct CacheArgInfo {
  ArgInfo q, q_rope, w_uk, w_uv, out, lse;
  ArgInfo latent, k_rope, block_table, seqlens;
  ArgInfo query_offsets, indices, sinks;
  StorageInfo storage;
};

/// With Layout other than LayoutRight, the query-side views are read through
/// row-major copies where they are not row-major: any strides will do.
template <class Scalar, class MemorySpace, class Layout>
CacheArgInfo describe_cache(const CacheArguments<Scalar, MemorySpace, Layout>& a) {
  auto arg = [](const char* name, const auto& v) {
    return std::is_same<Layout, Kokkos::LayoutRight>::value ? describe(name, v)
                                                            : describe_any_layout(name, v);
  };
  return {arg("q", a.q),
          arg("q_rope", a.q_rope),
          arg("w_uk", a.w_uk),
          arg("w_uv", a.w_uv),
          arg("out", a.out),
          arg("lse", a.lse),
          describe("cache.latent", a.cache.latent),
          describe("cache.k_rope", a.cache.k_rope),
          describe("cache.block_table", a.cache.block_table),
          describe("cache.seqlens", a.cache.seqlens),
          describe("query_offsets", a.query_offsets),
          describe("indices", a.indices),
          describe("sinks", a.sinks),
          describe_storage(a.cache)};
}

/// Extents of every argument against each other; returns the shape. With
/// packed queries its `queries` is their total (each sequence's count is
/// known only from the offsets' values).
CacheShape validate_cache_extents(const char* caller, const CacheArgInfo& a);

/// The arguments' shape (from validate_cache_extents) against the plan's:
/// equal, except that packed queries may total at most batch x queries.
void require_cache_shape_fits(const char* caller, const CacheShape& planned, const CacheShape& given);

/// Host copies of the (B + 1) query offsets of `total` packed queries: 0
/// first, nondecreasing, `total` last, at most `most` per sequence (no
/// limit when most < 0). Returns the most queries of one sequence.
std::int64_t validate_query_offsets(const char* caller, const int* offsets, std::int64_t batch,
                                    std::int64_t total, std::int64_t most);

/// v's elements readable on the host once exec is done with them: v itself
/// where the host reaches it, else a host copy.
template <class ExecSpace, class V>
auto on_host(const ExecSpace& exec, const V& v) {
  exec.fence();
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

/// The query offsets of `a` read on the host and checked as above; returns
/// the most queries of one sequence.
template <class ExecSpace, class Arguments>
std::int64_t check_query_offsets(const char* caller, const ExecSpace& exec, const Arguments& a,
                                 std::int64_t most) {
  const auto offsets = on_host(exec, a.query_offsets);
  return validate_query_offsets(caller, offsets.data(), std::int64_t(offsets.extent(0)) - 1,
                                std::int64_t(a.q.extent(1)), most);
}

/// The cache's own extents against the new tokens' for append_to_cache
/// (new_latent (B, Tn, R), new_k_rope (B, Tn, Dr) or absent), and an FP8
/// storage's bytes per token and scales; returns Tn.
std::int64_t validate_append_extents(const char* caller, const ArgInfo& latent, const ArgInfo& k_rope,
                                     const ArgInfo& block_table, const ArgInfo& seqlens,
                                     const ArgInfo& new_latent, const ArgInfo& new_k_rope,
                                     const StorageInfo& storage);

void validate_cache_shape(const char* caller, const CacheShape& s);
void require_same_cache_shape(const char* caller, const CacheShape& planned, const CacheShape& given);

/// Every seqlens(b) in [min_length, capacity] and every block-table entry a
/// sequence uses in [0, pages); host copies of both (table null when contiguous).
void validate_cache_indices(const char* caller, const int* seqlens, std::int64_t batch, const int* table,
                            std::int64_t table_ld, std::int64_t page_size, std::int64_t pages,
                            std::int64_t min_length, std::int64_t capacity);

/// Every entry of the (B, Tq, topk) host indices in [-1, seqlens(b)).
void validate_sparse_indices(const char* caller, const int* indices, const int* seqlens, std::int64_t batch,
                             std::int64_t queries, std::int64_t topk);

/// a's sparse indices read on the host with seqlens and checked as above.
template <class ExecSpace, class Arguments>
void check_sparse_indices(const char* caller, const ExecSpace& exec, const Arguments& a) {
  const auto indices = on_host(exec, a.indices);
  const auto lengths = on_host(exec, a.cache.seqlens);
  validate_sparse_indices(caller, indices.data(), lengths.data(), std::int64_t(a.indices.extent(0)),
                          std::int64_t(a.indices.extent(1)), std::int64_t(a.indices.extent(2)));
}

/// Reads seqlens and the block table on the host (in place when the host can
/// reach them, else through labelled host copies) after waiting for exec, and
/// checks them as above.
template <class ExecSpace, class Cache>
void check_cache_indices(const char* caller, const ExecSpace& exec, const Cache& cache,
                         std::int64_t min_length) {
  const bool paged = cache.block_table.size() > 0;
  const std::int64_t page_size = stored_extent(cache, 1);
  const std::int64_t per_sequence = paged ? std::int64_t(cache.block_table.extent(1)) : 1;
  auto check = [&](const int* lengths, const int* table) {
    validate_cache_indices(caller, lengths, std::int64_t(cache.seqlens.extent(0)), paged ? table : nullptr,
                           per_sequence, page_size, stored_extent(cache, 0), min_length,
                           per_sequence * page_size);
  };
  using Memory = typename Cache::Lengths::memory_space;
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
    exec.fence();
    check(cache.seqlens.data(), cache.block_table.data());
    return;
  }
  Kokkos::View<int*, Kokkos::HostSpace> lengths(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::seqlens"), cache.seqlens.extent(0));
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> table(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::block_table"), cache.block_table.extent(0),
      cache.block_table.extent(1));
  Kokkos::deep_copy(exec, lengths, cache.seqlens);
  Kokkos::deep_copy(exec, table, cache.block_table);
  exec.fence();
  check(lengths.data(), table.data());
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
