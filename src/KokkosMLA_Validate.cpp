// Host-side checks, run before any launch. Messages name the argument and the
// extents, e.g. "KokkosMLA::attention: latent.extent(2) = 31 but w_uk.extent(0) = 32".

#include <KokkosMLA_Attention.hpp>
#include <KokkosMLA_Fp8.hpp>

#include "impl/KokkosMLA_CacheChecks.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace KokkosMLA {

std::string to_string(Algorithm a) {
  switch (a) {
    case Algorithm::Auto:
      return "Auto";
    case Algorithm::Fused:
      return "Fused";
    case Algorithm::Decompressed:
      return "Decompressed";
    case Algorithm::Absorbed:
      return "Absorbed";
  }
  return "?";
}

std::string to_string(Path p) {
  switch (p) {
    case Path::Fused:
      return "Fused";
    case Path::Absorbed:
      return "Absorbed";
    case Path::DecompressedPortable:
      return "DecompressedPortable";
    case Path::DecompressedBlocked:
      return "DecompressedBlocked";
    case Path::DecompressedHost:
      return "DecompressedHost";
    case Path::FlashTensorSm80:
      return "FlashTensorSm80";
    case Path::Widened:
      return "Widened";
    case Path::CacheLatent:
      return "CacheLatent";
    case Path::CacheRegisters:
      return "CacheRegisters";
    case Path::CacheBlocked:
      return "CacheBlocked";
    case Path::DecodeTensorSm80:
      return "DecodeTensorSm80";
    case Path::DecodeSm90:
      return "DecodeSm90";
    case Path::FlashSm90:
      return "FlashSm90";
    case Path::DecompressedGemm:
      return "DecompressedGemm";
    case Path::CacheHost:
      return "CacheHost";
    case Path::CacheGemm:
      return "CacheGemm";
    case Path::FusedRow:
      return "FusedRow";
  }
  return "?";
}

std::string to_string(const Shape& s) {
  std::ostringstream o;
  o << "(B=" << s.batch << ", T=" << s.queries << ", S=" << s.keys << ", H=" << s.heads
    << ", D=" << s.head_dim << ", R=" << s.latent_dim << ")";
  return o.str();
}

FlopCount flop_count(const Shape& s, bool causal) {
  const double B = double(s.batch), T = double(s.queries), S = double(s.keys), H = double(s.heads),
               D = double(s.head_dim), R = double(s.latent_dim);
  const double pairs = causal ? T * (S - T) + T * (T + 1) / 2 : T * S;
  return {4 * B * S * R * H * D + 4 * B * H * D * pairs, 4 * B * T * H * D * R + 4 * B * H * R * pairs};
}

std::string to_string(const CacheShape& s) {
  std::ostringstream o;
  o << "(B=" << s.batch << ", Tq=" << s.queries << ", H=" << s.heads << ", D=" << s.head_dim
    << ", R=" << s.latent_dim << ", Dr=" << s.rope_dim << ", capacity=" << s.capacity
    << (s.packed_queries ? ", packed queries" : "") << (s.topk > 0 ? ", topk=" + std::to_string(s.topk) : "")
    << (s.storage != CacheStorage::Native ? ", " + to_string(s.storage) : "") << ")";
  return o.str();
}

std::string to_string(CacheStorage s) {
  switch (s) {
    case CacheStorage::Native:
      return "Native";
    case CacheStorage::Fp8PerBlock:
      return "Fp8PerBlock";
    case CacheStorage::Fp8PerTensor:
      return "Fp8PerTensor";
  }
  return "?";
}

std::int64_t fp8_token_bytes(CacheStorage s, std::int64_t latent_dim, std::int64_t rope_dim) {
  const std::string caller = "KokkosMLA::fp8_token_bytes: ";
  if (latent_dim <= 0 || rope_dim < 0)
    throw std::invalid_argument(caller + "latent_dim = " + std::to_string(latent_dim) + " and rope_dim = " +
                                std::to_string(rope_dim) + ": need latent_dim > 0 and rope_dim >= 0");
  switch (s) {
    case CacheStorage::Fp8PerBlock:
      if (latent_dim % kFp8BlockChannels != 0)
        throw std::invalid_argument(caller + "latent_dim = " + std::to_string(latent_dim) +
                                    " but Fp8PerBlock takes a multiple of 128");
      return latent_dim + 4 * (latent_dim / kFp8BlockChannels) + 2 * rope_dim;
    case CacheStorage::Fp8PerTensor:
      return latent_dim + rope_dim;
    case CacheStorage::Native:
      break;
  }
  throw std::invalid_argument(caller + "storage " + to_string(s) + " is not an FP8 storage");
}

