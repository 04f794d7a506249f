#ifndef KOKKOSMLA_TMA_HPP
#define KOKKOSMLA_TMA_HPP
// Hopper's tensor copy engine (TMA) for the sm_90a kernels. A tensor map (a
// 128-byte descriptor of a strided tensor of 16- or 32-bit elements in device memory, encoded on
// the host) lets one thread copy a whole box of the tensor into team scratch
// in wgmma's 128-byte-swizzled layout (KokkosMLA_Wgmma.hpp), counting the
// bytes on an mbarrier as they land; elements past the tensor's extents
// arrive as zeros. The kernels take the maps from global memory: a Kokkos
// functor is passed as a kernel argument that cannot be `__grid_constant__`.

#include "cuda/sm90a/KokkosMLA_Barriers.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace KokkosMLA {
namespace Impl {
namespace tma {

/// 64-bit words of one tensor map (CUtensorMap), kept 64-byte aligned.
constexpr int kMapWords = 16;

/// A tensor of rank 2 .. 5 as TMA sees it: extents from the contiguous
/// dimension out, the byte strides of dimensions 1 .. rank - 1 (multiples of
/// 16), the box one copy moves (box[0] elements make one 128-byte swizzled
/// row: 64 of 16 bits, 32 of 32 bits) and the bytes of an element (2 or 4;
/// TMA copies their bits, whatever the type).
struct TensorShape {
  int rank;
  std::uint64_t extents[5];
  std::uint64_t byte_strides[4];
  std::uint32_t box[5];
  int element_bytes = 2;
};

/// Encodes the map of `shape` at `base` (device memory) into `map` (host
/// memory, kMapWords words); throws std::runtime_error naming the shape when
/// the driver refuses it. Defined in KokkosMLA_Tma.cu.
void encode(std::uint64_t* map, const void* base, const TensorShape& shape);

/// A tensor for device_maps: where it starts, and how TMA sees it.
struct Tensor {
  const void* base;
  TensorShape shape;
};

/// The maps of `tensors`, in order, encoded on the host into a new device
/// allocation labelled `label` (64-byte aligned, as TMA wants it).
template <class ExecSpace>
Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> device_maps(const ExecSpace& exec,
                                                                            const char* label,
                                                                            std::initializer_list<Tensor> tensors) {
  constexpr std::size_t kMost = 2;
  if (tensors.size() > kMost) throw std::logic_error("KokkosMLA: more TMA maps than device_maps holds");
  Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> maps(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), tensors.size() * kMapWords);
  if (reinterpret_cast<std::uintptr_t>(maps.data()) % 64 != 0)
    throw std::runtime_error(std::string("KokkosMLA: the allocation of ") + label + " is not 64-byte aligned");
  alignas(64) std::uint64_t encoded[kMost * kMapWords] = {};
  std::uint64_t* at = encoded;
  for (const Tensor& t : tensors) encode(at, t.base, t.shape), at += kMapWords;
  Kokkos::deep_copy(exec, maps,
                    Kokkos::View<const std::uint64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                        encoded, maps.extent(0)));
  exec.fence();  // encoded is about to go out of scope
  return maps;
}

/// Announces `bytes` more to land on the barrier's current phase, as this
/// thread's arrival.
__device__ inline void expect_bytes(std::uint64_t* barrier, unsigned bytes) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sync::address_of(barrier)),
               "r"(bytes)
               : "memory");
#else
  (void)barrier, (void)bytes;
#endif
}

/// Starts copying the box of a rank-2 map at coordinates (c0, c1) into team
/// scratch at `to` (1024-byte aligned), its bytes counted on `barrier`.
__device__ inline void load_box(char* to, const std::uint64_t* map, int c0, int c1, std::uint64_t* barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(unsigned(__cvta_generic_to_shared(to))),
      "l"(map), "r"(c0), "r"(c1), "r"(sync::address_of(barrier))
      : "memory");
#else
  (void)to, (void)map, (void)c0, (void)c1, (void)barrier;
#endif
}

/// Starts copying the box of a rank-4 map at coordinates (c0, c1, c2, c3)
/// (elements, from the contiguous dimension out) into team scratch at `to`
/// (1024-byte aligned), its bytes counted on `barrier`.
__device__ inline void load_box(char* to, const std::uint64_t* map, int c0, int c1, int c2, int c3,
                                std::uint64_t* barrier) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4, %5}], [%6];\n" ::"r"(unsigned(__cvta_generic_to_shared(to))),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(sync::address_of(barrier))
      : "memory");
#else
  (void)to, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)barrier;
#endif
}

}  // namespace tma
}  // namespace Impl
}  // namespace KokkosMLA

#endif
