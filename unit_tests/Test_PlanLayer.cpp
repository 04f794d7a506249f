// The plan layer: which path a plan takes, the one scratch budget, and the
// tiles it gives on both kinds of Kokkos (the classic 48 KB team scratch and
// the large opt-in one).

#include "Reference.hpp"

#include "cuda/KokkosMLA_DecodeSm90.hpp"
#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"
#include "cuda/KokkosMLA_FlashSm90.hpp"
#include "cuda/KokkosMLA_Sm90a.hpp"
#include "impl/KokkosMLA_Launch.hpp"
#include "impl/KokkosMLA_Splits.hpp"
#include "impl/KokkosMLA_Tiling.hpp"

#include <climits>
#include <cstring>

namespace KokkosMLA {
namespace Test {
namespace {

using Impl::Backend;
using Impl::ScratchDemand;

/// A GPU as Kokkos describes it: an H200's 228 KiB per multiprocessor, and a
/// team limit of the classic 40936 bytes or of the opt-in's 224232.
Backend gpu(std::size_t scratch_max0) {
  Backend b;
  b.host = false;
  b.concurrency = 132 * 2048;
  b.scratch_max[0] = scratch_max0;
  b.scratch_max[1] = std::size_t(20) << 20;
  b.sm_shared = 233472;
  b.team_size = 128;
  return b;
}
const Backend classic = gpu(Impl::kClassicTeamScratch), large = gpu(224232);

TEST(ScratchBudget, ClassicKernelsKeepTheClassicBudgetOnBothKinds) {
  for (int per_sm : {1, 2, 3, 4}) {
    const ScratchDemand d{Impl::kClassicTeamScratch, 128, per_sm};
    EXPECT_EQ(classic.scratch_budget(d), Impl::kClassicTeamScratch) << per_sm;
    EXPECT_EQ(large.scratch_budget(d), Impl::kClassicTeamScratch) << per_sm;
  }
}

TEST(ScratchBudget, LargeKernelsGetTheirShareOfOneMultiprocessor) {
  const std::size_t reserve = 1024 + Impl::kokkos_team_reserve(128);  // the runtime's and Kokkos' per team
  // One team: the opt-in limit of one block (227 KiB) less Kokkos' reserve for
  // 128 threads, which is also all of one multiprocessor (228 KiB) less both reserves.
  EXPECT_EQ(large.scratch_budget({Impl::kAnyTeamScratch, 128, 1}), 233472u - reserve);
  EXPECT_EQ(large.scratch_budget({Impl::kAnyTeamScratch, 128, 4}), 233472u / 4 - reserve);
  // So many such teams always fit one multiprocessor: launch bounds stay satisfiable.
  for (int per_sm = 1; per_sm <= 8; ++per_sm)
    for (int threads : {32, 128, 256, 512}) {
      const std::size_t b = large.scratch_budget({Impl::kAnyTeamScratch, threads, per_sm});
      EXPECT_LE(per_sm * (b + 1024 + Impl::kokkos_team_reserve(threads)), 233472u)
          << per_sm << " x " << threads;
    }
}

// Kokkos' classic limit sets aside the reserve of a 1024-thread team: a
// kernel of fixed scratch and 128 threads may use 48 KiB less its own
// reserve (the 16-bit decode kernel's 41488 bytes among them).
TEST(ScratchBudget, FixedScratchKernelsUseTheWhole48KiBOnTheClassicKind) {
  EXPECT_EQ(classic.scratch_budget({Impl::kAnyTeamScratch, 128, 1}), 49152u - Impl::kokkos_team_reserve(128));
  EXPECT_GE(classic.scratch_budget({Impl::kAnyTeamScratch, 128, 3}), 41488u);
  EXPECT_EQ(classic.scratch_budget({Impl::kClassicTeamScratch, 128, 3}), Impl::kClassicTeamScratch);
}

TEST(ScratchBudget, HostsUseTheirWholeLimit) {
  Backend host;
  host.scratch_max[0] = std::size_t(1) << 30;
  EXPECT_EQ(host.scratch_budget({}), host.scratch_max[0]);
}

template <class Tiles>
void expect_same(const Impl::Fitted<Tiles>& a, const Impl::Fitted<Tiles>& b, const char* what) {
  EXPECT_EQ(std::memcmp(&a.tiles, &b.tiles, sizeof(Tiles)), 0) << what;
  EXPECT_EQ(a.level, b.level) << what;
  EXPECT_EQ(a.bytes, b.bytes) << what;
}

// The kernels written for 48 KB get the same tiles (so the same results) on
// both kinds of Kokkos, also where their preferred tiles would not fit 48 KB.
TEST(ScratchBudget, PortableTilesAreTheSameOnBothKinds) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  for (const Shape& s : {Shape{2, 32, 32, 4, 16, 24}, Shape{1, 4096, 4096, 16, 128, 512},
                         Shape{4, 1024, 1024, 16, 64, 256}, Shape{3, 7, 131, 5, 33, 577}}) {
    SCOPED_TRACE(to_string(s));
    expect_same(Impl::flash_tiles<Host, float>(s, classic), Impl::flash_tiles<Host, float>(s, large),
                "flash");
    expect_same(Impl::flash_tiles<Host, double>(s, classic), Impl::flash_tiles<Host, double>(s, large),
                "flash");
    using Fused = Impl::LatentKernel<Host, float, Impl::LatentStep::Fused>;
    const Fused k = Impl::latent_kernel<Host, float, Impl::LatentStep::Fused>(s);
    expect_same(Impl::latent_tiles(k, s.keys, classic), Impl::latent_tiles(k, s.keys, large), "latent");
    const auto fitted = Impl::latent_tiles(k, s.keys, large);
    if (fitted.level == 0) {
      EXPECT_LE(fitted.bytes, Impl::kClassicTeamScratch);
    }
  }
}

// A problem whose sequences fit one key tile is all latency (its teams' time
// is their chain of dependent steps, which grows with their rows): on a GPU
// its rows spread over more teams, heads first and then tokens, until each
// multiprocessor has one. Longer sequences keep a team's rows together, as
// they share each staged tile; hosts keep theirs.
TEST(LatentTiles, ShortSequencesSpreadTheirRowsOverTheMultiprocessors) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  struct Case {
    Shape shape;
    int tokens, heads;  // a team's on the H200's 132 multiprocessors
  };
  const Case cases[] = {
      {{2, 32, 32, 4, 16, 24}, 1, 1},    // 256 teams; with 2 tokens a team, 128
      {{4, 8, 8, 16, 16, 16}, 2, 1},     // 256 teams; with 4 tokens, 128
      {{1, 7, 7, 5, 33, 577}, 1, 1},     // 35 teams, one a row
      {{3, 16, 16, 128, 8, 8}, 8, 4},    // 192 teams as preferred: no spread
      {{2, 32, 4096, 4, 16, 24}, 8, 4},  // long sequences: rows share each tile
  };
  Backend host;
  host.scratch_max[0] = std::size_t(1) << 30;
  host.concurrency = 64;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.shape));
    const auto k = Impl::latent_kernel<Host, float, Impl::LatentStep::Fused>(c.shape);
    const Impl::LatentTiles t = Impl::latent_tiles(k, c.shape.keys, large).tiles;
    EXPECT_EQ(t.tokens, c.tokens);
    EXPECT_EQ(t.heads, c.heads);
    const Impl::LatentTiles on_host = Impl::latent_tiles(k, c.shape.keys, host).tiles;
    EXPECT_EQ(on_host.tokens, std::min<std::int64_t>(16, c.shape.queries));
    EXPECT_EQ(on_host.heads, std::min<std::int64_t>(4, c.shape.heads));
  }
}