namespace Impl {

namespace {

constexpr std::int64_t kMaxExtent = std::int64_t(1) << 30;

[[noreturn]] void fail(const char* caller, const std::string& what) {
  throw std::invalid_argument(std::string(caller) + ": " + what);
}

std::string extents_of(const ArgInfo& a) {
  std::ostringstream o;
  o << a.name << " (";
  for (int i = 0; i < a.rank; ++i) o << (i ? ", " : "") << a.extent[i];
  o << ")";
  return o.str();
}

/// a.extent(i) must equal b.extent(j).
void require_equal(const char* caller, const ArgInfo& a, int i, const ArgInfo& b, int j) {
  if (a.extent[i] != b.extent[j]) {
    std::ostringstream o;
    o << a.name << ".extent(" << i << ") = " << a.extent[i] << " but " << b.name << ".extent(" << j
      << ") = " << b.extent[j];
    fail(caller, o.str());
  }
}

bool overlaps(const ArgInfo& a, const ArgInfo& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a.bytes > 0 && b.bytes > 0 && a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

/// Non-empty extents and no gaps: what every kernel assumes of its arguments.
void require_usable(const char* caller, const ArgInfo& a) {
  for (int i = 0; i < a.rank; ++i)
    if (a.extent[i] <= 0) fail(caller, extents_of(a) + " has an empty extent " + std::to_string(i));
  if (!a.contiguous) fail(caller, extents_of(a) + " is not contiguous");
}

}  // namespace

Shape validate_arguments(const char* caller, const ArgInfo& q, const ArgInfo& latent, const ArgInfo& w_uk,
                         const ArgInfo& w_uv, const ArgInfo& out) {
  for (const ArgInfo* a : {&q, &latent, &w_uk, &w_uv, &out}) require_usable(caller, *a);
  require_equal(caller, latent, 0, q, 0);     // batch
  require_equal(caller, w_uk, 0, latent, 2);  // latent rank
  require_equal(caller, w_uk, 1, q, 2);       // heads
  require_equal(caller, w_uk, 2, q, 3);       // head dim
  for (int i = 0; i < 3; ++i) require_equal(caller, w_uv, i, w_uk, i);
  for (int i = 0; i < 4; ++i) require_equal(caller, out, i, q, i);
  if (latent.extent[1] < q.extent[1]) {
    fail(caller, "latent.extent(1) = " + std::to_string(latent.extent[1]) + " keys but q.extent(1) = " +
                     std::to_string(q.extent[1]) + " queries: need keys >= queries");
  }
  for (const ArgInfo* a : {&q, &latent, &w_uk, &w_uv})
    if (overlaps(out, *a)) fail(caller, "out aliases " + extents_of(*a));
  Shape s;
  s.batch = q.extent[0];
  s.queries = q.extent[1];
  s.keys = latent.extent[1];
  s.heads = q.extent[2];
  s.head_dim = q.extent[3];
  s.latent_dim = latent.extent[2];
  return s;
}

void validate_lse(const char* caller, const ArgInfo& lse, const ArgInfo& q, const ArgInfo& latent,
                  const ArgInfo& w_uk, const ArgInfo& w_uv, const ArgInfo& out) {
  require_usable(caller, lse);
  for (int i = 0; i < 3; ++i) require_equal(caller, lse, i, q, i);
  for (const ArgInfo* a : {&q, &latent, &w_uk, &w_uv, &out})
    if (overlaps(lse, *a)) fail(caller, "lse aliases " + extents_of(*a));
}

void validate_merge(const char* caller, const ArgInfo& out_a, const ArgInfo& lse_a, const ArgInfo& out_b,
                    const ArgInfo& lse_b, const ArgInfo& out, const ArgInfo& lse) {
  for (const ArgInfo* a : {&out_a, &lse_a, &out_b, &lse_b, &out, &lse}) require_usable(caller, *a);
  for (int i = 0; i < 4; ++i) {
    require_equal(caller, out_b, i, out_a, i);
    require_equal(caller, out, i, out_a, i);
  }
  for (int i = 0; i < 3; ++i) {
    require_equal(caller, lse_a, i, out_a, i);
    require_equal(caller, lse_b, i, out_a, i);
    require_equal(caller, lse, i, out_a, i);
  }
  // Each element is read before it is written, by the same thread: writing
  // over an input in place (the same view: data and strides) is safe, any
  // other overlap is not.
  auto same = [](const ArgInfo& a, const ArgInfo& b) {
    return a.data == b.data && a.bytes == b.bytes && std::equal(a.stride, a.stride + a.rank, b.stride);
  };
  for (const ArgInfo* a : {&out_a, &lse_a, &out_b, &lse_b})
    for (const ArgInfo* result : {&out, &lse})
      if (overlaps(*result, *a) && !same(*result, *a))
        fail(caller, std::string(result->name) + " partly overlaps " + extents_of(*a) +
                         ": it may only be that view itself");
  if (overlaps(out, lse)) fail(caller, "out aliases " + extents_of(lse));
}

namespace {

/// Every extent positive and at most 2^30: kernels index tiles and team counts
/// with int; products of extents use 64 bits.
void require_extents(const char* caller, std::initializer_list<std::int64_t> extents,
                     const std::string& shape) {
  for (std::int64_t x : extents)
    if (x <= 0) fail(caller, "every extent must be positive: " + shape);
  for (std::int64_t x : extents)
    if (x > kMaxExtent) fail(caller, "an extent exceeds 2^30: " + shape);
}

}  // namespace

void validate_shape(const char* caller, const Shape& s) {
  require_extents(caller, {s.batch, s.queries, s.keys, s.heads, s.head_dim, s.latent_dim}, to_string(s));
  if (s.keys < s.queries) fail(caller, "keys < queries: " + to_string(s));
}

void validate_options(const char* caller, const Options& opt) {
  if (opt.scale && !std::isfinite(*opt.scale))
    fail(caller, "scale = " + std::to_string(*opt.scale) + " is not finite");
}

void require_same_shape(const char* caller, const Shape& planned, const Shape& given) {
  if (planned != given)
    fail(caller, "views of shape " + to_string(given) + " given to a plan made for " + to_string(planned));
}

namespace {

/// The cache arrays against each other and against `tokens`, the (B, T, ...)
/// argument that brings the new queries or tokens: its batch, and its T within
/// the capacity (tokens a sequence can hold). Returns the capacity.
std::int64_t validate_cache_storage(const char* caller, const ArgInfo& latent, const ArgInfo& k_rope,
                                    const ArgInfo& block_table, const ArgInfo& seqlens, const ArgInfo& tokens,
                                    std::int64_t rope_dim) {
  require_usable(caller, latent);
  require_usable(caller, seqlens);
  require_equal(caller, seqlens, 0, tokens, 0);
  if (!absent(k_rope)) {
    require_usable(caller, k_rope);
    if (rope_dim == 0) fail(caller, extents_of(k_rope) + " given, but no RoPE queries (q_rope) or keys");
    require_equal(caller, k_rope, 0, latent, 0);
    require_equal(caller, k_rope, 1, latent, 1);
  }
  std::int64_t per_sequence = 1;
  if (absent(block_table)) {
    require_equal(caller, latent, 0, tokens, 0);
  } else {
    require_usable(caller, block_table);
    require_equal(caller, block_table, 0, tokens, 0);
    per_sequence = block_table.extent[1];
  }
  const std::int64_t capacity = per_sequence * latent.extent[1];
  if (capacity < tokens.extent[1])
    fail(caller, "the cache holds at most " + std::to_string(capacity) + " tokens per sequence but " +
                     tokens.name + ".extent(1) = " + std::to_string(tokens.extent[1]));
  return capacity;
}

/// latent is R wide, or R + Dr wide in the packed layout (no separate k_rope).
void require_latent_width(const char* caller, const ArgInfo& latent, const ArgInfo& k_rope, std::int64_t rank,
                          std::int64_t rope_dim, const char* rank_from) {
  const bool packed = rope_dim > 0 && absent(k_rope);
  const std::int64_t want = rank + (packed ? rope_dim : 0);
  if (latent.extent[2] != want) {
    std::ostringstream o;
    o << latent.name << ".extent(2) = " << latent.extent[2] << " but " << rank_from << " gives R = " << rank;
    if (packed) o << " and the packed layout needs R + Dr = " << want;
    fail(caller, o.str());
  }
}

bool is_power_of_two(float x) {
  int exponent = 0;
  return std::frexp(x, &exponent) == 0.5f;
}

/// The view that holds a cache's tokens, to be checked as a latent is: an
/// FP8 storage's tokens (with latent and k_rope absent, and usable scales),
/// else the latent.
const ArgInfo& stored_tokens(const char* caller, const StorageInfo& st, const ArgInfo& latent,
                             const ArgInfo& k_rope) {
  if (st.storage == CacheStorage::Native) return latent;
  for (const ArgInfo* x : {&latent, &k_rope})
    if (!absent(*x))
      fail(caller, "cache.storage = " + to_string(st.storage) +
                       " keeps its tokens in cache.fp8.tokens, but " + extents_of(*x) + " is given");
  if (st.storage == CacheStorage::Fp8PerTensor)
    for (const auto& scale : {std::make_pair("cache.fp8.latent_scale", st.latent_scale),
                              std::make_pair("cache.fp8.rope_scale", st.rope_scale)}) {
      if (!(std::isfinite(scale.second) && scale.second > 0))
        fail(caller, std::string(scale.first) + " = " + std::to_string(scale.second) +
                         ": an Fp8PerTensor scale must be finite and positive");
      if (st.power_of_two_scales && !is_power_of_two(scale.second))
        fail(caller, std::string(scale.first) + " = " + std::to_string(scale.second) +
                         " is not a power of two, as cache.fp8.power_of_two_scales requires");
    }
  return st.tokens;
}

/// An FP8 storage's tokens hold fp8_token_bytes(storage, R, Dr) bytes each.
void require_token_bytes(const char* caller, const StorageInfo& st, std::int64_t rank, std::int64_t rope_dim,
                         const char* rank_from) {
  if (st.storage == CacheStorage::Fp8PerBlock && rank % kFp8BlockChannels != 0)
    fail(caller, std::string(rank_from) + " = " + std::to_string(rank) +
                     " but cache.storage = Fp8PerBlock takes R a multiple of 128");
  const std::int64_t want = fp8_token_bytes(st.storage, rank, rope_dim);
  if (st.tokens.extent[2] != want) {
    std::ostringstream o;
    o << st.tokens.name << ".extent(2) = " << st.tokens.extent[2]
      << " but cache.storage = " << to_string(st.storage) << " with R = " << rank << " and Dr = " << rope_dim
      << " needs " << want << " bytes per token";
    fail(caller, o.str());
  }
}

/// The latent's width, or an FP8 storage's bytes per token.
void require_token_width(const char* caller, const StorageInfo& st, const ArgInfo& latent,
                         const ArgInfo& k_rope, std::int64_t rank, std::int64_t rope_dim,
                         const char* rank_from) {
  if (st.storage == CacheStorage::Native)
    require_latent_width(caller, latent, k_rope, rank, rope_dim, rank_from);
  else
    require_token_bytes(caller, st, rank, rope_dim, rank_from);
}

}  // namespace

CacheShape validate_cache_extents(const char* caller, const CacheArgInfo& a) {
  for (const ArgInfo* x : {&a.q, &a.w_uk, &a.w_uv, &a.out}) require_usable(caller, *x);
  require_equal(caller, a.w_uk, 1, a.q, 2);  // heads
  require_equal(caller, a.w_uk, 2, a.q, 3);  // head dim
  for (int i = 0; i < 3; ++i) require_equal(caller, a.w_uv, i, a.w_uk, i);
  for (int i = 0; i < 4; ++i) require_equal(caller, a.out, i, a.q, i);
  std::int64_t rope_dim = 0;
  if (!absent(a.q_rope)) {
    require_usable(caller, a.q_rope);
    for (int i = 0; i < 3; ++i) require_equal(caller, a.q_rope, i, a.q, i);
    rope_dim = a.q_rope.extent[3];
    if (!absent(a.k_rope)) require_equal(caller, a.k_rope, 2, a.q_rope, 3);
  }
  // What brings the sequences: q itself, or with packed queries (1, total,
  // H, D) the offsets, one query per sequence at least as far as the cache
  // is concerned.
  const bool packed = !absent(a.query_offsets);
  ArgInfo sequences = a.q;
  if (packed) {
    require_usable(caller, a.query_offsets);
    if (a.query_offsets.extent[0] < 2)
      fail(caller, extents_of(a.query_offsets) + " must hold B + 1 >= 2 offsets");
    if (a.q.extent[0] != 1)
      fail(caller, "q.extent(0) = " + std::to_string(a.q.extent[0]) +
                       " but packed queries (query_offsets given) are (1, total, H, D)");
    sequences.name = "query_offsets";
    sequences.extent[0] = a.query_offsets.extent[0] - 1;
    sequences.extent[1] = 1;
  }
  const ArgInfo& stored = stored_tokens(caller, a.storage, a.latent, a.k_rope);
  const std::int64_t capacity =
      validate_cache_storage(caller, stored, a.k_rope, a.block_table, a.seqlens, sequences, rope_dim);
  require_token_width(caller, a.storage, a.latent, a.k_rope, a.w_uk.extent[0], rope_dim, "w_uk.extent(0)");
  if (!absent(a.lse)) {
    require_usable(caller, a.lse);
    for (int i = 0; i < 3; ++i) require_equal(caller, a.lse, i, a.q, i);
  }
  for (const ArgInfo* result : {&a.out, &a.lse})
    for (const ArgInfo* x : {&a.q, &a.q_rope, &a.w_uk, &a.w_uv, &a.latent, &a.k_rope, &a.storage.tokens,
                             &a.block_table, &a.seqlens, &a.query_offsets, &a.indices, &a.sinks})
      if (overlaps(*result, *x)) fail(caller, std::string(result->name) + " aliases " + extents_of(*x));
  if (overlaps(a.out, a.lse)) fail(caller, "out aliases " + extents_of(a.lse));
  if (!absent(a.indices)) {
    if (packed) fail(caller, "sparse attention (indices) takes no packed queries (query_offsets)");
    require_usable(caller, a.indices);
    require_equal(caller, a.indices, 0, a.q, 0);
    require_equal(caller, a.indices, 1, a.q, 1);
  }
  if (!absent(a.sinks)) {
    require_usable(caller, a.sinks);
    require_equal(caller, a.sinks, 0, a.q, 2);
  }
  CacheShape s;
  s.batch = sequences.extent[0];
  s.queries = a.q.extent[1];
  s.heads = a.q.extent[2];
  s.head_dim = a.q.extent[3];
  s.latent_dim = a.w_uk.extent[0];
  s.rope_dim = rope_dim;
  s.capacity = capacity;
  s.packed_queries = packed;
  s.topk = absent(a.indices) ? 0 : a.indices.extent[2];
  s.storage = a.storage.storage;
  if (!packed) validate_cache_shape(caller, s);
  return s;
}

void require_cache_shape_fits(const char* caller, const CacheShape& planned, const CacheShape& given) {
  CacheShape padded = given;
  if (planned.packed_queries && given.packed_queries) {
    if (given.queries > planned.batch * planned.queries)
      fail(caller, std::to_string(given.queries) + " packed queries given to a plan for at most " +
                       std::to_string(planned.queries) + " of each of " + std::to_string(planned.batch) +
                       " sequences " + to_string(planned));
    padded.queries = planned.queries;
  }
  require_same_cache_shape(caller, planned, padded);
}

std::int64_t validate_query_offsets(const char* caller, const int* offsets, std::int64_t batch,
                                    std::int64_t total, std::int64_t most) {
  if (offsets[0] != 0) fail(caller, "query_offsets(0) = " + std::to_string(offsets[0]) + ", not 0");
  std::int64_t found = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t count = std::int64_t(offsets[b + 1]) - offsets[b];
    if (count < 0 || (most >= 0 && count > most)) {
      std::ostringstream o;
      o << "query_offsets(" << b + 1 << ") - query_offsets(" << b << ") = " << count
        << " queries of sequence " << b
        << (count < 0 ? ": offsets must not decrease" : " but the plan takes at most ")
        << (count < 0 ? "" : std::to_string(most));
      fail(caller, o.str());
    }
    found = std::max(found, count);
  }
  if (offsets[batch] != total)
    fail(caller, "query_offsets(" + std::to_string(batch) + ") = " + std::to_string(offsets[batch]) +
                     " but q holds " + std::to_string(total) + " packed queries");
  return found;
}

std::int64_t validate_append_extents(const char* caller, const ArgInfo& latent, const ArgInfo& k_rope,
                                     const ArgInfo& block_table, const ArgInfo& seqlens,
                                     const ArgInfo& new_latent, const ArgInfo& new_k_rope,
                                     const StorageInfo& storage) {
  require_usable(caller, new_latent);
  std::int64_t rope_dim = 0;
  if (!absent(new_k_rope)) {
    require_usable(caller, new_k_rope);
    require_equal(caller, new_k_rope, 0, new_latent, 0);
    require_equal(caller, new_k_rope, 1, new_latent, 1);
    rope_dim = new_k_rope.extent[2];
    if (!absent(k_rope)) require_equal(caller, new_k_rope, 2, k_rope, 2);
  } else if (!absent(k_rope)) {
    fail(caller, "the cache has " + extents_of(k_rope) + " but new_k_rope is empty");
  }
  const ArgInfo& stored = stored_tokens(caller, storage, latent, k_rope);
  validate_cache_storage(caller, stored, k_rope, block_table, seqlens, new_latent, rope_dim);
  require_token_width(caller, storage, latent, k_rope, new_latent.extent[2], rope_dim,
                      "new_latent.extent(2)");
  for (const ArgInfo* x : {&new_latent, &new_k_rope, &block_table, &seqlens})
    for (const ArgInfo* cache : {&latent, &k_rope, &storage.tokens})
      if (overlaps(*cache, *x)) fail(caller, std::string(cache->name) + " aliases " + extents_of(*x));
  return new_latent.extent[1];
}

void validate_cache_shape(const char* caller, const CacheShape& s) {
  require_extents(caller, {s.batch, s.queries, s.heads, s.head_dim, s.latent_dim, s.capacity}, to_string(s));
  if (s.rope_dim < 0) fail(caller, "rope_dim < 0: " + to_string(s));
  if (s.rope_dim > kMaxExtent) fail(caller, "an extent exceeds 2^30: " + to_string(s));
  if (s.capacity < s.queries) fail(caller, "capacity < queries: " + to_string(s));
  if (s.topk < 0 || s.topk > kMaxExtent) fail(caller, "topk outside [0, 2^30]: " + to_string(s));
  if (s.storage == CacheStorage::Fp8PerBlock && s.latent_dim % kFp8BlockChannels != 0)
    fail(caller, "Fp8PerBlock takes latent_dim a multiple of 128: " + to_string(s));
}

void validate_sparse_indices(const char* caller, const int* indices, const int* seqlens, std::int64_t batch,
                             std::int64_t queries, std::int64_t topk) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < queries; ++t)
      for (std::int64_t k = 0; k < topk; ++k) {
        const int x = indices[(b * queries + t) * topk + k];
        if (x < -1 || x >= seqlens[b]) {
          std::ostringstream o;
          o << "indices(" << b << ", " << t << ", " << k << ") = " << x << " is outside [-1, " << seqlens[b]
            << "): -1 or a position of the sequence (seqlens(" << b << ") = " << seqlens[b] << ")";
          fail(caller, o.str());
        }
      }
}

