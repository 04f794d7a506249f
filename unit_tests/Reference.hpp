#ifndef KOKKOSMLA_TEST_REFERENCE_HPP
#define KOKKOSMLA_TEST_REFERENCE_HPP
// Host double-precision reference and random problems for the unit tests.

#include <KokkosMLA.hpp>

#include "impl/KokkosMLA_Compat.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <algorithm>
#include <vector>

namespace KokkosMLA {
namespace Test {

using Space = Kokkos::DefaultExecutionSpace;

/// The scalar types every typed test runs over.
using Scalars = ::testing::Types<float, double>;

/// Every concrete algorithm (Auto resolves to one of these).
constexpr Algorithm kAlgorithms[] = {Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed};

template <class T, class... Traits>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, Space, Traits...>;
template <class T, class... Traits>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, Space, Traits...>;

/// A problem with random inputs on the device and double copies on the host.
template <class T>
struct Problem {
  Shape shape;
  View4<T> q, out;
  View3<T> latent, w_uk, w_uv;

  Problem(const Shape& s, std::uint64_t seed, double q_scale = 1.0) : shape(s) {
    q = View4<T>("q", s.batch, s.queries, s.heads, s.head_dim);
    out = View4<T>("out", s.batch, s.queries, s.heads, s.head_dim);
    latent = View3<T>("latent", s.batch, s.keys, s.latent_dim);
    w_uk = View3<T>("w_uk", s.latent_dim, s.heads, s.head_dim);
    w_uv = View3<T>("w_uv", s.latent_dim, s.heads, s.head_dim);
    std::mt19937_64 rng(seed);
    const double w = 1.0 / std::sqrt(double(s.latent_dim));
    fill(q, rng, q_scale);
    fill(latent, rng, 1.0);
    fill(w_uk, rng, w);
    fill(w_uv, rng, w);
    poison(out);
  }

  /// Uniform in [-scale, scale): never zeros or ones.
  template <class V>
  static void fill(const V& v, std::mt19937_64& rng, double scale) {
    auto h = Kokkos::create_mirror_view(v);
    std::uniform_real_distribution<double> u(-scale, scale);
    T* p = h.data();
    for (std::size_t i = 0; i < h.span(); ++i) p[i] = T(u(rng));
    Kokkos::deep_copy(v, h);
  }

  /// NaN everywhere, so that an unwritten element fails every comparison.
  template <class V>
  static void poison(const V& v) {
    Kokkos::deep_copy(v, T(std::nan("")));
  }

