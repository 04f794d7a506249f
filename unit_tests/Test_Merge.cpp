// The log-sum-exp output of every algorithm, and merge_states: results over
// disjoint key sets combine into the result over all keys.

#include "Reference.hpp"
#include "ToolsRecorder.hpp"

#include <functional>
#include <limits>
#include <stdexcept>

namespace KokkosMLA {
namespace Test {
namespace {

template <class T>
class Merge : public ::testing::Test {};
TYPED_TEST_SUITE(Merge, Scalars);

/// close() reports positions as out(b, t, h, d); an lse has d = 0 always.
Shape lse_shape(Shape s) {
  s.head_dim = 1;
  return s;
}

/// Keys [s0, s1) of latent, copied into a view of their own.
template <class T>
View3<T> key_slice(const View3<T>& latent, std::int64_t s0, std::int64_t s1) {
  const auto whole = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), latent);
  View3<T> part("part", latent.extent(0), s1 - s0, latent.extent(2));
  auto h = Kokkos::create_mirror_view(part);
  for (std::size_t b = 0; b < h.extent(0); ++b)
    for (std::size_t s = 0; s < h.extent(1); ++s)
      for (std::size_t r = 0; r < h.extent(2); ++r) h(b, s, r) = whole(b, s0 + s, r);
  Kokkos::deep_copy(part, h);
  return part;
}

template <class T>
View3<T> make_lse(const Shape& s) {
  View3<T> lse("lse", s.batch, s.queries, s.heads);
  Kokkos::deep_copy(lse, T(std::nan("")));
  return lse;
}

TYPED_TEST(Merge, LseMatchesReference) {
  using T = TypeParam;
  struct Case {
    Shape shape;
    bool causal;
    double scale;  // 0: the default
  };
  const Case cases[] = {{{2, 17, 17, 3, 8, 12}, true, 0},     {{1, 5, 40, 2, 16, 33}, true, 0},
                        {{1, 1, 1, 1, 1, 1}, true, 0},        {{2, 9, 23, 3, 5, 7}, false, 0},
                        {{1, 6, 31, 2, 16, 24}, false, 0.37}, {{3, 13, 13, 5, 11, 17}, true, 0}};
  for (const Case& c : cases)
    for (Algorithm a : kAlgorithms) {
      Options opt;
      opt.algorithm = a;
      opt.causal = c.causal;
      if (c.scale > 0) opt.scale = c.scale;
      Problem<T> p(c.shape, 21);
      const View3<T> lse = make_lse<T>(c.shape);
      attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse, opt);
      std::vector<double> want_lse;
      const auto want = reference(p, opt, &want_lse);
      EXPECT_TRUE(close(Problem<T>::host_copy(p.out), want, tolerance<T>(), c.shape)) << to_string(a);
      EXPECT_TRUE(close(Problem<T>::host_copy(lse), want_lse, tolerance<T>(), lse_shape(c.shape)))
          << "lse, " << to_string(a) << (c.causal ? " causal" : " non-causal");
    }
}

TYPED_TEST(Merge, PlanWritesLse) {
  using T = TypeParam;
  const Shape s{2, 7, 19, 3, 8, 12};
  Problem<T> p(s, 4);
  std::vector<double> want_lse;
  const auto want = reference(p, {}, &want_lse);
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    const Plan<T, Space> plan(Space(), s, opt);
    const View3<T> lse = make_lse<T>(s);
    Problem<T>::poison(p.out);
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse);
    EXPECT_TRUE(close(Problem<T>::host_copy(p.out), want, tolerance<T>(), s)) << to_string(a);
    EXPECT_TRUE(close(Problem<T>::host_copy(lse), want_lse, tolerance<T>(), lse_shape(s))) << to_string(a);
    // Without lse, the same plan gives the same out.
    const auto with_lse = Problem<T>::host_copy(p.out);
    Problem<T>::poison(p.out);
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
    EXPECT_EQ(with_lse, Problem<T>::host_copy(p.out)) << to_string(a);
  }
}

