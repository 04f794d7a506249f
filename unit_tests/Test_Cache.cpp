// Attention over a latent cache: ragged batches, paged and packed caches,
// decoupled RoPE, split-KV, appending, and bad input, against a host double
// reference computed on the logical (per-sequence) data.

#include "Reference.hpp"
#include "ToolsRecorder.hpp"
#include "impl/KokkosMLA_Backend.hpp"
#include "impl/KokkosMLA_Compat.hpp"
#include "paths/KokkosMLA_CachePaths.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>

namespace KokkosMLA {
namespace Test {
namespace {

/// How a test lays out its cache.
struct CacheCase {
  std::int64_t batch, queries, heads, head_dim, latent_dim, rope_dim;
  std::int64_t capacity;
  std::int64_t page;  ///< 0: contiguous
  bool packed;        ///< latent and RoPE keys side by side
  std::vector<int> lengths;
};

std::string describe(const CacheCase& c) {
  std::ostringstream o;
  o << "B=" << c.batch << " Tq=" << c.queries << " H=" << c.heads << " D=" << c.head_dim
    << " R=" << c.latent_dim << " Dr=" << c.rope_dim << " capacity=" << c.capacity << " page=" << c.page
    << (c.packed ? " packed" : "");
  return o.str();
}

/// Logical data in double: q (B,Tq,H,D), q_rope (B,Tq,H,Dr), the latent
/// (B,capacity,R) and RoPE keys (B,capacity,Dr) of each sequence, weights (R,H,D).
struct Logical {
  CacheCase c;
  std::vector<double> q, q_rope, latent, rope, w_uk, w_uv;

  Logical(const CacheCase& cc, std::uint64_t seed) : c(cc) {
    std::mt19937_64 rng(seed);
    const double w = 1.0 / std::sqrt(double(c.latent_dim));
    q = random(c.batch * c.queries * c.heads * c.head_dim, rng, 1.0);
    q_rope = random(c.batch * c.queries * c.heads * c.rope_dim, rng, 1.0);
    latent = random(c.batch * c.capacity * c.latent_dim, rng, 1.0);
    rope = random(c.batch * c.capacity * c.rope_dim, rng, 1.0);
    w_uk = random(c.latent_dim * c.heads * c.head_dim, rng, w);
    w_uv = random(c.latent_dim * c.heads * c.head_dim, rng, w);
  }
  static std::vector<double> random(std::int64_t n, std::mt19937_64& rng, double scale) {
    std::uniform_real_distribution<double> u(-scale, scale);
    std::vector<double> v(n);
    for (double& x : v) x = u(rng);
    return v;
  }

  /// Calls f(b, h, row, last) for every query row: row = (b Tq + t) H + h of
  /// sequence b and head h, which sees keys 0 .. last (none when last < 0).
  template <class F>
  void for_each_row(const Options& opt, F f) const {
    for (std::int64_t b = 0; b < c.batch; ++b)
      for (std::int64_t t = 0; t < c.queries; ++t)
        for (std::int64_t h = 0; h < c.heads; ++h) {
          const std::int64_t length = c.lengths[b];
          f(b, h, (b * c.queries + t) * c.heads + h, opt.causal ? length - c.queries + t : length - 1);
        }
  }

  /// q_rope's row `row` dotted with the RoPE key of token s of sequence b.
  double rope_dot(std::int64_t row, std::int64_t b, std::int64_t s) const {
    double dot = 0;
    for (std::int64_t e = 0; e < c.rope_dim; ++e)
      dot += q_rope[row * c.rope_dim + e] * rope[(b * c.capacity + s) * c.rope_dim + e];
    return dot;
  }

  /// logits <- exp(logit - max); returns their sum, and writes max + log(sum)
  /// to *lse_row when given: +inf for a row with no key (whose out is 0).
  static double exponentiate(std::vector<double>& logits, double* lse_row) {
    double mx = -INFINITY, sum = 0;
    for (double x : logits) mx = std::max(mx, x);
    for (double& x : logits) sum += (x = std::exp(x - mx));
    if (lse_row) *lse_row = logits.empty() ? INFINITY : mx + std::log(sum);
    return sum;
  }

  /// Every input rounded by `stored` (to a storage type's values).
  void round(double (*stored)(double)) {
    for (std::vector<double>* v : {&q, &q_rope, &latent, &rope, &w_uk, &w_uv})
      for (double& x : *v) x = stored(x);
  }

  /// The same attention in its absorbed form: qa = q w_uk^T per head, logits
  /// over the latent and RoPE keys, oa = P latent, out = oa w_uv. With
  /// `stored`, what a 16-bit implementation keeps in its type passes through
  /// it: qa, the unnormalised probabilities exp(logit - max), oa and out.
  /// Without, it equals reference() up to rounding in double.
  std::vector<double> absorbed_reference(const Options& opt, std::vector<double>* lse,
                                         double (*stored)(double) = nullptr) const {
    auto keep = [stored](double x) { return stored ? stored(x) : x; };
    const std::int64_t H = c.heads, D = c.head_dim, R = c.latent_dim;
    const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(D + c.rope_dim));
    std::vector<double> out(c.batch * c.queries * H * D, 0.0), qa(R), oa(R);
    if (lse) lse->assign(c.batch * c.queries * H, 0.0);
    for_each_row(opt, [&](std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t last) {
      for (std::int64_t r = 0; r < R; ++r) {
        double x = 0;
        for (std::int64_t d = 0; d < D; ++d) x += q[row * D + d] * w_uk[(r * H + h) * D + d];
        qa[r] = keep(x);
      }
      std::vector<double> logits(std::max<std::int64_t>(last + 1, 0));
      for (std::int64_t s = 0; s <= last; ++s) {
        double dot = rope_dot(row, b, s);
        for (std::int64_t r = 0; r < R; ++r) dot += qa[r] * latent[(b * c.capacity + s) * R + r];
        logits[s] = scale * dot;
      }
      const double sum = exponentiate(logits, lse ? &(*lse)[row] : nullptr);
      std::fill(oa.begin(), oa.end(), 0.0);
      for (std::int64_t s = 0; s <= last; ++s) {
        const double p = keep(logits[s]);
        for (std::int64_t r = 0; r < R; ++r) oa[r] += p * latent[(b * c.capacity + s) * R + r];
      }
      for (double& x : oa) x = keep(sum > 0 ? x / sum : 0.0);
      for (std::int64_t d = 0; d < D; ++d) {
        double x = 0;
        for (std::int64_t r = 0; r < R; ++r) x += oa[r] * w_uv[(r * H + h) * D + d];
        out[row * D + d] = keep(x);
      }
    });
    return out;
  }

  /// out (B,Tq,H,D) and lse (B,Tq,H), decompressing K and V row by row.
  std::vector<double> reference(const Options& opt, std::vector<double>* lse = nullptr) const {
    const std::int64_t H = c.heads, D = c.head_dim, R = c.latent_dim;
    const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(D + c.rope_dim));
    std::vector<double> out(c.batch * c.queries * H * D, 0.0);
    if (lse) lse->assign(c.batch * c.queries * H, 0.0);
    for_each_row(opt, [&](std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t last) {
      const std::int64_t keys = std::max<std::int64_t>(last + 1, 0);
      std::vector<double> logits(keys), v(D * keys, 0.0);
      for (std::int64_t s = 0; s <= last; ++s) {
        const double* l = &latent[(b * c.capacity + s) * R];
        double dot = rope_dot(row, b, s);
        for (std::int64_t d = 0; d < D; ++d) {
          double k = 0;
          for (std::int64_t r = 0; r < R; ++r) {
            k += l[r] * w_uk[(r * H + h) * D + d];
            v[s * D + d] += l[r] * w_uv[(r * H + h) * D + d];
          }
          dot += q[row * D + d] * k;
        }
        logits[s] = scale * dot;
      }
      const double sum = exponentiate(logits, lse ? &(*lse)[row] : nullptr);
      for (std::int64_t s = 0; s <= last; ++s)
        for (std::int64_t d = 0; d < D; ++d) out[row * D + d] += logits[s] / sum * v[s * D + d];
    });
    return out;
  }
};

/// The device-side cache of a case, with every row no sequence holds set to
/// NaN (so reading one shows in the output), and pages in shuffled order.
template <class T>
struct DeviceCache {
  LatentCache<T> cache;
  Kokkos::View<int*, Kokkos::LayoutRight, Space> seqlens;
  Kokkos::View<int**, Kokkos::LayoutRight, Space> block_table;

  /// fill: write the logical rows a sequence holds (false: leave the whole cache NaN, for append tests).
  DeviceCache(const Logical& l, std::uint64_t seed, bool fill = true) {
    const CacheCase& c = l.c;
    const std::int64_t R = c.latent_dim, Dr = c.rope_dim, width = R + (c.packed ? Dr : 0);
    const std::int64_t page = c.page ? c.page : c.capacity, per_sequence = c.capacity / page;
    const std::int64_t pages = c.page ? c.batch * per_sequence + 3 : c.batch;  // 3 pages nobody uses
    std::vector<int> order(pages);
    std::iota(order.begin(), order.end(), 0);
    if (c.page) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    seqlens = Kokkos::View<int*, Kokkos::LayoutRight, Space>("seqlens", c.batch);
    auto hl = Kokkos::create_mirror_view(seqlens);
    for (std::int64_t b = 0; b < c.batch; ++b) hl(b) = c.lengths[b];
    Kokkos::deep_copy(seqlens, hl);
    cache.seqlens = seqlens;
    if (c.page) {
      block_table = Kokkos::View<int**, Kokkos::LayoutRight, Space>("block_table", c.batch, per_sequence);
      auto ht = Kokkos::create_mirror_view(block_table);
      for (std::int64_t b = 0; b < c.batch; ++b)
        for (std::int64_t p = 0; p < per_sequence; ++p) ht(b, p) = order[b * per_sequence + p];
      Kokkos::deep_copy(block_table, ht);
      cache.block_table = block_table;
    }
    cache.latent = View3<T>("latent", pages, page, width);
    const bool separate_rope = Dr > 0 && !c.packed;
    if (separate_rope) cache.k_rope = View3<T>("k_rope", pages, page, Dr);
    auto hlat = Kokkos::create_mirror_view(cache.latent);
    auto hrope = Kokkos::create_mirror_view(cache.k_rope);
    Kokkos::deep_copy(hlat, T(std::nan("")));
    Kokkos::deep_copy(hrope, T(std::nan("")));
    for (std::int64_t b = 0; fill && b < c.batch; ++b)
      for (std::int64_t s = 0; s < c.lengths[b]; ++s) {
        const std::int64_t pg = order[c.page ? b * per_sequence + s / page : b], at = s % page;
        for (std::int64_t r = 0; r < R; ++r) hlat(pg, at, r) = T(l.latent[(b * c.capacity + s) * R + r]);
        for (std::int64_t e = 0; e < Dr; ++e) {
          const T x = T(l.rope[(b * c.capacity + s) * Dr + e]);
          if (separate_rope)
            hrope(pg, at, e) = x;
          else
            hlat(pg, at, R + e) = x;
        }
      }
    Kokkos::deep_copy(cache.latent, hlat);
    Kokkos::deep_copy(cache.k_rope, hrope);
  }
};

/// Device arguments for a case; out and lse start as NaN.
template <class T>
CacheArguments<T> arguments(const Logical& l, const DeviceCache<T>& dc) {
  const CacheCase& c = l.c;
  CacheArguments<T> a;
  a.q = to_device4<T>(l.q, c.batch, c.queries, c.heads, c.head_dim);
  if (c.rope_dim > 0) a.q_rope = to_device4<T>(l.q_rope, c.batch, c.queries, c.heads, c.rope_dim);
  a.cache = dc.cache;
  a.w_uk = to_device3<T>(l.w_uk, c.latent_dim, c.heads, c.head_dim);
  a.w_uv = to_device3<T>(l.w_uv, c.latent_dim, c.heads, c.head_dim);
  a.out = View4<T>("out", c.batch, c.queries, c.heads, c.head_dim);
  a.lse = typename CacheArguments<T>::Lse("lse", c.batch, c.queries, c.heads);
  Kokkos::deep_copy(a.out, T(std::nan("")));
  Kokkos::deep_copy(a.lse, std::nan(""));
  return a;
}

/// args with its query-side views in `layout` (in_layout), out and lse NaN.
template <class T>
CacheArguments<T, Space::memory_space, Kokkos::LayoutStride> in_layout(const CacheArguments<T>& a,
                                                                       Layout layout) {
  CacheArguments<T, Space::memory_space, Kokkos::LayoutStride> s = Impl::strided(a);
  s.q = in_layout(a.q, layout);
  if (a.q_rope.size() > 0) s.q_rope = in_layout(a.q_rope, layout);
  s.w_uk = in_layout(a.w_uk, layout);
  s.w_uv = in_layout(a.w_uv, layout);
  s.out = in_layout(a.out, layout);
  Kokkos::deep_copy(s.out, T(std::nan("")));
  if (a.lse.size() > 0) {
    s.lse = in_layout(a.lse, layout);
    Kokkos::deep_copy(s.lse, std::nan(""));
  }
  return s;
}

Shape shape_of(const CacheCase& c) {
  Shape s;
  s.batch = c.batch;
  s.queries = c.queries;
  s.keys = c.capacity;
  s.heads = c.heads;
  s.head_dim = c.head_dim;
  s.latent_dim = c.latent_dim;
  return s;
}

Shape lse_shape_of(const CacheCase& c) {
  Shape s = shape_of(c);
  s.head_dim = 1;
  return s;
}

/// Rows that see no key (an idle slot of length 0, or a query before its
/// sequence's first token) must hold out = 0 and lse = +inf exactly, with no
/// NaN although every cache row no sequence holds is NaN. Checks those rows,
/// then sets them to 0 on both sides; returns how many there were.
int expect_idle_rows_empty(std::vector<double>& out, std::vector<double>& lse, std::vector<double>& want,
                           std::vector<double>& want_lse, std::int64_t head_dim) {
  int idle = 0;
  for (std::size_t row = 0; row < want_lse.size(); ++row) {
    if (want_lse[row] != INFINITY) continue;
    ++idle;
    EXPECT_EQ(lse[row], INFINITY) << "lse of row " << row << ", which sees no key";
    for (std::int64_t d = 0; d < head_dim; ++d) {
      EXPECT_EQ(out[row * head_dim + d], 0.0) << "out of row " << row << ", which sees no key";
      out[row * head_dim + d] = want[row * head_dim + d] = 0;
    }
    lse[row] = want_lse[row] = 0;
  }
  return idle;
}

/// out and lse of an executed call against the reference on the logical
/// data, rows that see no key checked exactly; returns how many there were.
template <class T>
int expect_matches_reference(const Logical& l, const CacheArguments<T>& a, const Options& opt) {
  std::vector<double> want_lse;
  std::vector<double> want = l.reference(opt, &want_lse);
  std::vector<double> out = Problem<T>::host_copy(a.out), lse = Problem<T>::host_copy(a.lse);
  const int idle = expect_idle_rows_empty(out, lse, want, want_lse, l.c.head_dim);
  EXPECT_TRUE(close(out, want, tolerance<T>(), shape_of(l.c)));
  EXPECT_TRUE(close(lse, want_lse, tolerance<T>(), lse_shape_of(l.c)));
  return idle;
}

/// Every case, causal and not, with each split count, against the reference;
/// returns how many rows saw no key.
template <class T>
int expect_cases_match_reference(const std::vector<CacheCase>& cases, std::initializer_list<int> split_counts,
                                 std::uint64_t seed) {
  int idle = 0;
  for (const CacheCase& c : cases)
    for (bool causal : {true, false})
      for (int splits : split_counts) {
        SCOPED_TRACE(describe(c) + " causal=" + std::to_string(causal) + " splits=" + std::to_string(splits));
        const Logical l(c, ++seed);
        const DeviceCache<T> dc(l, seed);
        const CacheArguments<T> a = arguments(l, dc);
        Options opt;
        opt.causal = causal;
        opt.kv_splits = splits;
        CachePlan<T> plan(Space(), cache_shape(a), opt);
        // Hosts run the host kernel; GPUs the blocked one in float where its
        // tiles fit even 48 KB (R + Dr <= 32), or the register one.
        if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible) {
          EXPECT_EQ(plan.path(), Path::CacheHost) << plan.describe();
        } else if (std::is_same<T, float>::value && c.latent_dim + c.rope_dim <= 32) {
          EXPECT_EQ(plan.path(), Path::CacheBlocked) << plan.describe();
        } else {
          EXPECT_TRUE(plan.path() == Path::CacheBlocked || plan.path() == Path::CacheRegisters)
              << plan.describe();
        }
        plan.execute(Space(), a);
        idle += expect_matches_reference(l, a, opt);
      }
  return idle;
}