  template <class V>
  static std::vector<double> host_copy(const V& v) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    return std::vector<double>(h.data(), h.data() + h.span());
  }
};

/// out (B, T, H, D) in double, computed the plain way: decompress K and V, then
/// a two-pass softmax per query. When lse is given, it receives (B, T, H): the
/// log of each softmax denominator, max + log(sum of exp(logit - max)).
/// With `stored`, every value a low-precision implementation keeps in its
/// storage type passes through it: K and V, the unnormalised probabilities
/// exp(logit - max) fed to P V, and out; this models a framework's own error.
template <class T>
std::vector<double> reference(const Problem<T>& p, const Options& opt = {},
                              std::vector<double>* lse = nullptr, double (*stored)(double) = nullptr) {
  auto keep = [stored](double x) { return stored ? stored(x) : x; };
  const Shape& s = p.shape;
  const auto q = Problem<T>::host_copy(p.q), lat = Problem<T>::host_copy(p.latent);
  const auto wk = Problem<T>::host_copy(p.w_uk), wv = Problem<T>::host_copy(p.w_uv);
  const std::int64_t B = s.batch, Tq = s.queries, S = s.keys, H = s.heads, D = s.head_dim, R = s.latent_dim;
  const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> k(B * S * H * D, 0.0), v(B * S * H * D, 0.0);
  for (std::int64_t bs = 0; bs < B * S; ++bs)
    for (std::int64_t r = 0; r < R; ++r) {
      const double l = lat[bs * R + r];
      for (std::int64_t hd = 0; hd < H * D; ++hd) {
        k[bs * H * D + hd] += l * wk[r * H * D + hd];
        v[bs * H * D + hd] += l * wv[r * H * D + hd];
      }
    }
  for (std::size_t i = 0; stored && i < k.size(); ++i) k[i] = stored(k[i]), v[i] = stored(v[i]);
  std::vector<double> out(B * Tq * H * D, 0.0), logits(S);
  if (lse) lse->assign(B * Tq * H, 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < Tq; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t last = opt.causal ? S - Tq + t : S - 1;
        const double* qr = &q[((b * Tq + t) * H + h) * D];
        double mx = -INFINITY;
        for (std::int64_t j = 0; j <= last; ++j) {
          const double* kr = &k[((b * S + j) * H + h) * D];
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
          logits[j] = scale * dot;
          mx = std::max(mx, logits[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= last; ++j) sum += (logits[j] = std::exp(logits[j] - mx));
        if (lse) (*lse)[(b * Tq + t) * H + h] = mx + std::log(sum);
        double* o = &out[((b * Tq + t) * H + h) * D];
        for (std::int64_t j = 0; j <= last; ++j) {
          const double* vr = &v[((b * S + j) * H + h) * D];
          const double weight = keep(logits[j]) / sum;
          for (std::int64_t d = 0; d < D; ++d) o[d] += weight * vr[d];
        }
        for (std::int64_t d = 0; stored && d < D; ++d) o[d] = stored(o[d]);
      }
  return out;
}

/// Device views holding v rounded to T.
template <class T>
View3<T> to_device3(const std::vector<double>& v, std::int64_t a, std::int64_t b, std::int64_t c) {
  View3<T> d("data", a, b, c);
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = T(v[i]);
  Kokkos::deep_copy(d, h);
  return d;
}
template <class T>
View4<T> to_device4(const std::vector<double>& v, std::int64_t a, std::int64_t b, std::int64_t c,
                    std::int64_t e) {
  View4<T> d("data", a, b, c, e);
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = T(v[i]);
  Kokkos::deep_copy(d, h);
  return d;
}

/// How a test hands a view to the library.
enum class Layout { Right, Left, Strided, Aligned };
constexpr Layout kLayouts[] = {Layout::Right, Layout::Left, Layout::Strided, Layout::Aligned};
inline std::string to_string(Layout l) {
  return l == Layout::Right     ? "LayoutRight"
         : l == Layout::Left    ? "LayoutLeft"
         : l == Layout::Strided ? "strided slice"
                                : "aligned slice";
}

/// Elements from v's first to its last, the padding between a slice's rows included.
template <class V>
std::size_t reach(const V& v) {
  std::size_t last = 0;
  for (int d = 0; d < int(V::rank); ++d) last += (v.extent(d) - 1) * v.stride(d);
  return v.size() > 0 ? last + 1 : 0;
}

/// How many of the elements from v's first to its last equal x, read on the host.
template <class V>
std::size_t count_in_reach(const V& v, typename V::non_const_value_type x) {
  using T = typename V::non_const_value_type;
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  std::vector<T> host(reach(v));
  Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(host.data(), host.size()),
                    Kokkos::View<const T*, typename V::memory_space, Unmanaged>(v.data(), host.size()));
  return std::size_t(std::count(host.begin(), host.end(), x));
}

/// A LayoutStride view with v's extents and values: v itself (Right), a
/// LayoutLeft copy (Left), the leading part of a LayoutRight array wider
/// by odd paddings in every dimension (Strided: unit stride in the last
/// dimension only, gaps between rows), or (Aligned) 16-byte aligned rows
/// of a wider array: of a rank-4 view, columns from 16 bytes on of an array
/// wider in heads and columns (as q and q_rope are slices of DeepSeek's
/// (B, T, H, 192) query projection; the kernels read such queries where they
/// lie), of a rank-3 view its leading columns (as the latent is of DeepSeek's
/// packed (B, S, 576) KV projection; the row-reading paths read it in place).
template <class V>
Kokkos::View<typename V::data_type, Kokkos::LayoutStride, typename V::memory_space> in_layout(const V& v,
                                                                                              Layout layout) {
  using Data = typename V::non_const_data_type;
  using Memory = typename V::memory_space;
  using Strided = Kokkos::View<typename V::data_type, Kokkos::LayoutStride, Memory>;
  static_assert(int(V::rank) == 3 || int(V::rank) == 4, "rank 3 or 4");
  const std::size_t e0 = v.extent(0), e1 = v.extent(1), e2 = v.extent(2), e3 = v.extent(3);
  auto leading = [](std::size_t n) { return std::make_pair(std::size_t(0), n); };
  if (layout == Layout::Right) return Strided(v);
  if (layout == Layout::Left) {
    Kokkos::View<Data, Kokkos::LayoutLeft, Memory> left;
    if constexpr (int(V::rank) == 3)
      left = decltype(left)("left", e0, e1, e2);
    else
      left = decltype(left)("left", e0, e1, e2, e3);
    Kokkos::deep_copy(left, v);
    return Strided(left);
  }
  Kokkos::View<Data, Kokkos::LayoutRight, Memory> wide;
  Kokkos::View<Data, Kokkos::LayoutStride, Memory> part;
  constexpr std::size_t unit = std::max<std::size_t>(1, 16 / sizeof(typename V::value_type));
  if constexpr (int(V::rank) == 3) {
    if (layout == Layout::Aligned)
      wide = decltype(wide)("wide", e0, e1, ((e2 + unit - 1) / unit + 1) * unit);  // at least a unit after
    else
      wide = decltype(wide)("wide", e0 + 1, e1 + 2, e2 + 3);
    part = Kokkos::subview(wide, leading(e0), leading(e1), leading(e2));
  } else if (layout == Layout::Aligned) {
    const std::size_t columns = ((e3 + unit - 1) / unit + 2) * unit;  // a unit before, at least one after
    wide = decltype(wide)("wide", e0, e1, e2 + 3, columns);
    part = Kokkos::subview(wide, leading(e0), leading(e1), leading(e2), std::make_pair(unit, unit + e3));
  } else {
    wide = decltype(wide)("wide", e0 + 1, e1 + 2, e2 + 3, e3 + 5);
    part = Kokkos::subview(wide, leading(e0), leading(e1), leading(e2), leading(e3));
  }
  Kokkos::deep_copy(wide, typename V::non_const_value_type(-7));  // the gaps
  Kokkos::deep_copy(part, v);
  return Strided(part);
}

/// w_uk and w_uv (R, H, D) as the two halves of one (R, H, 2 D') array, D'
/// the least multiple of 16 bytes of at least D values: each head's w_uk
/// values, then its w_uv, as DeepSeek's kv_b_proj weight holds them (there D'
/// = D = 128). Unit stride within a head, 16-byte aligned heads and rows.
template <class V>
std::array<Kokkos::View<typename V::const_data_type, Kokkos::LayoutStride, typename V::memory_space>, 2>
weight_halves(const V& w_uk, const V& w_uv) {
  const std::size_t R = w_uk.extent(0), H = w_uk.extent(1), D = w_uk.extent(2);
  constexpr std::size_t unit = std::max<std::size_t>(1, 16 / sizeof(typename V::value_type));
  const std::size_t half = (D + unit - 1) / unit * unit;
  Kokkos::View<typename V::non_const_data_type, Kokkos::LayoutRight, typename V::memory_space> both(
      "both", R, H, 2 * half);
  Kokkos::deep_copy(both, typename V::non_const_value_type(-7));
  const auto all = Kokkos::ALL;
  const auto first = Kokkos::subview(both, all, all, std::make_pair(std::size_t(0), D));
  const auto second = Kokkos::subview(both, all, all, std::make_pair(half, half + D));
  Kokkos::deep_copy(first, w_uk);
  Kokkos::deep_copy(second, w_uv);
  return {first, second};
}

/// The values of a view of any layout, in row-major order.
template <class V>
std::vector<double> row_values(const V& v) {
  Kokkos::View<typename V::non_const_data_type, Kokkos::LayoutRight, typename V::memory_space> rows;
  if constexpr (int(V::rank) == 3)
    rows = decltype(rows)("rows", v.extent(0), v.extent(1), v.extent(2));
  else
    rows = decltype(rows)("rows", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  Kokkos::deep_copy(rows, v);
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), rows);
  return std::vector<double>(h.data(), h.data() + h.span());
}

template <class T>
constexpr double tolerance() {
  return sizeof(T) == 4 ? 2e-5 : 1e-13;
}

/// True where both sides are finite. A NaN or an infinity on either side
/// counts as an infinite error, even against an equal infinity: no output or
/// reference compared here should hold one, and a NaN on the reference side
/// (e.g. another run's output used as the reference) must not pass unseen.
inline bool both_finite(double got, double want) { return std::isfinite(got) && std::isfinite(want); }

/// Asserts |got - want| <= tol * max(1, max |want|) everywhere; prints the worst
/// element, or the first that is NaN or infinite on either side (an infinite
/// error). Vectors of different sizes fail.
inline ::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want,
                                        double tol, const Shape& s) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " elements, reference "
                                         << want.size() << " for " << to_string(s);
  double peak = 1;
  for (double w : want)
    if (std::isfinite(w)) peak = std::max(peak, std::abs(w));
  std::size_t worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = both_finite(got[i], want[i]) ? std::abs(got[i] - want[i]) : INFINITY;
    if (e > worst_err) worst_err = e, worst = i;
  }
  if (worst_err <= tol * peak) return ::testing::AssertionSuccess();
  const std::int64_t D = s.head_dim, H = s.heads, T = s.queries;
  std::int64_t i = std::int64_t(worst);
  const std::int64_t d = i % D, h = (i / D) % H, t = (i / (D * H)) % T, b = i / (D * H * T);
  std::ostringstream o;
  o.precision(10);
  o << "worst element [" << worst << "] out(" << b << ", " << t << ", " << h << ", " << d
    << ") = " << got[worst] << ", reference " << want[worst] << ", error " << worst_err << " > " << tol
    << " * " << peak << " for " << to_string(s);
  return ::testing::AssertionFailure() << o.str();
}