// The one split-count heuristic. On an H200 the 16-bit decode kernel (16
// rows per team, 3 teams per SM, 41488 bytes of scratch) takes 3 parts on
// FlashMLA's shapes, as measured fastest against 1, 2, 4 and 6 forced
// (docs/performance.md); a requested count is taken up to what the merge takes.
TEST(Splits, WavesOfTeamsFillTheDevice) {
  for (std::int64_t heads : {16, 128})
    for (std::int64_t keys : {4096, 8192}) {
      Impl::SplitInputs in;
      in.teams_per_part = double(128 * ((heads + 15) / 16));
      in.slots = classic.resident_teams({Impl::kAnyTeamScratch, 128, 3}, 41488);
      in.capacity = keys;
      in.min_part = 256;
      EXPECT_EQ(in.slots, 3.0 * 132);
      EXPECT_EQ(Impl::split_count(in, 0), 3) << heads << " heads, " << keys << " keys";
    }
  Impl::SplitInputs few;  // one team per part: as many parts as the device runs teams, if long enough
  few.slots = 16;
  few.capacity = 4096;
  few.min_part = 64;
  EXPECT_EQ(Impl::split_count(few, 0), 16);
  few.capacity = 300;  // 4 parts of at least 64 keys
  EXPECT_EQ(Impl::split_count(few, 0), 4);
  few.slots = 1;  // one thread: one part
  EXPECT_EQ(Impl::split_count(few, 0), 1);
  few.most_requested = 64;
  EXPECT_EQ(Impl::split_count(few, 100), 64);
  EXPECT_EQ(Impl::split_count(few, 5), 5);
}