/// Cases with rows that see no key: idle slots (length 0) and sequences
/// shorter than Tq, on the latent and register kernels, paged and contiguous.
std::vector<CacheCase> idle_cases() {
  return {
      {3, 2, 4, 8, 16, 4, 40, 8, false, {0, 1, 40}},  // paged, RoPE, Tq = 2
      {2, 3, 5, 6, 4, 2, 24, 0, true, {0, 2}},        // register kernel (R = 4), packed
      {2, 1, 3, 5, 7, 0, 16, 4, false, {0, 16}},      // decode with an idle slot, no RoPE
  };
}

/// Cases covering each feature; lengths are ragged unless noted.
std::vector<CacheCase> cases() {
  return {
      {1, 1, 1, 1, 1, 0, 1, 0, false, {1}},                // everything 1
      {3, 1, 4, 8, 16, 0, 40, 0, false, {40, 40, 40}},     // decode, contiguous, full
      {4, 1, 5, 7, 12, 4, 37, 0, false, {1, 37, 20, 9}},   // ragged, RoPE, primes
      {3, 2, 3, 5, 7, 3, 30, 1, false, {2, 30, 17}},       // page size 1, speculative Tq=2
      {3, 1, 8, 16, 32, 8, 128, 64, false, {128, 65, 1}},  // page size 64
      {2, 3, 6, 4, 24, 6, 48, 16, true, {48, 3}},          // packed, paged
      {2, 1, 2, 9, 10, 5, 21, 0, true, {21, 11}},          // packed, contiguous
      {2, 5, 3, 6, 11, 0, 35, 7, false, {5, 35}},          // prefill-like Tq, minimal length
      {2, 4, 17, 3, 65, 2, 70, 5, false, {70, 42}},        // heads and R beyond a tile
      // R <= 4: the register kernel runs on hosts too (GPUs take it up to R = 512).
      {3, 2, 5, 6, 4, 2, 40, 8, false, {40, 17, 2}},  // paged, RoPE, ragged
      {2, 1, 9, 5, 3, 2, 30, 0, true, {30, 7}},       // packed, two head groups
  };
}

/// A CachePlan of a's problem under opt, or null where this backend has none.
template <class T>
std::unique_ptr<CachePlan<T>> plan_if_taken(const CacheArguments<T>& a, const Options& opt) {
  return plan_or_null<CachePlan<T>>(cache_shape(a, opt), opt);
}

/// The paths of dense attention over a native cache, each forced in turn by
/// the tests of every path (those a backend lacks are skipped).
const std::vector<Path> kDensePaths = {Path::CacheHost, Path::CacheGemm, Path::CacheBlocked,
                                       Path::CacheRegisters, Path::CacheLatent};

template <class T>
class Cache : public ::testing::Test {};
TYPED_TEST_SUITE(Cache, Scalars);

TYPED_TEST(Cache, MatchesReferenceForEverySplitCount) {
  EXPECT_EQ(expect_cases_match_reference<TypeParam>(cases(), {0, 1, 2, 3, 8}, 100),
            0);  // every row sees a key
}

TYPED_TEST(Cache, RowsWithNoKeyGetZeroOutAndInfiniteLse) {
  EXPECT_GT(expect_cases_match_reference<TypeParam>(idle_cases(), {0, 1, 3}, 150), 0);
}

/// FlashMLA's decode shape at 128 heads: B = 128, D = 128, R = 512, Dr = 64.
CacheShape decode_at_128_heads(std::int64_t queries, std::int64_t capacity) {
  CacheShape s;
  s.batch = 128;
  s.queries = queries;
  s.heads = 128;
  s.head_dim = 128;
  s.latent_dim = 512;
  s.rope_dim = 64;
  s.capacity = capacity;
  return s;
}

// The GEMM path's default stops where one sequence's scores outgrow its
// chunk: a decode step at 128 heads fits, a chunked prefill of 4096 queries does not.
TYPED_TEST(Cache, AttentionByGemmsTakesOnlySequencesThatFitItsChunk) {
  using Unit = Impl::CacheGemmPath<TypeParam, Space>;
  EXPECT_TRUE(Unit::sequence_fits_chunk(decode_at_128_heads(1, 8192)));
  EXPECT_FALSE(Unit::sequence_fits_chunk(decode_at_128_heads(4096, 8192)));
}

// The GEMM path's key parts and chunks on a GPU of 132 multiprocessors at
// B = 128, H = 128: the whole capacity in one part with the largest equal
// chunk, of at least a quarter of the fullest, whose sequences keep 90 % of
// P latent's waves of 128 x 128 tiles busy (float at Tq = 1, S = 4096: the
// fullest, 64 sequences, 256 tiles; at S = 8192: 32 sequences, 128 tiles,
// where the fullest, 43, makes 172), else 1024-key parts with as many
// sequences as fit (double at Tq = 1, S = 8192: no chunk of 6 to 22
// sequences fills the waves). Double's chunks hold half as many sequences.
TYPED_TEST(Cache, AttentionByGemmsChunksFillWholeWaves) {
  using Unit = Impl::CacheGemmPath<TypeParam, Space>;
  const bool fp32 = sizeof(TypeParam) == 4;
  const std::int64_t want[][4] = {// Tq, S, keys of a part, sequences of a chunk
                                  {1, 4096, 4096, fp32 ? 64 : 32},
                                  {1, 8192, fp32 ? 8192 : 1024, fp32 ? 32 : 19},
                                  {2, 4096, 4096, fp32 ? 64 : 32},
                                  {2, 8192, 8192, fp32 ? 32 : 16}};
  for (const auto& w : want) {
    const auto c = Unit::chunking_for(decode_at_128_heads(w[0], w[1]), 132, Unit::kChunkBytes);
    EXPECT_EQ(c.part, w[2]) << "Tq " << w[0] << ", S " << w[1];
    EXPECT_EQ(c.sequences, w[3]) << "Tq " << w[0] << ", S " << w[1];
  }
}

// Attention by GEMMs, causal and not, with idle rows and NaN in every cache
// row no sequence holds: through a plan (its sequences in as few GEMMs as
// fit its chunk budget, keys in one part), and with one sequence per GEMM (a
// budget of one byte) and keys in parts of 3 (the last one partly past the capacity).
TYPED_TEST(Cache, AttentionByGemmsMatchesReferenceInOneOrManyChunks) {
  using T = TypeParam;
  std::vector<CacheCase> all = cases();
  for (const CacheCase& c : idle_cases()) all.push_back(c);
  std::uint64_t seed = 1700;
  int idle = 0;
  for (const CacheCase& c : all)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(describe(c) + " causal=" + std::to_string(causal));
      const Logical l(c, ++seed);
      const DeviceCache<T> dc(l, seed);
      const CacheArguments<T> a = arguments(l, dc);
      Options opt;
      opt.causal = causal;
      opt.path = Path::CacheGemm;
      const CachePlan<T> plan(Space(), cache_shape(a), opt);
      ASSERT_EQ(plan.path(), Path::CacheGemm);
      plan.execute(Space(), a);
      idle += expect_matches_reference(l, a, opt);

      Impl::CacheProblem p;
      p.shape = cache_shape(a);
      p.options = opt;
      p.backend = Impl::backend_of(Space());
      p.scale = plan.scale();
      const Impl::CacheGemmPath<T, Space> by_sequence(Space(), p, 1, 3);
      Kokkos::deep_copy(a.out, T(std::nan("")));
      Kokkos::deep_copy(a.lse, std::nan(""));
      by_sequence.run(Space(), Impl::strided(a));
      expect_matches_reference(l, a, opt);
    }
  EXPECT_GT(idle, 0);
}

/// DeepSeek's widths (R = 512, Dr = 64) and the widest rows the blocked GPU
/// kernel takes with R not a multiple of 4 (509 + 67): several row groups,
/// the last one partial, paged, ragged, causal and not, one part and three.
/// The packed form (CacheArguments::query_offsets) of a case whose sequence b
/// has counts[b] <= Tq queries: they are the last counts[b] logical rows of
/// that sequence (query j sits at seqlens(b) - counts[b] + j either way), in
/// sequence order. rows[r] is the logical row (b Tq + t) of packed row r.
template <class T>
struct PackedCase {
  CacheArguments<T> args;
  std::vector<std::int64_t> rows;
  Kokkos::View<int*, Kokkos::LayoutRight, Space> offsets;

  PackedCase(const Logical& l, const CacheArguments<T>& padded, const std::vector<int>& counts)
      : args(padded) {
    const CacheCase& c = l.c;
    std::vector<double> q, q_rope;
    offsets = Kokkos::View<int*, Kokkos::LayoutRight, Space>("query_offsets", c.batch + 1);
    auto host = Kokkos::create_mirror_view(offsets);
    host(0) = 0;
    for (std::int64_t b = 0; b < c.batch; ++b) {
      host(b + 1) = host(b) + counts[b];
      for (int j = 0; j < counts[b]; ++j) rows.push_back(b * c.queries + c.queries - counts[b] + j);
    }
    Kokkos::deep_copy(offsets, host);
    for (std::int64_t row : rows) {
      const std::int64_t qw = c.heads * c.head_dim, rw = c.heads * c.rope_dim;
      q.insert(q.end(), l.q.begin() + row * qw, l.q.begin() + (row + 1) * qw);
      q_rope.insert(q_rope.end(), l.q_rope.begin() + row * rw, l.q_rope.begin() + (row + 1) * rw);
    }
    const std::int64_t total = std::int64_t(rows.size());
    args.q = to_device4<T>(q, 1, total, c.heads, c.head_dim);
    if (c.rope_dim > 0) args.q_rope = to_device4<T>(q_rope, 1, total, c.heads, c.rope_dim);
    args.out = View4<T>("out", 1, total, c.heads, c.head_dim);
    args.lse = typename CacheArguments<T>::Lse("lse", 1, total, c.heads);
    Kokkos::deep_copy(args.out, T(std::nan("")));
    Kokkos::deep_copy(args.lse, std::nan(""));
    args.query_offsets = offsets;
  }

  /// The logical rows of `v` (width elements each) that the packed rows are.
  std::vector<double> pick(const std::vector<double>& v, std::int64_t width) const {
    std::vector<double> picked;
    for (std::int64_t row : rows)
      picked.insert(picked.end(), v.begin() + row * width, v.begin() + (row + 1) * width);
    return picked;
  }
};

// Variable query counts: counts of 0, a sequence of length 0 with a query
// and one with more queries than tokens (rows that see no key), against the
// reference of the same queries in a Tq = 4 problem, every split count.
TYPED_TEST(Cache, PackedQueriesMatchReference) {
  using T = TypeParam;
  const CacheCase c{5, 4, 3, 6, 8, 2, 24, 4, false, {24, 0, 9, 2, 17}};
  const std::vector<int> counts = {4, 1, 0, 3, 2};
  std::uint64_t seed = 900;
  int idle = 0;
  for (bool causal : {true, false})
    for (int splits : {0, 1, 3}) {
      SCOPED_TRACE("causal=" + std::to_string(causal) + " splits=" + std::to_string(splits));
      const Logical l(c, ++seed);
      const DeviceCache<T> dc(l, seed);
      const PackedCase<T> packed(l, arguments(l, dc), counts);
      Options opt;
      opt.causal = causal;
      opt.kv_splits = splits;
      const CacheShape shape = cache_shape(packed.args);
      EXPECT_TRUE(shape.packed_queries);
      EXPECT_EQ(shape.queries, 4);  // the most of one sequence
      CachePlan<T>(Space(), shape, opt).execute(Space(), packed.args);
      std::vector<double> want_lse, want = l.reference(opt, &want_lse);
      want = packed.pick(want, c.heads * c.head_dim);
      want_lse = packed.pick(want_lse, c.heads);
      std::vector<double> out = Problem<T>::host_copy(packed.args.out),
                          lse = Problem<T>::host_copy(packed.args.lse);
      idle += expect_idle_rows_empty(out, lse, want, want_lse, c.head_dim);
      const Shape s{1, std::int64_t(packed.rows.size()), c.capacity, c.heads, c.head_dim, c.latent_dim};
      Shape lse_shape = s;
      lse_shape.head_dim = 1;
      EXPECT_TRUE(close(out, want, tolerance<T>(), s));
      EXPECT_TRUE(close(lse, want_lse, tolerance<T>(), lse_shape));
    }
  // Rows of 3 heads that see no key, over 3 split counts: causal, the
  // length-0 sequence's query and the first of the 2-token one's three;
  // not causal, the former only.
  EXPECT_EQ(idle, 3 * 3 * (2 + 1));
}

// Offsets that do not describe the packed queries, or more queries than the
// plan pads to, are rejected before any launch, naming the offsets.
TYPED_TEST(Cache, PackedQueriesBadOffsetsAreRejected) {
  using T = TypeParam;
  const CacheCase c{3, 2, 2, 4, 6, 0, 12, 0, false, {12, 5, 7}};
  const Logical l(c, 77);
  const DeviceCache<T> dc(l, 77);
  const CacheArguments<T> padded = arguments(l, dc);
  const PackedCase<T> packed(l, padded, {2, 1, 2});
  const CachePlan<T> plan(Space(), cache_shape(packed.args));
  auto run = [&](const CacheArguments<T>& a) { return [&plan, a] { plan.execute(Space(), a); }; };
  auto with_offsets = [&](const std::vector<int>& offsets, const std::string& piece) {
    auto host = Kokkos::create_mirror_view(packed.offsets);
    std::copy(offsets.begin(), offsets.end(), host.data());
    Kokkos::deep_copy(packed.offsets, host);
    expect_rejected<T>(run(packed.args), {"KokkosMLA::CachePlan::execute", piece}, packed.args.out);
  };
  with_offsets({1, 2, 3, 5}, "query_offsets(0) = 1, not 0");
  with_offsets({0, 2, 1, 5}, "offsets must not decrease");
  with_offsets({0, 3, 4, 5}, "but the plan takes at most 2");
  with_offsets({0, 2, 3, 4}, "query_offsets(3) = 4 but q holds 5 packed queries");
  expect_rejected<T>(run(padded), {"given to a plan made for", "packed queries"}, padded.out);
  CacheArguments<T> wide = packed.args;
  wide.q = View4<T>("q", 2, 5, c.heads, c.head_dim);
  wide.out = View4<T>("out", 2, 5, c.heads, c.head_dim);
  wide.lse = {};
  expect_rejected<T>(run(wide), {"q.extent(0) = 2", "(1, total, H, D)"}, wide.out);
}

/// out (B, Tq, H, D) and lse (B, Tq, H) of attention over listed keys: query
/// t of sequence b, every head, sees the positions keys(b, t) (-1 skipped, a
/// repeated one counted again), plus per head a sink logit without a value
/// where sinks are given. A row with no key: out 0, lse +inf.
std::vector<double> listed_reference(const Logical& l,
                                     const std::function<std::vector<int>(std::int64_t, std::int64_t)>& keys,
                                     const std::vector<double>& sinks, const Options& opt,
                                     std::vector<double>* lse) {
  const CacheCase& c = l.c;
  const std::int64_t H = c.heads, D = c.head_dim, R = c.latent_dim;
  const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(D + c.rope_dim));
  std::vector<double> out(c.batch * c.queries * H * D, 0.0);
  lse->assign(c.batch * c.queries * H, INFINITY);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t t = 0; t < c.queries; ++t) {
      std::vector<int> listed;
      for (int s : keys(b, t))
        if (s >= 0) listed.push_back(s);
      if (listed.empty()) continue;
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t row = (b * c.queries + t) * H + h;
        std::vector<double> logits, v(listed.size() * D, 0.0);
        for (std::size_t k = 0; k < listed.size(); ++k) {
          const double* lat = &l.latent[(b * c.capacity + listed[k]) * R];
          double dot = l.rope_dot(row, b, listed[k]);
          for (std::int64_t d = 0; d < D; ++d) {
            double key = 0;
            for (std::int64_t r = 0; r < R; ++r) {
              key += lat[r] * l.w_uk[(r * H + h) * D + d];
              v[k * D + d] += lat[r] * l.w_uv[(r * H + h) * D + d];
            }
            dot += l.q[row * D + d] * key;
          }
          logits.push_back(scale * dot);
        }
        double top = *std::max_element(logits.begin(), logits.end());
        if (!sinks.empty()) top = std::max(top, sinks[h]);
        double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - top);
        for (double& x : logits) sum += (x = std::exp(x - top));
        for (std::size_t k = 0; k < listed.size(); ++k)
          for (std::int64_t d = 0; d < D; ++d) out[row * D + d] += logits[k] / sum * v[k * D + d];
        (*lse)[row] = top + std::log(sum);
      }
    }
  return out;
}

/// Runs a with opt and checks out and lse against listed_reference.
template <class T>
void expect_listed(const Logical& l, const CacheArguments<T>& a, const Options& opt,
                   const std::function<std::vector<int>(std::int64_t, std::int64_t)>& keys,
                   const std::vector<double>& sinks) {
  CachePlan<T> plan(Space(), cache_shape(a, opt), opt);
  plan.execute(Space(), a);
  std::vector<double> want_lse, want = listed_reference(l, keys, sinks, opt, &want_lse);
  std::vector<double> out = Problem<T>::host_copy(a.out), lse = Problem<T>::host_copy(a.lse);
  expect_idle_rows_empty(out, lse, want, want_lse, l.c.head_dim);
  EXPECT_TRUE(close(out, want, tolerance<T>(), shape_of(l.c))) << plan.describe();
  EXPECT_TRUE(close(lse, want_lse, tolerance<T>(), lse_shape_of(l.c))) << plan.describe();
}

