#ifndef KOKKOSMLA_LAUNCH_HPP
#define KOKKOSMLA_LAUNCH_HPP
// How every team kernel is launched, and latent kernels set up from a Shape.

#include <KokkosMLA_Attention.hpp>

#include "KokkosMLA_Backend.hpp"
#include "KokkosMLA_LatentKernels.hpp"

#include <climits>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// The launch of the latent, decode and projection kernels a path planned:
/// the backend, the team and the tiles (fitted to the kernel's scratch budget).
struct LaunchConfig {
  Backend backend;
  int team_size = 1;
  int scratch_level = 0;          ///< team scratch level of the attention kernel
  int query_tile = 1;             ///< query tokens per team
  int head_group = 1;             ///< heads per team (latent kernels)
  int key_tile = 1;               ///< keys staged per step
  int weight_chunk = 1;           ///< rows of w_uk / w_uv staged per step
  std::size_t scratch_bytes = 0;  ///< per team, attention kernel
  int project_rows = 0;           ///< cache attention's per-head projections: rows,
  int project_columns = 0;        ///< output columns
  int project_chunk = 0;          ///< and inner-dimension chunk per team
};

/// Teams a cluster of kernel K's launch holds (K::kClusterTeams, else 1):
/// on CUDA, thread-block clusters whose teams share scratch and barriers.
template <class K, class = void>
struct ClusterTeams : std::integral_constant<int, 1> {};
template <class K>
struct ClusterTeams<K, std::void_t<decltype(K::kClusterTeams)>>
    : std::integral_constant<int, K::kClusterTeams> {};

#ifdef KOKKOS_ENABLE_CUDA
/// Has Kokkos launch kernel K under policy type P in clusters of `teams`
/// (consecutive league ranks) on exec's GPU: a required cluster width set,
/// once a GPU, on the CUDA function that Kokkos launches for them (its own
/// launch has no cluster argument).
template <class K, class P>
void launch_in_clusters(const Kokkos::Cuda& exec, const char* label, int teams) {
  static std::mutex mutex;
  static std::set<int> devices_set;
  const std::lock_guard<std::mutex> lock(mutex);
  const int device = exec.cuda_device();
  if (devices_set.count(device)) return;
  using Driver = Kokkos::Impl::ParallelFor<K, P, Kokkos::Cuda>;
  const void* function = reinterpret_cast<const void*>(
      Kokkos::Impl::CudaParallelLaunch<Driver, typename P::launch_bounds>::get_kernel_func());
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(function, cudaFuncAttributeRequiredClusterWidth, teams);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(function, cudaFuncAttributeRequiredClusterHeight, 1);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(function, cudaFuncAttributeRequiredClusterDepth, 1);
  if (cudaSetDevice(current) != cudaSuccess || e != cudaSuccess)
    throw std::runtime_error(std::string(label) + ": clusters of " + std::to_string(teams) +
                             " teams refused: " + cudaGetErrorString(e));
  devices_set.insert(device);
}
#endif

