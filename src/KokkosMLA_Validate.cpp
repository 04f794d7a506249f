// Host-side checks, run before any launch. Messages name the argument and the
// extents, e.g. "KokkosMLA::attention: latent.extent(2) = 31 but w_uk.extent(0) = 32".

#include <KokkosMLA_Attention.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

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

namespace Impl {

namespace {

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
  // over an input in place is safe, any other overlap is not.
  auto same = [](const ArgInfo& a, const ArgInfo& b) { return a.data == b.data && a.bytes == b.bytes; };
  for (const ArgInfo* a : {&out_a, &lse_a, &out_b, &lse_b})
    for (const ArgInfo* result : {&out, &lse})
      if (overlaps(*result, *a) && !same(*result, *a))
        fail(caller, std::string(result->name) + " partly overlaps " + extents_of(*a) +
                         ": it may only be that view itself");
  if (overlaps(out, lse)) fail(caller, "out aliases " + extents_of(lse));
}

void validate_shape(const char* caller, const Shape& s) {
  const std::int64_t e[] = {s.batch, s.queries, s.keys, s.heads, s.head_dim, s.latent_dim};
  for (std::int64_t x : e)
    if (x <= 0) fail(caller, "every extent must be positive: " + to_string(s));
  if (s.keys < s.queries) fail(caller, "keys < queries: " + to_string(s));
  // Kernels index tiles and team counts with int; products of extents use 64 bits.
  for (std::int64_t x : e)
    if (x > std::int64_t(1) << 30) fail(caller, "an extent exceeds 2^30: " + to_string(s));
}

void validate_options(const char* caller, const Options& opt) {
  if (opt.scale && !std::isfinite(*opt.scale))
    fail(caller, "scale = " + std::to_string(*opt.scale) + " is not finite");
}

void require_same_shape(const char* caller, const Shape& planned, const Shape& given) {
  if (planned != given)
    fail(caller, "views of shape " + to_string(given) + " given to a plan made for " + to_string(planned));
}

}  // namespace Impl
}  // namespace KokkosMLA
