// Randomised differential testing: random legal shapes and options checked
// against the double reference and against the other algorithms, and random
// illegal inputs checked to be rejected with out untouched.
//
// CI runs a bounded number of cases with a fixed seed. For a long run:
//   KOKKOSMLA_FUZZ_CASES=100000 KOKKOSMLA_FUZZ_SEED=$RANDOM kokkosmla_unit_tests --gtest_filter='Fuzz*'
// A failure prints the case's seed; KOKKOSMLA_FUZZ_SEED=<it> KOKKOSMLA_FUZZ_CASES=1 replays it.

#include "Reference.hpp"

#include <cstdlib>
#include <iterator>
#include <stdexcept>

namespace KokkosMLA {
namespace Test {
namespace {

/// Sizes from 1 to `most`, biased to small values, primes and tile edges.
std::int64_t draw_extent(std::mt19937_64& rng, std::int64_t most) {
  static const std::int64_t special[] = {1,  2,  3,  7,  8,  13,  16,  17,  31,
                                         32, 33, 63, 64, 65, 127, 128, 129, 257};
  std::uniform_int_distribution<int> pick(0, 3);
  std::int64_t x;
  if (pick(rng) == 0) {
    x = special[std::uniform_int_distribution<int>(0, int(sizeof(special) / sizeof(*special)) - 1)(rng)];
  } else {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    x = 1 + std::int64_t(std::pow(u, 2.0) * double(most));
  }
  return std::max<std::int64_t>(1, std::min(x, most));
}

struct FuzzCase {
  Shape shape;
  Options opt;
};

FuzzCase draw_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  FuzzCase c;
  Shape& s = c.shape;
  // Keep B*S*H*(D + R) moderate so a few hundred cases run in seconds.
  s.batch = draw_extent(rng, 3);
  s.queries = draw_extent(rng, 160);
  s.keys = s.queries + (rng() % 3 == 0 ? draw_extent(rng, 60) : 0);
  s.heads = draw_extent(rng, 9);
  s.head_dim = draw_extent(rng, 130);
  s.latent_dim = draw_extent(rng, 300);
  c.opt.causal = rng() % 4 != 0;
  if (rng() % 2) c.opt.scale = std::uniform_real_distribution<double>(0.01, 2.0)(rng);
  const Algorithm all[] = {Algorithm::Auto, Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed};
  c.opt.algorithm = all[rng() % 4];
  return c;
}

template <class T>
class Fuzz : public ::testing::Test {};
TYPED_TEST_SUITE(Fuzz, Scalars);

TYPED_TEST(Fuzz, RandomLegalCasesMatchReferenceAndEachOther) {
  const std::uint64_t first = env_or("KOKKOSMLA_FUZZ_SEED", 20261129),
                      cases = env_or("KOKKOSMLA_FUZZ_CASES", 150);
  for (std::uint64_t seed = first; seed < first + cases; ++seed) {
    const FuzzCase c = draw_case(seed);
    Problem<TypeParam> p(c.shape, seed);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, c.opt);
    const auto got = Problem<TypeParam>::host_copy(p.out);
    ASSERT_TRUE(close(got, reference(p, c.opt), tolerance<TypeParam>(), c.shape))
        << "KOKKOSMLA_FUZZ_SEED=" << seed << " algorithm " << to_string(c.opt.algorithm);
    {  // every argument in a layout of its own (in_layout): the same bits, except
       // that weights read in place with heads not D apart are up-projected head
       // by head by the Decompressed paths: to rounding
      std::mt19937_64 rng(seed ^ 0x1a7);
      auto draw = [&] { return kLayouts[rng() % std::size(kLayouts)]; };
      const Layout lq = draw(), ll = draw(), lk = draw(), lv = draw(), lo = draw();
      const auto out = in_layout(p.out, lo);
      const auto w_uk = in_layout(p.w_uk, lk), w_uv = in_layout(p.w_uv, lv);
      auto by_head = [](const auto& w) {
        return Impl::reads_weights_in_place(w) && w.extent(1) > 1 && std::size_t(w.stride(1)) != w.extent(2);
      };
      Kokkos::deep_copy(out, TypeParam(std::nan("")));
      attention(Space(), in_layout(p.q, lq), in_layout(p.latent, ll), w_uk, w_uv, out, c.opt);
      const std::string layouts = "KOKKOSMLA_FUZZ_SEED=" + std::to_string(seed) + " layouts q " +
                                  to_string(lq) + ", latent " + to_string(ll) + ", w_uk " + to_string(lk) +
                                  ", w_uv " + to_string(lv) + ", out " + to_string(lo);
      if (by_head(w_uk) || by_head(w_uv))
        ASSERT_TRUE(close(row_values(out), got, tolerance<TypeParam>(), c.shape)) << layouts;
      else
        ASSERT_EQ(row_values(out), got) << layouts;
    }
    Options other = c.opt;
    other.algorithm = c.opt.algorithm == Algorithm::Decompressed ? Algorithm::Fused : Algorithm::Decompressed;
    Problem<TypeParam>::poison(p.out);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, other);
    ASSERT_TRUE(close(Problem<TypeParam>::host_copy(p.out), got, 2 * tolerance<TypeParam>(), c.shape))
        << "KOKKOSMLA_FUZZ_SEED=" << seed << " " << to_string(other.algorithm) << " vs "
        << to_string(c.opt.algorithm);
  }
}

