// Every algorithm against the double reference on many shapes, both scalar types.

#include "Reference.hpp"
#include "ToolsRecorder.hpp"

#include "impl/KokkosMLA_Tiling.hpp"

#include <cmath>
#include <map>
#include <memory>

namespace KokkosMLA {
namespace Test {
namespace {

enum class Scalar { Float, Double };

struct Case {
  Shape shape;
  Algorithm algorithm;
  Scalar scalar;
};

// (B, T, S, H, D, R): the original example, sizes of 1, primes, sizes just off
// tile multiples, S > T (queries at the end of the keys), R * D beyond level-0
// scratch, many heads, large B * T * H.
const Shape kShapes[] = {
    {2, 32, 32, 4, 16, 24},  {1, 1, 1, 1, 1, 1},     {1, 1, 1, 3, 8, 8},       {1, 1, 17, 4, 8, 8},
    {2, 5, 9, 2, 4, 3},      {1, 8, 8, 2, 1, 8},     {1, 8, 8, 2, 8, 1},       {1, 37, 37, 3, 7, 29},
    {3, 13, 13, 5, 11, 17},  {1, 64, 64, 2, 16, 32}, {1, 65, 65, 2, 16, 32},   {1, 63, 63, 2, 16, 32},
    {2, 100, 100, 3, 8, 12}, {1, 129, 129, 1, 4, 4}, {1, 16, 16, 3, 64, 257},  {1, 20, 20, 2, 130, 70},
    {1, 9, 9, 2, 40, 520},   {4, 33, 33, 16, 8, 16}, {1, 31, 31, 33, 4, 8},    {2, 1, 1, 7, 5, 3},
    {1, 3, 200, 2, 8, 16},   {1, 200, 200, 1, 2, 2}, {5, 7, 7, 3, 3, 5},       {1, 47, 47, 4, 32, 64},
    {2, 24, 24, 6, 24, 48},  {1, 2, 2, 2, 2, 2},     {1, 11, 11, 1, 97, 13},   {1, 5, 5, 2, 3, 300},
    {3, 19, 23, 4, 6, 10},   {1, 256, 256, 2, 8, 8}, {1, 12, 12, 2, 16, 1031}, {16, 64, 64, 32, 4, 4},
    {1, 300, 307, 2, 8, 8},  // host teams of several row groups, then a partial one
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << to_string(c.algorithm) << (c.scalar == Scalar::Float ? " float " : " double ") << to_string(c.shape);
}

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Shape& s = info.param.shape;
  std::ostringstream o;
  o << to_string(info.param.algorithm) << (info.param.scalar == Scalar::Float ? "_float" : "_double") << "_B"
    << s.batch << "T" << s.queries << "S" << s.keys << "H" << s.heads << "D" << s.head_dim << "R"
    << s.latent_dim;
  return o.str();
}

template <class T>
void check_against_reference(const Shape& s, const Options& opt, std::uint64_t seed) {
  Problem<T> p(s, seed);
  attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
  Kokkos::fence();
  EXPECT_TRUE(close(Problem<T>::host_copy(p.out), reference(p, opt), tolerance<T>(), s))
      << "algorithm " << to_string(choose_algorithm<T>(Space(), s, opt));
}

class AttentionShapes : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionShapes, MatchesReference) {
  const Case& c = GetParam();
  Options opt;
  opt.algorithm = c.algorithm;
  if (c.scalar == Scalar::Float)
    check_against_reference<float>(c.shape, opt, 42);
  else
    check_against_reference<double>(c.shape, opt, 42);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const Shape& s : kShapes)
    for (Algorithm a : {Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed, Algorithm::Auto})
      for (Scalar t : {Scalar::Float, Scalar::Double}) cases.push_back({s, a, t});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionShapes, ::testing::ValuesIn(all_cases()), name_of);

template <class T>
class AttentionTyped : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionTyped, Scalars);

TYPED_TEST(AttentionTyped, NonCausalAndCustomScale) {
  for (Algorithm a : kAlgorithms)
    for (const Shape& s : {Shape{2, 17, 17, 3, 8, 12}, Shape{1, 5, 40, 2, 16, 33}}) {
      Options opt;
      opt.algorithm = a;
      opt.causal = false;
      opt.scale = 0.37;
      check_against_reference<TypeParam>(s, opt, 7);
    }
}

