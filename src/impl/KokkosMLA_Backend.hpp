#ifndef KOKKOSMLA_BACKEND_HPP
#define KOKKOSMLA_BACKEND_HPP
// What a backend offers a team, and the one scratch budget every kernel's
// tiles come from.
//
// Kokkos releases before the CUDA shared-memory opt-in give a CUDA team 48 KiB
// of shared memory less Kokkos' own reserve for team reductions:
// TeamPolicy::scratch_size_max(0) = 49152 - 8216 = 40936 bytes. A Kokkos with
// the opt-in (upstream in 2026) reports the multiprocessor's opt-in limit
// instead (224232 bytes on an H100 or H200). Kernels written for the classic
// 40936 bytes keep that budget on both kinds of Kokkos (same tiles, same
// results); a kernel written for large scratch says so, and every budget is
// also held to what its occupancy target leaves per team on one multiprocessor.

#include "KokkosMLA_Compat.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// Level-0 scratch a CUDA team had before the opt-in: 48 KiB less Kokkos' reserve.
constexpr std::size_t kClassicTeamScratch = 49152 - 8216;
/// For kernels written to use whatever the backend gives.
constexpr std::size_t kAnyTeamScratch = ~std::size_t(0);

/// What a kernel asks of level-0 scratch.
struct ScratchDemand {
  std::size_t designed_for = kClassicTeamScratch;  ///< the most its tiles were written for
  int team_threads = 1;                            ///< threads per team it launches
  int teams_per_sm = 1;                            ///< occupancy target (launch bounds' minimum blocks)
};

/// A kernel's demand from its launch bounds: LaunchBounds<T, B> targets B teams per multiprocessor.
template <class Bounds>
ScratchDemand demand_of(int team_threads, std::size_t designed_for = kClassicTeamScratch) {
  const int per_sm = int(Bounds::minBperSM);
  return {designed_for, team_threads, per_sm > 0 ? per_sm : 1};
}

/// What a backend offers a team.
struct Backend {
  bool host = true;
  int concurrency = 1;
  std::size_t scratch_max[2] = {0, 0};  ///< Kokkos' limits per team, levels 0 and 1
  std::size_t sm_shared = 0;            ///< shared memory of one multiprocessor (CUDA); 0 elsewhere
  int compute_capability = 0;           ///< major * 10 + minor (CUDA); 0 elsewhere
  int team_size = 1;                    ///< threads per team we ask for (clamped at launch)

  /// The level-0 scratch a kernel may use per team: Kokkos' limit, on GPUs
  /// held to what the kernel was written for and to its share of one
  /// multiprocessor at its occupancy target (less the CUDA runtime's 1 KiB
  /// and Kokkos' team-reduction reserve per team). Host scratch is ordinary
  /// memory: there the tiles come from the kernels' own preferences.
  std::size_t scratch_budget(const ScratchDemand& d) const {
    if (host) return scratch_max[0];
    std::size_t budget = std::min(scratch_max[0], d.designed_for);
    if (sm_shared > 0) {
      const std::size_t reserve =
          1024 + (std::size_t(d.team_threads) + 2) * sizeof(double) + sizeof(std::int64_t);
      const std::size_t share = sm_shared / std::size_t(d.teams_per_sm);
      budget = std::min(budget, share > reserve ? share - reserve : 0);
    }
    return budget;
  }
};

/// Whether ExecSpace is Kokkos::Cuda (false where the build has no CUDA).
template <class ExecSpace>
constexpr bool is_cuda_space() {
#ifdef KOKKOS_ENABLE_CUDA
  return std::is_same<ExecSpace, Kokkos::Cuda>::value;
#else
  return false;
#endif
}

/// Threads per team the kernels ask for (clamped at launch): host teams are
/// one thread, as teams map to cores; GPU teams a few warps.
template <class ExecSpace>
constexpr int preferred_team_size() {
  return is_host_space<ExecSpace>() ? 1 : 128;
}

template <class ExecSpace>
Backend backend_of(const ExecSpace& exec) {
  Backend b;
  b.host = is_host_space<ExecSpace>();
  b.concurrency = exec.concurrency();
  Kokkos::TeamPolicy<ExecSpace> policy(exec, 1, 1);
  b.scratch_max[0] = std::size_t(policy.scratch_size_max(0));
  b.scratch_max[1] = std::size_t(policy.scratch_size_max(1));
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value) {
    const cudaDeviceProp& prop = exec.cuda_device_prop();
    b.sm_shared = std::size_t(prop.sharedMemPerMultiprocessor);
    b.compute_capability = 10 * prop.major + prop.minor;
  }
#endif
  b.team_size = preferred_team_size<ExecSpace>();
  return b;
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
