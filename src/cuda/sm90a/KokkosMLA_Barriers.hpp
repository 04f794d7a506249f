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
__device__ inline unsigned address_of(std::uint64_t* barrier) {
  return unsigned(__cvta_generic_to_shared(barrier));
}

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

}  // namespace sync
}  // namespace Impl
}  // namespace KokkosMLA

#endif