// Logits of magnitude ~1e4 overflow a naive exp; the online softmax must not.
TYPED_TEST(AttentionTyped, HugeLogitsStayFinite) {
  const Shape s{2, 29, 29, 3, 8, 16};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    opt.scale = 3e3;
    Problem<TypeParam> p(s, 11, 4.0);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    const auto got = Problem<TypeParam>::host_copy(p.out);
    std::vector<double> lse;
    const auto want = reference(p, opt, &lse);
    // The rows' lse (about their largest logit) confirm the regime the test claims.
    EXPECT_GT(max_abs(lse), 1e4);
    for (double x : got) ASSERT_TRUE(std::isfinite(x)) << to_string(a);
    // Near one-hot softmax: float rounding of the logits moves weights by ~1e-3.
    EXPECT_TRUE(close(got, want, sizeof(TypeParam) == 4 ? 2e-2 : 1e-9, s)) << to_string(a);
  }
}

// Changing latents at positions after t leaves out[..., t, ...] bit-identical.
TYPED_TEST(AttentionTyped, CausalityIsExact) {
  const Shape s{2, 40, 45, 3, 8, 12};
  const std::int64_t cut = 20;  // queries t <= cut see keys <= 5 + cut
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<TypeParam> p(s, 5);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    const auto before = Problem<TypeParam>::host_copy(p.out);
    auto lat = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.latent);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t j = s.keys - s.queries + cut + 1; j < s.keys; ++j)
        for (std::int64_t r = 0; r < s.latent_dim; ++r) lat(b, j, r) = TypeParam(100 + j + r);
    Kokkos::deep_copy(p.latent, lat);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    const auto after = Problem<TypeParam>::host_copy(p.out);
    const std::int64_t row = s.heads * s.head_dim;
    std::int64_t changed_later = 0;
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 0; t < s.queries; ++t)
        for (std::int64_t e = 0; e < row; ++e) {
          const std::size_t i = std::size_t((b * s.queries + t) * row + e);
          if (t <= cut)
            ASSERT_EQ(before[i], after[i]) << to_string(a) << " b=" << b << " t=" << t;
          else
            changed_later += before[i] != after[i];
        }
    EXPECT_GT(changed_later, 0) << "the edit must reach the later queries";
  }
}

// Shapes for every blocked flash tile a GPU plan may take (Large's 64 x 64 at
// T >= 32 and D <= 128 on the large team scratch, Narrow, Wide), with query
// and key counts past whole tiles, on the blocked kernel (forced) against the
// reference. Hosts have no blocked kernel (their flash kernel runs in the
// other Decompressed tests), so the test is skipped there.
TYPED_TEST(AttentionTyped, DecompressedOnEveryBlockedTileMatchesReference) {
  int ran = 0;
  for (const Shape& s : {Shape{1, 97, 131, 3, 128, 40}, Shape{2, 64, 64, 2, 72, 16},
                         Shape{1, 33, 70, 2, 5, 8}, Shape{1, 130, 130, 1, 64, 24}})
    for (bool causal : {true, false}) {
      Options opt;
      opt.path = Path::DecompressedBlocked;
      opt.causal = causal;
      if (!plan_if_taken<TypeParam>(s, opt)) continue;  // not a path of this backend
      ++ran;
      check_against_reference<TypeParam>(s, opt, 19);
    }
  if (ran == 0) GTEST_SKIP() << "no blocked flash kernel on this backend";
}

// Every Decompressed path that takes a shape, forced through Options::path,
// matches the reference on every shape, causal or not: hosts run their
// vector-unit kernel, attention by GEMMs and the portable one alike, GPUs the
// GEMMs, the blocked and the portable one.
TYPED_TEST(AttentionTyped, EveryDecompressedPathMatchesReference) {
  std::map<Path, int> ran;
  for (const Shape& s : kShapes)
    for (Path path : {Path::DecompressedHost, Path::DecompressedGemm, Path::DecompressedBlocked,
                      Path::DecompressedPortable})
      for (bool causal : {true, false}) {
        SCOPED_TRACE(to_string(path) + " causal=" + std::to_string(causal));
        Options opt;
        opt.path = path;
        opt.causal = causal;
        if (!plan_if_taken<TypeParam>(s, opt)) continue;  // the path does not take the shape here
        ++ran[path];
        check_against_reference<TypeParam>(s, opt, 23);
      }
  const int every = int(2 * (sizeof(kShapes) / sizeof(kShapes[0])));
  EXPECT_EQ(ran[Path::DecompressedPortable], every);
  EXPECT_EQ(ran[Path::DecompressedGemm], every);
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible) {
    EXPECT_EQ(ran[Path::DecompressedHost], every);
  }
}

