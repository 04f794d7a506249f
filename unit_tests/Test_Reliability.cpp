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

TYPED_TEST(Reliability, InfInLatentReachesOnlyLaterQueriesOfItsBatch) {
  const Shape s{2, 30, 30, 2, 8, 12};
  const std::int64_t nb = 0, ns = 21;
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<TypeParam> p(s, 6);
    auto lat = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.latent);
    lat(nb, ns, 5) = TypeParam(INFINITY);
    Kokkos::deep_copy(p.latent, lat);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.out);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 0; t < s.queries; ++t) {
        bool finite = true;
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t d = 0; d < s.head_dim; ++d) finite = finite && std::isfinite(out(b, t, h, d));
        if (b != nb) {
          EXPECT_TRUE(finite) << to_string(a) << " other batch b=" << b << " t=" << t;
        } else if (t >= ns) {
          EXPECT_FALSE(finite) << to_string(a) << " t=" << t << " reads the Inf";
        }
      }
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