template <class T>
typename decltype(CacheArguments<T>::sinks)::non_const_type device_sinks(const std::vector<double>& sinks) {
  typename decltype(CacheArguments<T>::sinks)::non_const_type v("sinks", sinks.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < sinks.size(); ++i) h(i) = sinks[i];
  Kokkos::deep_copy(v, h);
  return v;
}

/// (B, Tq, topk) index lists on the device.
Kokkos::View<int***, Kokkos::LayoutRight, Space> device_indices(const std::vector<int>& lists,
                                                                const CacheCase& c, std::int64_t topk) {
  Kokkos::View<int***, Kokkos::LayoutRight, Space> indices("indices", c.batch, c.queries, topk);
  auto h = Kokkos::create_mirror_view(indices);
  std::copy(lists.begin(), lists.end(), h.data());
  Kokkos::deep_copy(indices, h);
  return indices;
}

/// The entries of row (b, t) of (B, Tq, topk) index lists, as expect_listed takes them.
std::function<std::vector<int>(std::int64_t, std::int64_t)> row_entries(const std::vector<int>& lists,
                                                                        std::int64_t queries,
                                                                        std::int64_t topk) {
  return [&lists, queries, topk](std::int64_t b, std::int64_t t) {
    return std::vector<int>(lists.begin() + (b * queries + t) * topk,
                            lists.begin() + (b * queries + t + 1) * topk);
  };
}

// Sparse (top-k) attention: random index lists with -1 entries, repeats, any
// order, more entries than a sequence has tokens, a row whose entries are all
// unused and an idle sequence; with and without sinks; splits 0, 1 and 3.
TYPED_TEST(Cache, SparseIndicesMatchReference) {
  using T = TypeParam;
  const std::int64_t topk = 24;
  std::uint64_t seed = 1200;
  for (const CacheCase& c : {CacheCase{3, 2, 4, 6, 8, 2, 40, 8, false, {40, 17, 0}},
                             CacheCase{2, 1, 3, 5, 4, 0, 30, 0, false, {30, 9}},
                             CacheCase{2, 3, 2, 4, 6, 3, 32, 16, true, {32, 20}}})
    for (bool with_sinks : {false, true})
      for (int splits : {0, 1, 3}) {
        SCOPED_TRACE(describe(c) + " sinks=" + std::to_string(with_sinks) +
                     " splits=" + std::to_string(splits));
        const Logical l(c, ++seed);
        const DeviceCache<T> dc(l, seed);
        CacheArguments<T> a = arguments(l, dc);
        std::mt19937_64 rng(seed);
        std::vector<int> lists(c.batch * c.queries * topk);
        for (std::int64_t b = 0; b < c.batch; ++b)
          for (std::int64_t t = 0; t < c.queries; ++t)
            for (std::int64_t k = 0; k < topk; ++k) {
              const bool unused = c.lengths[b] == 0 || (b == 0 && t == 1) || rng() % 4 == 0;
              lists[(b * c.queries + t) * topk + k] = unused ? -1 : int(rng() % c.lengths[b]);
            }
        a.indices = device_indices(lists, c, topk);
        std::vector<double> sinks;
        if (with_sinks)
          for (std::int64_t i = 0; i < c.heads; ++i) sinks.push_back(1.5 * std::sin(double(i + seed)));
        if (with_sinks) a.sinks = device_sinks<T>(sinks);
        // The paths of sparse attention: the host kernel (hosts) and the latent kernel (every backend).
        for (Path path : {Path::CacheHost, Path::CacheLatent}) {
          Options opt;
          opt.kv_splits = splits;
          opt.path = path;
          const CacheShape shape = cache_shape(a, opt);
          EXPECT_EQ(shape.topk, topk);
          if (path == Path::CacheHost &&
              !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible)
            continue;
          EXPECT_EQ(CachePlan<T>(Space(), shape, opt).path(), path);
          expect_listed(l, a, opt, row_entries(lists, c.queries, topk), sinks);
        }
      }
}

// Index lists and sinks that do not fit the problem are rejected before any
// launch, naming them.
TYPED_TEST(Cache, SparseBadInputIsRejectedBeforeAnyWrite) {
  using T = TypeParam;
  const CacheCase c{2, 1, 3, 4, 6, 0, 16, 4, false, {16, 5}};
  const Logical l(c, 31);
  const DeviceCache<T> dc(l, 31);
  const CacheArguments<T> good = arguments(l, dc);
  auto run = [&](const CacheArguments<T>& a) { return [a] { cache_attention(Space(), a); }; };
  auto with_indices = [&](std::int64_t b, std::int64_t t, std::int64_t k, std::vector<int> values) {
    Kokkos::View<int***, Kokkos::LayoutRight, Space> v("indices", b, t, k);
    auto h = Kokkos::create_mirror_view(v);
    for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = i < values.size() ? values[i] : -1;
    Kokkos::deep_copy(v, h);
    CacheArguments<T> a = good;
    a.indices = v;
    return a;
  };
  expect_rejected<T>(run(with_indices(2, 1, 3, {0, 15, -1, 4, 5, 1})), {"indices(1, 0, 1) = 5", "[-1, 5)"},
                     good.out);
  expect_rejected<T>(run(with_indices(2, 1, 3, {-2})), {"indices(0, 0, 0) = -2"}, good.out);
  expect_rejected<T>(run(with_indices(3, 1, 3, {})), {"indices.extent(0) = 3", "q.extent(0) = 2"}, good.out);
  expect_rejected<T>(run(with_indices(2, 1, 0, {})), {"indices (2, 1, 0) has an empty extent 2"}, good.out);
  CacheArguments<T> a = good;
  a.sinks = device_sinks<T>({0.5, 0.5});
  expect_rejected<T>(run(a), {"sinks.extent(0) = 2", "q.extent(2) = 3"}, good.out);
}

// Sinks on dense attention, every path that takes the case, with lse asked
// for and without (the plan keeps its own): against the reference.
TYPED_TEST(Cache, SinksOnEveryPathMatchReference) {
  using T = TypeParam;
  std::uint64_t seed = 1300;
  int ran = 0;
  for (const CacheCase& c : {CacheCase{3, 2, 4, 6, 4, 2, 40, 8, false, {40, 17, 0}},
                             CacheCase{2, 1, 3, 5, 24, 4, 30, 0, true, {30, 9}}})
    for (Path path : kDensePaths)
      for (bool with_lse : {true, false}) {
        SCOPED_TRACE(describe(c) + " path=" + to_string(path) + " lse=" + std::to_string(with_lse));
        const Logical l(c, ++seed);
        const DeviceCache<T> dc(l, seed);
        CacheArguments<T> a = arguments(l, dc);
        std::vector<double> sinks;
        for (std::int64_t i = 0; i < c.heads; ++i) sinks.push_back(double(i) - 1.0);
        a.sinks = device_sinks<T>(sinks);
        Options opt;
        opt.path = path;
        if (!plan_if_taken(a, opt)) continue;  // the path does not take the case here
        ++ran;
        if (with_lse) {
          expect_listed(
              l, a, opt,
              [&](std::int64_t b, std::int64_t t) {
                std::vector<int> all(std::max<std::int64_t>(0, c.lengths[b] - c.queries + t + 1));
                std::iota(all.begin(), all.end(), 0);
                return all;
              },
              sinks);
        } else {
          CacheArguments<T> without = a;
          without.lse = {};
          CachePlan<T>(Space(), cache_shape(without), opt).execute(Space(), without);
          CachePlan<T>(Space(), cache_shape(a), opt).execute(Space(), a);
          const std::vector<double> x = Problem<T>::host_copy(without.out), y = Problem<T>::host_copy(a.out);
          for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << "element " << i;
        }
      }
  EXPECT_GE(ran, 4);
}

TYPED_TEST(Cache, WideRowsMatchReference) {
  const std::vector<CacheCase> wide = {
      {2, 2, 20, 8, 512, 64, 112, 16, false, {112, 37}},  // 40 rows of a sequence: 3 groups of 16
      {2, 1, 3, 5, 509, 67, 70, 0, true, {70, 33}},       // packed, no whole quads
  };
  EXPECT_EQ(expect_cases_match_reference<TypeParam>(wide, {1, 3}, 300), 0);
}

/// Every path that takes a case, forced through Options::path, matches the
/// reference on it: the GPU runs its faster kernels and the portable ones alike.
TYPED_TEST(Cache, EveryPathThatTakesACaseMatchesReference) {
  using T = TypeParam;
  std::map<Path, int> ran;
  std::uint64_t seed = 700;
  for (const CacheCase& c : cases())
    for (Path path : kDensePaths)
      for (int splits : {1, 3}) {
        SCOPED_TRACE(describe(c) + " path=" + to_string(path) + " splits=" + std::to_string(splits));
        const Logical l(c, ++seed);
        const DeviceCache<T> dc(l, seed);
        const CacheArguments<T> a = arguments(l, dc);
        Options opt;
        opt.kv_splits = splits;
        opt.path = path;
        std::unique_ptr<CachePlan<T>> plan;
        try {
          plan = std::make_unique<CachePlan<T>>(Space(), cache_shape(a), opt);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find(to_string(path)), std::string::npos) << e.what();
          continue;
        }
        EXPECT_EQ(plan->path(), path);
        plan->execute(Space(), a);
        expect_matches_reference(l, a, opt);
        ++ran[path];
      }
  EXPECT_EQ(ran[Path::CacheLatent], int(2 * cases().size()));  // the last path takes everything
  EXPECT_EQ(ran[Path::CacheGemm], int(2 * cases().size()));    // and attention by GEMMs
  EXPECT_GT(ran[Path::CacheRegisters], 0);
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible) {
    EXPECT_EQ(ran[Path::CacheHost], int(2 * cases().size()));  // hosts: every case
  } else if (std::is_same<T, float>::value) {
    EXPECT_GT(ran[Path::CacheBlocked], 0);
  }
}