/// Runs plan (of s, made with opt) on random inputs from seed with lse
/// asked for (NaN before), and checks out and lse against the reference.
template <class T>
void check_out_and_lse(const Plan<T, Space>& plan, const Shape& s, const Options& opt, std::uint64_t seed) {
  Problem<T> p(s, seed);
  View3<T> lse("lse", s.batch, s.queries, s.heads);
  Kokkos::deep_copy(lse, T(std::nan("")));
  plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse);
  std::vector<double> want_lse;
  const auto want = reference(p, opt, &want_lse);
  EXPECT_TRUE(close(Problem<T>::host_copy(p.out), want, tolerance<T>(), s)) << plan.describe();
  Shape lse_shape = s;
  lse_shape.head_dim = 1;
  EXPECT_TRUE(close(Problem<T>::host_copy(lse), want_lse, tolerance<T>(), lse_shape)) << plan.describe();
}

// Attention by GEMMs in several query blocks per batch element (on GPUs
// 16384 / (B H) rows, each block over both batch elements: 128 at 64 heads,
// 81 at 200, 1024 at 16; on hosts 128), the last one partial, keys past the
// queries, causal or not, a negative scale: out and lse against the
// reference. Causal blocks of 1,024 rows (GPUs) and of 128 (hosts) compute
// their scores in steps of rows (512 and 32), the others in one.
TYPED_TEST(AttentionTyped, AttentionByGemmsOverManyBlocksMatchesReference) {
  using T = TypeParam;
  const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible;
  for (const Shape& s :
       {Shape{2, 300, 345, 64, 8, 16}, Shape{1, 170, 170, 200, 4, 4}, Shape{1, 1100, 1100, 16, 8, 8}})
    for (bool causal : {true, false}) {
      Options opt;
      opt.path = Path::DecompressedGemm;
      opt.causal = causal;
      if (!causal) opt.scale = -0.3;
      const Plan<T, Space> plan(Space(), s, opt);
      const std::string described = plan.describe();
      const std::size_t at = described.find("query_block=");
      ASSERT_NE(at, std::string::npos) << described;
      const std::int64_t block = std::stoll(described.substr(at + 12));
      EXPECT_TRUE(block < s.queries && s.queries % block != 0) << described;
      // GPUs take every batch element into one block (a grouped GEMM), hosts one at a time.
      const std::size_t batches_at = described.find("batches_per_block=");
      ASSERT_NE(batches_at, std::string::npos) << described;
      EXPECT_EQ(std::stoll(described.substr(batches_at + 18)), host ? 1 : s.batch) << described;
      const std::size_t step_at = described.find("score_step=");
      ASSERT_NE(step_at, std::string::npos) << described;
      const std::int64_t step = std::stoll(described.substr(step_at + 11));
      EXPECT_EQ(step, !causal ? block : host ? 32 : block >= 1024 ? 512 : block) << described;
      check_out_and_lse(plan, s, opt, 29);
    }
}

// The one-row Fused kernel, named through Options::path, on every shape of
// at most 64 keys (one key, primes, the original example, keys past the
// queries, R past a warp's width), causal or not, with a negative scale: out
// and lse against the reference, with the rows' operands staged in scratch
// (the original example) and read in place (R * D past the staging budget).
// A longer sequence is refused by name; Auto takes the path for the original
// example on GPUs and never on hosts.
TYPED_TEST(AttentionTyped, FusedRowMatchesReferenceOnShortSequences) {
  using T = TypeParam;
  int ran = 0, expected = 0, staged = 0;
  for (const Shape& s : kShapes) {
    if (s.keys > 64) continue;
    for (bool causal : {true, false}) {
      ++expected;
      Options opt;
      opt.path = Path::FusedRow;
      opt.causal = causal;
      if (!causal) opt.scale = -0.3;
      const Plan<T, Space> plan(Space(), s, opt);
      ASSERT_EQ(plan.path(), Path::FusedRow);
      const bool stages = plan.describe().find("operands staged in scratch") != std::string::npos;
      if (s.batch == 2 && s.queries == 32 && s.latent_dim == 24) {
        EXPECT_TRUE(stages) << plan.describe();
      }
      if (s.head_dim * s.latent_dim > 8192) {
        EXPECT_FALSE(stages) << plan.describe();
      }
      staged += stages;
      check_out_and_lse(plan, s, opt, 31);
      ++ran;
    }
  }
  EXPECT_EQ(ran, expected);
  EXPECT_GE(ran, 50);
  EXPECT_GT(staged, 20);
  EXPECT_LT(staged, ran);
  Options named;
  named.path = Path::FusedRow;
  EXPECT_THROW((Plan<T, Space>(Space(), Shape{1, 3, 65, 2, 8, 16}, named)), std::invalid_argument);
  const Path chosen = Plan<T, Space>(Space(), Shape{2, 32, 32, 4, 16, 24}, Options{}).path();
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space::memory_space>::accessible) {
    EXPECT_NE(chosen, Path::FusedRow);
  } else if (std::is_same<T, float>::value) {
    EXPECT_EQ(chosen, Path::FusedRow);
  }
}