void require_same_cache_shape(const char* caller, const CacheShape& planned, const CacheShape& given) {
  if (planned != given)
    fail(caller,
         "arguments of shape " + to_string(given) + " given to a plan made for " + to_string(planned));
}

void validate_cache_indices(const char* caller, const int* seqlens, std::int64_t batch, const int* table,
                            std::int64_t table_ld, std::int64_t page_size, std::int64_t pages,
                            std::int64_t min_length, std::int64_t capacity) {
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = seqlens[b];
    if (length < min_length || length > capacity) {
      std::ostringstream o;
      o << "cache.seqlens(" << b << ") = " << length << " is outside [" << min_length << ", " << capacity
        << "]: a sequence holds " << (min_length > 0 ? "at least its new tokens and " : "")
        << "at most the cache's capacity";
      fail(caller, o.str());
    }
    if (!table) continue;
    for (std::int64_t p = 0; p < (length + page_size - 1) / page_size; ++p) {
      const int page = table[b * table_ld + p];
      if (page < 0 || page >= pages) {
        std::ostringstream o;
        o << "cache.block_table(" << b << ", " << p << ") = " << page << " but the cache has " << pages
          << " pages";
        fail(caller, o.str());
      }
    }
  }
}

}  // namespace Impl
}  // namespace KokkosMLA