/// Random legal problems: every extent, page size, layout and split count.
TYPED_TEST(Cache, RandomProblemsMatchReference) {
  using T = TypeParam;
  // CI runs 40 problems; a long run: KOKKOSMLA_CACHE_FUZZ_CASES=100000 KOKKOSMLA_CACHE_FUZZ_SEED=$RANDOM.
  std::mt19937_64 rng(env_or("KOKKOSMLA_CACHE_FUZZ_SEED", 2024));
  auto pick = [&](int lo, int hi) { return int(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  const int trials = int(env_or("KOKKOSMLA_CACHE_FUZZ_CASES", 40));
  for (int trial = 0; trial < trials; ++trial) {
    CacheCase c;
    c.batch = pick(1, 4);
    c.queries = pick(1, 4);
    c.heads = pick(1, 10);
    c.head_dim = pick(1, 9);
    c.latent_dim = pick(1, 40);
    c.rope_dim = pick(0, 3) ? pick(1, 6) : 0;
    c.page = pick(0, 1) ? pick(1, 9) : 0;
    c.capacity = c.page ? c.page * pick((int(c.queries) + int(c.page) - 1) / int(c.page), 8)
                        : pick(int(c.queries), 50);
    c.packed = c.rope_dim > 0 && pick(0, 1);
    for (int b = 0; b < c.batch; ++b) c.lengths.push_back(pick(int(c.queries), int(c.capacity)));
    Options opt;
    opt.causal = pick(0, 3) > 0;
    opt.kv_splits = pick(0, 6);
    SCOPED_TRACE(describe(c) + " causal=" + std::to_string(opt.causal) +
                 " splits=" + std::to_string(opt.kv_splits));
    const Logical l(c, 500 + trial);
    const DeviceCache<T> dc(l, 500 + trial);
    const CacheArguments<T> a = arguments(l, dc);
    cache_attention(Space(), a, opt);
    expect_matches_reference(l, a, opt);
    const Layout layout = kLayouts[pick(0, 3)];  // the same bits from query-side views of any layout
    const auto strided = in_layout(a, layout);
    cache_attention(Space(), strided, opt);
    EXPECT_EQ(row_values(strided.out), Problem<T>::host_copy(a.out)) << to_string(layout);
    EXPECT_EQ(row_values(strided.lse), Problem<T>::host_copy(a.lse)) << to_string(layout);
  }
}

TYPED_TEST(Cache, CustomScaleAndFreeFunction) {
  using T = TypeParam;
  const CacheCase c{2, 2, 3, 8, 12, 4, 20, 4, false, {20, 9}};
  const Logical l(c, 7);
  const DeviceCache<T> dc(l, 7);
  const CacheArguments<T> a = arguments(l, dc);
  Options opt;
  opt.scale = 0.21;
  cache_attention(Space(), a, opt);
  expect_matches_reference(l, a, opt);
}

/// The same pages in another order, or no pages at all, give the same bits.
TYPED_TEST(Cache, PagedEqualsContiguousBitwise) {
  using T = TypeParam;
  for (int splits : {1, 3}) {
    CacheCase c{3, 2, 4, 8, 20, 4, 48, 0, false, {48, 30, 7}};
    const Logical contiguous(c, 5);
    c.page = 8;
    const Logical paged(c, 5);
    Options opt;
    opt.kv_splits = splits;
    std::vector<double> results[3];
    int i = 0;
    for (const Logical* l : {&contiguous, &paged, &paged}) {
      const DeviceCache<T> dc(*l, 40 + i);  // two different page orders
      const CacheArguments<T> a = arguments(*l, dc);
      CachePlan<T>(Space(), cache_shape(a), opt).execute(Space(), a);
      results[i++] = Problem<T>::host_copy(a.out);
    }
    EXPECT_EQ(results[0], results[1]);
    EXPECT_EQ(results[1], results[2]);
  }
}

/// Run to run, a plan gives the same bits, whatever its split count.
TYPED_TEST(Cache, RepeatableBitwise) {
  using T = TypeParam;
  const CacheCase c{2, 1, 4, 8, 16, 4, 64, 16, false, {64, 33}};
  const Logical l(c, 9);
  const DeviceCache<T> dc(l, 9);
  const CacheArguments<T> a = arguments(l, dc);
  for (int splits : {1, 4}) {
    Options opt;
    opt.kv_splits = splits;
    CachePlan<T> plan(Space(), cache_shape(a), opt);
    plan.execute(Space(), a);
    const auto first = Problem<T>::host_copy(a.out);
    plan.execute(Space(), a);
    EXPECT_EQ(first, Problem<T>::host_copy(a.out));
  }
}

/// A contiguous cache, all sequences full and no RoPE, is attention() itself.
TYPED_TEST(Cache, FullCacheEqualsAttention) {
  using T = TypeParam;
  const CacheCase c{2, 6, 3, 8, 16, 0, 19, 0, false, {19, 19}};
  const Logical l(c, 11);
  const DeviceCache<T> dc(l, 11);
  const CacheArguments<T> a = arguments(l, dc);
  cache_attention(Space(), a);
  View4<T> out("out", c.batch, c.queries, c.heads, c.head_dim);
  attention(Space(), a.q, dc.cache.latent, a.w_uk, a.w_uv, out);
  EXPECT_TRUE(close(Problem<T>::host_copy(a.out), Problem<T>::host_copy(out), tolerance<T>(), shape_of(c)));
}

/// A serving loop: prefill appends a prompt per sequence, then decode steps
/// append one or two tokens each; attention after each step matches the
/// reference over the tokens held so far.
/// A decode loop on a case of 2 sequences: a prompt of 9 tokens each appended
/// in two pieces, then 4 steps of 1 or 2 tokens, each step's attention
/// checked against the reference on l. The tokens appended are source's at
/// l's lengths; `appended` runs after each append.
template <class T>
void expect_append_then_attend(Logical& l, const DeviceCache<T>& dc, const Logical& source,
                               const std::function<void()>& appended) {
  const CacheCase& c = source.c;
  auto append = [&](int tokens) {
    // seqlens already count the new tokens: they are the last `tokens` positions.
    auto hl = Kokkos::create_mirror_view(dc.seqlens);
    for (int b = 0; b < 2; ++b) hl(b) = l.c.lengths[b];
    Kokkos::deep_copy(dc.seqlens, hl);
    std::vector<double> lat(2 * tokens * c.latent_dim), rope(2 * tokens * c.rope_dim);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < tokens; ++i) {
        const std::int64_t s = l.c.lengths[b] - tokens + i;
        for (std::int64_t r = 0; r < c.latent_dim; ++r)
          lat[(b * tokens + i) * c.latent_dim + r] = source.latent[(b * c.capacity + s) * c.latent_dim + r];
        for (std::int64_t e = 0; e < c.rope_dim; ++e)
          rope[(b * tokens + i) * c.rope_dim + e] = source.rope[(b * c.capacity + s) * c.rope_dim + e];
      }
    append_to_cache(Space(), dc.cache, to_device3<T>(lat, 2, tokens, c.latent_dim),
                    to_device3<T>(rope, 2, tokens, c.rope_dim));
    appended();
  };
  l.c.lengths = {5, 5};
  append(5);
  l.c.lengths = {9, 9};
  append(4);
  for (int step = 0; step < 4; ++step) {
    const int tokens = step % 2 ? 2 : 1;
    for (int& n : l.c.lengths) n += tokens;
    append(tokens);
    const CacheArguments<T> a = arguments(l, dc);
    cache_attention(Space(), a);
    EXPECT_TRUE(close(Problem<T>::host_copy(a.out), l.reference({}), tolerance<T>(), shape_of(l.c)))
        << "after step " << step;
  }
}

TYPED_TEST(Cache, AppendThenAttend) {
  using T = TypeParam;
  for (bool packed : {false, true})
    for (std::int64_t page : {0, 1, 6}) {
      CacheCase c{2, 1, 3, 4, 10, 3, 24, page, packed, {0, 0}};
      SCOPED_TRACE(describe(c));
      Logical l(c, 13);
      const DeviceCache<T> dc(l, 13, false);  // nothing written yet: all NaN
      expect_append_then_attend<T>(l, dc, l, [] {});
    }
}

TYPED_TEST(Cache, BadInputIsRejectedBeforeAnyWrite) {
  using T = TypeParam;
  const CacheCase c{2, 2, 3, 4, 8, 2, 16, 4, false, {16, 9}};
  const Logical l(c, 17);
  const DeviceCache<T> dc(l, 17);
  const CacheArguments<T> good = arguments(l, dc);
  auto run = [&](const CacheArguments<T>& a) { return [a] { cache_attention(Space(), a); }; };
  auto set_ints = [](const auto& v, std::vector<int> values) {
    auto h = Kokkos::create_mirror_view(v);
    std::copy(values.begin(), values.end(), h.data());
    Kokkos::deep_copy(v, h);
  };

  {  // a block-table entry out of range
    DeviceCache<T> bad(l, 17);
    set_ints(bad.block_table, {0, 1, 2, 3, 4, 99, 6, 7});
    CacheArguments<T> a = good;
    a.cache = bad.cache;
    expect_rejected<T>(run(a), {"cache.block_table(1, 1) = 99", "pages"}, a.out);
  }
  {  // negative seqlens, and beyond the capacity
    DeviceCache<T> bad(l, 17);
    CacheArguments<T> a = good;
    a.cache = bad.cache;
    set_ints(bad.seqlens, {-1, 9});
    expect_rejected<T>(run(a), {"cache.seqlens(0) = -1", "[0, 16]"}, a.out);
    set_ints(bad.seqlens, {16, 17});
    expect_rejected<T>(run(a), {"cache.seqlens(1) = 17"}, a.out);
  }
  {  // k_rope pages of another size
    CacheArguments<T> a = good;
    a.cache.k_rope = View3<T>("k_rope", dc.cache.latent.extent(0), 5, 2);
    expect_rejected<T>(run(a), {"cache.k_rope.extent(1) = 5", "cache.latent.extent(1) = 4"}, a.out);
  }
  {  // RoPE widths that disagree, and RoPE keys without RoPE queries
    CacheArguments<T> a = good;
    a.q_rope = View4<T>("q_rope", 2, 2, 3, 3);
    expect_rejected<T>(run(a), {"cache.k_rope.extent(2) = 2", "q_rope.extent(3) = 3"}, a.out);
    a.q_rope = {};
    expect_rejected<T>(run(a), {"cache.k_rope", "no RoPE queries"}, a.out);
  }
  {  // a packed cache of the wrong width
    CacheArguments<T> a = good;
    a.cache.k_rope = {};
    expect_rejected<T>(run(a), {"cache.latent.extent(2) = 8", "R + Dr = 10"}, a.out);
  }
  {  // a block table for another batch, and out aliasing the cache
    CacheArguments<T> a = good;
    a.cache.block_table = Kokkos::View<int**, Kokkos::LayoutRight, Space>("block_table", 3, 4);
    expect_rejected<T>(run(a), {"cache.block_table.extent(0) = 3", "q.extent(0) = 2"}, a.out);
    a = good;
    a.out = View4<T>(dc.cache.latent.data(), 2, 2, 3, 4);
    expect_rejected<T>(run(a), {"out aliases cache.latent"}, good.lse);
  }
  {  // a plan for another shape
    CachePlan<T> plan(Space(), cache_shape(good));
    CacheArguments<T> a = good;
    a.q = View4<T>("q", 2, 1, 3, 4);
    a.q_rope = View4<T>("q_rope", 2, 1, 3, 2);
    a.out = View4<T>("out", 2, 1, 3, 4);
    a.lse = View3<T>("lse", 2, 1, 3);
    expect_rejected<T>([&] { plan.execute(Space(), a); }, {"given to a plan made for"}, a.out);
  }
  {  // append: new tokens of another width, and more new tokens than a sequence holds
    View3<T> lat("lat", 2, 1, 7), rope("rope", 2, 1, 2);
    expect_rejected<T>([&] { append_to_cache(Space(), dc.cache, lat, rope); },
                       {"cache.latent.extent(2) = 8", "new_latent.extent(2)"}, dc.cache.latent);
  }
  {
    DeviceCache<T> bad(l, 17);
    set_ints(bad.seqlens, {16, 2});
    View3<T> lat("lat", 2, 3, 8), rope("rope", 2, 3, 2);
    expect_rejected<T>([&] { append_to_cache(Space(), bad.cache, lat, rope); },
                       {"cache.seqlens(1) = 2", "[3, 16]"}, bad.cache.latent);
  }
  EXPECT_THROW(CachePlan<T>(Space(), CacheShape{2, 3, 1, 1, 1, 0, 2}), std::invalid_argument);
  Options negative;
  negative.kv_splits = -1;
  EXPECT_THROW(CachePlan<T>(Space(), cache_shape(good), negative), std::invalid_argument);
}

/// The cases of the slice tests: a paged cache with RoPE and Tq = 2, and a
/// packed contiguous one with an idle slot.
const std::vector<CacheCase> kSliceCases = {
    {3, 2, 3, 5, 7, 3, 30, 5, false, {2, 30, 17}},
    {2, 1, 2, 9, 10, 5, 21, 0, true, {21, 0}},
};

// q and q_rope as 16-byte aligned columns of wider arrays (DeepSeek's query
// projection split in two) are read where they lie: a CachePlan's execute
// allocates nothing for them, over a paged cache, packed queries and split
// parts alike. LayoutLeft ones are copied into two buffers the plan
// allocates at its first such call and keeps.
TYPED_TEST(Cache, AlignedQuerySlicesAreNotCopied) {
  using T = TypeParam;
  std::uint64_t seed = 950;
  for (const CacheCase& c : kSliceCases)
    for (int splits : {1, 3}) {
      SCOPED_TRACE(describe(c) + " splits " + std::to_string(splits));
      const Logical l(c, ++seed);
      const DeviceCache<T> dc(l, seed);
      const CacheArguments<T> a = arguments(l, dc);
      Options opt;
      opt.kv_splits = splits;
      const CachePlan<T> plan(Space(), cache_shape(a, opt), opt);
      plan.execute(Space(), a);
      const std::vector<double> want = Problem<T>::host_copy(a.out);
      // Allocations of one execution with q and q_rope in `layout`.
      auto allocations = [&](Layout layout) {
        auto s = Impl::strided(a);
        s.q = in_layout(a.q, layout);
        s.q_rope = in_layout(a.q_rope, layout);
        Problem<T>::poison(a.out);
        Recorder r;
        {
          Recording recording(r);
          plan.execute(Space(), s);
          Space().fence();
        }
        EXPECT_EQ(Problem<T>::host_copy(a.out), want) << to_string(layout);
        return allocations_named(r, "KokkosMLA::layout_copies");
      };
      EXPECT_EQ(allocations(Layout::Aligned), 0u);
      EXPECT_EQ(allocations(Layout::Left), 2u);
      EXPECT_EQ(allocations(Layout::Left), 0u) << "the plan keeps its copy buffers";
    }
}

// out as 16-byte aligned columns of a wider array, and lse in every layout
// (LayoutLeft, slices of wider arrays), are written where they lie by every
// cache path this backend has, over paged and contiguous caches, with sinks
// or not, split or not: nothing allocated for them, the contiguous out's and
// lse's bits, the gaps between their rows untouched. So are w_uk and w_uv
// read as the two halves of one (R, H, 2 D) array (to rounding). So are w_uk and w_uv
// read as the two halves of one (R, H, 2 D) array (to rounding).
TYPED_TEST(Cache, AlignedOutputSlicesAreWrittenInPlace) {
  using T = TypeParam;
  std::uint64_t seed = 970;
  int runs = 0;
  for (const CacheCase& c : kSliceCases)
    for (Path path : kDensePaths)
      for (int splits : {1, 3})
        for (bool sinks : {false, true}) {
          SCOPED_TRACE(describe(c) + " " + to_string(path) + " splits " + std::to_string(splits) +
                       (sinks ? " sinks" : ""));
          const Logical l(c, ++seed);
          const DeviceCache<T> dc(l, seed);
          CacheArguments<T> a = arguments(l, dc);
          if (sinks) a.sinks = device_sinks<T>(std::vector<double>(std::size_t(c.heads), 0.25));
          Options opt;
          opt.kv_splits = splits;
          opt.path = path;
          const std::unique_ptr<CachePlan<T>> plan = plan_if_taken(a, opt);
          if (!plan) continue;  // not a path of this backend
          ++runs;
          plan->execute(Space(), a);
          const std::vector<double> want = Problem<T>::host_copy(a.out),
                                    want_lse = Problem<T>::host_copy(a.lse);
          auto halves = Impl::strided(a);
          const auto [w_uk, w_uv] = weight_halves(a.w_uk, a.w_uv);
          halves.w_uk = w_uk;
          halves.w_uv = w_uv;
          Recorder weights;
          {
            Recording recording(weights);
            plan->execute(Space(), halves);
            Space().fence();
          }
          EXPECT_LE(max_error(Problem<T>::host_copy(a.out), want), tolerance<T>()) << "weights sliced";
          EXPECT_EQ(allocations_named(weights, "KokkosMLA::layout_copies"), 0u) << "weights sliced";
          const Layout lse_layout = kLayouts[runs % std::size(kLayouts)];
          SCOPED_TRACE("lse " + to_string(lse_layout));
          auto s = Impl::strided(a);
          s.out = in_layout(a.out, Layout::Aligned);
          s.lse = in_layout(a.lse, lse_layout);
          const std::size_t gaps = count_in_reach(s.out, T(-7));
          const std::size_t lse_gaps = count_in_reach(s.lse, compute_type<T>(-7));
          Problem<T>::poison(s.out);
          Kokkos::deep_copy(s.lse, compute_type<T>(std::nan("")));
          Recorder r;
          {
            Recording recording(r);
            plan->execute(Space(), s);
            Space().fence();
          }
          EXPECT_EQ(row_values(s.out), want);
          EXPECT_EQ(row_values(s.lse), want_lse);
          EXPECT_EQ(count_in_reach(s.out, T(-7)), gaps) << "a gap was written";
          EXPECT_EQ(count_in_reach(s.lse, compute_type<T>(-7)), lse_gaps) << "a gap of lse was written";
          EXPECT_EQ(allocations_named(r, "KokkosMLA::layout_copies"), 0u);
        }
  EXPECT_GE(runs, 16);
}

// Weights of one latent row and one head in LayoutLeft (row-major, read in
// place, with a row stride of 1, which BLAS refuses below a row's width):
// every dense path this backend has, against the reference
// (AttentionTyped.WeightsOfOneRowAndHeadInLayoutLeftMatchReference for prefill).
TYPED_TEST(Cache, WeightsOfOneRowAndHeadInLayoutLeftMatchReference) {
  using T = TypeParam;
  const CacheCase c{2, 2, 1, 9, 1, 0, 12, 4, false, {12, 5}};
  int runs = 0;
  for (Path path : kDensePaths) {
    SCOPED_TRACE(to_string(path));
    const Logical l(c, 990);
    const DeviceCache<T> dc(l, 990);
    const CacheArguments<T> a = arguments(l, dc);
    Options opt;
    opt.path = path;
    const std::unique_ptr<CachePlan<T>> plan = plan_if_taken(a, opt);
    if (!plan) continue;  // not a path of this backend
    ++runs;
    auto left = Impl::strided(a);
    left.w_uk = in_layout(a.w_uk, Layout::Left);
    left.w_uv = in_layout(a.w_uv, Layout::Left);
    EXPECT_TRUE(Impl::reads_weights_in_place(left.w_uk));
    plan->execute(Space(), left);
    expect_matches_reference(l, a, opt);
  }
  EXPECT_GE(runs, 2);
}

// Query-side views of every layout (LayoutLeft copies, slices of wider
// arrays with odd padding in every dimension, unit stride in the last) give
// the contiguous row-major result bit for bit, through CachePlan::execute,
// cache_attention and cache_shape, with LayoutStride and LayoutLeft
// CacheArguments; paged, packed and contiguous caches, RoPE, packed queries,
// sparse indices and sinks. The gaps of the slices are never written.
TYPED_TEST(Cache, EveryLayoutEqualsRowMajor) {
  using T = TypeParam;
  const std::vector<CacheCase> layout_cases = {
      {3, 2, 3, 5, 7, 3, 30, 5, false, {2, 30, 17}},  // paged, RoPE, Tq = 2
      {2, 1, 2, 9, 10, 5, 21, 0, true, {21, 0}},      // packed, contiguous, an idle slot
      {2, 3, 4, 6, 5, 0, 12, 3, false, {12, 7}},      // no RoPE
  };
  std::uint64_t seed = 900;
  for (const CacheCase& c : layout_cases)
    for (int variant = 0; variant < 3; ++variant) {  // dense; with sinks and split in 3; sparse
      SCOPED_TRACE(describe(c) + " variant " + std::to_string(variant));
      const Logical l(c, ++seed);
      const DeviceCache<T> dc(l, seed);
      CacheArguments<T> a = arguments(l, dc);
      Options opt;
      if (variant == 1) {
        opt.kv_splits = 3;
        a.sinks = device_sinks<T>(std::vector<double>(c.heads, 0.5));
      }
      Kokkos::View<int***, Kokkos::LayoutRight, Space> indices;
      if (variant == 2) {
        indices = decltype(indices)("indices", c.batch, c.queries, 4);
        auto h = Kokkos::create_mirror_view(indices);
        for (std::int64_t b = 0; b < c.batch; ++b)
          for (std::int64_t t = 0; t < c.queries; ++t)
            for (int k = 0; k < 4; ++k) h(b, t, k) = c.lengths[b] > 0 ? int((t + 3 * k) % c.lengths[b]) : -1;
        Kokkos::deep_copy(indices, h);
        a.indices = indices;
      }
      const CacheShape shape = cache_shape(a, opt);
      const CachePlan<T> plan(Space(), shape, opt);
      plan.execute(Space(), a);
      const std::vector<double> want = Problem<T>::host_copy(a.out), want_lse = Problem<T>::host_copy(a.lse);
      for (double x : want) ASSERT_FALSE(std::isnan(x));
      for (Layout layout : kLayouts) {
        SCOPED_TRACE(to_string(layout));
        const auto s = in_layout(a, layout);
        EXPECT_EQ(cache_shape(s, opt), shape);
        plan.execute(Space(), s);
        EXPECT_EQ(row_values(s.out), want);
        EXPECT_EQ(row_values(s.lse), want_lse);
        Kokkos::deep_copy(s.out, T(std::nan("")));
        cache_attention(Space(), s, opt);
        EXPECT_EQ(row_values(s.out), want);
        if (layout == Layout::Strided ||
            layout == Layout::Aligned) {  // the padding around the slices is untouched
          EXPECT_EQ(count_in_reach(s.out, T(-7)), reach(s.out) - s.out.size());
        }
      }
      // CacheArguments of LayoutLeft: LayoutLeft views only.
      CacheArguments<T, Space::memory_space, Kokkos::LayoutLeft> left;
      using Left4 = Kokkos::View<T****, Kokkos::LayoutLeft, Space>;
      using Left3 = Kokkos::View<T***, Kokkos::LayoutLeft, Space>;
      const Left4 q("q", c.batch, c.queries, c.heads, c.head_dim),
          out("out", c.batch, c.queries, c.heads, c.head_dim);
      const Left3 w_uk("w_uk", c.latent_dim, c.heads, c.head_dim),
          w_uv("w_uv", c.latent_dim, c.heads, c.head_dim);
      Kokkos::deep_copy(q, a.q);
      Kokkos::deep_copy(w_uk, a.w_uk);
      Kokkos::deep_copy(w_uv, a.w_uv);
      left.q = q;
      left.w_uk = w_uk;
      left.w_uv = w_uv;
      left.out = out;
      if (c.rope_dim > 0) {
        const Left4 q_rope("q_rope", c.batch, c.queries, c.heads, c.rope_dim);
        Kokkos::deep_copy(q_rope, a.q_rope);
        left.q_rope = q_rope;
      }
      left.cache = a.cache;
      left.indices = a.indices;
      left.sinks = a.sinks;
      plan.execute(Space(), left);
      EXPECT_EQ(row_values(out), want);
    }
}

// Slices with the wrong extents are rejected before anything runs, naming
// the argument, with out untouched; so is an out slice that shares memory
// with a q slice of the same array.
TYPED_TEST(Cache, StridedBadInputIsRejectedUntouched) {
  using T = TypeParam;
  const CacheCase c{2, 2, 3, 4, 8, 2, 16, 4, false, {16, 9}};
  const Logical l(c, 31);
  const DeviceCache<T> dc(l, 31);
  const auto good = in_layout(arguments(l, dc), Layout::Strided);
  const CachePlan<T> plan(Space(), cache_shape(good));
  auto expect_rejected_untouched = [&](const auto& a, const std::string& piece) {
    Kokkos::deep_copy(a.out, T(3.5));
    try {
      plan.execute(Space(), a);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
    for (double x : row_values(a.out)) ASSERT_EQ(x, 3.5);
  };
  auto a = good;
  View4<T> wide("wide", 2, 2, 3, 7);
  a.q_rope = Kokkos::subview(wide, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(4, 7));
  expect_rejected_untouched(a, "q_rope.extent(3) = 3");
  a = good;
  a.out = Kokkos::subview(wide, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, 4));
  a.q = Kokkos::subview(wide, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(3, 7));
  expect_rejected_untouched(a, "out aliases q");
  a = good;
  a.w_uv = View3<T>("w_uv", 8, 3, 5);
  expect_rejected_untouched(a, "w_uv.extent(2) = 5");
}

// append_to_cache from the latent and RoPE columns of one packed (B, Tn,
// R + Dr) array, from LayoutLeft copies and from padded slices writes the
// same cache as from contiguous arrays, bit for bit, into native and FP8
// caches; it reads slices with evenly spaced token rows where they lie and
// copies other views.
TYPED_TEST(Cache, AppendFromEveryLayoutEqualsRowMajor) {
  using T = TypeParam;
  const std::int64_t B = 2, Tn = 3, R = 128, Dr = 5;
  for (CacheStorage storage : {CacheStorage::Native, CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor})
    for (bool paged : {false, true}) {
      SCOPED_TRACE(to_string(storage) + (paged ? " paged" : " contiguous"));
      const CacheCase c{B, 1, 1, 1, R, Dr, 12, paged ? 4 : 0, false, {7, 12}};
      const Logical l(c, 41);
      auto fresh_cache = [&] {
        DeviceCache<T> dc(l, 41, false);
        if (storage != CacheStorage::Native) {
          dc.cache.storage = storage;
          dc.cache.fp8.tokens = Fp8Tokens<Space::memory_space>::Bytes("tokens", dc.cache.latent.extent(0),
                                                                      dc.cache.latent.extent(1),
                                                                      fp8_token_bytes(storage, R, Dr));
          dc.cache.latent = {};
          dc.cache.k_rope = {};
        }
        return dc;
      };
      auto stored = [&](const DeviceCache<T>& dc) {
        std::vector<double> v;
        if (storage == CacheStorage::Native) {
          v = Problem<T>::host_copy(dc.cache.latent);
          const auto r = Problem<T>::host_copy(dc.cache.k_rope);
          v.insert(v.end(), r.begin(), r.end());
        } else {
          const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dc.cache.fp8.tokens);
          v.assign(h.data(), h.data() + h.span());
        }
        for (double& x : v)
          if (std::isnan(x)) x = -1;  // rows nobody wrote: NaN in both
        return v;
      };
      std::mt19937_64 rng(43);
      View3<T> packed("packed", B, Tn, R + Dr);
      Problem<T>::fill(packed, rng, 1.0);
      const auto all = Kokkos::ALL;
      const auto latent_columns = Kokkos::subview(packed, all, all, std::make_pair(std::int64_t(0), R));
      const auto rope_columns = Kokkos::subview(packed, all, all, std::make_pair(R, R + Dr));
      View3<T> latent("latent", B, Tn, R), rope("rope", B, Tn, Dr);
      Kokkos::deep_copy(latent, latent_columns);
      Kokkos::deep_copy(rope, rope_columns);
      const DeviceCache<T> want_cache = fresh_cache();
      append_to_cache(Space(), want_cache.cache, latent, rope);
      const std::vector<double> want = stored(want_cache);
      // Copies the append makes of the new tokens given in views a and b.
      auto copies = [&](const DeviceCache<T>& into, const auto& a, const auto& b) {
        Recorder r;
        {
          Recording recording(r);
          append_to_cache(Space(), into.cache, a, b);
          Space().fence();
        }
        return allocations_named(r, "KokkosMLA::layout_copies");
      };
      const DeviceCache<T> from_columns = fresh_cache();
      EXPECT_EQ(copies(from_columns, latent_columns, rope_columns), 0u) << "token rows are read in place";
      EXPECT_EQ(stored(from_columns), want);
      for (Layout layout : kLayouts) {
        SCOPED_TRACE(to_string(layout));
        const DeviceCache<T> got = fresh_cache();
        // Slices padded in the token dimension too have rows unevenly spaced
        // across sequences; aligned slices (leading columns) do not.
        EXPECT_EQ(copies(got, in_layout(latent, layout), in_layout(rope, layout)),
                  layout == Layout::Right || layout == Layout::Aligned ? 0u : 2u);
        EXPECT_EQ(stored(got), want);
      }
      // Bad extents of a slice: rejected, naming it, nothing written.
      const DeviceCache<T> untouched = fresh_cache();
      const std::vector<double> before = stored(untouched);
      const auto short_rope = Kokkos::subview(packed, all, all, std::make_pair(R, R + Dr - 1));
      try {
        append_to_cache(Space(), untouched.cache, latent_columns, short_rope);
        ADD_FAILURE() << "no exception";
      } catch (const std::invalid_argument& e) {
        const char* piece = storage == CacheStorage::Native ? "new_k_rope.extent(2) = 4" : "Dr = 4";
        EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
      }
      EXPECT_EQ(stored(untouched), before);
    }
}