/// A kernel whose league is larger than a launch takes.
struct HugeLeague {
  int scratch_level = 0;
  std::int64_t league_size() const { return std::int64_t(INT_MAX) + 1; }
  KOKKOS_INLINE_FUNCTION void operator()(const Kokkos::TeamPolicy<Space>::member_type&) const {}
};

TEST(Launch, LeaguePastIntRangeIsAnErrorNotAWrappedCount) {
  try {
    Impl::launch(Space(), "KokkosMLA::test", HugeLeague{}, 1, 0);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2147483648 teams"), std::string::npos) << e.what();
  }
}

template <class T>
class PathChoice : public ::testing::Test {};
TYPED_TEST_SUITE(PathChoice, Scalars);

// Each forced algorithm runs on a path of that algorithm, and Auto on one of
// the algorithm choose_algorithm reports.
TYPED_TEST(PathChoice, PathComputesTheAlgorithmAsked) {
  const Shape s{2, 21, 21, 3, 8, 10};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    const Plan<TypeParam, Space> plan(Space(), s, opt);
    EXPECT_EQ(plan.algorithm(), a) << plan.describe();
    switch (a) {
      case Algorithm::Fused:
        EXPECT_TRUE(plan.path() == Path::Fused || plan.path() == Path::FusedRow) << plan.describe();
        break;
      case Algorithm::Absorbed:
        EXPECT_EQ(plan.path(), Path::Absorbed);
        break;
      default:
        EXPECT_TRUE(plan.path() == Path::DecompressedPortable || plan.path() == Path::DecompressedBlocked ||
                    plan.path() == Path::DecompressedHost || plan.path() == Path::DecompressedGemm)
            << plan.describe();
    }
    EXPECT_NE(plan.describe().find("path=" + to_string(plan.path())), std::string::npos) << plan.describe();
  }
  const Plan<TypeParam, Space> automatic(Space(), s);
  EXPECT_EQ(automatic.algorithm(), choose_algorithm<TypeParam>(Space(), s));
}

