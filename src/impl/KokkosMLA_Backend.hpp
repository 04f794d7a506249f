#ifndef KOKKOSMLA_BACKEND_HPP
#define KOKKOSMLA_BACKEND_HPP
// What a backend offers a team, and the one scratch budget every kernel's
// tiles come from.
//
// Kokkos releases before the CUDA shared-memory opt-in give a CUDA team 48 KiB
// of shared memory, and report TeamPolicy::scratch_size_max(0) = 49152 - 8216
// = 40936 bytes: Kokkos sets aside its team-reduction reserve for a
// 1024-thread team, so a team of 128 threads may really use 48112. A Kokkos
// with the opt-in (upstream in 2026) reports the opt-in limit instead (224232
// bytes on an H100 or H200). The portable kernels were written for 40936 bytes
// and keep that budget on both kinds of Kokkos (same tiles, same results);
// kernels of fixed scratch (the tensor-core ones) and kernels written for
// large scratch take what the backend gives, and every budget is held to the
// team's share of one multiprocessor at the kernel's occupancy target.

#include "KokkosMLA_Compat.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// Kokkos' own level-0 reserve in a CUDA team of `threads`: a double per
/// thread and two for team reductions, and a shared 64-bit id.
constexpr std::size_t kokkos_team_reserve(int threads) {
  return (std::size_t(threads) + 2) * sizeof(double) + sizeof(std::int64_t);
}
/// What every Kokkos before the opt-in reports for a CUDA team: 48 KiB less
/// the reserve of a 1024-thread team. The portable kernels' tiles were written for it.
constexpr std::size_t kClassicTeamScratch = 49152 - kokkos_team_reserve(1024);
/// For kernels that take whatever the backend gives.
constexpr std::size_t kAnyTeamScratch = ~std::size_t(0);
/// Shared memory the CUDA runtime keeps per resident block.
constexpr std::size_t kRuntimeBlockReserve = 1024;

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

  /// The level-0 scratch a kernel may use per team: what Kokkos allows a
  /// team of its size, held to what the kernel was written for and, on CUDA,
  /// to its share of one multiprocessor at its occupancy target (less the
  /// runtime's and Kokkos' reserves per team). Host scratch is ordinary
  /// memory: there the tiles come from the kernels' own preferences.
  std::size_t scratch_budget(const ScratchDemand& d) const {
    if (host) return scratch_max[0];
    std::size_t budget = scratch_max[0];
    if (sm_shared > 0) {
      // Kokkos' limit sets aside the reserve of a 1024-thread team; a smaller team keeps the difference.
      const std::size_t reserve = kokkos_team_reserve(d.team_threads);
      budget += kokkos_team_reserve(1024) - reserve;
      const std::size_t share = sm_shared / std::size_t(d.teams_per_sm);
      budget = std::min(budget,
                        share > reserve + kRuntimeBlockReserve ? share - reserve - kRuntimeBlockReserve : 0);
    }
    return std::min(budget, d.designed_for);
  }

  /// The scratch level whose limit holds `bytes` per team: 0 where it fits, else 1.
  int level_holding(std::size_t bytes) const { return bytes <= scratch_max[0] ? 0 : 1; }

  /// Teams of a kernel that run at once: a host runs one per thread; a GPU,
  /// per multiprocessor (2048 threads), the kernel's occupancy target where
  /// its launch bounds set one (they cap its registers to just that many),
  /// else as many as its team size allows, and no more than its scratch allows.
  double resident_teams(const ScratchDemand& d, std::size_t scratch_bytes) const {
    if (host) return double(concurrency);
    double per_sm = d.teams_per_sm > 1 ? double(d.teams_per_sm) : double(kThreadsPerSM / d.team_threads);
    if (sm_shared > 0)
      per_sm = std::min(
          per_sm, std::floor(double(sm_shared) / double(scratch_bytes + kokkos_team_reserve(d.team_threads) +
                                                        kRuntimeBlockReserve)));
    return std::max(1.0, multiprocessors() * per_sm);
  }

  /// A GPU's multiprocessors (Kokkos counts 2048 threads each); a host's threads.
  double multiprocessors() const { return host ? double(concurrency) : double(concurrency) / kThreadsPerSM; }
  static constexpr int kThreadsPerSM = 2048;
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