/// The largest |got - want|. A size mismatch, or a NaN or infinity on either
/// side, records a test failure (naming the sizes, or the first such element)
/// and returns infinity: the calling test fails even where it compares the
/// result against a bound that is itself computed by max_error.
inline double max_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << "max_error: size mismatch: got " << got.size() << " elements, reference " << want.size();
    return INFINITY;
  }
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!both_finite(got[i], want[i])) {
      ADD_FAILURE() << "max_error: element [" << i << "] = " << got[i] << ", reference " << want[i];
      return INFINITY;
    }
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  return worst;
}

/// The largest |x| of v.
inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// x rounded to T, as a framework computing in T would store it.
template <class T>
double stored_as(double x) {
  return static_cast<double>(T(x));
}

#if KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF
/// The 16-bit types this build has.
using HalfTypes = ::testing::Types<
#if KOKKOSMLA_HAS_HALF
    Kokkos::Experimental::half_t
#endif
#if KOKKOSMLA_HAS_HALF && KOKKOSMLA_HAS_BHALF
    ,
#endif
#if KOKKOSMLA_HAS_BHALF
    Kokkos::Experimental::bhalf_t
#endif
    >;
#endif

/// What expect_rejected writes first: -7.25, or 0x5a for bytes.
template <class T>
T sentinel() {
  if constexpr (std::is_integral<T>::value)
    return T(0x5a);
  else
    return T(-7.25);
}

