#ifndef KOKKOSMLA_BARRIERS_HPP
#define KOKKOSMLA_BARRIERS_HPP
// Synchronisation finer than a team barrier for the sm_90a kernels, through
// inline PTX: shared-memory mbarriers (a count of arrivals per phase; a
// thread's cp.async copies can arrive when they land) and named barriers
// between two warpgroups (one waits, the other only arrives).

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

/// Waits until the phase of parity `parity` (0 for the first, 1 for the
/// second, ...) has completed.
__device__ inline void wait(std::uint64_t* barrier, unsigned parity) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(
      "{\n.reg .pred done;\nwaiting:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra waiting;\n}\n" ::"r"(address_of(barrier)),
      "r"(parity)
      : "memory");
#else
  (void)barrier, (void)parity;
#endif
}

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
  /// Waits until every user of tile i is done with it.
  __device__ void await_release(int i) const { wait(empty + i % stages, (i / stages) & 1); }
};

}  // namespace sync
}  // namespace Impl
}  // namespace KokkosMLA

#endif