/// The absorbed form that models 16-bit implementations is the same
/// attention: without rounding it equals the decompressed reference.
TEST(CacheReference, AbsorbedFormEqualsDecompressed) {
  std::uint64_t seed = 600;
  for (const CacheCase& c : cases())
    for (bool causal : {true, false}) {
      SCOPED_TRACE(describe(c) + " causal=" + std::to_string(causal));
      const Logical l(c, ++seed);
      Options opt;
      opt.causal = causal;
      std::vector<double> lse, absorbed_lse;
      const std::vector<double> plain = l.reference(opt, &lse);
      EXPECT_TRUE(close(l.absorbed_reference(opt, &absorbed_lse), plain, 1e-12, shape_of(c)));
      EXPECT_TRUE(close(absorbed_lse, lse, 1e-12, lse_shape_of(c)));
    }
}

// FP8 caches (docs/serving.md, "FP8 latent cache"): attention over the
// tokens as stored, against the reference on their dequantised values.

using Bytes = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, Space>;

/// Per-tensor scales of the FP8 tests: not powers of two, so that
/// dequantising rounds (e4m3 x scale in fp32, as the contract says).
constexpr float kLatentScale = 0.0037f, kRopeScale = 0.011f;

/// Row of token s of sequence b in a cache's tokens (host copies of its table).
template <class Table>
std::int64_t token_row(const Table& table, std::int64_t page, std::int64_t b, std::int64_t s) {
  return table.extent(0) > 0 ? table(b, s / page) * page + s % page : b * page + s;
}

/// The case's latent and RoPE keys of every token a sequence holds, replaced
/// by what the cache's bytes decode to: e4m3 x scale in fp32, bf16 RoPE keys
/// in Fp8PerBlock. Byte offsets as the contract gives them.
template <class T>
void dequantize_into(Logical& l, const LatentCache<T>& cache) {
  const CacheCase& c = l.c;
  const std::int64_t R = c.latent_dim, Dr = c.rope_dim, page = std::int64_t(cache.fp8.tokens.extent(1));
  const bool per_block = cache.storage == CacheStorage::Fp8PerBlock;
  const auto bytes = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), cache.fp8.tokens);
  const auto table = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), cache.block_table);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t s = 0; s < c.lengths[b]; ++s) {
      const std::uint8_t* token = bytes.data() + token_row(table, page, b, s) * bytes.extent(2);
      for (std::int64_t r = 0; r < R; ++r) {
        float scale = cache.fp8.latent_scale;
        if (per_block) std::memcpy(&scale, token + R + 4 * (r / 128), sizeof scale);
        l.latent[(b * c.capacity + s) * R + r] = double(float_from_e4m3(token[r]) * scale);
      }
      for (std::int64_t e = 0; e < Dr; ++e) {
        std::uint16_t bits;
        if (per_block) std::memcpy(&bits, token + R + 4 * (R / 128) + 2 * e, sizeof bits);
        l.rope[(b * c.capacity + s) * Dr + e] =
            per_block ? double(float_from_bf16(bits))
                      : double(float_from_e4m3(token[R + e]) * cache.fp8.rope_scale);
      }
    }
}

/// A case's cache (shuffled pages, as DeviceCache) stored as `storage`, every
/// byte 0xff (NaN codes and scales); with fill, the tokens each sequence
/// holds quantised on the host by the contract (per-block scales amax / 448,
/// or the per-tensor scales above) and the case's keys replaced by their
/// dequantised values. c.packed does not apply: a token holds both parts.
template <class T>
DeviceCache<T> fp8_device_cache(Logical& l, CacheStorage storage, std::uint64_t seed, bool fill = true) {
  DeviceCache<T> dc(l, seed, false);
  const CacheCase& c = l.c;
  const std::int64_t R = c.latent_dim, Dr = c.rope_dim;
  const std::int64_t pages = std::int64_t(dc.cache.latent.extent(0)),
                     page = std::int64_t(dc.cache.latent.extent(1));
  LatentCache<T>& cache = dc.cache;
  cache.latent = {};
  cache.k_rope = {};
  cache.storage = storage;
  cache.fp8.latent_scale = kLatentScale;
  cache.fp8.rope_scale = kRopeScale;
  cache.fp8.tokens = Bytes("tokens", pages, page, fp8_token_bytes(storage, R, Dr));
  auto bytes = Kokkos::create_mirror_view(cache.fp8.tokens);
  Kokkos::deep_copy(bytes, std::uint8_t(0xff));
  const auto table = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), cache.block_table);
  const bool per_block = storage == CacheStorage::Fp8PerBlock;
  for (std::int64_t b = 0; fill && b < c.batch; ++b)
    for (std::int64_t s = 0; s < c.lengths[b]; ++s) {
      std::uint8_t* token = bytes.data() + token_row(table, page, b, s) * bytes.extent(2);
      const double* latent = &l.latent[(b * c.capacity + s) * R];
      for (std::int64_t r0 = 0; r0 < R; r0 += 128) {
        const std::int64_t r1 = std::min(r0 + 128, R);
        float amax = 0;
        for (std::int64_t r = r0; r < r1; ++r) amax = std::max(amax, std::fabs(float(latent[r])));
        const float scale = per_block ? fp8_block_scale(amax, false) : kLatentScale;
        if (per_block) std::memcpy(token + R + 4 * (r0 / 128), &scale, sizeof scale);
        for (std::int64_t r = r0; r < r1; ++r) token[r] = e4m3_from_float(float(latent[r]) / scale);
      }
      for (std::int64_t e = 0; e < Dr; ++e) {
        const float x = float(l.rope[(b * c.capacity + s) * Dr + e]);
        const std::uint16_t bits = bf16_from_float(x);
        if (per_block)
          std::memcpy(token + R + 4 * (R / 128) + 2 * e, &bits, sizeof bits);
        else
          token[R + e] = e4m3_from_float(x / kRopeScale);
      }
    }
  Kokkos::deep_copy(cache.fp8.tokens, bytes);
  if (fill) dequantize_into(l, cache);
  return dc;
}

#if KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF
/// Cases of DeepSeek's widths (latent 512, RoPE 64: the tensor-core kernel on
/// CUDA), tails in every extent, one of latent 512 without RoPE (the same
/// kernel, 512-wide rows), and one the tensor-core kernel does not take.
std::vector<CacheCase> half_cases() {
  return {
      {1, 1, 1, 16, 512, 64, 1, 0, false, {1}},                 // one of everything
      {3, 1, 16, 16, 512, 64, 320, 64, false, {320, 300, 17}},  // decode, page 64, ragged
      {2, 2, 20, 8, 512, 64, 96, 16, true, {96, 33}},           // packed, Tq = 2, 20 heads
      {2, 3, 5, 8, 512, 64, 50, 0, false, {50, 3}},             // contiguous, a length of Tq
      {1, 1, 128, 8, 512, 64, 200, 1, true, {200}},             // 128 heads, page size 1
      {2, 1, 16, 8, 512, 64, 96, 24, false, {96, 50}},          // pages that 16-key steps cross
      {2, 2, 3, 8, 24, 4, 20, 4, false, {20, 9}},               // other widths: widened
      {2, 1, 16, 8, 512, 0, 80, 16, false, {80, 41}},           // no RoPE part
  };
}

/// A case's logical data with every input rounded to T.
template <class T>
Logical rounded_to(const CacheCase& c, std::uint64_t seed) {
  Logical l(c, seed);
  l.round(&stored_as<T>);
  return l;
}

/// Copies of a call's arguments in another memory space (out and lse NaN).
template <class Mem, class T>
CacheArguments<T, Mem> arguments_in(const CacheArguments<T>& a) {
  CacheArguments<T, Mem> m;
  m.q = Kokkos::create_mirror_view_and_copy(Mem(), a.q);
  if (a.cache.latent.size() > 0) m.cache.latent = Kokkos::create_mirror_view_and_copy(Mem(), a.cache.latent);
  // Absent optional views stay absent (default-constructed).
  if (a.q_rope.size() > 0) m.q_rope = Kokkos::create_mirror_view_and_copy(Mem(), a.q_rope);
  if (a.cache.k_rope.size() > 0) m.cache.k_rope = Kokkos::create_mirror_view_and_copy(Mem(), a.cache.k_rope);
  if (a.cache.block_table.size() > 0)
    m.cache.block_table = Kokkos::create_mirror_view_and_copy(Mem(), a.cache.block_table);
  m.cache.seqlens = Kokkos::create_mirror_view_and_copy(Mem(), a.cache.seqlens);
  m.cache.storage = a.cache.storage;
  m.cache.fp8.latent_scale = a.cache.fp8.latent_scale;
  m.cache.fp8.rope_scale = a.cache.fp8.rope_scale;
  if (a.cache.fp8.tokens.size() > 0)
    m.cache.fp8.tokens = Kokkos::create_mirror_view_and_copy(Mem(), a.cache.fp8.tokens);
  m.w_uk = Kokkos::create_mirror_view_and_copy(Mem(), a.w_uk);
  m.w_uv = Kokkos::create_mirror_view_and_copy(Mem(), a.w_uv);
  m.out = Kokkos::create_mirror_view(Mem(), a.out);
  m.lse = Kokkos::create_mirror_view(Mem(), a.lse);
  Kokkos::deep_copy(m.out, T(std::nan("")));
  Kokkos::deep_copy(m.lse, std::nan(""));
  return m;
}

/// out and lse of a 16-bit call executed on l's data within twice the error
/// of the modelled 16-bit framework, which holds the keys in T (an FP8
/// cache's dequantised values rounded to T; 16-bit caches are T already) or,
/// over FP8 caches, as dequantised (which rounds qa's products with keys
/// differently: on one row and key, either error alone can be below half
/// the other's).
template <class T, class Arguments>
void expect_within_framework_error(const Logical& l, const Arguments& a, const Options& opt,
                                   const std::string& plan) {
  std::vector<double> exact_lse, model_lse, unrounded_lse;
  const std::vector<double> exact = l.reference(opt, &exact_lse);
  Logical held = l;
  held.round(&stored_as<T>);
  const std::vector<double> model = held.absorbed_reference(opt, &model_lse, &stored_as<T>);
  const std::vector<double> unrounded = l.absorbed_reference(opt, &unrounded_lse, &stored_as<T>);
  const double bound = 2 * std::max(max_error(model, exact), max_error(unrounded, exact)) + 1e-7;
  const double lse_bound =
      2 * std::max(max_error(model_lse, exact_lse), max_error(unrounded_lse, exact_lse)) + 1e-6;
  EXPECT_LE(max_error(Problem<T>::host_copy(a.out), exact), bound) << plan;
  EXPECT_LE(max_error(Problem<T>::host_copy(a.lse), exact_lse), lse_bound) << plan;
}

/// A copy of v in a new allocation.
template <class V>
V copy_at_new_address(const V& v) {
  V copy(Kokkos::view_alloc(Kokkos::WithoutInitializing, v.label() + "_copy"), v.layout());
  Kokkos::deep_copy(copy, v);
  return copy;
}