/// Attention over keys [0, split) (non-causal) and [split, S) (causal_tail
/// or not), merged, against attention over all keys.
template <class T>
void check_split(const Shape& s, std::int64_t split, bool causal_tail, Algorithm a) {
  Problem<T> p(s, 13);
  const View3<T> lat_a = key_slice(p.latent, 0, split), lat_b = key_slice(p.latent, split, s.keys);
  View4<T> out_a("out_a", s.batch, s.queries, s.heads, s.head_dim);
  View4<T> out_b("out_b", s.batch, s.queries, s.heads, s.head_dim);
  const View3<T> lse_a = make_lse<T>(s), lse_b = make_lse<T>(s), lse = make_lse<T>(s),
                 lse_whole = make_lse<T>(s);
  Options head, tail, whole;
  head.algorithm = tail.algorithm = whole.algorithm = a;
  head.causal = false;
  tail.causal = whole.causal = causal_tail;
  attention(Space(), p.q, lat_a, p.w_uk, p.w_uv, out_a, lse_a, head);
  attention(Space(), p.q, lat_b, p.w_uk, p.w_uv, out_b, lse_b, tail);
  merge_states(Space(), out_a, lse_a, out_b, lse_b, p.out, lse);
  View4<T> out_whole("out_whole", s.batch, s.queries, s.heads, s.head_dim);
  attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, out_whole, lse_whole, whole);
  const auto want = Problem<T>::host_copy(out_whole), want_lse = Problem<T>::host_copy(lse_whole);
  const std::string what = to_string(a) + (causal_tail ? " causal tail" : " non-causal");
  EXPECT_TRUE(close(Problem<T>::host_copy(p.out), want, 2 * tolerance<T>(), s)) << what;
  EXPECT_TRUE(close(Problem<T>::host_copy(lse), want_lse, 2 * tolerance<T>(), lse_shape(s))) << what;
  // And against the double reference, so that a shared mistake cannot hide.
  std::vector<double> ref_lse;
  EXPECT_TRUE(close(Problem<T>::host_copy(p.out), reference(p, whole, &ref_lse), 2 * tolerance<T>(), s))
      << what;
  EXPECT_TRUE(close(Problem<T>::host_copy(lse), ref_lse, 2 * tolerance<T>(), lse_shape(s))) << what;

  // In place: the a pair accumulates b.
  merge_states(Space(), out_a, lse_a, out_b, lse_b, out_a, lse_a);
  EXPECT_EQ(Problem<T>::host_copy(out_a), Problem<T>::host_copy(p.out)) << what << " in place";
  EXPECT_EQ(Problem<T>::host_copy(lse_a), Problem<T>::host_copy(lse)) << what << " in place";
}

TYPED_TEST(Merge, TwoHalvesEqualTheWhole) {
  for (Algorithm a : kAlgorithms) {
    check_split<TypeParam>(Shape{2, 5, 37, 3, 8, 12}, 16, false, a);
    check_split<TypeParam>(Shape{1, 4, 8, 2, 16, 33}, 4, false, a);
  }
}

// Decode: the queries are the last keys; the head of the cache is seen by
// every query, the tail (which holds the queries' positions) causally.
TYPED_TEST(Merge, DecodeSplitEqualsCausal) {
  for (Algorithm a : kAlgorithms) {
    check_split<TypeParam>(Shape{2, 3, 40, 3, 8, 12}, 22, true, a);
    check_split<TypeParam>(Shape{1, 1, 9, 4, 8, 16}, 8, true, a);
    check_split<TypeParam>(Shape{1, 6, 12, 2, 5, 7}, 6, true, a);
  }
}