// Hosts run the kernels written for a core's vector unit, and the portable
// ones when asked: the blocked flash kernel and the blocked cache kernel are
// GPU paths (the register cache kernel runs on hosts for R <= 4).
TYPED_TEST(PathChoice, HostsTakeTheHostPaths) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  Options opt;
  opt.algorithm = Algorithm::Decompressed;
  const Shape prefill{1, 256, 256, 2, 64, 32};
  EXPECT_EQ((Plan<TypeParam, Host>(Host(), prefill, opt).path()), Path::DecompressedHost);
  opt.path = Path::DecompressedPortable;
  EXPECT_EQ((Plan<TypeParam, Host>(Host(), prefill, opt).path()), Path::DecompressedPortable);
  const CacheShape wide{2, 1, 4, 16, 64, 8, 128}, narrow{2, 1, 4, 16, 4, 0, 128};
  EXPECT_EQ((CachePlan<TypeParam, Host>(Host(), wide).path()), Path::CacheHost);
  Options portable;
  portable.path = Path::CacheRegisters;
  EXPECT_EQ((CachePlan<TypeParam, Host>(Host(), narrow, portable).path()), Path::CacheRegisters);
  EXPECT_THROW((CachePlan<TypeParam, Host>(Host(), wide, portable)), std::invalid_argument);
}

// Options::path runs the path named, or the plan refuses with that name.
TYPED_TEST(PathChoice, ForcedPathIsTakenOrRefusedByName) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const CacheShape s{2, 1, 4, 16, 64, 8, 128};
  Options opt;
  opt.path = Path::CacheLatent;
  EXPECT_EQ((CachePlan<TypeParam, Host>(Host(), s, opt).path()), Path::CacheLatent);
  opt.path = Path::CacheBlocked;  // a GPU path
  try {
    CachePlan<TypeParam, Host>(Host(), s, opt);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Options::path = CacheBlocked"), std::string::npos) << e.what();
  }
  opt.path = Path::Absorbed;
  EXPECT_EQ((Plan<TypeParam, Host>(Host(), Shape{1, 8, 8, 2, 4, 16}, opt).path()), Path::Absorbed);
  opt.path = Path::Fused;  // a prefill path for cache attention
  EXPECT_THROW((CachePlan<TypeParam, Host>(Host(), s, opt)), std::invalid_argument);
}

TEST(PathNames, EveryPathHasAName) {
  for (Path p : {Path::Fused, Path::Absorbed, Path::DecompressedPortable, Path::DecompressedBlocked,
                 Path::FlashTensorSm80, Path::Widened, Path::CacheLatent, Path::CacheRegisters,
                 Path::CacheBlocked, Path::DecodeTensorSm80, Path::DecompressedHost, Path::CacheHost,
                 Path::DecodeSm90, Path::FlashSm90, Path::DecompressedGemm, Path::CacheGemm, Path::FusedRow})
    EXPECT_NE(to_string(p), "?");
}

#if KOKKOSMLA_ENABLE_SM90A && KOKKOSMLA_HAS_BHALF
// The Hopper decode path takes DeepSeek's widths on compute capability 9.0
// alone, with the opt-in's team scratch and 32 or more query rows a sequence.
TEST(PathChoice, HopperDecodeNeedsSm90LargeScratchAndThirtyTwoRows) {
  using Unit = Impl::DecodeSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
  auto takes = [](const Backend& be, int compute_capability, const CacheShape& s) {
    Impl::CacheProblem p;
    p.shape = s;
    p.backend = be;
    p.backend.compute_capability = compute_capability;
    return Unit::applicable(p);
  };
  const CacheShape h128{128, 1, 128, 128, 512, 64, 4096}, h16{128, 1, 16, 128, 512, 64, 4096},
      h16_two_tokens{128, 2, 16, 128, 512, 64, 4096}, h8_three_tokens{128, 3, 8, 128, 512, 64, 4096},
      no_rope{128, 1, 64, 128, 512, 0, 4096}, other_widths{128, 1, 128, 128, 256, 64, 4096};
  EXPECT_TRUE(takes(large, 90, h128));
  EXPECT_TRUE(takes(large, 90, h16_two_tokens));  // 2 tokens x 16 heads: 32 rows
  EXPECT_TRUE(takes(large, 90, no_rope));
  EXPECT_FALSE(takes(large, 90, h16));              // 16 rows: the mma.sync kernel's
  EXPECT_FALSE(takes(large, 90, h8_three_tokens));  // 24 rows
  EXPECT_FALSE(takes(classic, 90, h128));
  EXPECT_FALSE(takes(large, 80, h128));
  EXPECT_FALSE(takes(large, 100, h128));
  EXPECT_FALSE(takes(large, 90, other_widths));
  // FP8 tokens of DeepSeek's widths (dequantised in the kernel), not without RoPE keys.
  for (CacheStorage storage : {CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor}) {
    CacheShape fp8 = h128, fp8_no_rope = no_rope;
    fp8.storage = fp8_no_rope.storage = storage;
    EXPECT_TRUE(takes(large, 90, fp8));
    EXPECT_FALSE(takes(classic, 90, fp8));
    EXPECT_FALSE(takes(large, 90, fp8_no_rope));
  }
}

