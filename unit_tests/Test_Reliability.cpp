// Concurrency, determinism and non-finite inputs.

#include "Reference.hpp"
#include "impl/KokkosMLA_Compat.hpp"

namespace KokkosMLA {
namespace Test {
namespace {

template <class T>
class Reliability : public ::testing::Test {};
TYPED_TEST_SUITE(Reliability, Scalars);

// Two plans on two instances at once give what they give one after the other.
TYPED_TEST(Reliability, ConcurrentPlansOnTwoInstancesMatchSequential) {
  const Shape sa{2, 40, 40, 4, 16, 24}, sb{1, 23, 30, 3, 8, 40};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    SCOPED_TRACE(to_string(a));
    Problem<TypeParam> pa(sa, 1), pb(sb, 2);
    Plan<TypeParam, Space> plan_a(Space(), sa, opt), plan_b(Space(), sb, opt);
    expect_concurrent_equals_sequential(
        [&](const Space& e) { plan_a.execute(e, pa.q, pa.latent, pa.w_uk, pa.w_uv, pa.out); },
        [&](const Space& e) { plan_b.execute(e, pb.q, pb.latent, pb.w_uk, pb.w_uv, pb.out); },
        [&] { return Problem<TypeParam>::host_copy(pa.out); },
        [&] { return Problem<TypeParam>::host_copy(pb.out); },
        [&] {
          Problem<TypeParam>::poison(pa.out);
          Problem<TypeParam>::poison(pb.out);
        });
  }
}

// Documented behaviour: non-finite inputs reach exactly the outputs that read them.
TYPED_TEST(Reliability, NanInOneQueryRowStaysInThatRow) {
  const Shape s{2, 37, 37, 3, 8, 20};
  const std::int64_t nb = 1, nt = 17, nh = 2;
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<TypeParam> p(s, 4);
    auto q = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q);
    q(nb, nt, nh, 3) = TypeParam(std::nan(""));
    Kokkos::deep_copy(p.q, q);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.out);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 0; t < s.queries; ++t)
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t d = 0; d < s.head_dim; ++d) {
            const bool poisoned = b == nb && t == nt && h == nh;
            ASSERT_EQ(std::isnan(out(b, t, h, d)), poisoned)
                << to_string(a) << " out(" << b << "," << t << "," << h << "," << d << ")";
          }
  }
}

/// The number after `key=` in a plan's describe(), or -1 where it has none.
std::int64_t described_value(const std::string& described, const std::string& key) {
  for (std::size_t at = described.find(key + "="); at != std::string::npos;
       at = described.find(key + "=", at + 1))
    if (at == 0 || described[at - 1] == ' ') return std::stoll(described.substr(at + key.size() + 1));
  return -1;
}

/// The first query row that may read key position s with a zero weight
/// (0 * Inf = NaN), in a prefill whose query t sits at key position t: with
/// attention by GEMMs, the first row of s's block of query rows; with a flash
/// or latent kernel, the first row of the query tile that holds the first
/// row of s's key tile (so at most query_tile + key_tile - 1 rows before s).
std::int64_t first_row_reading(const std::string& described, std::int64_t s) {
  const std::int64_t block = described_value(described, "query_block");
  if (block > 0) return s / block * block;
  const std::int64_t query_tile = described_value(described, "query_tile"),
                     key_tile = described_value(described, "key_tile");
  EXPECT_GT(query_tile, 0) << described;
  EXPECT_GT(key_tile, 0) << described;
  return s / key_tile * key_tile / query_tile * query_tile;
}

// An Inf in one latent row (position ns of batch nb) makes non-finite every
// query that sees ns, may reach the rows that share its tiles (docs/testing.md,
// "Non-finite inputs"), and leaves every earlier row and the other batch
// finite; on every prefill path this backend has, over sequences of several
// tiles (so that rows before the reach exist).
TYPED_TEST(Reliability, InfInLatentReachesOnlyLaterQueriesOfItsBatch) {
  using T = TypeParam;
  const Shape s{2, 300, 300, 2, 8, 12};
  const std::int64_t nb = 0, ns = 250;
  Problem<T> p(s, 6);
  auto lat = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.latent);
  lat(nb, ns, 5) = T(INFINITY);
  Kokkos::deep_copy(p.latent, lat);
  int paths_with_rows_before = 0;
  const int paths = for_each_prefill_path<T>(s, [&](const Plan<T, Space>& plan) {
    const std::int64_t first = first_row_reading(plan.describe(), ns);
    if (first > 0) ++paths_with_rows_before;
    Problem<T>::poison(p.out);
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
    auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.out);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 0; t < s.queries; ++t) {
        bool finite = true;
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t d = 0; d < s.head_dim; ++d) finite = finite && std::isfinite(out(b, t, h, d));
        if (b != nb) {
          EXPECT_TRUE(finite) << "other batch b=" << b << " t=" << t;
        } else if (t >= ns) {
          EXPECT_FALSE(finite) << "t=" << t << " reads the Inf";
        } else if (t < first) {
          EXPECT_TRUE(finite) << "t=" << t << " before the rows that share a tile with " << ns << " (from "
                              << first << ": " << plan.describe() << ")";
        }
      }
  });
  EXPECT_GE(paths, 3);
  // Only a GPU's block of query rows (attention by GEMMs) may span the whole sequence.
  EXPECT_GE(paths_with_rows_before, paths - 1);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