TYPED_TEST(AttentionTyped, AlgorithmsAgree) {
  const Shape s{2, 50, 50, 5, 12, 20};
  Problem<TypeParam> p(s, 3);
  std::vector<std::vector<double>> outs;
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<TypeParam>::poison(p.out);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    outs.push_back(Problem<TypeParam>::host_copy(p.out));
  }
  EXPECT_TRUE(close(outs[1], outs[0], 2 * tolerance<TypeParam>(), s));
  EXPECT_TRUE(close(outs[2], outs[0], 2 * tolerance<TypeParam>(), s));
}

// Views of every layout: LayoutLeft copies (a GPU's default layout), slices
// of wider arrays with unit stride in the last dimension (DeepSeek's q and
// latent arrive as such slices), a LayoutLeft out and a strided lse give the
// row-major result bit for bit, for every algorithm, through attention() and
// Plan::execute; so does q as 16-byte aligned columns of a wider array, which
// the kernels read where it lies.
TYPED_TEST(AttentionTyped, EveryLayoutEqualsRowMajor) {
  using T = TypeParam;
  using C = compute_type<T>;
  using Left4 = Kokkos::View<T****, Kokkos::LayoutLeft, Space>;
  using Left3 = Kokkos::View<T***, Kokkos::LayoutLeft, Space>;
  const Shape s{2, 21, 29, 3, 8, 12};
  Problem<T> p(s, 17);
  const auto all = Kokkos::ALL;
  Left4 q_left("q_left", s.batch, s.queries, s.heads, s.head_dim),
      out_left("out_left", s.batch, s.queries, s.heads, s.head_dim);
  Left3 w_uk_left("w_uk_left", s.latent_dim, s.heads, s.head_dim);
  Kokkos::deep_copy(q_left, p.q);
  Kokkos::deep_copy(w_uk_left, p.w_uk);
  View4<T> q_wide("q_wide", s.batch, s.queries, s.heads, s.head_dim + 5);
  View3<T> latent_wide("latent_wide", s.batch, s.keys, s.latent_dim + 3);
  const auto q_slice = Kokkos::subview(q_wide, all, all, all, std::make_pair(std::int64_t(0), s.head_dim));
  const auto latent_slice =
      Kokkos::subview(latent_wide, all, all, std::make_pair(std::int64_t(0), s.latent_dim));
  Kokkos::deep_copy(q_slice, p.q);
  Kokkos::deep_copy(latent_slice, p.latent);
  Kokkos::View<C***, Kokkos::LayoutRight, Space> lse("lse", s.batch, s.queries, s.heads),
      lse_wide("lse_wide", s.batch, s.queries, s.heads + 2);
  const auto lse_slice = Kokkos::subview(lse_wide, all, all, std::make_pair(std::int64_t(0), s.heads));
  View4<T> got("got", s.batch, s.queries, s.heads, s.head_dim);
  Kokkos::View<C***, Kokkos::LayoutRight, Space> got_lse("got_lse", s.batch, s.queries, s.heads);
  for (Algorithm a : {Algorithm::Auto, Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed}) {
    SCOPED_TRACE(to_string(a));
    Options opt;
    opt.algorithm = a;
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse, opt);
    const std::vector<double> want = Problem<T>::host_copy(p.out), want_lse = Problem<T>::host_copy(lse);
    const auto q_aligned = in_layout(p.q, Layout::Aligned);
    ASSERT_TRUE(Impl::reads_in_place(q_aligned));
    Problem<T>::poison(p.out);
    attention(Space(), q_aligned, p.latent, p.w_uk, p.w_uv, p.out, lse, opt);
    EXPECT_EQ(Problem<T>::host_copy(p.out), want);
    EXPECT_EQ(Problem<T>::host_copy(lse), want_lse);
    Kokkos::deep_copy(out_left, T(std::nan("")));
    attention(Space(), q_slice, latent_slice, w_uk_left, p.w_uv, out_left, lse_slice, opt);
    Kokkos::deep_copy(got, out_left);
    Kokkos::deep_copy(got_lse, lse_slice);
    EXPECT_EQ(Problem<T>::host_copy(got), want);
    EXPECT_EQ(Problem<T>::host_copy(got_lse), want_lse);
    Kokkos::deep_copy(out_left, T(std::nan("")));
    Plan<T, Space>(Space(), s, opt).execute(Space(), q_left, latent_slice, p.w_uk, w_uk_left, out_left);
    Kokkos::deep_copy(got, out_left);
    // w_uv given as w_uk: a different but equally valid problem; compare with it row-major.
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uk, p.out, opt);
    EXPECT_EQ(Problem<T>::host_copy(got), Problem<T>::host_copy(p.out));
  }
}