/// A CachePlan<T, ExecSpace> on a case with inputs rounded to T (the cache
/// stored as `storage`; FP8: against its dequantised values): out and lse
/// within twice the error of the modelled 16-bit framework, and the same bits
/// from q and q_rope as 16-byte aligned columns of wider arrays (read where
/// they lie, as slices of one query projection are) and into out as such
/// columns (written where it lies), and again over a copy of the cache.
/// Returns the plan's path.
template <class ExecSpace, class T>
Path expect_cache_accurate(const CacheCase& c, const Options& opt, std::uint64_t seed,
                           CacheStorage storage = CacheStorage::Native) {
  Logical l = rounded_to<T>(c, seed);
  const DeviceCache<T> dc =
      storage == CacheStorage::Native ? DeviceCache<T>(l, seed) : fp8_device_cache<T>(l, storage, seed);
  const auto a = arguments_in<typename ExecSpace::memory_space>(arguments(l, dc));
  const CachePlan<T, ExecSpace> plan(ExecSpace(), cache_shape(a), opt);
  plan.execute(ExecSpace(), a);
  expect_within_framework_error<T>(l, a, opt, plan.describe());
  const std::vector<double> out = Problem<T>::host_copy(a.out), lse = Problem<T>::host_copy(a.lse);
  auto sliced = Impl::strided(a);
  sliced.q = in_layout(a.q, Layout::Aligned);
  if (a.q_rope.size() > 0) sliced.q_rope = in_layout(a.q_rope, Layout::Aligned);
  EXPECT_TRUE(Impl::reads_in_place(sliced.q) && Impl::reads_in_place(sliced.q_rope));
  Problem<T>::poison(a.out);
  plan.execute(ExecSpace(), sliced);
  EXPECT_EQ(Problem<T>::host_copy(a.out), out) << "q sliced: " << plan.describe();
  EXPECT_EQ(Problem<T>::host_copy(a.lse), lse) << "q sliced: " << plan.describe();
  // And into out as 16-byte aligned columns of a wider array, written where it lies.
  sliced.out = in_layout(a.out, Layout::Aligned);
  EXPECT_TRUE(Impl::reads_rows_in_place(sliced.out));
  const std::size_t gaps = count_in_reach(sliced.out, T(-7));
  Problem<T>::poison(sliced.out);
  plan.execute(ExecSpace(), sliced);
  EXPECT_EQ(row_values(sliced.out), out) << "out sliced: " << plan.describe();
  EXPECT_EQ(count_in_reach(sliced.out, T(-7)), gaps) << "out sliced: " << plan.describe();
  // And into a LayoutLeft lse, written where it lies.
  sliced.lse = in_layout(a.lse, Layout::Left);
  Problem<float>::poison(sliced.lse);
  plan.execute(ExecSpace(), sliced);
  EXPECT_EQ(row_values(sliced.lse), lse) << "lse LayoutLeft: " << plan.describe();
  // And from w_uk and w_uv as the halves of one (R, H, 2 D) array, read where they lie.
  const auto [uk_half, uv_half] = weight_halves(a.w_uk, a.w_uv);
  sliced.w_uk = uk_half;
  sliced.w_uv = uv_half;
  EXPECT_TRUE(Impl::reads_weights_in_place(sliced.w_uk) && Impl::reads_weights_in_place(sliced.w_uv));
  Problem<T>::poison(sliced.out);
  plan.execute(ExecSpace(), sliced);
  EXPECT_LE(max_error(row_values(sliced.out), out), 0.02 * max_abs(out))
      << "weights sliced: " << plan.describe();
  // And over a copy of the cache at another address, then over the first
  // again: the same bits (a path that keeps state per cache, as the Hopper
  // kernel's TMA maps, finds each cache's own).
  if (storage == CacheStorage::Native) {
    const auto moved = [&] {
      auto m = a;
      m.cache.latent = copy_at_new_address(a.cache.latent);
      if (a.cache.k_rope.size() > 0) m.cache.k_rope = copy_at_new_address(a.cache.k_rope);  // else packed
      return m;
    }();
    for (const auto* call : {&moved, &a}) {
      Problem<T>::poison(a.out);
      plan.execute(ExecSpace(), *call);
      EXPECT_EQ(Problem<T>::host_copy(a.out), out)
          << (call == &a ? "first cache again: " : "cache moved: ") << plan.describe();
    }
  }
  return plan.path();
}

template <class T>
class HalfCache : public ::testing::Test {};
TYPED_TEST_SUITE(HalfCache, HalfTypes);

/// The 16-bit tensor-core cache paths.
[[maybe_unused]] bool is_tensor_path(Path p) { return p == Path::DecodeTensorSm80 || p == Path::DecodeSm90; }

/// Whether the default backend's Kokkos lets a team have more than the
/// classic 48 KB of scratch (the CUDA shared-memory opt-in).
[[maybe_unused]] bool large_team_scratch() {
  return Impl::backend_of(Kokkos::DefaultExecutionSpace()).scratch_max[0] > Impl::kClassicTeamScratch;
}

// Each 16-bit tensor-core path this build and GPU run, forced, on the half
// cases and on head counts where a team of 64 query rows is full, spans
// tokens, or ends part-way: within twice the framework's error, with one
// part and with several; the cases of DeepSeek's widths again over FP8
// caches in both layouts (the kernels dequantise tiles on the fly; against
// the reference on the dequantised cache).
TYPED_TEST(HalfCache, EveryTensorPathWithinTwiceFrameworkError) {
  std::vector<CacheCase> cases = half_cases();
  cases.push_back({2, 1, 64, 16, 512, 64, 320, 64, false, {300, 7}});  // 64 heads: one full team
  cases.push_back({2, 2, 128, 8, 512, 64, 144, 16, true, {130, 49}});  // 2 tokens x 128 heads: four teams
  cases.push_back({1, 3, 24, 8, 512, 0, 100, 0, false, {100}});        // 72 rows over 3 tokens, no RoPE
  cases.push_back({2, 2, 32, 8, 512, 64, 256, 64, true, {256, 70}});   // packed, page 64: whole tiles, a part
  cases.push_back({3, 1, 256, 8, 512, 64, 256, 64, false, {200, 1, 65}});  // two pairs of teams a token (FP8)
  std::map<CacheStorage, std::map<Path, int>> ran;
  std::uint64_t seed = 900;
  auto run = [&](const CacheCase& c, const Options& opt, CacheStorage storage, const std::string& what) {
    SCOPED_TRACE(describe(c) + " " + to_string(storage) + " path=" + to_string(*opt.path) + what);
    expect_runs_or_refuses(*opt.path, ran[storage], [&] {
      return expect_cache_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(c, opt, ++seed, storage);
    });
  };
  for (CacheStorage storage : {CacheStorage::Native, CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor})
    for (const CacheCase& c : cases) {
      if (storage != CacheStorage::Native && (c.latent_dim != 512 || c.rope_dim != 64)) continue;
      for (Path path : {Path::DecodeSm90, Path::DecodeTensorSm80})
        for (int splits : {1, 3}) {
          Options opt;
          opt.path = path;
          opt.kv_splits = splits;
          opt.causal = splits == 1;
          run(c, opt, storage, " splits=" + std::to_string(splits));
        }
    }
  // A negative softmax scale, and a scale of 0 (every visible key alike) with causal masks.
  for (double scale : {-0.05, 0.0})
    for (Path path : {Path::DecodeSm90, Path::DecodeTensorSm80}) {
      Options opt;
      opt.path = path;
      opt.scale = scale;
      opt.causal = true;
      run({2, 2, 64, 8, 512, 64, 144, 16, true, {130, 49}}, opt, CacheStorage::Native,
          " scale=" + std::to_string(scale));
    }
  std::map<Path, int>&native = ran[CacheStorage::Native], &fp8 = ran[CacheStorage::Fp8PerBlock];
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_GT(native[Path::DecodeTensorSm80], 0);
  EXPECT_GT(fp8[Path::DecodeTensorSm80], 0);  // its FP8 staging fits a classic team's 48 KB
#endif
  std::cout << "[ tensor paths ] DecodeSm90 ran " << native[Path::DecodeSm90] << " cases (FP8 per block "
            << fp8[Path::DecodeSm90] << "), DecodeTensorSm80 " << native[Path::DecodeTensorSm80]
            << " (FP8 per block " << fp8[Path::DecodeTensorSm80] << ")\n";
  int total = 0;
  for (const auto& storage_and_counts : ran) total += cases_that_ran(storage_and_counts.second);
  if (total == 0) GTEST_SKIP() << "no 16-bit tensor-core cache path in this build or on this GPU";
}

// DecodeSm90's tiles copied by TMA, where 64 keys are consecutive cache rows
// (a contiguous cache, pages of 64 or 128 keys): several whole tiles a part,
// partial last tiles beside them, one part and several. Small enough to run
// under compute-sanitizer; refused (and skipped) where the build has no
// sm_90a code or the GPU is not a Hopper.
TYPED_TEST(HalfCache, WholeTilesOnDecodeSm90WithinTwiceFrameworkError) {
  std::map<Path, int> ran;
  std::uint64_t seed = 950;
  for (const CacheCase& c : {CacheCase{2, 1, 64, 8, 512, 64, 448, 0, false, {448, 200}},
                             CacheCase{1, 2, 32, 8, 512, 64, 384, 64, true, {321}},
                             CacheCase{2, 1, 64, 8, 512, 64, 512, 128, false, {512, 130}}})
    for (int splits : {1, 3}) {
      SCOPED_TRACE(describe(c) + " splits=" + std::to_string(splits));
      Options opt;
      opt.path = Path::DecodeSm90;
      opt.kv_splits = splits;
      expect_runs_or_refuses(Path::DecodeSm90, ran, [&] {
        return expect_cache_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(c, opt, ++seed);
      });
    }
  if (ran[Path::DecodeSm90] == 0) GTEST_SKIP() << "no DecodeSm90 in this build or on this GPU";
  EXPECT_EQ(ran[Path::DecodeSm90], 6);
}

// Both 16-bit tensor paths on small cases split into 1, 3 and 5 parts, the
// parts merged by lse (sequences shorter than their parts, parts with no
// key, a row group part-full). Small enough to run under compute-sanitizer.
TYPED_TEST(HalfCache, SplitsOnEachTensorPathWithinTwiceFrameworkError) {
  std::map<Path, int> ran;
  std::uint64_t seed = 970;
  for (const CacheCase& c : {CacheCase{2, 1, 32, 8, 512, 64, 400, 16, false, {400, 9}},
                             CacheCase{3, 2, 24, 8, 512, 0, 97, 0, false, {97, 2, 50}}})
    for (Path path : {Path::DecodeTensorSm80, Path::DecodeSm90})
      for (int splits : {1, 3, 5}) {
        SCOPED_TRACE(describe(c) + " path=" + to_string(path) + " splits=" + std::to_string(splits));
        Options opt;
        opt.path = path;
        opt.kv_splits = splits;
        expect_runs_or_refuses(path, ran, [&] {
          return expect_cache_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(c, opt, ++seed);
        });
      }
  if (ran[Path::DecodeTensorSm80] + ran[Path::DecodeSm90] == 0)
    GTEST_SKIP() << "no tensor path in this build";
  EXPECT_EQ(ran[Path::DecodeTensorSm80], 6);
}

TYPED_TEST(HalfCache, DeviceWithinTwiceFrameworkError) {
  std::uint64_t seed = 700;
  for (const CacheCase& c : half_cases())
    for (bool causal : {true, false})
      for (int splits : {0, 1, 3, 64}) {
        SCOPED_TRACE(describe(c) + " causal=" + std::to_string(causal) + " splits=" + std::to_string(splits));
        Options opt;
        opt.causal = causal;
        opt.kv_splits = splits;
        expect_cache_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(c, opt, ++seed);
      }
}

TYPED_TEST(HalfCache, HostWithinTwiceFrameworkError) {
  std::uint64_t seed = 800;
  for (const CacheCase& c : {half_cases()[1], half_cases()[2], half_cases()[5]}) {
    SCOPED_TRACE(describe(c));
    EXPECT_EQ((expect_cache_accurate<Kokkos::DefaultHostExecutionSpace, TypeParam>(c, {}, ++seed)),
              Path::Widened);
  }
}

TYPED_TEST(HalfCache, PathFollowsBackendAndWidths) {
  using T = TypeParam;
  CacheShape deepseek{2, 1, 16, 128, 512, 64, 256}, other = deepseek, no_rope = deepseek;
  other.rope_dim = 32;
  no_rope.rope_dim = 0;
  const CachePlan<T> on_device(Space(), deepseek), without_rope(Space(), no_rope), widths(Space(), other);
  EXPECT_EQ(widths.path(), Path::Widened) << widths.describe();
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_TRUE(is_tensor_path(on_device.path())) << on_device.describe();
  EXPECT_TRUE(is_tensor_path(without_rope.path())) << without_rope.describe();
  Options many;
  many.kv_splits = 100;
  EXPECT_EQ(CachePlan<T>(Space(), deepseek, many).splits(), 64);  // the most its merge takes
#else
  EXPECT_EQ(on_device.path(), Path::Widened) << on_device.describe();
  EXPECT_EQ(without_rope.path(), Path::Widened) << without_rope.describe();
#endif
}

// Idle slots and sequences shorter than Tq on the 16-bit paths (on CUDA the
// tensor-core decode kernel, with one part and with several): rows that see
// no key get out 0 and lse +inf, the others are as accurate as ever.
TYPED_TEST(HalfCache, RowsWithNoKeyGetZeroOutAndInfiniteLse) {
  using T = TypeParam;
  const CacheCase c{3, 2, 16, 16, 512, 64, 128, 64, false, {0, 1, 128}};
  for (int splits : {1, 3}) {
    SCOPED_TRACE("splits=" + std::to_string(splits));
    const Logical l = rounded_to<T>(c, 31);
    const DeviceCache<T> dc(l, 31);
    const CacheArguments<T> a = arguments(l, dc);
    Options opt;
    opt.kv_splits = splits;
    CachePlan<T>(Space(), cache_shape(a), opt).execute(Space(), a);
    std::vector<double> want_lse, model_lse;
    std::vector<double> want = l.reference(opt, &want_lse);
    std::vector<double> model = l.absorbed_reference(opt, &model_lse, &stored_as<T>);  // the 16-bit framework
    std::vector<double> out = Problem<T>::host_copy(a.out), lse = Problem<T>::host_copy(a.lse);
    std::vector<double> want_again = want, want_lse_again = want_lse;
    EXPECT_GT(expect_idle_rows_empty(out, lse, want, want_lse, c.head_dim), 0);
    expect_idle_rows_empty(model, model_lse, want_again, want_lse_again, c.head_dim);
    // The rows with keys within twice the framework's error, as on every 16-bit path.
    EXPECT_LE(max_error(out, want), 2 * max_error(model, want) + 1e-7);
    EXPECT_LE(max_error(lse, want_lse), 2 * max_error(model_lse, want_lse) + 1e-6);
  }
}

// One part writes oa in 16 bits straight from fp32; several merge fp32 parts
// first: the two agree to the rounding of oa and out (a few units in the
// last place of T).
TYPED_TEST(HalfCache, SplitCountsAgree) {
  using T = TypeParam;
  const Logical l = rounded_to<T>(half_cases()[2], 21);
  const DeviceCache<T> dc(l, 21);
  std::vector<double> results[2];
  for (int i = 0; i < 2; ++i) {
    const CacheArguments<T> a = arguments(l, dc);
    Options opt;
    opt.kv_splits = i == 0 ? 1 : 3;
    CachePlan<T>(Space(), cache_shape(a), opt).execute(Space(), a);
    results[i] = Problem<T>::host_copy(a.out);
  }
  double peak = 0;
  for (double x : results[0]) peak = std::max(peak, std::abs(x));
  // The spacing of T's values just above 1: 2^-10 for fp16, 2^-7 for bf16.
  const double ulp =
      stored_as<T>(1.0 + std::ldexp(1.0, -9)) > 1.0 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  EXPECT_LE(max_error(results[1], results[0]), 4 * ulp * peak);
}

// A plan run again on the same inputs gives the same bits, with several
// parts as with one (the parts are merged in part order, not arrival order).
TYPED_TEST(HalfCache, RepeatedCallsAreBitwiseEqual) {
  using T = TypeParam;
  const Logical l = rounded_to<T>(half_cases()[2], 23);
  const DeviceCache<T> dc(l, 23);
  for (int splits : {1, 3, 64}) {
    SCOPED_TRACE("splits=" + std::to_string(splits));
    const CacheArguments<T> a = arguments(l, dc);
    Options opt;
    opt.kv_splits = splits;
    const CachePlan<T> plan(Space(), cache_shape(a), opt);
    std::vector<double> out[3], lse[3];
    for (int call = 0; call < 3; ++call) {
      Kokkos::deep_copy(a.out, T(std::nan("")));
      Kokkos::deep_copy(a.lse, std::nan(""));
      plan.execute(Space(), a);
      out[call] = Problem<T>::host_copy(a.out);
      lse[call] = Problem<T>::host_copy(a.lse);
    }
    for (int call = 1; call < 3; ++call) {
      EXPECT_EQ(out[call], out[0]) << "call " << call;
      EXPECT_EQ(lse[call], lse[0]) << "call " << call;
    }
    EXPECT_LE(max_error(out[0], l.reference(opt)), 0.05);  // not NaN: every row was written
  }
}