// Its teams run in pairs that share each FP8 tile's dequantisation where a
// pair's 128 rows are heads of one query token: dense FP8 caches, H a
// multiple of 128; not 16-bit caches, nor sparse lists.
TEST(PathChoice, HopperDecodePairsTeamsOverFp8TokensOfWhole128HeadBlocks) {
  using Unit = Impl::DecodeSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
  auto fp8 = [](std::int64_t queries, std::int64_t heads, std::int64_t topk = 0) {
    CacheShape s{128, queries, heads, 128, 512, 64, 4096};
    s.storage = CacheStorage::Fp8PerBlock;
    s.topk = topk;
    return s;
  };
  EXPECT_TRUE(Unit::teams_in_pairs(fp8(1, 128)));
  EXPECT_TRUE(Unit::teams_in_pairs(fp8(2, 128)));
  EXPECT_TRUE(Unit::teams_in_pairs(fp8(1, 256)));
  CacheShape per_tensor = fp8(1, 128);
  per_tensor.storage = CacheStorage::Fp8PerTensor;
  EXPECT_TRUE(Unit::teams_in_pairs(per_tensor));
  EXPECT_FALSE(Unit::teams_in_pairs(fp8(2, 64)));  // 128 rows over two tokens' keys
  EXPECT_FALSE(Unit::teams_in_pairs(fp8(1, 64)));
  EXPECT_FALSE(Unit::teams_in_pairs(fp8(1, 192)));
  EXPECT_FALSE(Unit::teams_in_pairs(fp8(1, 128, 2048)));  // sparse lists
  CacheShape bf16 = fp8(1, 128);
  bf16.storage = CacheStorage::Native;
  EXPECT_FALSE(Unit::teams_in_pairs(bf16));
}
#endif

#if KOKKOSMLA_ENABLE_SM80 && KOKKOSMLA_HAS_BHALF
// The mma.sync decode path takes FP8 tokens of DeepSeek's widths on both
// kinds of Kokkos (DecodeFp8TensorKernel's staging ring, 46 KB a team, fits
// a classic team's scratch), not without RoPE keys; 16-bit caches too.
TEST(PathChoice, TensorDecodeTakesFp8CachesOfDeepSeekWidths) {
  using Unit = Impl::DecodeTensorSm80Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
  auto takes = [](const Backend& be, const CacheShape& s) {
    Impl::CacheProblem p;
    p.shape = s;
    p.backend = be;
    p.backend.compute_capability = 90;
    return Unit::applicable(p);
  };
  const CacheShape h16{128, 1, 16, 128, 512, 64, 4096}, no_rope{128, 1, 16, 128, 512, 0, 4096};
  EXPECT_TRUE(takes(classic, h16));
  EXPECT_TRUE(takes(classic, no_rope));
  for (CacheStorage storage : {CacheStorage::Fp8PerBlock, CacheStorage::Fp8PerTensor}) {
    CacheShape fp8 = h16, fp8_no_rope = no_rope;
    fp8.storage = fp8_no_rope.storage = storage;
    EXPECT_TRUE(takes(large, fp8));
    EXPECT_TRUE(takes(classic, fp8));
    EXPECT_FALSE(takes(classic, fp8_no_rope));
    EXPECT_FALSE(takes(large, fp8_no_rope));
  }
}

