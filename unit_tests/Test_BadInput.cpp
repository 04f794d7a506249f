// Bad input: a std::invalid_argument naming the argument and extents, thrown
// before any launch, with out untouched.

#include "Reference.hpp"

#include <functional>
#include <stdexcept>

namespace KokkosMLA {
namespace Test {
namespace {

template <class T>
class BadInput : public ::testing::Test {
 protected:
  const Shape shape{2, 6, 6, 3, 4, 5};
  Problem<T> p{shape, 1};

  BadInput() { Kokkos::deep_copy(p.out, T(-7.25)); }

  void expect_rejected(const std::function<void()>& call, std::initializer_list<std::string> expected) {
    KokkosMLA::Test::expect_rejected<T>(call, expected, p.out);
  }
  /// The same for a call whose output is another view than p.out.
  template <class V>
  void expect_rejected(const std::function<void()>& call, std::initializer_list<std::string> expected,
                       const V& its_output) {
    KokkosMLA::Test::expect_rejected<T>(call, expected, its_output);
  }

  void expect_rejected_views(const View4<T>& q, const View3<T>& latent, const View3<T>& w_uk,
                             const View3<T>& w_uv, const View4<T>& out,
                             std::initializer_list<std::string> expected, const Options& opt = {}) {
    expect_rejected([&] { attention(Space(), q, latent, w_uk, w_uv, out, opt); }, expected);
  }
};

TYPED_TEST_SUITE(BadInput, Scalars);

TYPED_TEST(BadInput, ExtentMismatches) {
  auto& p = this->p;
  const Shape s = this->shape;
  View3<TypeParam> lat_batch("l", s.batch + 1, s.keys, s.latent_dim);
  this->expect_rejected_views(p.q, lat_batch, p.w_uk, p.w_uv, p.out,
                              {"KokkosMLA::attention", "latent.extent(0) = 3", "q.extent(0) = 2"});
  View3<TypeParam> lat_rank("l", s.batch, s.keys, s.latent_dim + 1);
  this->expect_rejected_views(p.q, lat_rank, p.w_uk, p.w_uv, p.out,
                              {"w_uk.extent(0) = 5", "latent.extent(2) = 6"});
  View3<TypeParam> wk_heads("w", s.latent_dim, s.heads + 1, s.head_dim);
  this->expect_rejected_views(p.q, p.latent, wk_heads, p.w_uv, p.out,
                              {"w_uk.extent(1) = 4", "q.extent(2) = 3"});
  View3<TypeParam> wk_dim("w", s.latent_dim, s.heads, s.head_dim + 2);
  this->expect_rejected_views(p.q, p.latent, wk_dim, p.w_uv, p.out,
                              {"w_uk.extent(2) = 6", "q.extent(3) = 4"});
  View3<TypeParam> wv("w", s.latent_dim, s.heads, s.head_dim + 1);
  this->expect_rejected_views(p.q, p.latent, p.w_uk, wv, p.out, {"w_uv.extent(2) = 5", "w_uk.extent(2) = 4"});
  View4<TypeParam> out_t("o", s.batch, s.queries + 1, s.heads, s.head_dim);
  this->expect_rejected([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, out_t); },
                        {"out.extent(1) = 7", "q.extent(1) = 6"}, out_t);
  View3<TypeParam> short_keys("l", s.batch, s.queries - 1, s.latent_dim);
  this->expect_rejected_views(p.q, short_keys, p.w_uk, p.w_uv, p.out,
                              {"latent.extent(1) = 5", "q.extent(1) = 6", "keys >= queries"});
}

TYPED_TEST(BadInput, EmptyExtents) {
  auto& p = this->p;
  View4<TypeParam> q0("q", this->shape.batch, 0, this->shape.heads, this->shape.head_dim);
  this->expect_rejected_views(q0, p.latent, p.w_uk, p.w_uv, p.out, {"q (2, 0, 3, 4)", "empty extent 1"});
  View3<TypeParam> w0("w", 0, this->shape.heads, this->shape.head_dim);
  this->expect_rejected_views(p.q, p.latent, w0, p.w_uv, p.out, {"w_uk (0, 3, 4)", "empty extent 0"});
}

TYPED_TEST(BadInput, NonFiniteScale) {
  auto& p = this->p;
  for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    Options opt;
    opt.scale = bad;
    this->expect_rejected_views(p.q, p.latent, p.w_uk, p.w_uv, p.out, {"scale", "not finite"}, opt);
  }
}

TYPED_TEST(BadInput, OutAliasesAnInput) {
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  auto& p = this->p;
  const Shape s = this->shape;
  View4<TypeParam, Unmanaged> over_q(p.q.data(), s.batch, s.queries, s.heads, s.head_dim);
  this->expect_rejected([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, over_q); },
                        {"out aliases q (2, 6, 3, 4)"}, over_q);
  // One shared element between the end of latent and the start of out.
  Kokkos::View<TypeParam*, Space> buffer(
      "buffer", 2 * s.batch * s.keys * s.latent_dim + 2 * s.batch * s.queries * s.heads * s.head_dim);
  View3<TypeParam, Unmanaged> lat(buffer.data(), s.batch, s.keys, s.latent_dim);
  Kokkos::deep_copy(lat, p.latent);
  View4<TypeParam, Unmanaged> out(buffer.data() + lat.span() - 1, s.batch, s.queries, s.heads, s.head_dim);
  EXPECT_THROW(attention(Space(), p.q, lat, p.w_uk, p.w_uv, out), std::invalid_argument);
  View4<TypeParam, Unmanaged> after(buffer.data() + lat.span(), s.batch, s.queries, s.heads, s.head_dim);
  EXPECT_NO_THROW(attention(Space(), p.q, lat, p.w_uk, p.w_uv, after)) << "adjacent is not aliasing";
}