TYPED_TEST(Fuzz, RandomIllegalCasesAreRejectedUntouched) {
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  const std::uint64_t first = env_or("KOKKOSMLA_FUZZ_SEED", 20261129),
                      cases = env_or("KOKKOSMLA_FUZZ_CASES", 150);
  for (std::uint64_t seed = first; seed < first + cases; ++seed) {
    std::mt19937_64 rng(seed);
    Shape s{draw_extent(rng, 3), draw_extent(rng, 12), 0,
            draw_extent(rng, 4), draw_extent(rng, 9),  draw_extent(rng, 9)};
    s.keys = s.queries;
    Problem<TypeParam> p(s, seed);
    // Perturb one extent of one argument, or alias out with an input.
    const int which = int(rng() % 6);
    const std::int64_t delta = 1 + std::int64_t(rng() % 3);
    View4<TypeParam> q = p.q;
    View3<TypeParam> latent = p.latent, w_uk = p.w_uk, w_uv = p.w_uv;
    View4<TypeParam> out("out", s.batch, s.queries, s.heads, s.head_dim);
    Kokkos::deep_copy(out, TypeParam(-3.5));
    const int dim = int(rng() % 3);
    auto grown3 = [&](const View3<TypeParam>& v) {
      std::int64_t e[3] = {std::int64_t(v.extent(0)), std::int64_t(v.extent(1)), std::int64_t(v.extent(2))};
      e[dim] += delta;
      return View3<TypeParam>("grown", e[0], e[1], e[2]);
    };
    bool aliased = false;
    switch (which) {
      case 0:
        q = View4<TypeParam>("q", s.batch + delta, s.queries, s.heads, s.head_dim);
        break;
      case 1:
        if (dim != 1) {
          latent = grown3(latent);
        } else {                         // more keys than queries is legal; fewer is not
          if (s.queries == 1) continue;  // zero keys: covered by BadInput.EmptyExtents
          latent = View3<TypeParam>("latent", s.batch, s.queries - 1, s.latent_dim);
        }
        break;
      case 2:
        w_uk = grown3(w_uk);
        break;
      case 3:
        w_uv = grown3(w_uv);
        break;
      case 4:
        out = View4<TypeParam>("out", s.batch, s.queries, s.heads, s.head_dim + delta);
        break;
      default:
        aliased = true;
        break;
    }
    if (which == 4) Kokkos::deep_copy(out, TypeParam(-3.5));
    auto untouched = [&](const auto& v) {
      for (double x : Problem<TypeParam>::host_copy(v)) ASSERT_EQ(x, -3.5) << "KOKKOSMLA_FUZZ_SEED=" << seed;
    };
    if (aliased) {
      View4<TypeParam, Unmanaged> over(const_cast<TypeParam*>(p.q.data()), s.batch, s.queries, s.heads,
                                       s.head_dim);
      const auto before = Problem<TypeParam>::host_copy(p.q);
      EXPECT_THROW(attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, over), std::invalid_argument)
          << "KOKKOSMLA_FUZZ_SEED=" << seed;
      EXPECT_EQ(before, Problem<TypeParam>::host_copy(p.q)) << "KOKKOSMLA_FUZZ_SEED=" << seed;
      continue;
    }
    EXPECT_THROW(attention(Space(), q, latent, w_uk, w_uv, out), std::invalid_argument)
        << "KOKKOSMLA_FUZZ_SEED=" << seed << " argument " << which << " extent " << dim;
    untouched(out);
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
