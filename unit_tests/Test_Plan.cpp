// Plans: reuse, no allocation per execute, the Auto choice, and describe().

#include "Reference.hpp"

namespace KokkosMLA {
namespace Test {
namespace {

template <class T>
class PlanTest : public ::testing::Test {};
TYPED_TEST_SUITE(PlanTest, Scalars);

TYPED_TEST(PlanTest, ReuseOnNewInputsMatchesReference) {
  const Shape s{2, 21, 21, 3, 8, 10};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Plan<TypeParam, Space> plan(Space(), s, opt);
    EXPECT_EQ(plan.algorithm(), a);
    const std::size_t workspace = plan.workspace_bytes();
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      Problem<TypeParam> p(s, seed);
      plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
      EXPECT_TRUE(close(Problem<TypeParam>::host_copy(p.out), reference(p, opt), tolerance<TypeParam>(), s))
          << to_string(a) << " seed " << seed;
      EXPECT_EQ(plan.workspace_bytes(), workspace) << "execute must not grow the workspace";
    }
  }
}

TYPED_TEST(PlanTest, WorkspaceMatchesTheAlgorithm) {
  const Shape s{2, 9, 11, 3, 4, 5};
  auto bytes = [&](Algorithm a) {
    Options opt;
    opt.algorithm = a;
    return Plan<TypeParam, Space>(Space(), s, opt).workspace_bytes();
  };
  EXPECT_EQ(bytes(Algorithm::Fused), 0u);
  // K and V: B S rows of H D values each; a host's rows padded by under two
  // 64-byte lines (FlashHostKernel::key_row_stride), a GPU's not at all.
  const bool host = Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible;
  const std::size_t kv_rows = 2u * 2 * 11, row_bytes = 3 * 4 * sizeof(TypeParam);
  EXPECT_GE(bytes(Algorithm::Decompressed), kv_rows * row_bytes);
  EXPECT_LT(bytes(Algorithm::Decompressed), kv_rows * (row_bytes + (host ? 128 : 1)));
  EXPECT_EQ(bytes(Algorithm::Absorbed), 2u * 9 * 3 * 5 * sizeof(TypeParam));
}

TYPED_TEST(PlanTest, AutoResolvesToARealAlgorithm) {
  for (const Shape& s : {Shape{2, 32, 32, 4, 16, 24}, Shape{1, 4096, 4096, 16, 128, 512},
                         Shape{128, 1, 4096, 128, 128, 512}, Shape{1, 1, 1, 1, 1, 1}}) {
    const Algorithm a = choose_algorithm<TypeParam>(Space(), s);
    EXPECT_NE(a, Algorithm::Auto);
    Options forced;
    forced.algorithm = Algorithm::Absorbed;
    EXPECT_EQ(choose_algorithm<TypeParam>(Space(), s, forced), Algorithm::Absorbed);
  }
  // On a GPU the original example is launch-bound: one launch wins. (On a
  // host backend launches are nearly free and the GEMM path is cheaper.)
  const Shape tiny{2, 32, 32, 4, 16, 24};
  const bool host = Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible;
  EXPECT_EQ(choose_algorithm<TypeParam>(Space(), tiny), host ? Algorithm::Decompressed : Algorithm::Fused);
}

TYPED_TEST(PlanTest, DescribeNamesPathAlgorithmAndWorkDivision) {
  // Every path, the one-row kernel with no tiles too, says what runs and how
  // the work is divided.
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Plan<TypeParam, Space> plan(Space(), Shape{2, 32, 32, 4, 16, 24}, opt);
    const std::string d = plan.describe();
    EXPECT_NE(d.find("path=" + to_string(plan.path()) + " "), std::string::npos) << d;
    EXPECT_NE(d.find("algorithm=" + to_string(a)), std::string::npos) << d;
    EXPECT_NE(d.find("team_size="), std::string::npos) << d;
    EXPECT_DOUBLE_EQ(plan.scale(), 0.25);
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