/// Runs call, expects std::invalid_argument holding every piece of expected,
/// and checks that untouched still holds the sentinel (written first).
template <class T, class V>
void expect_rejected(const std::function<void()>& call, std::initializer_list<std::string> expected,
                     const V& untouched) {
  Kokkos::deep_copy(untouched, sentinel<T>());
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const std::string& piece : expected)
      EXPECT_NE(what.find(piece), std::string::npos) << "'" << piece << "' not in: " << what;
  }
  for (double x : Problem<T>::host_copy(untouched))
    ASSERT_EQ(x, double(sentinel<T>())) << "output was written";
}

/// Runs a and b (each a callable taking an execution-space instance) on the
/// default instance, reads their outputs, clears them, then runs both three
/// times at once on two instances (CUDA streams, OpenMP partitions): the
/// outputs must be the same bits. read_a / read_b return an output as host
/// values; clear overwrites both outputs (with NaN) between the two runs.
template <class RunA, class RunB, class ReadA, class ReadB, class Clear>
void expect_concurrent_equals_sequential(RunA run_a, RunB run_b, ReadA read_a, ReadB read_b, Clear clear) {
  run_a(Space());
  run_b(Space());
  Kokkos::fence();
  const std::vector<double> want_a = read_a(), want_b = read_b();
  clear();
  Kokkos::fence();
  const auto inst = Impl::two_instances(Space());
  for (int round = 0; round < 3; ++round) {
    run_a(inst[0]);
    run_b(inst[1]);
  }
  inst[0].fence();
  inst[1].fence();
  EXPECT_EQ(read_a(), want_a);
  EXPECT_EQ(read_b(), want_b);
}