/// Calls check(opt, want) for each algorithm, want being out of attention()
/// with that algorithm on p's contiguous inputs.
template <class T, class Check>
void for_each_algorithm(Problem<T>& p, Check check) {
  for (Algorithm a : {Algorithm::Auto, Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed}) {
    SCOPED_TRACE(to_string(a));
    Options opt;
    opt.algorithm = a;
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    check(opt, Problem<T>::host_copy(p.out));
  }
}

/// Copy buffers ("KokkosMLA::layout_copies") one execution of plan on q and
/// latent allocates; its result must be want.
template <class T, class Q, class L>
std::size_t copies_in_execute(const Plan<T, Space>& plan, Problem<T>& p, const Q& q, const L& latent,
                              const std::vector<double>& want) {
  Problem<T>::poison(p.out);
  Recorder r;
  {
    Recording recording(r);
    plan.execute(Space(), q, latent, p.w_uk, p.w_uv, p.out);
    Space().fence();
  }
  EXPECT_EQ(Problem<T>::host_copy(p.out), want);
  return allocations_named(r, "KokkosMLA::layout_copies");
}

// q as 16-byte aligned columns of a wider array (DeepSeek's q beside q_rope
// in one (B, T, H, 192) projection) is read where it lies: executing a Plan
// allocates nothing for it, whatever the algorithm. A LayoutLeft q, or a
// slice of every other query token (rows not evenly spaced across
// sequences), is copied into a buffer the plan allocates once and keeps.
TYPED_TEST(AttentionTyped, AlignedQuerySlicesAreNotCopied) {
  using T = TypeParam;
  const Shape s{2, 9, 11, 3, 8, 12};
  Problem<T> p(s, 23);
  View4<T> every_other("every_other", s.batch, 2 * s.queries, s.heads, s.head_dim);
  const auto odd_tokens = Kokkos::subview(every_other, Kokkos::ALL, Kokkos::pair<int, int>(0, int(s.queries)),
                                          Kokkos::ALL, Kokkos::ALL);
  Kokkos::deep_copy(odd_tokens, p.q);
  const auto aligned = in_layout(p.q, Layout::Aligned), left = in_layout(p.q, Layout::Left);
  EXPECT_FALSE(Impl::reads_in_place(left));
  EXPECT_FALSE(Impl::reads_in_place(odd_tokens));
  EXPECT_FALSE(Impl::reads_in_place(in_layout(p.q, Layout::Strided)));  // rows of 13 elements: unaligned
  for_each_algorithm(p, [&](const Options& opt, const std::vector<double>& want) {
    auto allocations = [&](const Plan<T, Space>& plan, const auto& q) {
      return copies_in_execute(plan, p, q, p.latent, want);
    };
    EXPECT_EQ(allocations(Plan<T, Space>(Space(), s, opt), aligned), 0u);
    EXPECT_EQ(allocations(Plan<T, Space>(Space(), s, opt), odd_tokens), 1u);
    const Plan<T, Space> plan(Space(), s, opt);
    EXPECT_EQ(allocations(plan, left), 1u);
    EXPECT_EQ(allocations(plan, left), 0u) << "the plan keeps its copy buffer";
  });
}