#if KOKKOSMLA_ENABLE_SM80
// Two tensor-core cache plans on two streams at once (their projections
// share one cuBLAS handle) give what they give one after the other, bit for bit.
TYPED_TEST(HalfCache, ConcurrentTensorPlansOnTwoStreamsMatchSequential) {
  using T = TypeParam;
  const Logical la = rounded_to<T>(half_cases()[1], 41), lb = rounded_to<T>(half_cases()[4], 42);
  const DeviceCache<T> da(la, 41), db(lb, 42);
  const CacheArguments<T> a = arguments(la, da), b = arguments(lb, db);
  const CachePlan<T> plan_a(Space(), cache_shape(a)), plan_b(Space(), cache_shape(b));
  ASSERT_TRUE(is_tensor_path(plan_a.path())) << plan_a.describe();
  ASSERT_TRUE(is_tensor_path(plan_b.path())) << plan_b.describe();
  expect_concurrent_equals_sequential(
      [&](const Space& e) { plan_a.execute(e, a); }, [&](const Space& e) { plan_b.execute(e, b); },
      [&] { return Problem<T>::host_copy(a.out); }, [&] { return Problem<T>::host_copy(b.out); },
      [&] {
        Kokkos::deep_copy(a.out, T(std::nan("")));
        Kokkos::deep_copy(b.out, T(std::nan("")));
      });
}

// The tensor-core kernel copies cache rows in 16-byte pieces: a latent view
// that starts one element off is refused before anything runs.
TYPED_TEST(HalfCache, MisalignedCacheIsRejected) {
  using T = TypeParam;
  const Logical l = rounded_to<T>(half_cases()[1], 3);
  const DeviceCache<T> dc(l, 3);
  CacheArguments<T> a = arguments(l, dc);
  const auto& latent = dc.cache.latent;
  Kokkos::View<T*, Space> spare("spare", latent.size() + 1);
  a.cache.latent =
      typename LatentCache<T>::Tokens(spare.data() + 1, latent.extent(0), latent.extent(1), latent.extent(2));
  const CachePlan<T> plan(Space(), cache_shape(a));
  expect_rejected<T>([&] { plan.execute(Space(), a); }, {"cache.latent", "16-byte aligned"}, a.out);
}

/// Errors of out and lse of a float CachePlan with `opt` on l's data against
/// the float64 reference, rows that see no key checked exactly (out 0, lse
/// +inf) and left out, then the reference's largest |out| (at least 1); the
/// plan's path in *path.
std::array<double, 3> float_cache_errors(const Logical& l, const DeviceCache<float>& dc, const Options& opt,
                                         Path* path) {
  const CacheArguments<float> a = arguments(l, dc);
  const CachePlan<float> plan(Space(), cache_shape(a), opt);
  plan.execute(Space(), a);
  *path = plan.path();
  std::vector<double> want_lse, want = l.reference(opt, &want_lse);
  std::vector<double> out = Problem<float>::host_copy(a.out), lse = Problem<float>::host_copy(a.lse);
  expect_idle_rows_empty(out, lse, want, want_lse, l.c.head_dim);
  double peak = 1;
  for (double x : want) peak = std::max(peak, std::abs(x));
  return {max_error(out, want), max_error(lse, want_lse), peak};
}

// float cache attention on the mma.sync decode kernel: with emulate_fp32
// (3xTF32 products, fp32 GEMMs) out and lse within twice the error of the
// exact fp32 kernels on the same inputs, give or take a few units of 2^-22
// (3xTF32 keeps each operand to 2^-21, fp32 to 2^-24: where the exact
// kernels' error is at fp32's floor, a few units of the emulation's show),
// and far inside TF32's (from 128 rows a sequence, exact fp32 GEMMs); with
// allow_tf32 (on the kernel, or as TF32 GEMMs from 128 rows a sequence)
// within 8 units of TF32's rounding of the largest output. Rows
// that see no key get out 0 and lse +inf. Where the kernel does not apply
// (other widths; a Kokkos without the shared-memory opt-in, as its fp32
// tiles take 78 KB) both options change nothing, bit for bit.
TEST(FloatCache, TensorCoreDecodeAsAccurateAsFp32) {
  std::vector<CacheCase> cases = half_cases();
  cases.push_back({3, 2, 16, 16, 512, 64, 128, 64, false, {0, 1, 128}});  // an idle slot, a length below Tq
  cases.push_back({2, 2, 128, 8, 512, 64, 144, 16, true, {130, 49}});     // 2 tokens x 128 heads
  std::uint64_t seed = 1300;
  int on_tensor_cores = 0;
  for (const CacheCase& c : cases)
    for (int splits : {1, 3}) {
      SCOPED_TRACE(describe(c) + " splits=" + std::to_string(splits));
      const Logical l = rounded_to<float>(c, ++seed);
      const DeviceCache<float> dc(l, seed);
      Options exact, emulated, tf32;
      for (Options* o : {&exact, &emulated, &tf32}) o->kv_splits = splits, o->causal = splits == 1;
      emulated.emulate_fp32 = true;
      emulated.allow_tf32 = true;  // emulate_fp32 takes precedence
      tf32.allow_tf32 = true;
      Path exact_path, emulated_path, tf32_path;
      const auto fp32 = float_cache_errors(l, dc, exact, &exact_path);
      const auto emu = float_cache_errors(l, dc, emulated, &emulated_path);
      const auto tf = float_cache_errors(l, dc, tf32, &tf32_path);
      EXPECT_NE(exact_path, Path::DecodeTensorSm80);
      const bool tensor =
          c.latent_dim == 512 && (c.rope_dim == 64 || c.rope_dim == 0) && large_team_scratch();
      if (!tensor) {
        EXPECT_EQ(emulated_path, exact_path);
        EXPECT_EQ(tf32_path, exact_path);
        EXPECT_EQ(emu, fp32);
        EXPECT_EQ(tf, fp32);
        continue;
      }
      ++on_tensor_cores;
      // Where cuBLAS is, attention by GEMMs takes over: exact fp32 GEMMs in
      // place of 3xTF32 from 128 query rows a sequence, and TF32 GEMMs.
      const std::int64_t rows = KOKKOSMLA_ENABLE_CUBLAS ? c.queries * c.heads : 0;
      EXPECT_EQ(emulated_path, rows >= 128 ? Path::CacheGemm : Path::DecodeTensorSm80);
      EXPECT_EQ(tf32_path, rows >= 128 ? Path::CacheGemm : Path::DecodeTensorSm80);
      EXPECT_LE(emu[0], 2 * fp32[0] + 4 * std::ldexp(1.0, -22) * fp32[2]) << "fp32 error " << fp32[0];
      EXPECT_LE(emu[1], 2 * fp32[1] + 1e-6) << "fp32 lse error " << fp32[1];
      EXPECT_LT(emu[0], tf[0] / 8) << "against TF32";
      EXPECT_LE(tf[0], 8 * std::ldexp(1.0, -11) * fp32[2]);
    }
  if (large_team_scratch()) EXPECT_GT(on_tensor_cores, 0);
}
#endif
#endif

#ifdef KOKKOS_ENABLE_CUDA
/// step() captured once into a CUDA graph on exec's stream, in the global
/// capture mode: a step that allocates or waits for the host while being
/// captured fails the capture (and the test).
template <class Step>
cudaGraphExec_t capture(const Kokkos::Cuda& exec, Step step) {
  cudaStream_t stream = exec.cuda_stream();
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  step();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t instance = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&instance, graph, 0), cudaSuccess);
  cudaGraphDestroy(graph);
  return instance;
}

/// Random values in [-1, 1) into every element of a device view.
template <class V>
void set_device(const V& v, std::mt19937_64& rng) {
  using T = typename V::non_const_value_type;
  auto h = Kokkos::create_mirror_view(v);
  std::uniform_real_distribution<double> u(-1, 1);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = T(u(rng));
  Kokkos::deep_copy(v, h);
}

/// A decode step (append one token per sequence, then attend) with index
/// checks off, captured once and replayed on new queries, new tokens, new
/// lengths and a new block table, gives the same bits as the step run
/// directly; over a cache stored as `storage` (FP8: appends quantise).
template <class T>
void expect_captured_step_matches_direct(CacheStorage storage = CacheStorage::Native) {
  const bool fp8 = storage != CacheStorage::Native;
  CacheCase c{3, 1, 16, 16, 512, 64, 256, 64, false, {200, 37, 256}};
  if (fp8) c.lengths = {256, 256, 256};  // every token quantised from the start: replays may read any
  Logical l = [&] {
    if constexpr (is_half_precision<T>::value)
      return rounded_to<T>(c, 61);
    else
      return Logical(c, 61);
  }();
  const DeviceCache<T> dc = fp8 ? fp8_device_cache<T>(l, storage, 61) : DeviceCache<T>(l, 61);
  const CacheArguments<T> a = arguments(l, dc);
  View3<T> new_latent("new_latent", c.batch, 1, c.latent_dim), new_rope("new_rope", c.batch, 1, c.rope_dim);
  Options opt;
  opt.check_cache_indices = false;
  std::mt19937_64 rng(5);
  // New lengths and page orders reach rows and pages no sequence held: every row finite.
  if (!fp8) {
    set_device(dc.cache.latent, rng);
    set_device(dc.cache.k_rope, rng);
  }
  const Kokkos::Cuda exec = Impl::two_instances(Space())[0];
  const CachePlan<T, Kokkos::Cuda> plan(exec, cache_shape(a), opt);
  auto step = [&] {
    append_to_cache(exec, a.cache, new_latent, new_rope, opt);
    plan.execute(exec, a);
  };
  step();  // the first call sets up what a capture cannot (the cuBLAS handle)
  exec.fence();
  const cudaGraphExec_t graph = capture(exec, step);
  // Pages to deal out: the whole pool (random rows), or over an FP8 cache
  // the pages the sequences hold (the tokens quantised; the rest of the pool is NaN bytes).
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dc.block_table);
  std::vector<int> order(ht.data(), ht.data() + ht.span());
  if (!fp8) {
    order.resize(dc.cache.latent.extent(0));
    std::iota(order.begin(), order.end(), 0);
  }
  const std::int64_t per_sequence = c.capacity / c.page;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    set_device(new_latent, rng);
    set_device(new_rope, rng);
    set_device(View4<T>(const_cast<T*>(a.q.data()), c.batch, c.queries, c.heads, c.head_dim), rng);
    auto hl = Kokkos::create_mirror_view(dc.seqlens);
    std::shuffle(order.begin(), order.end(), rng);
    for (std::int64_t b = 0; b < c.batch; ++b) {
      hl(b) = int(1 + (rng() % c.capacity));
      for (std::int64_t p = 0; p < per_sequence; ++p) ht(b, p) = order[b * per_sequence + p];
    }
    Kokkos::deep_copy(dc.seqlens, hl);
    Kokkos::deep_copy(dc.block_table, ht);
    Kokkos::deep_copy(a.out, T(std::nan("")));
    Kokkos::fence();
    ASSERT_EQ(cudaGraphLaunch(graph, exec.cuda_stream()), cudaSuccess);
    exec.fence();
    const std::vector<double> replayed = Problem<T>::host_copy(a.out),
                              replayed_lse = Problem<T>::host_copy(a.lse);
    for (double x : replayed) ASSERT_TRUE(std::isfinite(x));
    Kokkos::deep_copy(a.out, T(std::nan("")));
    Kokkos::fence();
    step();
    exec.fence();
    EXPECT_EQ(replayed, Problem<T>::host_copy(a.out));
    EXPECT_EQ(replayed_lse, Problem<T>::host_copy(a.lse));
  }
  cudaGraphExecDestroy(graph);
}

TYPED_TEST(Cache, CapturedDecodeStepReplaysAsDirect) {
  if (!std::is_same<Space, Kokkos::Cuda>::value) GTEST_SKIP() << "CUDA graphs";
  expect_captured_step_matches_direct<TypeParam>();
}

#if KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF
TYPED_TEST(HalfCache, CapturedDecodeStepReplaysAsDirect) {
  if (!std::is_same<Space, Kokkos::Cuda>::value) GTEST_SKIP() << "CUDA graphs";
  for (CacheStorage storage : {CacheStorage::Native, CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor}) {
    SCOPED_TRACE(to_string(storage));
    expect_captured_step_matches_direct<TypeParam>(storage);
  }
}
#endif
#endif

/// Cases of FlashMLA's token layout: R a multiple of 128, DeepSeek's widths
/// among them; extents of 1, primes, idle slots, page sizes 1 to 8.
std::vector<CacheCase> per_block_cases() {
  return {
      {1, 1, 1, 1, 128, 0, 1, 0, false, {1}},            // everything 1 but R
      {3, 1, 4, 8, 128, 64, 40, 0, false, {40, 17, 1}},  // decode, contiguous, ragged
      {3, 2, 3, 5, 256, 3, 30, 1, false, {2, 30, 17}},   // page size 1, Tq = 2, odd Dr
      {2, 3, 5, 7, 512, 64, 40, 8, false, {37, 5}},      // DeepSeek's widths, paged, Tq = 3
      {3, 2, 2, 3, 128, 2, 28, 7, false, {0, 23, 1}},    // an idle slot, a sequence shorter than Tq
  };
}

/// Every case, causal and not, with splits 0, 1 and 3, stored as `storage`:
/// the Widened path, within the tolerance of a T cache; returns how many
/// rows saw no key.
template <class T>
int expect_fp8_cases_match_reference(const std::vector<CacheCase>& cases, CacheStorage storage,
                                     std::uint64_t seed) {
  int idle = 0;
  for (const CacheCase& c : cases)
    for (bool causal : {true, false})
      for (int splits : {0, 1, 3}) {
        SCOPED_TRACE(describe(c) + " " + to_string(storage) + " causal=" + std::to_string(causal) +
                     " splits=" + std::to_string(splits));
        Logical l(c, ++seed);
        const DeviceCache<T> dc = fp8_device_cache<T>(l, storage, seed);
        const CacheArguments<T> a = arguments(l, dc);
        Options opt;
        opt.causal = causal;
        opt.kv_splits = splits;
        const CacheShape shape = cache_shape(a);
        EXPECT_EQ(shape.storage, storage);
        CachePlan<T> plan(Space(), shape, opt);
        EXPECT_EQ(plan.path(), Path::Widened);
        EXPECT_NE(plan.describe().find(to_string(storage) + " cache dequantised"), std::string::npos)
            << plan.describe();
        plan.execute(Space(), a);
        idle += expect_matches_reference(l, a, opt);
      }
  return idle;
}

TYPED_TEST(Cache, Fp8PerBlockMatchesReferenceOnDequantisedCache) {
  EXPECT_GT(expect_fp8_cases_match_reference<TypeParam>(per_block_cases(), CacheStorage::Fp8PerBlock, 1500),
            0);
}

TYPED_TEST(Cache, Fp8PerTensorMatchesReferenceOnDequantisedCache) {
  std::vector<CacheCase> all = cases();
  for (const CacheCase& c : idle_cases()) all.push_back(c);
  EXPECT_GT(expect_fp8_cases_match_reference<TypeParam>(all, CacheStorage::Fp8PerTensor, 1600), 0);
}

// Packed queries and sparse indices with sinks take FP8 caches as they take
// others (the outer plan packs; the indices address the gathered cache).
TYPED_TEST(Cache, Fp8PackedQueriesAndSparseIndicesMatchReference) {
  using T = TypeParam;
  {
    const CacheCase c{3, 3, 3, 6, 128, 4, 24, 4, false, {24, 0, 9}};
    Logical l(c, 1700);
    const DeviceCache<T> dc = fp8_device_cache<T>(l, CacheStorage::Fp8PerBlock, 1700);
    const PackedCase<T> packed(l, arguments(l, dc), {3, 1, 2});
    cache_attention(Space(), packed.args);
    std::vector<double> want_lse, want = l.reference({}, &want_lse);
    want = packed.pick(want, c.heads * c.head_dim);
    want_lse = packed.pick(want_lse, c.heads);
    std::vector<double> out = Problem<T>::host_copy(packed.args.out),
                        lse = Problem<T>::host_copy(packed.args.lse);
    EXPECT_EQ(expect_idle_rows_empty(out, lse, want, want_lse, c.head_dim), 3);  // the length-0 sequence
    const Shape s{1, std::int64_t(packed.rows.size()), c.capacity, c.heads, c.head_dim, c.latent_dim};
    EXPECT_TRUE(close(out, want, tolerance<T>(), s));
  }
  {
    const CacheCase c{2, 2, 4, 5, 11, 3, 32, 8, false, {30, 13}};
    const std::int64_t topk = 9;
    Logical l(c, 1701);
    const DeviceCache<T> dc = fp8_device_cache<T>(l, CacheStorage::Fp8PerTensor, 1701);
    CacheArguments<T> a = arguments(l, dc);
    std::mt19937_64 rng(1701);
    std::vector<int> lists(c.batch * c.queries * topk);
    for (std::int64_t b = 0; b < c.batch; ++b)
      for (std::int64_t i = 0; i < c.queries * topk; ++i)
        lists[b * c.queries * topk + i] = rng() % 4 == 0 ? -1 : int(rng() % c.lengths[b]);
    a.indices = device_indices(lists, c, topk);
    const std::vector<double> sinks = {0.5, -1.0, 2.0, 0.25};
    a.sinks = device_sinks<T>(sinks);
    expect_listed(l, a, Options(), row_entries(lists, c.queries, topk), sinks);
  }
}