// Hand-computed rows: the formula, and empty key sets on either side or both.
TYPED_TEST(Merge, FormulaAndEmptySides) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const int rows = 7, dim = 2;
  View4<T> oa("oa", 1, 1, rows, dim), ob("ob", 1, 1, rows, dim), o("o", 1, 1, rows, dim);
  View3<T> la("la", 1, 1, rows), lb("lb", 1, 1, rows), l("l", 1, 1, rows);
  auto hoa = Kokkos::create_mirror_view(oa), hob = Kokkos::create_mirror_view(ob);
  auto hla = Kokkos::create_mirror_view(la), hlb = Kokkos::create_mirror_view(lb);
  // Rows 4-6: sides reported empty (+inf, out 0), one of them holding NaN.
  const T a_out[rows][dim] = {{1, 2}, {nan, nan}, {5, 6}, {nan, 3}, {0, 0}, {0, 0}, {nan, 0}};
  const T b_out[rows][dim] = {{3, -2}, {7, 8}, {nan, inf}, {4, nan}, {7, 8}, {0, 0}, {7, 8}};
  const T a_lse[rows] = {T(0.5), -inf, T(-1.25), -inf, inf, inf, inf};
  const T b_lse[rows] = {T(2), T(3.5), -inf, -inf, T(3.5), inf, T(3.5)};
  for (int i = 0; i < rows; ++i) {
    hla(0, 0, i) = a_lse[i];
    hlb(0, 0, i) = b_lse[i];
    for (int j = 0; j < dim; ++j) hoa(0, 0, i, j) = a_out[i][j], hob(0, 0, i, j) = b_out[i][j];
  }
  Kokkos::deep_copy(oa, hoa);
  Kokkos::deep_copy(ob, hob);
  Kokkos::deep_copy(la, hla);
  Kokkos::deep_copy(lb, hlb);
  merge_states(Space(), oa, la, ob, lb, o, l);
  const auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  const auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), l);
  const double wa = std::exp(0.5 - 2.0), wb = 1.0, tol = tolerance<T>();
  EXPECT_NEAR(ho(0, 0, 0, 0), (wa * 1 + wb * 3) / (wa + wb), tol);
  EXPECT_NEAR(ho(0, 0, 0, 1), (wa * 2 + wb * -2) / (wa + wb), tol);
  EXPECT_NEAR(hl(0, 0, 0), 2.0 + std::log(wa + wb), tol);
  // One side empty: the other side exactly, whatever the empty side's output holds.
  EXPECT_EQ(ho(0, 0, 1, 0), T(7));
  EXPECT_EQ(ho(0, 0, 1, 1), T(8));
  EXPECT_EQ(hl(0, 0, 1), T(3.5));
  EXPECT_EQ(ho(0, 0, 2, 0), T(5));
  EXPECT_EQ(ho(0, 0, 2, 1), T(6));
  EXPECT_EQ(hl(0, 0, 2), T(-1.25));
  // Both empty: no keys at all, reported as out 0 and lse +inf.
  EXPECT_EQ(ho(0, 0, 3, 0), T(0));
  EXPECT_EQ(ho(0, 0, 3, 1), T(0));
  EXPECT_EQ(hl(0, 0, 3), inf);
  // A side reported empty: the other side exactly; both: out 0, lse +inf.
  EXPECT_EQ(ho(0, 0, 4, 0), T(7));
  EXPECT_EQ(ho(0, 0, 4, 1), T(8));
  EXPECT_EQ(hl(0, 0, 4), T(3.5));
  EXPECT_EQ(ho(0, 0, 5, 0), T(0));
  EXPECT_EQ(ho(0, 0, 5, 1), T(0));
  EXPECT_EQ(hl(0, 0, 5), inf);
  // ...but a NaN it holds (from non-finite inputs) is passed on, not dropped.
  EXPECT_TRUE(std::isnan(ho(0, 0, 6, 0)));
  EXPECT_EQ(ho(0, 0, 6, 1), T(8));
}