// The latent as the first R columns of a packed (B, S, R + Dr) array
// (DeepSeek's KV projection holds the latent beside the RoPE keys), its rows
// 16-byte aligned: every path takes it where it lies, allocating nothing for
// it (the Decompressed GEMMs get its row stride as BLAS's leading dimension),
// and the result is the contiguous latent's, bit for bit. A LayoutLeft
// latent, or one whose rows are not 16-byte aligned, is copied into a buffer
// the plan makes once and keeps.
TYPED_TEST(AttentionTyped, PackedLatentSlicesAreReadInPlace) {
  using T = TypeParam;
  const Shape s{2, 9, 11, 3, 8, 12};
  Problem<T> p(s, 29);
  const std::int64_t rope = 64 / std::int64_t(sizeof(T));  // 64 bytes of RoPE keys a row: rows stay aligned
  View3<T> packed("packed", s.batch, s.keys, s.latent_dim + rope);
  Kokkos::deep_copy(packed, T(-7));
  const auto latent =
      Kokkos::subview(packed, Kokkos::ALL, Kokkos::ALL, std::make_pair(std::int64_t(0), s.latent_dim));
  Kokkos::deep_copy(latent, p.latent);
  const auto left = in_layout(p.latent, Layout::Left), unaligned = in_layout(p.latent, Layout::Strided);
  EXPECT_TRUE(Impl::reads_latent_in_place(latent));
  EXPECT_FALSE(Impl::reads_latent_in_place(left));
  EXPECT_FALSE(Impl::reads_latent_in_place(unaligned));  // rows of 15 elements
  // Rows that overlap (16 bytes apart, fewer than R elements) are no BLAS matrix.
  const std::int64_t narrow = 16 / std::int64_t(sizeof(T));
  const Kokkos::View<const T***, Kokkos::LayoutStride, Space> overlapping(
      packed.data(), Kokkos::LayoutStride(s.batch, s.keys * narrow, s.keys, narrow, s.latent_dim, 1));
  EXPECT_FALSE(Impl::reads_latent_in_place(overlapping));
  for_each_algorithm(p, [&](const Options& opt, const std::vector<double>& want) {
    auto allocations = [&](const Plan<T, Space>& plan, const auto& lat) {
      return copies_in_execute(plan, p, p.q, lat, want);
    };
    const Plan<T, Space> plan(Space(), s, opt);
    EXPECT_EQ(allocations(plan, latent), 0u) << to_string(plan.path());
    EXPECT_EQ(allocations(Plan<T, Space>(Space(), s, opt), left), 1u);
    EXPECT_EQ(allocations(Plan<T, Space>(Space(), s, opt), unaligned), 1u);
  });
}

// out as 16-byte aligned columns of a wider array (a slice of an
// application's larger buffer) is written where it lies by every prefill path
// this backend has: nothing allocated for it, the contiguous out's bits, and
// the gaps between its rows untouched. A LayoutLeft out goes through a buffer
// the plan makes once and keeps.
TYPED_TEST(AttentionTyped, AlignedOutputSlicesAreWrittenInPlace) {
  using T = TypeParam;
  const Shape s{2, 9, 11, 3, 8, 12};
  Problem<T> p(s, 31);
  const auto slice = in_layout(p.out, Layout::Aligned), left = in_layout(p.out, Layout::Left);
  EXPECT_TRUE(Impl::reads_rows_in_place(slice));
  EXPECT_FALSE(Impl::reads_rows_in_place(left));
  const std::size_t gaps = count_in_reach(slice, T(-7));
  const int paths = for_each_prefill_path<T>(s, [&](const Plan<T, Space>& plan) {
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
    const std::vector<double> want = Problem<T>::host_copy(p.out);
    auto copies_writing_into = [&](const auto& out) {
      Problem<T>::poison(out);
      Recorder r;
      {
        Recording recording(r);
        plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, out);
        Space().fence();
      }
      EXPECT_EQ(row_values(out), want);
      return allocations_named(r, "KokkosMLA::layout_copies");
    };
    EXPECT_EQ(copies_writing_into(slice), 0u);
    EXPECT_EQ(count_in_reach(slice, T(-7)), gaps) << "a gap was written";
    EXPECT_EQ(copies_writing_into(left), 1u);
    EXPECT_EQ(copies_writing_into(left), 0u) << "the plan keeps its copy buffer";
  });
  EXPECT_GE(paths, 4);
}

// lse of every layout (LayoutLeft, a slice of a wider array with odd padding
// in every dimension, aligned leading columns) is written where it lies by
// every prefill path this backend has: nothing allocated, the contiguous
// lse's bits, the gaps untouched.
TYPED_TEST(AttentionTyped, LseOfEveryLayoutIsWrittenWhereItLies) {
  using T = TypeParam;
  using C = compute_type<T>;
  const Shape s{2, 9, 11, 3, 8, 12};
  Problem<T> p(s, 37);
  Kokkos::View<C***, Kokkos::LayoutRight, Space> lse("lse", s.batch, s.queries, s.heads);
  const int paths = for_each_prefill_path<T>(s, [&](const Plan<T, Space>& plan) {
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse);
    const std::vector<double> want = Problem<T>::host_copy(p.out), want_lse = Problem<T>::host_copy(lse);
    for (Layout layout : {Layout::Left, Layout::Strided, Layout::Aligned}) {
      SCOPED_TRACE(to_string(layout));
      const auto lse_in_layout = in_layout(lse, layout);
      const std::size_t gaps = count_in_reach(lse_in_layout, C(-7));
      Kokkos::deep_copy(lse_in_layout, C(std::nan("")));
      Problem<T>::poison(p.out);
      Recorder r;
      {
        Recording recording(r);
        plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, lse_in_layout);
        Space().fence();
      }
      EXPECT_EQ(row_values(lse_in_layout), want_lse);
      EXPECT_EQ(Problem<T>::host_copy(p.out), want);
      EXPECT_EQ(count_in_reach(lse_in_layout, C(-7)), gaps) << "a gap was written";
      EXPECT_EQ(allocations_named(r, "KokkosMLA::layout_copies"), 0u);
    }
  });
  EXPECT_GE(paths, 4);
}