TYPED_TEST(BadInput, PaddedViewIsReadThroughACopy) {
  // A padded LayoutRight view has gaps between rows: attention copies it
  // into a row-major array and gives the unpadded result bit for bit.
  const Shape s{1, 2, 2, 1, 4, 100};
  Problem<TypeParam> p(s, 2);
  View3<TypeParam> padded(Kokkos::view_alloc("padded", Kokkos::AllowPadding), s.batch, s.keys, s.latent_dim);
  if (padded.span_is_contiguous()) GTEST_SKIP() << "this Kokkos does not pad LayoutRight rows";
  Kokkos::deep_copy(padded, p.latent);
  attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
  const std::vector<double> want = Problem<TypeParam>::host_copy(p.out);
  Problem<TypeParam>::poison(p.out);
  attention(Space(), p.q, padded, p.w_uk, p.w_uv, p.out);
  EXPECT_EQ(Problem<TypeParam>::host_copy(p.out), want);
}

TYPED_TEST(BadInput, PlanRejectsOtherShapes) {
  auto& p = this->p;
  Plan<TypeParam, Space> plan(Space(), Shape{2, 6, 6, 3, 4, 7});
  this->expect_rejected([&] { plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out); },
                        {"KokkosMLA::Plan::execute", "R=5", "R=7"});
}

TYPED_TEST(BadInput, PlanRejectsBadShapes) {
  for (Shape s : {Shape{0, 1, 1, 1, 1, 1}, Shape{1, 1, 1, 1, -3, 1}, Shape{1, 4, 3, 1, 1, 1},
                  Shape{1, 1, 1, 1, 1, std::int64_t(1) << 40}}) {
    EXPECT_THROW((Plan<TypeParam, Space>(Space(), s)), std::invalid_argument) << to_string(s);
  }
  Options opt;
  opt.scale = std::nan("");
  EXPECT_THROW((Plan<TypeParam, Space>(Space(), this->shape, opt)), std::invalid_argument);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA

namespace KokkosMLA {
namespace Test {
namespace {

// The run-time contiguity check, reached directly: Kokkos 3.4 never pads, so
// no view of the right type can be built with gaps there.
TEST(Validation, NonContiguousArgumentIsNamed) {
  Impl::ArgInfo q, latent, w_uk, w_uv, out;
  auto set = [](Impl::ArgInfo& a, const char* name, std::initializer_list<std::int64_t> e) {
    a.name = name;
    a.rank = int(e.size());
    int i = 0;
    for (std::int64_t x : e) a.extent[i++] = x;
  };
  set(q, "q", {1, 2, 3, 4});
  set(out, "out", {1, 2, 3, 4});
  set(latent, "latent", {1, 2, 5});
  set(w_uk, "w_uk", {5, 3, 4});
  set(w_uv, "w_uv", {5, 3, 4});
  EXPECT_NO_THROW(Impl::validate_arguments("check", q, latent, w_uk, w_uv, out));
  w_uv.contiguous = false;
  try {
    Impl::validate_arguments("check", q, latent, w_uk, w_uv, out);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "check: w_uv (5, 3, 4) is not contiguous");
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