// merge_states on views of every layout (LayoutLeft copies, slices of wider
// arrays with odd padding, mixed within one call), into fresh outputs and in
// place (out and lse the a pair itself), gives the row-major result bit for
// bit, where the views lie (one kernel, nothing allocated), and leaves the
// slices' padding alone. The a pair's memory under other strides is not the
// a pair itself, and is rejected as an output.
TYPED_TEST(Merge, EveryLayoutEqualsRowMajor) {
  using T = TypeParam;
  const std::int64_t B = 2, Tq = 3, H = 5, D = 7;
  std::mt19937_64 rng(71);
  View4<T> oa("oa", B, Tq, H, D), ob("ob", B, Tq, H, D), o("o", B, Tq, H, D);
  View3<T> la("la", B, Tq, H), lb("lb", B, Tq, H), l("l", B, Tq, H);
  for (const auto& v : {oa, ob}) Problem<T>::fill(v, rng, 1.0);
  for (const auto& v : {la, lb}) Problem<T>::fill(v, rng, 3.0);
  merge_states(Space(), oa, la, ob, lb, o, l);
  const std::vector<double> want = Problem<T>::host_copy(o), want_lse = Problem<T>::host_copy(l);
  for (Layout layout : kLayouts) {
    SCOPED_TRACE(to_string(layout));
    const Layout other = layout == Layout::Left ? Layout::Strided : Layout::Left;
    // Fresh copies of the a pair: LayoutRight hands over the view itself, which the in-place call overwrites.
    View4<T> oa_copy("oa_copy", B, Tq, H, D);
    View3<T> la_copy("la_copy", B, Tq, H);
    Kokkos::deep_copy(oa_copy, oa);
    Kokkos::deep_copy(la_copy, la);
    const auto a = in_layout(oa_copy, layout), b = in_layout(ob, other);
    const auto a_lse = in_layout(la_copy, other), b_lse = in_layout(lb, layout);
    const auto out = in_layout(o, layout);
    const auto lse = in_layout(l, other);
    Kokkos::deep_copy(out, T(std::nan("")));
    Kokkos::deep_copy(lse, T(std::nan("")));
    Recorder r;
    {
      Recording recording(r);
      merge_states(Space(), a, a_lse, b, b_lse, out, lse);
    }
    EXPECT_EQ(r.kernels, std::vector<std::string>{"KokkosMLA::merge_states"});
    EXPECT_TRUE(r.allocations.empty()) << joined(r.allocations);
    EXPECT_EQ(row_values(out), want);
    EXPECT_EQ(row_values(lse), want_lse);
    merge_states(Space(), a, a_lse, b, b_lse, a, a_lse);  // in place
    EXPECT_EQ(row_values(a), want);
    EXPECT_EQ(row_values(a_lse), want_lse);
    if (layout == Layout::Strided || layout == Layout::Aligned) {
      EXPECT_EQ(count_in_reach(a, T(-7)), reach(a) - a.size());
    }
  }
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  const Kokkos::View<T****, Kokkos::LayoutLeft, Space, Unmanaged> oa_left(oa.data(), B, Tq, H, D);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob, lb, oa_left, la); },
                     {"KokkosMLA::merge_states", "out partly overlaps out_a (2, 3, 5, 7)"}, oa);
}

// Views whose strides are those of a contiguous row-major array are read in
// place whatever their layout type (no copy); others are copied.
TEST(Layouts, RowMajorViewsAreReadInPlace) {
  using Strided4 = Kokkos::View<float****, Kokkos::LayoutStride, Space>;
  View4<float> q("q", 4, 3, 2, 5);
  const auto all = Kokkos::ALL;
  const Strided4 leading = Kokkos::subview(q, std::make_pair(1, 3), all, all, all);
  EXPECT_TRUE(Impl::is_row_major(Strided4(q)));
  EXPECT_TRUE(Impl::is_row_major(leading));
  EXPECT_EQ(Impl::row_major(Space(), leading, true).data(), leading.data());
  const Strided4 columns = Kokkos::subview(q, all, all, all, std::make_pair(0, 4));
  EXPECT_FALSE(Impl::is_row_major(columns));
  EXPECT_NE(Impl::row_major(Space(), columns, true).data(), columns.data());
  // LayoutLeft: row-major only where no two extents exceed 1.
  EXPECT_TRUE(Impl::is_row_major(Kokkos::View<float****, Kokkos::LayoutLeft, Space>("a", 1, 1, 1, 5)));
  EXPECT_FALSE(Impl::is_row_major(Kokkos::View<float****, Kokkos::LayoutLeft, Space>("b", 2, 1, 1, 5)));
}

// A slice's memory runs from its first element to its last: an output
// placed right after the last element of an input slice does not overlap it
// (Kokkos' span() of the slice reaches past it), and is accepted.
TEST(Layouts, SlicesOverlapOnlyWhereTheirElementsDo) {
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using Strided4 = Kokkos::View<double****, Kokkos::LayoutStride, Space, Unmanaged>;
  Kokkos::View<double*, Space> buffer("buffer", 200);
  Kokkos::deep_copy(buffer, 0.5);
  // out_a: (1, 1, 2, 3) rows 8 apart; its last element is buffer(10).
  const Strided4 out_a(buffer.data(), Kokkos::LayoutStride(1, 48, 1, 48, 2, 8, 3, 1));
  const View4<double, Unmanaged> out(buffer.data() + 11, 1, 1, 2, 3);
  View4<double> out_b("out_b", 1, 1, 2, 3);
  View3<double> lse_a("lse_a", 1, 1, 2), lse_b("lse_b", 1, 1, 2), lse("lse", 1, 1, 2);
  Kokkos::deep_copy(out_b, 1.5);
  Kokkos::deep_copy(out, std::nan(""));
  EXPECT_NO_THROW(merge_states(Space(), out_a, lse_a, out_b, lse_b, out, lse));
  for (double x : Problem<double>::host_copy(out)) EXPECT_EQ(x, 1.0);   // equal lse: the mean of 0.5 and 1.5
  const View4<double, Unmanaged> into(buffer.data() + 10, 1, 1, 2, 3);  // shares buffer(10)
  EXPECT_THROW(merge_states(Space(), out_a, lse_a, out_b, lse_b, into, lse), std::invalid_argument);
}