// w_uk and w_uv as the two halves of one (R, H, 2 D) array (DeepSeek's
// kv_b_proj weight, split per head) are read where they lie by every prefill
// path this backend has: nothing allocated, the contiguous weights' result
// (to rounding: the Decompressed paths then multiply head by head). LayoutLeft
// weights go through buffers the plan makes once and keeps.
TYPED_TEST(AttentionTyped, WeightSlicesAreReadInPlace) {
  using T = TypeParam;
  const Shape s{2, 9, 11, 3, 8, 12};
  Problem<T> p(s, 41);
  // Named references, not structured bindings: a lambda below reads them, which
  // C++17 allows only for variables (Clang, under hipcc, refuses bindings).
  const auto halves = weight_halves(p.w_uk, p.w_uv);
  const auto &w_uk = halves[0], &w_uv = halves[1];
  const auto left_uk = in_layout(p.w_uk, Layout::Left), left_uv = in_layout(p.w_uv, Layout::Left);
  EXPECT_TRUE(Impl::reads_weights_in_place(w_uk) && Impl::reads_weights_in_place(w_uv));
  EXPECT_FALSE(Impl::reads_weights_in_place(left_uk));
  const int paths = for_each_prefill_path<T>(s, [&](const Plan<T, Space>& plan) {
    plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
    const std::vector<double> want = Problem<T>::host_copy(p.out);
    auto copies_reading = [&](const auto& uk, const auto& uv) {
      Problem<T>::poison(p.out);
      Recorder r;
      {
        Recording recording(r);
        plan.execute(Space(), p.q, p.latent, uk, uv, p.out);
        Space().fence();
      }
      EXPECT_LE(max_error(Problem<T>::host_copy(p.out), want), tolerance<T>());
      return allocations_named(r, "KokkosMLA::layout_copies");
    };
    EXPECT_EQ(copies_reading(w_uk, w_uv), 0u);
    EXPECT_EQ(copies_reading(left_uk, left_uv), 2u);
    EXPECT_EQ(copies_reading(left_uk, left_uv), 0u) << "the plan keeps its copy buffers";
  });
  EXPECT_GE(paths, 4);
}

// Weights of one latent row and one head in LayoutLeft are row-major (one
// extent above 1) and read in place, with a row stride of 1: less than the
// row's width, which BLAS refuses for any matrix (it printed an error and left
// K unwritten, found by the long fuzz run). Every prefill path, against the
// reference, with latents of one row too (one key).
TYPED_TEST(AttentionTyped, WeightsOfOneRowAndHeadInLayoutLeftMatchReference) {
  using T = TypeParam;
  for (const Shape& s : {Shape{3, 2, 2, 1, 130, 1}, Shape{1, 1, 1, 1, 33, 1}, Shape{2, 4, 6, 1, 8, 1}}) {
    SCOPED_TRACE(to_string(s));
    Problem<T> p(s, 47);
    const auto left_uk = in_layout(p.w_uk, Layout::Left), left_uv = in_layout(p.w_uv, Layout::Left);
    EXPECT_TRUE(Impl::reads_weights_in_place(left_uk));
    const std::vector<double> want = reference(p);
    const int paths = for_each_prefill_path<T>(s, [&](const Plan<T, Space>& plan) {
      Problem<T>::poison(p.out);
      plan.execute(Space(), p.q, p.latent, left_uk, left_uv, p.out);
      EXPECT_TRUE(close(Problem<T>::host_copy(p.out), want, tolerance<T>(), s)) << plan.describe();
    });
    EXPECT_GE(paths, 4);
  }
}

