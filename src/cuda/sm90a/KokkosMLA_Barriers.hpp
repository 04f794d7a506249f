#ifndef KOKKOSMLA_BARRIERS_HPP
#define KOKKOSMLA_BARRIERS_HPP
// Synchronisation finer than a team barrier for the sm_90a kernels, through
// inline PTX: shared-memory mbarriers (a count of arrivals per phase; a
// thread's cp.async copies can arrive when they land), named barriers
// between two warpgroups (one waits, the other only arrives), and what the
// teams of a thread-block cluster share.

#include "cuda/sm90a/KokkosMLA_Wgmma.hpp"

namespace KokkosMLA {
namespace Impl {
namespace sync {

/// The shared-window address of an mbarrier in team scratch.
__device__ inline unsigned address_of(std::uint64_t* barrier) { return shared_address(barrier); }

/// Sets up an mbarrier whose phases complete after `count` arrivals.
__device__ inline void init(std::uint64_t* barrier, unsigned count) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(address_of(barrier)), "r"(count) : "memory");
#else
  (void)barrier, (void)count;
#endif
}

/// Ends an mbarrier's life, so that its memory may hold another.
__device__ inline void invalidate(std::uint64_t* barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(address_of(barrier)) : "memory");
#else
  (void)barrier;
#endif
}

/// This thread's arrival.
__device__ inline void arrive(std::uint64_t* barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(address_of(barrier)) : "memory");
#else
  (void)barrier;
#endif
}

/// This thread's arrival once every cp.async copy it has started has landed
/// (counted in the barrier's initial count).
__device__ inline void arrive_when_copied(std::uint64_t* barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(address_of(barrier))
               : "memory");
#else
  (void)barrier;
#endif
}

// An mbarrier's wait loop, acquiring at the scope `order` names.
#define KOKKOSMLA_MBARRIER_WAIT(order)                            \
  "{\n.reg .pred done;\nwaiting:\nmbarrier.try_wait.parity" order \
  ".shared::cta.b64 done, [%0], %1;\n"                            \
  "@!done bra waiting;\n}\n"

/// Waits until the phase of parity `parity` (0 for the first, 1 for the
/// second, ...) has completed; FromCluster: also acquiring what threads of
/// the cluster's other teams released by their arrivals (cluster::arrive_remote).
template <bool FromCluster = false>
__device__ inline void wait(std::uint64_t* barrier, unsigned parity) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (FromCluster)
    asm volatile(KOKKOSMLA_MBARRIER_WAIT(".acquire.cluster")::"r"(address_of(barrier)), "r"(parity)
                 : "memory");
  else
    asm volatile(KOKKOSMLA_MBARRIER_WAIT("")::"r"(address_of(barrier)), "r"(parity) : "memory");
#else
  (void)barrier, (void)parity;
#endif
}
#undef KOKKOSMLA_MBARRIER_WAIT

/// Named barrier `id` over `threads` threads: wait there, or only arrive.
__device__ inline void named_wait(int id, int threads) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id, (void)threads;
#endif
}
__device__ inline void named_arrive(int id, int threads) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id, (void)threads;
#endif
}

/// Buffers used in turn, tile i in buffer i % stages, each with two
/// mbarriers: full (tile i has landed) and empty (its users are done with
/// it). The n-th use of a buffer is its barriers' phase n.
struct Ring {
  char* buffers;
  std::uint64_t* full;
  std::uint64_t* empty;
  int stages;
  int bytes;  ///< of a buffer
  __device__ char* buffer(int i) const { return buffers + i % stages * bytes; }
  /// Sets up every buffer's barriers (one thread): full after `full_arrivals`
  /// arrivals a phase, empty after `empty_arrivals`.
  __device__ void init(unsigned full_arrivals, unsigned empty_arrivals) const {
    for (int b = 0; b < stages; ++b) sync::init(full + b, full_arrivals), sync::init(empty + b, empty_arrivals);
  }
  /// The full barrier of tile i's buffer.
  __device__ std::uint64_t* full_of(int i) const { return full + i % stages; }
  /// Waits until tile i has landed.
  __device__ void await(int i) const { wait(full + i % stages, (i / stages) & 1); }
  /// This thread's part of tile i has landed (written by ordinary stores).
  __device__ void filled(int i) const { arrive(full + i % stages); }
  /// This thread's part of tile i will have landed once its cp.async copies have.
  __device__ void filled_when_copied(int i) const { arrive_when_copied(full + i % stages); }
  /// This thread is done with tile i.
  __device__ void release(int i) const { arrive(empty + i % stages); }
  /// Waits until every user of tile i is done with it (FromCluster: users
  /// in the cluster's other teams too, arriving by cluster::arrive_remote).
  template <bool FromCluster = false>
  __device__ void await_release(int i) const {
    wait<FromCluster>(empty + i % stages, (i / stages) & 1);
  }
};

}  // namespace sync

/// Thread-block clusters: teams launched together on one GPC, each able to
/// write the others' scratch and arrive on their mbarriers (a kernel's
/// launch sets the cluster's size: kClusterTeams, Launch.hpp).
namespace cluster {

/// This team's rank in its cluster.
__device__ inline unsigned rank() {
  unsigned r = 0;
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

/// The address, in the cluster's shared window, of what sits at `address`
/// (a shared-window address) in the scratch of the cluster's team `team`.
__device__ inline unsigned peer_address(unsigned address, unsigned team) {
  unsigned r = 0;
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(address), "r"(team));
#else
  (void)address, (void)team;
#endif
  return r;
}

/// Every thread of the cluster's teams meets here: what each wrote before
/// is visible to all after (and mbarriers set up before, once
/// publish_inits has run, may take remote arrivals).
__device__ inline void meet() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

/// Orders this thread's mbarrier set-ups before its next cluster-scope release (meet).
__device__ inline void publish_inits() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// This thread's arrival on another team's mbarrier (`barrier`: its
/// cluster address), releasing at cluster scope what this thread has done.
__device__ inline void arrive_remote(unsigned barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(barrier) : "memory");
#else
  (void)barrier;
#endif
}

/// Stores 16 bytes at `address` in another team's scratch, counted (as
/// bytes, like a TMA copy's) on its mbarrier at `barrier` (cluster addresses).
__device__ inline void store_remote_16(unsigned address, uint4 v, unsigned barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
          address),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(barrier)
      : "memory");
#else
  (void)address, (void)v, (void)barrier;
#endif
}

}  // namespace cluster
}  // namespace Impl
}  // namespace KokkosMLA

#endif