/// Launches kernel k with its scratch, as many threads per team as asked for
/// and the backend allows for this kernel (under the launch bounds given). A
/// kernel whose layout needs every thread asked for (exact) fails instead of
/// running with fewer.
template <class ExecSpace, class Kernel, class Bounds = Kokkos::LaunchBounds<>>
void launch(const ExecSpace& exec, const char* label, const Kernel& k, int team_size,
            std::size_t scratch_bytes, bool exact = false, Bounds = Bounds()) {
  using Policy = Kokkos::TeamPolicy<ExecSpace, Bounds>;
  // Counted in 64 bits: a league past Kokkos' int range is an error, not a wrapped count.
  const std::int64_t league = std::int64_t(k.league_size());
  if (league <= 0 || league > std::int64_t(INT_MAX))
    throw std::invalid_argument(std::string(label) + ": " + std::to_string(league) +
                                " teams, outside the 1 .. INT_MAX a launch takes");
  Policy probe(exec, int(league), 1);
  probe.set_scratch_size(k.scratch_level, Kokkos::PerTeam(scratch_bytes));
  const int allowed = probe.team_size_max(k, Kokkos::ParallelForTag());
  if (exact && allowed < team_size)
    throw std::runtime_error(std::string(label) + ": needs " + std::to_string(team_size) +
                             " threads per team, the backend allows " + std::to_string(allowed));
  // The functor travels as the kernel's argument (HintLightWeight, up to 4 KB
  // on CUDA): from 512 bytes on, Kokkos would otherwise stage it through
  // constant memory behind a host-side event wait, which stalls the host and
  // which a CUDA graph capture cannot take.
  auto policy =
      Kokkos::Experimental::require(Policy(exec, int(league), team_size < allowed ? team_size : allowed),
                                    Kokkos::Experimental::WorkItemProperty::HintLightWeight);
  policy.set_scratch_size(k.scratch_level, Kokkos::PerTeam(scratch_bytes));
  if constexpr (ClusterTeams<Kernel>::value > 1) {
    constexpr int teams = ClusterTeams<Kernel>::value;
    if (league % teams != 0)
      throw std::invalid_argument(std::string(label) + ": " + std::to_string(league) +
                                  " teams, not whole clusters of " + std::to_string(teams));
#ifdef KOKKOS_ENABLE_CUDA
    static_assert(std::is_same<ExecSpace, Kokkos::Cuda>::value, "clusters of teams: CUDA alone");
    launch_in_clusters<Kernel, decltype(policy)>(exec, label, teams);
#else
    static_assert(ClusterTeams<Kernel>::value == 1, "clusters of teams: CUDA alone");
#endif
  }
  Kokkos::parallel_for(label, policy, k);
}

/// Launches a host kernel (src/impl/KokkosMLA_*HostKernel.hpp): teams of one
/// thread, a core each, dynamically scheduled (their work differs: causal
/// query tiles, sequence lengths), scratch at the level that holds it (both
/// are ordinary memory on a host).
template <class ExecSpace, class Kernel>
void launch_on_host(const ExecSpace& exec, const char* label, Kernel k, std::size_t scratch_bytes,
                    const Backend& be) {
  k.scratch_level = be.level_holding(scratch_bytes);
  launch(exec, label, k, 1, scratch_bytes, false, Kokkos::Schedule<Kokkos::Dynamic>());
}

/// A latent kernel with the extents of s: one contiguous sequence of s.keys
/// keys per batch element, no RoPE part, one split.
template <class ExecSpace, class T, LatentStep Step>
LatentKernel<ExecSpace, T, Step> latent_kernel(const Shape& s) {
  LatentKernel<ExecSpace, T, Step> k;
  k.batch = s.batch;
  k.queries = s.queries;
  k.heads = s.heads;
  k.dim = s.head_dim;
  k.rank = s.latent_dim;
  k.cache.keys = s.keys;
  k.cache.page_size = s.keys;
  k.cache.latent_ld = s.latent_dim;
  k.team_threads = preferred_team_size<ExecSpace>();
  return k;
}

/// The kernel's tiles from a LaunchConfig.
inline LatentTiles latent_tiles_of(const LaunchConfig& c) {
  return {c.query_tile, c.head_group, c.key_tile, c.weight_chunk};
}

/// Launches a kernel whose tiles are set (latent, decode and projection
/// kernels); its scratch goes to level 0 when it fits there.
template <class ExecSpace, class Kernel>
void launch_tiled(const ExecSpace& exec, const char* label, Kernel k, const LaunchConfig& c) {
  const std::size_t bytes = k.scratch_bytes(k.tiles);
  const std::size_t budget = c.backend.scratch_budget(demand_of<typename Kernel::bounds>(c.team_size));
  k.scratch_level = bytes <= budget ? 0 : 1;
  launch(exec, label, k, c.team_size, bytes, Kernel::needs_full_team, typename Kernel::bounds());
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