TYPED_TEST(AttentionTyped, RepeatedRunsAreBitwiseEqual) {
  const Shape s{2, 33, 33, 4, 8, 24};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<TypeParam> p(s, 9);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    const auto first = Problem<TypeParam>::host_copy(p.out);
    Problem<TypeParam>::poison(p.out);
    attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
    EXPECT_EQ(first, Problem<TypeParam>::host_copy(p.out)) << to_string(a);
  }
}

// The blocked flash kernel with the thread layouts that GPU teams use (several
// threads per query row, several row groups, threads past the grid), which
// host plans never pick: teams of one thread are all they launch. Runs the
// team sizes the host backend allows (OpenMP with two or more threads).
template <int MR, int NR, int G, int U>
void check_blocked_layout(const Impl::FlashGrid& grid, int launch_threads, const Shape& s, bool causal) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  using Kernel = Impl::FlashBlockedKernel<Host, double, MR, NR, G, U>;
  const int B = int(s.batch), T = int(s.queries), S = int(s.keys), H = int(s.heads), D = int(s.head_dim);
  if (!Kernel::covers(grid, D)) return;
  std::mt19937 rng(std::uint32_t(B + 10 * T + 100 * S + 1000 * D));
  std::uniform_real_distribution<double> uniform(-2, 2);
  std::vector<double> q(std::size_t(B) * T * H * D), k(std::size_t(B) * S * H * D), v(k.size());
  std::vector<double> out(q.size(), 0), lse(std::size_t(B) * T * H, 0);
  for (double& x : q) x = uniform(rng);
  for (double& x : k) x = uniform(rng);
  for (double& x : v) x = uniform(rng);
  const double scale = 0.3;
  Kernel f{Impl::packed_rows<const double>(q.data(), H, D),
           k.data(),
           v.data(),
           Impl::packed_rows(out.data(), H, D),
           Impl::lse_rows(Kokkos::View<double***, Kokkos::HostSpace>(lse.data(), B, T, H)),
           B,
           T,
           S,
           H,
           D,
           grid,
           scale,
           causal,
           0};
  Kokkos::TeamPolicy<Host> policy(f.league_size(), launch_threads);
  policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes(grid, D)));
  Kokkos::parallel_for(policy, f);
  Kokkos::fence();
  auto at = [&](int b, int t, int h, int n) { return ((std::size_t(b) * n + t) * H + h) * D; };
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const int last = causal ? S - T + t : S - 1;
        std::vector<double> p(last + 1);
        double max = -INFINITY, sum = 0;
        for (int j = 0; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[at(b, t, h, T) + d] * k[at(b, j, h, S) + d];
          max = std::max(max, p[j] = dot * scale);
        }
        for (double& x : p) sum += x = std::exp(x - max);
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j <= last; ++j) o += p[j] * v[at(b, j, h, S) + d];
          ASSERT_NEAR(o / sum, out[at(b, t, h, T) + d], 1e-12) << "b=" << b << " t=" << t << " h=" << h;
        }
        ASSERT_NEAR(max + std::log(sum), lse[(std::size_t(b) * T + t) * H + h], 1e-12);
      }
}

TEST(FlashBlocked, TeamLayoutsMatchReference) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  Kokkos::TeamPolicy<Host> probe(1, 1);
  const int most =
      probe.team_size_max(Impl::FlashBlockedKernel<Host, double, 2, 4, 4, 2>{}, Kokkos::ParallelForTag());
  // (team threads the layout uses, threads per row, threads launched)
  const int layouts[][3] = {{1, 1, 1}, {1, 1, 2}, {2, 2, 2}, {2, 1, 2}, {4, 2, 4}};
  const Shape shapes[] = {
      {1, 1, 1, 1, 1, 1}, {2, 5, 9, 2, 4, 1}, {1, 37, 37, 3, 7, 1}, {1, 33, 40, 2, 16, 1}};
  int layouts_run = 0;
  for (const auto& l : layouts) {
    if (l[2] > most) continue;
    ++layouts_run;
    const Impl::FlashGrid grid{l[0], l[1]};
    for (const Shape& s : shapes)
      for (bool causal : {true, false}) {
        check_blocked_layout<2, 4, 4, 2>(grid, l[2], s, causal);
        check_blocked_layout<4, 4, 2, 3>(grid, l[2], s, causal);
        check_blocked_layout<4, 4, 2, 8>(grid, l[2], s, causal);  // the Large variant's
        check_blocked_layout<1, 8, 8, 1>(grid, l[2], s, causal);
      }
  }
  if (layouts_run < 2)
    GTEST_SKIP() << "teams of at most " << most << " thread(s) here: only the one-thread layout was checked";
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