TYPED_TEST(Merge, BadLse) {
  using T = TypeParam;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  const Shape s{2, 6, 6, 4, 4, 5};
  Problem<T> p(s, 1);
  View3<T> heads("lse", s.batch, s.queries, s.heads + 1);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, heads); },
                     {"KokkosMLA::attention", "lse.extent(2) = 5 but q.extent(2) = 4"}, p.out);
  View3<T> tokens("lse", s.batch, s.queries + 1, s.heads);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, tokens); },
                     {"lse.extent(1) = 7 but q.extent(1) = 6"}, p.out);
  View3<T> batch("lse", s.batch + 1, s.queries, s.heads);
  const Plan<T, Space> plan(Space(), s);
  expect_rejected<T>([&] { plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, batch); },
                     {"KokkosMLA::Plan::execute", "lse.extent(0) = 3 but q.extent(0) = 2"}, p.out);
  View3<T> empty("lse", s.batch, 0, s.heads);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, empty); },
                     {"lse (2, 0, 4)", "empty extent 1"}, p.out);
  View3<T, Unmanaged> over_q(p.q.data(), s.batch, s.queries, s.heads);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, over_q); },
                     {"lse aliases q (2, 6, 4, 4)"}, p.out);
  View3<T, Unmanaged> over_out(p.out.data() + 3, s.batch, s.queries, s.heads);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, over_out); },
                     {"lse aliases out (2, 6, 4, 4)"}, p.out);
  View3<T, Unmanaged> over_latent(p.latent.data(), s.batch, s.queries, s.heads);
  expect_rejected<T>([&] { attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, over_latent); },
                     {"lse aliases latent"}, p.out);
}

TYPED_TEST(Merge, BadMergeArguments) {
  using T = TypeParam;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  View4<T> oa("oa", 2, 3, 4, 5), ob("ob", 2, 3, 4, 5), o("o", 2, 3, 4, 5);
  View3<T> la("la", 2, 3, 4), lb("lb", 2, 3, 4), l("l", 2, 3, 4);
  const char* caller = "KokkosMLA::merge_states";
  View4<T> ob_dim("ob", 2, 3, 4, 6);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob_dim, lb, o, l); },
                     {caller, "out_b.extent(3) = 6 but out_a.extent(3) = 5"}, o);
  View4<T> o_tokens("o", 2, 4, 4, 5);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob, lb, o_tokens, l); },
                     {"out.extent(1) = 4 but out_a.extent(1) = 3"}, o_tokens);
  View3<T> la_heads("la", 2, 3, 3);
  expect_rejected<T>([&] { merge_states(Space(), oa, la_heads, ob, lb, o, l); },
                     {"lse_a.extent(2) = 3 but out_a.extent(2) = 4"}, o);
  View3<T> lb_batch("lb", 1, 3, 4);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob, lb_batch, o, l); },
                     {"lse_b.extent(0) = 1 but out_a.extent(0) = 2"}, o);
  View3<T> l_tokens("l", 2, 2, 4);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob, lb, o, l_tokens); },
                     {"lse.extent(1) = 2 but out_a.extent(1) = 3"}, o);
  // Writing over an input is allowed only when the output is that input.
  View4<T, Unmanaged> shifted(ob.data() + 1, 2, 3, 4, 4);
  View4<T> oa_small("oa", 2, 3, 4, 4);
  View4<T, Unmanaged> ob_small(ob.data(), 2, 3, 4, 4);
  expect_rejected<T>([&] { merge_states(Space(), oa_small, la, ob_small, lb, shifted, l); },
                     {"out partly overlaps out_b (2, 3, 4, 4)", "may only be that view itself"}, ob);
  View3<T, Unmanaged> l_over_o(o.data(), 2, 3, 4);
  expect_rejected<T>([&] { merge_states(Space(), oa, la, ob, lb, o, l_over_o); }, {"out aliases lse"}, o);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
