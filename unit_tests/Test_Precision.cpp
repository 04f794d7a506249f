// 16-bit storage types (half_t, bhalf_t) where this Kokkos has them: the
// tensor-core path on CUDA and the widened (float) path on every space; and
// the opt-in TF32 path of float plans.
// Accuracy is judged as FlashAttention's tests judge it: the error against the
// float64 reference may be at most twice the error of computing the same
// attention the way a framework does in that type (K, V, the probabilities and
// out rounded to it, everything else exact).

#include "Reference.hpp"

#include "impl/KokkosMLA_Compat.hpp"
#include "impl/KokkosMLA_FlashTensorKernel.hpp"
#include "impl/KokkosMLA_Launch.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace KokkosMLA {
namespace Test {
namespace {

struct Result {
  std::vector<double> out, lse;
  std::string plan;  ///< describe()
  Path path;
};

/// Runs a Plan<T, ExecSpace> on copies of p's inputs in ExecSpace's memory.
template <class ExecSpace, class T>
Result run_plan(const Problem<T>& p, const Options& opt) {
  using Mem = typename ExecSpace::memory_space;
  const Shape& s = p.shape;
  auto q = Kokkos::create_mirror_view_and_copy(Mem(), p.q);
  auto latent = Kokkos::create_mirror_view_and_copy(Mem(), p.latent);
  auto w_uk = Kokkos::create_mirror_view_and_copy(Mem(), p.w_uk);
  auto w_uv = Kokkos::create_mirror_view_and_copy(Mem(), p.w_uv);
  auto out = Kokkos::create_mirror_view(Mem(), p.out);
  Problem<T>::poison(out);  // unwritten elements fail; p.out may be out itself
  Kokkos::View<float***, Kokkos::LayoutRight, Mem> lse("lse", s.batch, s.queries, s.heads);
  Problem<float>::poison(lse);
  const Plan<T, ExecSpace> plan(ExecSpace(), s, opt);
  plan.execute(ExecSpace(), q, latent, w_uk, w_uv, out, lse);
  Result r{Problem<T>::host_copy(out), Problem<T>::host_copy(lse), plan.describe(), plan.path()};
  // The same bits from q as 16-byte aligned columns of a wider array, read where it lies.
  const auto q_slice = in_layout(q, Layout::Aligned);
  EXPECT_TRUE(Impl::reads_in_place(q_slice));
  Problem<T>::poison(out);
  plan.execute(ExecSpace(), q_slice, latent, w_uk, w_uv, out, lse);
  EXPECT_EQ(Problem<T>::host_copy(out), r.out) << "q sliced: " << r.plan;
  // And from the latent as the leading columns of a packed array with 16-byte aligned rows.
  const auto latent_slice = in_layout(latent, Layout::Aligned);
  EXPECT_TRUE(Impl::reads_latent_in_place(latent_slice));
  Problem<T>::poison(out);
  plan.execute(ExecSpace(), q, latent_slice, w_uk, w_uv, out, lse);
  EXPECT_EQ(Problem<T>::host_copy(out), r.out) << "latent sliced: " << r.plan;
  // And into out as 16-byte aligned columns of a wider array, written where it lies, its gaps untouched.
  const auto out_slice = in_layout(out, Layout::Aligned);
  EXPECT_TRUE(Impl::reads_rows_in_place(out_slice));
  const std::size_t gaps = count_in_reach(out_slice, T(-7));
  Problem<T>::poison(out_slice);
  plan.execute(ExecSpace(), q, latent, w_uk, w_uv, out_slice, lse);
  EXPECT_EQ(row_values(out_slice), r.out) << "out sliced: " << r.plan;
  EXPECT_EQ(count_in_reach(out_slice, T(-7)), gaps) << "out sliced: " << r.plan;
  // And into a LayoutLeft lse, written where it lies.
  const auto lse_left = in_layout(lse, Layout::Left);
  Problem<float>::poison(lse_left);
  plan.execute(ExecSpace(), q, latent, w_uk, w_uv, out, lse_left);
  EXPECT_EQ(row_values(lse_left), r.lse) << "lse LayoutLeft: " << r.plan;
  // And from w_uk and w_uv as the halves of one (R, H, 2 D) array, read where
  // they lie (the decompression then multiplies head by head: to rounding).
  const auto [uk_half, uv_half] = weight_halves(w_uk, w_uv);
  EXPECT_TRUE(Impl::reads_weights_in_place(uk_half) && Impl::reads_weights_in_place(uv_half));
  Problem<T>::poison(out);
  plan.execute(ExecSpace(), q, latent, uk_half, uv_half, out, lse);
  EXPECT_LE(max_error(Problem<T>::host_copy(out), r.out), 0.02 * max_abs(r.out))
      << "weights sliced: " << r.plan;
  return r;
}

#if KOKKOSMLA_ENABLE_SM80
// TF32 keeps 10 mantissa bits of every product's operands (u = 2^-11 where
// rounded, 2u where truncated); across the two GEMMs and two attention
// products the error of out stays within 8u of its largest magnitude on these
// problems (docs/performance.md).
TEST(Tf32, TensorCorePathWithinBound) {
  const double bound = 8 * std::ldexp(1.0, -11);
  std::uint64_t seed = 51;
  for (const Shape& s : {Shape{1, 1, 1, 1, 64, 16}, Shape{2, 37, 53, 3, 64, 40},
                         Shape{1, 130, 130, 2, 128, 64}, Shape{2, 65, 200, 2, 128, 32}}) {
    const Problem<float> p(s, ++seed);
    Options tf32;
    tf32.allow_tf32 = true;
    const Result r = run_plan<Space>(p, tf32);
    EXPECT_NE(r.plan.find("tf32"), std::string::npos) << r.plan;
    EXPECT_TRUE(r.path == Path::FlashSm90 || r.path == Path::FlashTensorSm80) << r.plan;
    EXPECT_TRUE(close(r.out, reference(p), bound, s)) << r.plan;
  }
}

// Each TF32 prefill path this build and GPU run, forced, within the same
// bound, causal or not, on shapes where the Hopper kernel's 128-row teams
// and 64-key tiles are full, end part-way, or span many tiles, key counts
// that are not multiples of 8 or 32 (V^T's padding), and one token; lse
// within TF32's error of the exact fp32 plan's. A path that does not take a
// case refuses it naming itself.
TEST(Tf32, EveryTensorPathWithinBound) {
  const double bound = 8 * std::ldexp(1.0, -11);
  const Shape shapes[] = {{1, 1, 1, 1, 128, 16},     {2, 37, 53, 3, 64, 40},    {1, 256, 256, 1, 64, 8},
                          {1, 300, 300, 2, 128, 64}, {2, 129, 131, 3, 64, 32},  {1, 61, 1031, 1, 128, 24},
                          {1, 130, 133, 2, 128, 512}};
  std::map<Path, int> ran;
  std::uint64_t seed = 900;
  for (const Shape& s : shapes)
    for (Path path : {Path::FlashSm90, Path::FlashTensorSm80})
      for (bool causal : {true, false}) {
        const Problem<float> p(s, ++seed);
        Options tf32;
        tf32.allow_tf32 = true;
        tf32.causal = causal;
        tf32.path = path;
        Options exact = tf32;
        exact.allow_tf32 = false;
        exact.path.reset();
        SCOPED_TRACE(to_string(s) + " path=" + to_string(path) + " causal=" + std::to_string(causal));
        expect_runs_or_refuses(path, ran, [&] {
          const Result r = run_plan<Space>(p, tf32), fp32 = run_plan<Space>(p, exact);
          EXPECT_NE(r.plan.find("products=tf32"), std::string::npos) << r.plan;
          EXPECT_TRUE(close(r.out, reference(p, exact), bound, s)) << r.plan;
          EXPECT_LE(max_error(r.lse, fp32.lse), 1e-2) << r.plan;
          return r.path;
        });
      }
  EXPECT_GT(ran[Path::FlashTensorSm80], 0);
  std::cout << "[ tf32 paths ] FlashSm90 ran " << ran[Path::FlashSm90] << " cases, FlashTensorSm80 "
            << ran[Path::FlashTensorSm80] << "\n";
}

// 3xTF32 (emulate_fp32) keeps about 21 bits of every product's operands, so
// its error against float64 is at most twice that of the exact fp32 kernels
// on the same inputs, and it is far inside TF32's: on these shapes TF32's
// error is about 100 times fp32's.
TEST(Fp32Emulation, TensorCorePathAsAccurateAsFp32) {
  std::uint64_t seed = 71;
  for (const Shape& s :
       {Shape{1, 1, 1, 1, 64, 16}, Shape{2, 37, 53, 3, 64, 40}, Shape{1, 130, 130, 2, 128, 64},
        Shape{2, 65, 200, 2, 128, 32}, Shape{1, 257, 257, 1, 128, 512}}) {
    const Problem<float> p(s, ++seed);
    Options emulated, tf32;
    emulated.emulate_fp32 = true;
    emulated.allow_tf32 = true;  // emulate_fp32 takes precedence
    tf32.allow_tf32 = true;
    const std::vector<double> exact = reference(p);
    const Result r = run_plan<Space>(p, emulated), fp32 = run_plan<Space>(p, {}),
                 tf32_result = run_plan<Space>(p, tf32);
    EXPECT_NE(r.plan.find("products=3xtf32"), std::string::npos) << r.plan;
    EXPECT_EQ(r.path, Path::FlashTensorSm80) << r.plan;
    EXPECT_NE(fp32.path, Path::FlashTensorSm80) << fp32.plan;
    const double fp32_error = max_error(fp32.out, exact), error = max_error(r.out, exact);
    EXPECT_LE(error, 2 * fp32_error + 1e-9) << to_string(s) << ": fp32 error " << fp32_error;
    EXPECT_LT(error, max_error(tf32_result.out, exact) / 8) << to_string(s) << ": against TF32";
    EXPECT_LE(max_error(r.lse, fp32.lse), 1e-5) << to_string(s);
  }
}
#endif

// Where TF32 and its emulation of fp32 do not apply (hosts, head dimensions
// without a tensor-core kernel) the options change nothing, bit for bit.
TEST(Tf32, IgnoredOffTheTensorCorePath) {
  const Shape shapes[] = {{1, 5, 9, 2, 24, 16}
#if !KOKKOSMLA_ENABLE_SM80
                          ,
                          {2, 37, 53, 3, 64, 40}
#endif
  };
  for (const Shape& s : shapes) {
    const Problem<float> p(s, 7);
    Options tf32;
    tf32.allow_tf32 = true;
    tf32.emulate_fp32 = true;
    const Result with = run_plan<Space>(p, tf32), without = run_plan<Space>(p, {});
    EXPECT_EQ(with.plan.find("tf32"), std::string::npos) << with.plan;
    EXPECT_NE(with.path, Path::FlashTensorSm80) << with.plan;
    EXPECT_EQ(with.out, without.out);
    EXPECT_EQ(with.lse, without.lse);
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA

#if KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF
namespace KokkosMLA {
namespace Test {
namespace {

/// Checks out and lse of a Plan<T, ExecSpace> against the float64 reference,
/// each within twice the modelled framework error.
/// Returns the path that ran.
template <class ExecSpace, class T>
Path expect_accurate(const Shape& s, const Options& opt, std::uint64_t seed) {
  const Problem<T> p(s, seed);
  std::vector<double> exact_lse, framework_lse;
  const std::vector<double> exact = reference(p, opt, &exact_lse);
  const std::vector<double> framework = reference(p, opt, &framework_lse, &stored_as<T>);
  const Result r = run_plan<ExecSpace>(p, opt);
  const double bound = 2 * max_error(framework, exact) + 1e-7;
  const double lse_bound = 2 * max_error(framework_lse, exact_lse) + 1e-6;
  EXPECT_LE(max_error(r.out, exact), bound) << to_string(s) << " causal=" << opt.causal << ": " << r.plan;
  EXPECT_LE(max_error(r.lse, exact_lse), lse_bound) << to_string(s) << ": " << r.plan;
  return r.path;
}

// Tensor-core shapes (head_dim 64, 128) with query and key counts that are not
// multiples of the 64-row tiles, one token, more keys than queries; and shapes
// that only the widened path takes.
const Shape kShapes[] = {
    {1, 1, 1, 1, 64, 16},       // one token
    {2, 37, 53, 3, 64, 40},     // tails in queries and keys, S > T
    {1, 130, 130, 2, 128, 64},  // three query tiles
    {2, 65, 200, 2, 128, 32},   // decode-like offset
    {1, 5, 9, 2, 24, 16},       // head_dim without a tensor-core kernel
};

template <class T>
struct HalfPrecision : ::testing::Test {};
TYPED_TEST_SUITE(HalfPrecision, HalfTypes);

TYPED_TEST(HalfPrecision, DeviceWithinTwiceFrameworkError) {
  std::uint64_t seed = 11;
  for (const Shape& s : kShapes)
    for (bool causal : {true, false}) {
      Options opt;
      opt.causal = causal;
      expect_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(s, opt, ++seed);
    }
}

/// The 16-bit tensor-core prefill paths.
[[maybe_unused]] bool is_tensor_path(Path p) { return p == Path::FlashTensorSm80 || p == Path::FlashSm90; }

// Each 16-bit tensor-core prefill path this build and GPU run, forced, on
// the tensor-core shapes and on shapes where the Hopper kernel's 128-row
// teams and 128-key tiles are full, end part-way, or span a long key range:
// within twice the framework's error, causal or not. A path that does not
// take a case refuses it naming itself.
TYPED_TEST(HalfPrecision, EveryTensorPathWithinTwiceFrameworkError) {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({1, 256, 256, 1, 64, 8});    // two full teams, two full key tiles
  shapes.push_back({1, 300, 300, 2, 128, 64});  // three teams, the last one 44 rows
  shapes.push_back({2, 129, 131, 3, 64, 32});   // one row past a team, keys past a tile
  shapes.push_back({1, 61, 1031, 1, 128, 24});  // a short team over nine key tiles
  shapes.push_back({1, 1, 1, 1, 128, 16});      // one token at D = 128
  std::map<Path, int> ran;
  std::uint64_t seed = 400;
  for (const Shape& s : shapes)
    for (Path path : {Path::FlashSm90, Path::FlashTensorSm80})
      for (bool causal : {true, false}) {
        Options opt;
        opt.path = path;
        opt.causal = causal;
        SCOPED_TRACE(to_string(s) + " path=" + to_string(path) + " causal=" + std::to_string(causal));
        expect_runs_or_refuses(path, ran, [&] {
          return expect_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(s, opt, ++seed);
        });
      }
  // A negative softmax scale, and a scale of 0 (every visible key alike) with causal masks.
  for (double scale : {-0.08, 0.0})
    for (Path path : {Path::FlashSm90, Path::FlashTensorSm80}) {
      Options opt;
      opt.path = path;
      opt.scale = scale;
      const Shape s{1, 200, 260, 2, 128, 32};
      SCOPED_TRACE(to_string(s) + " path=" + to_string(path) + " scale=" + std::to_string(scale));
      expect_runs_or_refuses(path, ran, [&] {
        return expect_accurate<Kokkos::DefaultExecutionSpace, TypeParam>(s, opt, ++seed);
      });
    }
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_GT(ran[Path::FlashTensorSm80], 0);
#endif
  std::cout << "[ tensor paths ] FlashSm90 ran " << ran[Path::FlashSm90] << " cases, FlashTensorSm80 "
            << ran[Path::FlashTensorSm80] << "\n";
  if (cases_that_ran(ran) == 0) GTEST_SKIP() << "no 16-bit tensor-core path in this build or on this GPU";
}

TYPED_TEST(HalfPrecision, HostWithinTwiceFrameworkError) {
  std::uint64_t seed = 31;
  for (const Shape& s : kShapes) expect_accurate<Kokkos::DefaultHostExecutionSpace, TypeParam>(s, {}, ++seed);
}

TYPED_TEST(HalfPrecision, EveryAlgorithmWithinTwiceFrameworkError) {
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    expect_accurate<Kokkos::DefaultExecutionSpace, TypeParam>({2, 9, 17, 3, 64, 24}, opt, 5);
  }
}

TYPED_TEST(HalfPrecision, PathFollowsBackendAndShape) {
  const Shape tensor_shape{1, 8, 8, 2, 64, 16}, other_shape{1, 8, 8, 2, 48, 16};
  const Plan<TypeParam, Kokkos::DefaultHostExecutionSpace> on_host(Kokkos::DefaultHostExecutionSpace(),
                                                                   tensor_shape);
  EXPECT_EQ(on_host.path(), Path::Widened) << on_host.describe();
  const Plan<TypeParam> device(Kokkos::DefaultExecutionSpace(), tensor_shape);
  const Plan<TypeParam> other(Kokkos::DefaultExecutionSpace(), other_shape);
  EXPECT_EQ(other.path(), Path::Widened) << other.describe();
  EXPECT_NE(other.describe().find("widened to float"), std::string::npos) << other.describe();
#if KOKKOSMLA_ENABLE_SM80
  EXPECT_TRUE(is_tensor_path(device.path())) << device.describe();
  EXPECT_EQ(device.algorithm(), Algorithm::Decompressed);
#else
  EXPECT_EQ(device.path(), Path::Widened) << device.describe();
#endif
}

#if KOKKOSMLA_ENABLE_SM80
// The order in which teams take (batch, head) pairs and query tiles changes
// no result: groups of 4 pairs out of 6 (the last one partial) equal one pair
// per group, bit for bit.
TYPED_TEST(HalfPrecision, TensorKernelGroupingChangesNothing) {
  using T = TypeParam;
  const Shape s{2, 70, 90, 3, 64, 8};
  const Problem<T> p(s, 9);
  View4<T> k("k", s.batch, s.keys, s.heads, s.head_dim), v("v", s.batch, s.keys, s.heads, s.head_dim);
  std::mt19937_64 rng(4);
  Problem<T>::fill(k, rng, 1.0);
  Problem<T>::fill(v, rng, 1.0);
  std::vector<double> results[2];
  for (int grouped = 0; grouped < 2; ++grouped) {
    using Kernel = Impl::FlashTensorKernel<T, 64>;
    Kernel f{Impl::packed_rows<const T>(p.q.data(), s.heads, s.head_dim),
             k.data(),
             v.data(),
             Impl::packed_rows(p.out.data(), s.heads, s.head_dim),
             {},
             s.batch,
             s.queries,
             s.keys,
             s.heads,
             0.125f,
             true};
    f.head_group = grouped ? 4 : 1;
    Impl::launch(Space(), "KokkosMLA::test::flash_tensor", f, Kernel::kThreads, Kernel::scratch_bytes(), true,
                 typename Kernel::bounds());
    results[grouped] = Problem<T>::host_copy(p.out);
  }
  for (std::size_t i = 0; i < results[0].size(); ++i)
    ASSERT_EQ(results[0][i], results[1][i]) << "element " << i;
}

// Two tensor-core plans on two streams at once (their GEMMs share one cuBLAS
// handle, held while each call is issued) give what they give one after the
// other, bit for bit.
TYPED_TEST(HalfPrecision, ConcurrentTensorPlansOnTwoStreamsMatchSequential) {
  using T = TypeParam;
  const Shape sa{2, 96, 96, 4, 64, 48}, sb{1, 130, 130, 3, 128, 32};
  Problem<T> pa(sa, 31), pb(sb, 32);
  const Plan<T> plan_a(Space(), sa), plan_b(Space(), sb);
  ASSERT_TRUE(is_tensor_path(plan_a.path())) << plan_a.describe();
  ASSERT_TRUE(is_tensor_path(plan_b.path())) << plan_b.describe();
  expect_concurrent_equals_sequential(
      [&](const Space& e) { plan_a.execute(e, pa.q, pa.latent, pa.w_uk, pa.w_uv, pa.out); },
      [&](const Space& e) { plan_b.execute(e, pb.q, pb.latent, pb.w_uk, pb.w_uv, pb.out); },
      [&] { return Problem<T>::host_copy(pa.out); }, [&] { return Problem<T>::host_copy(pb.out); },
      [&] {
        Problem<T>::poison(pa.out);
        Problem<T>::poison(pb.out);
      });
}

// The tensor-core kernel reads q and writes out in element pairs: a view that
// starts one element off is refused before anything runs.
TYPED_TEST(HalfPrecision, MisalignedViewsAreRejected) {
  using T = TypeParam;
  const Shape s{1, 4, 4, 1, 64, 16};
  const Problem<T> p(s, 3);
  Kokkos::View<T*, Space> spare("spare", s.queries * s.head_dim + 1);
  View4<T, Kokkos::MemoryUnmanaged> shifted(spare.data() + 1, 1, s.queries, 1, s.head_dim);
  const Plan<T> plan(Space(), s);
  expect_rejected<T>([&] { plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, shifted); },
                     {"out", "4-byte aligned"}, shifted);
  Kokkos::deep_copy(shifted, p.q);
  expect_rejected<T>([&] { plan.execute(Space(), shifted, p.latent, p.w_uk, p.w_uv, p.out); },
                     {"q", "4-byte aligned"}, p.out);
}
#endif

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
#endif