// A decode loop on an FP8 cache: tokens quantised by append_to_cache (in
// pieces, plain and power-of-two scales), each step's attention against the
// reference on what the bytes decode to.
TYPED_TEST(Cache, Fp8AppendThenAttend) {
  using T = TypeParam;
  for (CacheStorage storage : {CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor})
    for (std::int64_t page : {0, 1, 6}) {
      const bool power_of_two = page == 6;
      const CacheCase c{2, 1, 3, 4, 256, 3, 24, page, false, {0, 0}};
      SCOPED_TRACE(describe(c) + " " + to_string(storage));
      Logical l(c, 19);
      const Logical original = l;  // the values appended; l keeps what the cache holds
      DeviceCache<T> dc = fp8_device_cache<T>(l, storage, 19, false);
      dc.cache.fp8.power_of_two_scales = power_of_two;
      if (power_of_two) dc.cache.fp8.latent_scale = 1.f / 256, dc.cache.fp8.rope_scale = 1.f / 64;
      expect_append_then_attend<T>(l, dc, original, [&] {
        dequantize_into(l, dc.cache);
        // The quantised keys stay close to the appended ones: e4m3 keeps 4 significant bits.
        EXPECT_LE(max_error(l.latent, original.latent), 1.0 / 16 + 1e-6);
      });
    }
}

TYPED_TEST(Cache, Fp8BadInputIsRejectedBeforeAnyWrite) {
  using T = TypeParam;
  const CacheCase c{2, 1, 3, 4, 128, 2, 16, 4, false, {16, 9}};
  Logical l(c, 23);
  const DeviceCache<T> dc = fp8_device_cache<T>(l, CacheStorage::Fp8PerBlock, 23);
  const CacheArguments<T> good = arguments(l, dc);
  auto run = [&](const CacheArguments<T>& a) { return [a] { cache_attention(Space(), a); }; };
  {  // tokens of another size, and of another page size than the table's sequences hold
    CacheArguments<T> a = good;
    a.cache.fp8.tokens = Bytes("tokens", 11, 4, 576);
    expect_rejected<T>(run(a), {"cache.fp8.tokens.extent(2) = 576", "Fp8PerBlock", "needs 136"}, a.out);
  }
  {  // a latent that the attention does not read beside the FP8 tokens
    CacheArguments<T> a = good;
    a.cache.latent = View3<T>("latent", 11, 4, 128);
    expect_rejected<T>(run(a), {"cache.storage = Fp8PerBlock", "cache.latent (11, 4, 128)"}, a.out);
  }
  {  // per-tensor scales that are not finite and positive
    CacheArguments<T> a = good;
    a.cache.storage = CacheStorage::Fp8PerTensor;
    a.cache.fp8.tokens = Bytes("tokens", 11, 4, 130);
    a.cache.fp8.rope_scale = -1;
    expect_rejected<T>(run(a), {"cache.fp8.rope_scale = -1", "finite and positive"}, a.out);
  }
  {  // a plan for the Native cache, a block-table entry out of range, a forced path
    CacheShape native = cache_shape(good);
    EXPECT_EQ(native.storage, CacheStorage::Fp8PerBlock);
    native.storage = CacheStorage::Native;
    CachePlan<T> plan(Space(), native);
    expect_rejected<T>([&] { plan.execute(Space(), good); }, {"given to a plan made for", "Fp8PerBlock"},
                       good.out);
    Options forced;
    forced.path = Path::CacheLatent;
    expect_rejected<T>([&] { CachePlan<T>(Space(), cache_shape(good), forced); },
                       {"Options::path = CacheLatent",
                        "Fp8PerBlock caches take the Widened path or a tensor-core decode path"},
                       good.out);
    CacheShape odd = cache_shape(good);
    odd.latent_dim = 100;
    expect_rejected<T>([&] { CachePlan<T>(Space(), odd); },
                       {"Fp8PerBlock takes latent_dim a multiple of 128"}, good.out);
  }
}

#if KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF
// Queries, weights and out in 16 bits over FP8 caches (the Widened path on
// every backend): within twice the error of the modelled 16-bit framework,
// as 16-bit caches are, both layouts, one part and three.
TYPED_TEST(HalfCache, Fp8CachesWithinTwiceFrameworkError) {
  using T = TypeParam;
  std::uint64_t seed = 1800;
  std::vector<CacheCase> cases = per_block_cases();
  cases.pop_back();  // rows with no key have no finite error
  for (CacheStorage storage : {CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor})
    for (const CacheCase& c : cases)
      for (int splits : {1, 3}) {
        SCOPED_TRACE(describe(c) + " " + to_string(storage) + " splits=" + std::to_string(splits));
        Logical l = rounded_to<T>(c, ++seed);
        const DeviceCache<T> dc = fp8_device_cache<T>(l, storage, seed);
        const CacheArguments<T> a = arguments(l, dc);
        Options opt;
        opt.kv_splits = splits;
        CachePlan<T> plan(Space(), cache_shape(a), opt);
        // DeepSeek's widths on the tensor-core paths (which read FP8 tokens), others widened.
        const bool tensor = c.latent_dim == 512 && c.rope_dim == 64 && KOKKOSMLA_ENABLE_SM80;
        EXPECT_EQ(is_tensor_path(plan.path()), tensor) << plan.describe();
        EXPECT_EQ(plan.path() == Path::Widened, !tensor) << plan.describe();
        plan.execute(Space(), a);
        expect_within_framework_error<T>(l, a, opt, plan.describe());
      }
}

// FP8 tokens whose block scales span 2^-8 .. 2^8 from token to token and
// block to block (so the largest scale of a tile, the unit DecodeFp8TensorKernel
// keeps oa in, changes from step to step), and query rows spanning 2^-4 ..
// 2^4 (each brought into fp16's range by a power of two of its own), on each
// tensor path: within twice the framework's error, one part and three.
TYPED_TEST(HalfCache, Fp8TokensOfSpreadScalesWithinTwiceFrameworkError) {
  using T = TypeParam;
  const std::vector<CacheCase> cases = {
      {2, 1, 16, 8, 512, 64, 208, 16, false, {200, 77}},  // 16 rows a sequence
      {1, 2, 32, 8, 512, 64, 192, 64, true, {130}},       // 64 rows over two tokens
  };
  std::map<Path, int> ran;
  std::uint64_t seed = 2600;
  for (const CacheCase& c : cases)
    for (Path path : {Path::DecodeSm90, Path::DecodeTensorSm80})
      for (int splits : {1, 3}) {
        SCOPED_TRACE(describe(c) + " path=" + to_string(path) + " splits=" + std::to_string(splits));
        Logical l = rounded_to<T>(c, ++seed);
        const std::int64_t R = c.latent_dim, D = c.head_dim;
        for (std::int64_t i = 0; i < std::int64_t(l.latent.size()); ++i)
          l.latent[i] *= std::ldexp(1.0, int((i / R * 5 + i % R / 128 * 3) % 17) - 8);
        for (std::int64_t i = 0; i < std::int64_t(l.q.size()); ++i)
          l.q[i] *= std::ldexp(1.0, int(i / D * 3 % 9) - 4);
        l.round(&stored_as<T>);
        const DeviceCache<T> dc = fp8_device_cache<T>(l, CacheStorage::Fp8PerBlock, seed);
        const CacheArguments<T> a = arguments(l, dc);
        Options opt;
        opt.path = path;
        opt.kv_splits = splits;
        opt.scale = 1e-3;  // logits of a few units: softmax weights spread over many keys
        expect_runs_or_refuses(path, ran, [&] {
          CachePlan<T> plan(Space(), cache_shape(a), opt);
          plan.execute(Space(), a);
          expect_within_framework_error<T>(l, a, opt, plan.describe());
          return plan.path();
        });
      }
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_GT(ran[Path::DecodeTensorSm80], 0);
#endif
  if (cases_that_ran(ran) == 0)
    GTEST_SKIP() << "no 16-bit tensor-core cache path in this build or on this GPU";
}

/// Random (B, Tq, topk) lists over the case's sequences: -1 entries, repeats,
/// any order; a sequence of length 0 lists nothing.
std::vector<int> random_lists(const CacheCase& c, std::int64_t topk, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> lists(c.batch * c.queries * topk);
  for (std::int64_t i = 0; i < std::int64_t(lists.size()); ++i) {
    const int length = c.lengths[i / (c.queries * topk)];
    lists[i] = length == 0 || rng() % 5 == 0 ? -1 : int(rng() % length);
  }
  return lists;
}

/// The dense problem that sparse lists over l pose: each query token (b, t)
/// a sequence of its own (Tq = 1, contiguous, capacity topk) holding the rows
/// its list names, in the list's order.
Logical listed_rows(const Logical& l, const std::vector<int>& lists, std::int64_t topk) {
  const CacheCase& c = l.c;
  const std::int64_t R = c.latent_dim, Dr = c.rope_dim;
  CacheCase g{c.batch * c.queries, 1, c.heads, c.head_dim, R, Dr, topk, 0, false, {}};
  for (std::int64_t v = 0; v < g.batch; ++v)
    g.lengths.push_back(int(std::count_if(lists.begin() + v * topk, lists.begin() + (v + 1) * topk,
                                          [](int p) { return p >= 0; })));
  Logical d(g, 0);
  d.q = l.q;
  d.q_rope = l.q_rope;
  d.w_uk = l.w_uk;
  d.w_uv = l.w_uv;
  for (std::int64_t v = 0; v < g.batch; ++v) {
    const std::int64_t b = v / c.queries;
    std::int64_t j = 0;
    for (std::int64_t k = 0; k < topk; ++k, ++j) {
      const int p = lists[v * topk + k];
      if (p < 0) {
        --j;
        continue;
      }
      std::copy_n(&l.latent[(b * c.capacity + p) * R], R, &d.latent[(v * topk + j) * R]);
      std::copy_n(&l.rope[(b * c.capacity + p) * Dr], Dr, &d.rope[(v * topk + j) * Dr]);
    }
  }
  return d;
}

/// An FP8 cache for listed_rows(l, lists, topk): the bytes of each listed
/// token of dc copied, so that both caches decode to the same values.
template <class T>
DeviceCache<T> fp8_listed_cache(const Logical& g, const DeviceCache<T>& dc, const CacheCase& c,
                                const std::vector<int>& lists, std::int64_t topk) {
  DeviceCache<T> gc(g, 0, false);
  const auto& from = dc.cache.fp8.tokens;
  const std::int64_t bytes = std::int64_t(from.extent(2)), page = std::int64_t(from.extent(1));
  gc.cache.latent = {};
  gc.cache.k_rope = {};
  gc.cache.storage = dc.cache.storage;
  gc.cache.fp8 = dc.cache.fp8;
  gc.cache.fp8.tokens = Bytes("listed_tokens", g.c.batch, topk, bytes);
  const auto src = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), from);
  const auto table = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dc.cache.block_table);
  auto dst = Kokkos::create_mirror_view(gc.cache.fp8.tokens);
  Kokkos::deep_copy(dst, std::uint8_t(0xff));
  for (std::int64_t v = 0; v < g.c.batch; ++v)
    for (std::int64_t k = 0, j = 0; k < topk; ++k) {
      const int p = lists[v * topk + k];
      if (p < 0) continue;
      std::copy_n(src.data() + token_row(table, page, v / c.queries, p) * bytes, bytes,
                  dst.data() + (v * topk + j++) * bytes);
    }
  Kokkos::deep_copy(gc.cache.fp8.tokens, dst);
  return gc;
}

// Sparse attention on the 16-bit tensor-core paths, 16-bit and FP8 caches:
// for random lists (-1 entries, repeats, any order, a sequence with none),
// with and without sinks, out and lse equal bit for bit those of the same
// path's dense attention over a cache in which each query token is a
// sequence holding the rows its list names (how the kernels read lists),
// and that is within twice the modelled framework's error.
TYPED_TEST(HalfCache, SparseOnTensorPathsEqualsDenseOverListedRows) {
  using T = TypeParam;
  const std::vector<std::pair<CacheCase, std::int64_t>> cases = {
      {{3, 1, 16, 8, 512, 64, 208, 16, false, {200, 0, 77}}, 150},  // H = 16, an idle sequence
      {{2, 1, 16, 8, 512, 64, 96, 32, false, {96, 45}}, 71},        // H = 16
      {{2, 2, 64, 8, 512, 64, 104, 8, false, {100, 61}}, 37},       // H = 64, Tq = 2
      {{1, 1, 128, 8, 512, 64, 320, 64, false, {300}}, 260},        // H = 128, lists past one tile
  };
  std::map<Path, int> ran;
  std::uint64_t seed = 2000;
  for (CacheStorage storage : {CacheStorage::Native, CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor})
    for (const auto& listed_case : cases)
      for (Path path : {Path::DecodeSm90, Path::DecodeTensorSm80})
        for (bool with_sinks : {false, true}) {
          const CacheCase& c = listed_case.first;
          const std::int64_t topk = listed_case.second;
          SCOPED_TRACE(describe(c) + " topk=" + std::to_string(topk) + " " + to_string(storage) +
                       " path=" + to_string(path) + " sinks=" + std::to_string(with_sinks));
          Logical l = rounded_to<T>(c, ++seed);
          const DeviceCache<T> dc = storage == CacheStorage::Native ? DeviceCache<T>(l, seed)
                                                                    : fp8_device_cache<T>(l, storage, seed);
          const std::vector<int> lists = random_lists(c, topk, seed);
          CacheArguments<T> a = arguments(l, dc);
          a.indices = device_indices(lists, c, topk);
          const Logical g = listed_rows(l, lists, topk);
          const DeviceCache<T> gc = storage == CacheStorage::Native ? DeviceCache<T>(g, 0)
                                                                    : fp8_listed_cache(g, dc, c, lists, topk);
          CacheArguments<T> dense = arguments(g, gc);
          if (with_sinks) {
            std::vector<double> sinks;
            for (std::int64_t h = 0; h < c.heads; ++h) sinks.push_back(2.0 * std::sin(double(h + seed)));
            a.sinks = dense.sinks = device_sinks<T>(sinks);
          }
          Options opt;
          opt.path = path;
          expect_runs_or_refuses(path, ran, [&] {
            const CachePlan<T> sparse_plan(Space(), cache_shape(a, opt), opt);
            sparse_plan.execute(Space(), a);
            Options dense_opt = opt;
            dense_opt.causal = false;
            const CachePlan<T> dense_plan(Space(), cache_shape(dense, dense_opt), dense_opt);
            dense_plan.execute(Space(), dense);
            EXPECT_EQ(sparse_plan.splits(), dense_plan.splits());
            EXPECT_TRUE(Problem<T>::host_copy(a.out) == Problem<T>::host_copy(dense.out))
                << sparse_plan.describe();
            EXPECT_TRUE(Problem<T>::host_copy(a.lse) == Problem<T>::host_copy(dense.lse));
            // A token whose list names no key gets out 0 and lse +inf (it has no finite error to bound).
            const std::vector<double> out = Problem<T>::host_copy(a.out), lse = Problem<T>::host_copy(a.lse);
            bool every_token_has_keys = true;
            for (std::int64_t v = 0; v < g.c.batch; ++v) {
              if (g.c.lengths[v] > 0) continue;
              every_token_has_keys = false;
              for (std::int64_t i = v * c.heads; i < (v + 1) * c.heads; ++i) {
                EXPECT_EQ(lse[i], INFINITY);
                for (std::int64_t d = 0; d < c.head_dim; ++d) EXPECT_EQ(out[i * c.head_dim + d], 0.0);
              }
            }
            if (!with_sinks && every_token_has_keys)
              expect_within_framework_error<T>(g, dense, dense_opt, dense_plan.describe());
            return sparse_plan.path();
          });
        }
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_GT(ran[Path::DecodeTensorSm80], 0);
#endif
  std::cout << "[ sparse tensor paths ] DecodeSm90 ran " << ran[Path::DecodeSm90]
            << " cases, DecodeTensorSm80 " << ran[Path::DecodeTensorSm80] << "\n";
  if (cases_that_ran(ran) == 0)
    GTEST_SKIP() << "no 16-bit tensor-core cache path in this build or on this GPU";
}
#endif

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
