#ifndef KOKKOSMLA_SPLITS_HPP
#define KOKKOSMLA_SPLITS_HPP
// The one split-count heuristic of cache attention (split-KV, flash-decoding),
// for every kernel that attends in parts.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// What the split count depends on.
struct SplitInputs {
  double teams_per_part = 1;     ///< teams one part of every sequence takes (all query rows)
  double slots = 1;              ///< teams the device runs at once (Backend::resident_teams)
  std::int64_t capacity = 1;     ///< the longest sequence
  std::int64_t min_part = 1;     ///< fewest keys worth a part of its own
  int most = 64;                 ///< most parts the heuristic picks
  int most_requested = INT_MAX;  ///< most parts a caller may ask for (what the merge takes)
  double part_cost = 0.02;       ///< cost of each extra part (its result written and merged), relative
};

/// Parts per sequence: `requested` when positive (at most most_requested);
/// otherwise, as the teams run in waves of `slots`, the count whose last wave
/// is fullest among those that fill the device (a device less than 90 % full
/// counts double), each extra part costing part_cost, parts at least
/// min_part keys long.
inline int split_count(const SplitInputs& in, int requested) {
  if (requested > 0) return std::min(requested, in.most_requested);
  const std::int64_t longest =
      std::max<std::int64_t>(1, std::min<std::int64_t>(in.most, in.capacity / in.min_part));
  int best = 1;
  double best_cost = INFINITY;
  for (int parts = 1; parts <= longest; ++parts) {
    const double waves = in.teams_per_part * parts / in.slots;
    const double cost = (std::ceil(waves) / waves) * (1 + in.part_cost * (parts - 1)) * (waves < 0.9 ? 2 : 1);
    if (cost < best_cost) best = parts, best_cost = cost;
  }
  return best;
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