/// An unsigned number from the environment variable `name`, or `fallback`
/// where it is not set (the randomised tests' seed and case count).
inline std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

/// How many cases ran on any path of `ran` (expect_runs_or_refuses' counts): a
/// test whose forced paths all refused has checked nothing and must say so
/// (GTEST_SKIP), not pass.
inline int cases_that_ran(const std::map<Path, int>& ran) {
  int n = 0;
  for (const auto& path_and_count : ran) n += path_and_count.second;
  return n;
}

/// For a case run on a forced path: check() plans with Options::path = path
/// and returns the path that ran, which is counted in ran[path]; a path that
/// does not take the case must refuse it with std::invalid_argument naming itself.
template <class Check>
void expect_runs_or_refuses(Path path, std::map<Path, int>& ran, Check&& check) {
  try {
    EXPECT_EQ(check(), path);
    ++ran[path];
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(to_string(path)), std::string::npos) << e.what();
  }
}

/// A plan (Plan, CachePlan) built on Space() from args, or null where this
/// backend has none: a forced path it lacks, or that does not take the
/// problem, refuses with std::invalid_argument.
template <class P, class... Args>
std::unique_ptr<P> plan_or_null(const Args&... args) {
  try {
    return std::make_unique<P>(Space(), args...);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

/// A plan of s under opt, or null where this backend has none.
template <class T>
std::unique_ptr<Plan<T, Space>> plan_if_taken(const Shape& s, const Options& opt) {
  return plan_or_null<Plan<T, Space>>(s, opt);
}

/// Calls run(plan) with a plan of s for every prefill path this backend
/// has; returns how many.
template <class T, class Run>
int for_each_prefill_path(const Shape& s, Run run) {
  int paths = 0;
  for (Path path : {Path::Fused, Path::FusedRow, Path::Absorbed, Path::DecompressedHost,
                    Path::DecompressedGemm, Path::DecompressedBlocked, Path::DecompressedPortable}) {
    SCOPED_TRACE(to_string(path));
    Options opt;
    opt.path = path;
    const std::unique_ptr<Plan<T, Space>> plan = plan_if_taken<T>(s, opt);
    if (!plan) continue;  // not a path of this backend
    ++paths;
    run(*plan);
  }
  return paths;
}

}  // namespace Test
}  // namespace KokkosMLA

#endif