// FP8 tokens go in 32-key steps where a team may have their scratch: 50 KB
// for FlashMLA's 656-byte tokens (a Kokkos with the opt-in; 16-key steps in
// 46 KB on a classic one), 46 KB for per-tensor tokens of 592 bytes (both
// kinds). 16-bit rows keep 16-key steps on both.
TEST(PathChoice, TensorDecodeTakesFp8In32KeyStepsWhereScratchHoldsThem) {
  using Unit = Impl::DecodeTensorSm80Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
  auto described = [](const Backend& be, CacheStorage storage) {
    Impl::CacheProblem p;
    p.shape = CacheShape{8, 1, 16, 128, 512, 64, 256};
    p.shape.storage = storage;
    p.backend = be;
    p.backend.compute_capability = 90;
    return Unit(Kokkos::Cuda(), p).describe();
  };
  auto check = [&](const Backend& be, CacheStorage storage, const char* expected) {
    const std::string text = described(be, storage);
    EXPECT_NE(text.find(expected), std::string::npos) << text;
  };
  check(large, CacheStorage::Fp8PerBlock, "key_tile=32 scratch=50192B");
  check(classic, CacheStorage::Fp8PerBlock, "key_tile=16 scratch=46096B");
  check(large, CacheStorage::Fp8PerTensor, "key_tile=32 scratch=46096B");
  check(classic, CacheStorage::Fp8PerTensor, "key_tile=32 scratch=46096B");
  check(large, CacheStorage::Native, "key_tile=16");
  check(classic, CacheStorage::Native, "key_tile=16");
}
#endif

#if KOKKOSMLA_ENABLE_SM80
// float plans take the mma.sync decode path only when asked to (TF32 or
// 3xTF32), on native caches of its widths, where the large team scratch
// holds two fp32 tiles (78 KB a team). Where cuBLAS is, attention by GEMMs
// takes over unless the path is named: exact fp32 GEMMs in place of 3xTF32
// from 128 query rows a sequence, and TF32 GEMMs.
TEST(PathChoice, TensorDecodeTakesFloatWithTf32OrEmulationAndLargeScratch) {
  using Unit = Impl::DecodeTensorSm80Path<float, Kokkos::Cuda>;
  auto takes = [](const Backend& be, const CacheShape& s, bool tf32, bool emulate, bool named = false) {
    Impl::CacheProblem p;
    p.shape = s;
    p.backend = be;
    p.backend.compute_capability = 90;
    p.options.allow_tf32 = tf32;
    p.options.emulate_fp32 = emulate;
    if (named) p.options.path = Path::DecodeTensorSm80;
    return Unit::applicable(p);
  };
  const CacheShape h16{128, 1, 16, 128, 512, 64, 4096}, no_rope{128, 1, 16, 128, 512, 0, 4096},
      other_widths{128, 1, 16, 128, 256, 64, 4096};
  CacheShape fp8 = h16;
  fp8.storage = CacheStorage::Fp8PerBlock;
  EXPECT_TRUE(takes(large, h16, false, true));
  EXPECT_TRUE(takes(large, h16, true, false));
  EXPECT_TRUE(takes(large, no_rope, false, true));
  EXPECT_FALSE(takes(large, h16, false, false));  // exact fp32: the CUDA-core kernels
  EXPECT_FALSE(takes(classic, h16, false, true));
  EXPECT_FALSE(takes(large, other_widths, false, true));
  EXPECT_FALSE(takes(large, fp8, false, true));
  const CacheShape rows128{128, 1, 128, 128, 512, 64, 4096}, rows256{128, 2, 128, 128, 512, 64, 4096};
  EXPECT_EQ(takes(large, rows128, true, false), !KOKKOSMLA_ENABLE_CUBLAS);
  EXPECT_EQ(takes(large, rows256, true, false), !KOKKOSMLA_ENABLE_CUBLAS);
  EXPECT_EQ(takes(large, rows128, false, true), !KOKKOSMLA_ENABLE_CUBLAS);
  EXPECT_TRUE(takes(large, rows128, true, false, true));
  EXPECT_TRUE(takes(large, rows256, true, false, true));
  EXPECT_TRUE(takes(large, rows256, false, true, true));
}
#endif

