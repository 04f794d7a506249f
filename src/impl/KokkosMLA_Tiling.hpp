#ifndef KOKKOSMLA_TILING_HPP
#define KOKKOSMLA_TILING_HPP
// Tile sizes per kernel, fitted to the kernel's level-0 scratch budget
// (Backend::scratch_budget): the preferred tiles shrink until they fit level
// 0; when even small tiles do not, the preferred tiles go to level 1 (global
// memory on GPUs).

#include <KokkosMLA_Attention.hpp>

#include "KokkosMLA_Backend.hpp"
#include "KokkosMLA_DecodeKernel.hpp"
#include "KokkosMLA_FlashBlockedKernel.hpp"
#include "KokkosMLA_FlashKernel.hpp"
#include "KokkosMLA_Launch.hpp"
#include "KokkosMLA_LatentKernels.hpp"
#include "KokkosMLA_ProjectKernel.hpp"

#include <stdexcept>
#include <string>

namespace KokkosMLA {
namespace Impl {

template <class Tiles>
struct Fitted {
  Tiles tiles;
  int level = 0;
  std::size_t bytes = 0;
};

/// Records a latent kernel's fitted tiles, their scratch level and bytes.
inline void apply(LaunchConfig& c, const Fitted<LatentTiles>& f) {
  c.query_tile = f.tiles.tokens;
  c.head_group = f.tiles.heads;
  c.key_tile = f.tiles.key_tile;
  c.weight_chunk = f.tiles.weight_chunk;
  c.scratch_level = f.level;
  c.scratch_bytes = f.bytes;
}

/// Halves one tile dimension at a time (shrink returns false when none can
/// shrink) until bytes(tiles) fits the level-0 budget; otherwise uses level 1.
template <class Tiles, class Bytes, class Shrink>
Fitted<Tiles> fit(const Tiles& preferred, std::size_t budget0, const Backend& be, Bytes bytes, Shrink shrink,
                  const char* kernel) {
  Tiles t = preferred;
  while (bytes(t) > budget0 && shrink(t)) {
  }
  if (bytes(t) <= budget0) return {t, 0, bytes(t)};
  t = preferred;
  while (bytes(t) > be.scratch_max[1] && shrink(t)) {
  }
  if (bytes(t) <= be.scratch_max[1]) return {t, 1, bytes(t)};
  throw std::invalid_argument(std::string("KokkosMLA: the ") + kernel + " kernel needs " +
                              std::to_string(bytes(t)) + " bytes of team scratch, more than the " +
                              std::to_string(be.scratch_max[1]) + " this backend allows");
}

inline int halve(int x, int floor) { return x / 2 >= floor ? x / 2 : x; }
inline int clamp_tile(std::int64_t extent, int preferred) {
  return int(extent < preferred ? extent : preferred);
}

template <class ExecSpace, class T>
Fitted<FlashTiles> flash_tiles(const Shape& s, const Backend& be) {
  const int pref = be.host ? 64 : 32;
  FlashTiles t{clamp_tile(s.queries, pref), clamp_tile(s.keys, pref)};
  auto bytes = [&](const FlashTiles& x) {
    return FlashAttentionKernel<ExecSpace, T>::scratch_bytes(x, s.head_dim);
  };
  // Square tiles: on an H200 they beat query-first tiles by 8-10 % (docs/performance.md).
  auto shrink = [](FlashTiles& x) {
    int& larger = x.key_tile >= x.query_tile ? x.key_tile : x.query_tile;
    if (larger == 1) return false;
    larger /= 2;
    return true;
  };
  const std::size_t budget = be.scratch_budget(demand_of<Kokkos::LaunchBounds<>>(be.team_size));
  return fit(t, budget, be, bytes, shrink, "flash attention");
}

/// Which flash kernel runs Decompressed's attention: the portable one, the
/// blocked one with one of its register tiles, or (16-bit types on CUDA) the
/// tensor-core one.
enum class FlashVariant { Portable = 0, Narrow, Wide, Large, Tensor };

inline const char* to_string(FlashVariant v) {
  switch (v) {
    case FlashVariant::Narrow:
      return "blocked-narrow";
    case FlashVariant::Wide:
      return "blocked-wide";
    case FlashVariant::Large:
      return "blocked-large";
    case FlashVariant::Tensor:
      return "tensor-core";
    default:
      return "portable";
  }
}

/// Register tiles of the blocked kernel (MR query rows, NR keys, G output quads
/// per thread; TC threads per row; U quads per staging batch, a K or V tile's
/// share of a thread; designed_for: the team scratch its tiles were written
/// for). Narrow and Wide suit 128-thread teams and 40 KB of
/// scratch: Narrow gives fp32 D <= 64 a 64 x 32 tile, Wide fp32 D <= 128 a
/// 32 x 32 one, both with 32 output accumulators per thread, and registers
/// capped so that 4 teams share an SM (as many as scratch allows). Large is
/// for the large team scratch of a Kokkos with the CUDA opt-in: 256 threads,
/// a 64 x 64 tile for D <= 128 (92 KB in fp32, two teams per SM), 4 x 4
/// scores and 4 x 8 outputs per thread: 8 quad loads per 64 FMAs in the
/// scores and 12 per 128 in P V, against Wide's 6 per 32 and 18 per 128.
template <FlashVariant V>
struct FlashBlock;
template <>
struct FlashBlock<FlashVariant::Narrow> {
  static constexpr int mr = 4, nr = 4, g = 2, tc = 8, u = 4;
  using bounds = Kokkos::LaunchBounds<128, 4>;
  static constexpr std::size_t designed_for = kClassicTeamScratch;
};
template <>
struct FlashBlock<FlashVariant::Wide> {
  static constexpr int mr = 2, nr = 4, g = 4, tc = 8, u = 8;
  using bounds = Kokkos::LaunchBounds<128, 4>;
  static constexpr std::size_t designed_for = kClassicTeamScratch;
};

template <>
struct FlashBlock<FlashVariant::Large> {
  static constexpr int mr = 4, nr = 4, g = 2, tc = 16, u = 8;
  using bounds = Kokkos::LaunchBounds<256, 2>;
  static constexpr std::size_t designed_for = kAnyTeamScratch;
};

template <class ExecSpace, class T, FlashVariant V>
using FlashBlockedOf = FlashBlockedKernel<ExecSpace, T, FlashBlock<V>::mr, FlashBlock<V>::nr,
                                          FlashBlock<V>::g, FlashBlock<V>::u>;

struct FlashChoice {
  FlashVariant variant = FlashVariant::Portable;
  FlashGrid grid;
  FlashTiles tiles;  ///< queries and keys per step
  std::size_t bytes = 0;
};

/// The blocked variant V if its tile covers the head dimension, fits level-0
/// scratch, and is at least half used by the queries: its tile cannot shrink
/// (it is the thread grid), and on few queries (decoding) the portable kernel,
/// whose tile can, does less wasted work.
template <class ExecSpace, class T, FlashVariant V>
bool try_blocked(const Shape& s, const Backend& be, FlashChoice& c) {
  using Kernel = FlashBlockedOf<ExecSpace, T, V>;
  const int tc = FlashBlock<V>::tc;
  const int most = FlashBlock<V>::bounds::maxTperB;  // 0: no bound
  const int threads = most > 0 ? most : be.team_size;
  FlashGrid g{threads, threads % tc == 0 ? tc : 1};
  const std::size_t bytes = Kernel::scratch_bytes(g, s.head_dim);
  const std::size_t budget =
      be.scratch_budget(demand_of<typename FlashBlock<V>::bounds>(threads, FlashBlock<V>::designed_for));
  if (!Kernel::covers(g, s.head_dim) || bytes > budget) return false;
  const auto l = Kernel::layout(g, s.head_dim);
  if (2 * s.queries < l.rows) return false;
  c = {V, g, FlashTiles{l.rows, l.cols}, bytes};
  return true;
}

/// On GPUs the first blocked variant that fits (Large where the large team
/// scratch holds its tile, then Narrow and Wide), else the portable kernel
/// (whose tiles flash_tiles picks). Hosts keep the portable kernel: a host
/// tile of the blocked kernel (8 x 16, one thread per team) took 1.13x its
/// time on one core and 1.41x on two (1851 vs 1631 ms and 1177 vs 832 ms on
/// (4,1024,16,64,256), Kokkos 4.6 OpenMP), so the blocked kernel's logic is
/// tested on hosts directly (Test_Attention's FlashBlocked), not planned there.
template <class ExecSpace, class T>
FlashChoice flash_choice(const Shape& s, const Backend& be) {
  FlashChoice c;
  if constexpr (!is_host_space<ExecSpace>()) {
    if (!try_blocked<ExecSpace, T, FlashVariant::Large>(s, be, c) &&
        !try_blocked<ExecSpace, T, FlashVariant::Narrow>(s, be, c))
      try_blocked<ExecSpace, T, FlashVariant::Wide>(s, be, c);
  }
  return c;
}

/// Fewer rows a team (heads first, then tokens) until a GPU's multiprocessors
/// each have a team: for problems whose sequences fit one key tile, where
/// rows that share a team share little but its chain of dependent steps
/// (a team's time is that chain's latency, and it grows with its rows).
template <class Kernel>
void spread_rows(const Kernel& k, const Backend& be, LatentTiles& t) {
  Kernel with = k;  // its league with tiles t
  auto teams = [&] { return with.tiles = t, double(with.league_size()); };
  while (teams() < be.multiprocessors() && (t.heads > 1 || t.tokens > 1)) {
    if (t.heads > 1)
      t.heads = halve(t.heads, 1);
    else
      t.tokens = halve(t.tokens, 1);
  }
}

/// Tiles for a latent kernel whose extents (and rope width, splits) are set;
/// keys is the longest sequence.
template <class Kernel>
Fitted<LatentTiles> latent_tiles(const Kernel& k, std::int64_t keys, const Backend& be) {
  LatentTiles t;
  t.tokens = clamp_tile(k.queries, be.host ? 16 : 8);
  t.heads = clamp_tile(k.heads, be.host ? 4 : (32 + t.tokens - 1) / t.tokens);
  t.key_tile = clamp_tile(keys, be.host ? 64 : 32);
  t.weight_chunk = clamp_tile(k.rank, be.host ? 64 : 32);
  if (!be.host && keys <= t.key_tile) spread_rows(k, be, t);
  auto bytes = [&](const LatentTiles& x) { return k.scratch_bytes(x); };
  // Staged tiles shrink first (to 8), then the row block, then the tiles to 1.
  auto shrink = [](LatentTiles& x) {
    const LatentTiles old = x;
    if (x.key_tile > 8 || x.weight_chunk > 8) {
      x.key_tile = halve(x.key_tile, 8);
      x.weight_chunk = halve(x.weight_chunk, 8);
    } else if (x.heads > 1) {
      x.heads = halve(x.heads, 1);
    } else if (x.tokens > 1) {
      x.tokens = halve(x.tokens, 1);
    } else {
      x.key_tile = halve(x.key_tile, 1);
      x.weight_chunk = halve(x.weight_chunk, 1);
    }
    return x.key_tile != old.key_tile || x.weight_chunk != old.weight_chunk || x.heads != old.heads ||
           x.tokens != old.tokens;
  };
  const std::size_t budget = be.scratch_budget(demand_of<typename Kernel::bounds>(be.team_size));
  return fit(t, budget, be, bytes, shrink, "latent attention");
}

/// Tiles for a ProjectKernel: 32 rows x 64 columns, inner chunks of 32
/// (4x4 register blocks for 128 threads).
template <class Kernel>
Fitted<ProjectTiles> project_tiles(const Kernel& k, const Backend& be) {
  ProjectTiles t{clamp_tile(k.rows, 32), clamp_tile(k.out_width(), 64), clamp_tile(k.in_width(), 32)};
  auto bytes = [&](const ProjectTiles& x) { return k.scratch_bytes(x); };
  auto shrink = [](ProjectTiles& x) {
    int& larger = x.columns >= x.rows ? x.columns : x.rows;
    if (larger > 1) return (larger /= 2), true;
    if (x.chunk > 1) return (x.chunk /= 2), true;
    return false;
  };
  const std::size_t budget = be.scratch_budget(demand_of<typename Kernel::bounds>(be.team_size));
  return fit(t, budget, be, bytes, shrink, "projection");
}

/// Tiles for a DecodeKernel: up to kMaxRows rows (all of one token's heads
/// first), key tiles of up to kMaxKeys, shrinking to fit level-0 scratch. The
/// kernel is only worth it at level 0: a caller takes it when level == 0.
template <class Kernel>
Fitted<LatentTiles> decode_tiles(const Kernel& k, std::int64_t keys, const Backend& be) {
  LatentTiles t;
  t.tokens = clamp_tile(k.queries, Kernel::kMaxRows);
  t.heads = clamp_tile(k.heads, Kernel::kMaxRows / t.tokens);
  t.key_tile = clamp_tile(keys, Kernel::kMaxKeys);
  t.weight_chunk = 1;  // the kernel stages no weights
  auto bytes = [&](const LatentTiles& x) { return k.scratch_bytes(x); };
  auto shrink = [](LatentTiles& x) {
    if (x.key_tile > 4) return (x.key_tile /= 2), true;
    if (x.heads > 1) return (x.heads /= 2), true;
    return false;
  };
  const std::size_t budget = be.scratch_budget(demand_of<typename Kernel::bounds>(be.team_size));
  return fit(t, budget, be, bytes, shrink, "decode");
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