#if KOKKOSMLA_ENABLE_SM90A && KOKKOSMLA_HAS_BHALF
// The Hopper prefill path takes head_dim 64 and 128 on compute capability
// 9.0 alone, with the opt-in's team scratch, for the Decompressed algorithm.
TEST(PathChoice, HopperPrefillNeedsSm90LargeScratchAndItsHeadDims) {
  using Unit = Impl::FlashSm90Path<Kokkos::Experimental::bhalf_t, Kokkos::Cuda>;
  auto takes = [](const Backend& be, int compute_capability, const Shape& s, Algorithm a = Algorithm::Auto) {
    Impl::PrefillProblem p;
    p.shape = s;
    p.options.algorithm = a;
    p.backend = be;
    p.backend.compute_capability = compute_capability;
    return Unit::applicable(p);
  };
  const Shape d128{1, 4096, 4096, 16, 128, 512}, d64{4, 1024, 1024, 16, 64, 256}, d96{1, 64, 64, 2, 96, 64};
  EXPECT_TRUE(takes(large, 90, d128));
  EXPECT_TRUE(takes(large, 90, d64));
  EXPECT_TRUE(takes(large, 90, d128, Algorithm::Decompressed));
  EXPECT_FALSE(takes(large, 90, d128, Algorithm::Fused));
  EXPECT_FALSE(takes(large, 90, d96));
  EXPECT_FALSE(takes(classic, 90, d128));
  EXPECT_FALSE(takes(large, 80, d128));
  EXPECT_FALSE(takes(large, 100, d64));
}
#endif

#if KOKKOSMLA_ENABLE_SM90A
// Float plans take the Hopper prefill path with TF32 products alone: not in
// exact fp32 (the default), and not with 3xTF32, which stays on mma.sync.
TEST(PathChoice, HopperPrefillTakesFloatWithTf32Only) {
  using Unit = Impl::FlashSm90Path<float, Kokkos::Cuda>;
  auto takes = [](bool tf32, bool emulated, int compute_capability = 90) {
    Impl::PrefillProblem p;
    p.shape = {1, 4096, 4096, 16, 128, 512};
    p.options.allow_tf32 = tf32;
    p.options.emulate_fp32 = emulated;
    p.backend = large;
    p.backend.compute_capability = compute_capability;
    return Unit::applicable(p);
  };
  EXPECT_TRUE(takes(true, false));
  EXPECT_FALSE(takes(false, false));
  EXPECT_FALSE(takes(false, true));
  EXPECT_FALSE(takes(true, true));
  EXPECT_FALSE(takes(true, false, 80));
}
#endif

#if KOKKOSMLA_ENABLE_SM90A
// A source of src/cuda/sm90a/ runs its sm_90a code on a Hopper GPU, beside
// the library's sm_90 code from Kokkos' own flags.
TEST(Sm90a, ArchitectureSpecificCodeRunsOnHopper) {
  if (Impl::backend_of(Space()).compute_capability != 90) GTEST_SKIP() << "not a Hopper GPU";
  EXPECT_TRUE(Impl::sm90a_code_runs(Space()));
}
#endif

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
