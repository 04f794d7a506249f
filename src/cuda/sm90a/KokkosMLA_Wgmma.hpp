#ifndef KOKKOSMLA_WGMMA_HPP
#define KOKKOSMLA_WGMMA_HPP
// Hopper warpgroup products (wgmma.mma_async) through inline PTX, for the
// sm_90a kernels of this folder. A warpgroup is four consecutive warps; one
// product m64nNk16 multiplies 64 rows (16 per warp) by N columns over 16 of
// the contraction, accumulating fp32 in registers laid out as mma.sync's
// m16n8 accumulators side by side: n8 tile j of a thread is
// d[4j .. 4j + 3] = (row g, columns 8j + 2t, 8j + 2t + 1), then row g + 8,
// with g = lane / 4, t = lane % 4 and rows counted from 16 * (warp % 4).
//
// TF32 products (m64nNk8, fp32 bits in, the low 13 mantissa bits ignored)
// take both operands K-major; their A fragments in registers are mma.sync's
// m16n8k8 ones. Operands in shared memory are tiles stored as 128-byte rows
// (64 16-bit or 32 32-bit columns) in blocks, swizzled the way wgmma's 128-byte mode reads them (the
// 16-byte piece c of row r at piece c ^ (r % 8)); each block starts on a
// 1024-byte boundary. A tile of keys serves both products of attention from
// the one copy: read K-major as the keys of S = Q K^T, and MN-major
// (transposed) as the values of O = P V.

#include "impl/KokkosMLA_TensorOps.hpp"

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KOKKOSMLA_SM90A_DEVICE_CODE 1
#endif

namespace KokkosMLA {
namespace Impl {
namespace wgmma {

constexpr int kBlockColumns = 64;  ///< 16-bit columns of one 128-byte swizzled row
constexpr int kAtomBytes = 1024;   ///< 8 swizzled rows: the pattern's period

/// Byte offset of byte `byte` of row `row` (as if unswizzled and stored in
/// 128-byte blocks of `rows` rows) in a swizzled tile, for elements of any size.
__host__ __device__ constexpr int swizzled_byte_offset(int rows, int row, int byte) {
  return (byte / 128) * rows * 128 + row * 128 + ((((byte % 128) / 16) ^ (row % 8)) * 16) + byte % 16;
}

/// Byte offset of 16-bit element (row, col) of a swizzled tile of `rows` rows.
__host__ __device__ constexpr int swizzled_offset(int rows, int row, int col) {
  return swizzled_byte_offset(rows, row, 2 * col);
}

/// The shared-memory matrix descriptor of the operand starting at byte
/// `address` of the shared window: 128-byte swizzle, `stride` bytes between
/// groups of 8 rows (K-major) or 8 contraction rows (MN-major), `leading`
/// bytes between 64-column blocks (MN-major, N > 64 only).
__device__ inline std::uint64_t descriptor(unsigned address, unsigned leading, unsigned stride) {
  return std::uint64_t((address & 0x3FFFF) >> 4) | std::uint64_t((leading >> 4) & 0x3FFF) << 16 |
         std::uint64_t((stride >> 4) & 0x3FFF) << 32 | std::uint64_t(1) << 62;
}

/// A descriptor (as `descriptor` makes it) split in its two words, whose
/// start address moves by adding to the low word: exact while the operand
/// stays inside the 256 KB shared window (the start field holds 14 bits of
/// 16-byte units), one integer addition a product where a fresh descriptor
/// takes three or four instructions.
struct Operand {
  unsigned low, high;
  __device__ Operand(unsigned address, unsigned leading, unsigned stride) {
    const std::uint64_t d = descriptor(address, leading, stride);
    low = unsigned(d);
    high = unsigned(d >> 32);
  }
  /// The descriptor of the operand `bytes` further on.
  __device__ std::uint64_t at(unsigned bytes) const {
    return std::uint64_t(high) << 32 | (low + (bytes >> 4));
  }
};

/// x, which every lane of the warp holds alike, taken from lane 0 (all 32
/// lanes call it) so that the compiler knows it is the same: shared-memory
/// addresses that reach the products are then computed once a warp in the
/// uniform registers wgmma reads descriptors from, not per thread and moved
/// there (R2UR) before every product.
__device__ inline unsigned warp_uniform(unsigned x) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  return __shfl_sync(0xffffffffu, x, 0);
#else
  return x;
#endif
}

/// The shared-window address of p, as warp_uniform.
__device__ inline unsigned uniform_shared_address(const void* p) {
  return warp_uniform(unsigned(__cvta_generic_to_shared(p)));
}

/// Orders this thread's earlier register and shared-memory writes before the warpgroup's next products.
__device__ inline void fence() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

/// Closes the group of products issued since the last commit.
__device__ inline void commit() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/// Waits until at most N committed groups are in flight.
template <int N>
__device__ inline void wait() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/// Sets this warpgroup's registers a thread from `Launched` (what the
/// kernel's launch bounds gave it) to N (all its threads call it): a kernel
/// whose groups have roles gives the registers one role does not need to
/// another (setmaxnreg; N a multiple of 8 in [24, 256]).
template <int N, int Launched>
__device__ inline void set_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (N > Launched)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
  else if constexpr (N < Launched)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// Makes shared memory written by ordinary stores and cp.async visible to
/// the products, which read it through the async proxy.
__device__ inline void fence_shared_writes() {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// Stores four 8x8 16-bit matrices held as mma.sync fragments (register i:
/// matrix i's row lane / 4, columns 2 (lane % 4) and the next) with one
/// stmatrix: lane l gives the shared-window address of row l % 8 of matrix
/// l / 8 (16 contiguous bytes), where fragment-wise stores take sixteen.
__device__ inline void store_matrices(unsigned address, const unsigned (&r)[4]) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  (void)address, (void)r;
#endif
}

/// Keeps the compiler from moving accesses to accumulators across a product's issue and wait.
template <int N>
__device__ inline void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define KOKKOSMLA_F8(d, i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define KOKKOSMLA_SS_N32(TYPE)                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
#define KOKKOSMLA_SS_N64(TYPE)                                                                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                              \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
#define KOKKOSMLA_SS_N128(TYPE)                                                                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                              \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                              \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                        \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                        \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, " \
  "0;\n}\n"
#define KOKKOSMLA_RS_N64_TRANSPOSED(TYPE)                                                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                              \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
#define KOKKOSMLA_RS_N128_TRANSPOSED(TYPE)                                            \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                        \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                        \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
  "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
#define KOKKOSMLA_SS_N64_TRANSPOSED(TYPE)                                                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                              \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"

/// d (64 x 32) = A B^T (+ d when `add`) over 16 columns: A (64 rows) and B
/// (32 rows) K-major in shared memory. bf16 when Bf16, fp16 otherwise.
template <bool Bf16>
__device__ inline void product_n32(float (&d)[16], std::uint64_t a, std::uint64_t b, bool add) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_SS_N32("bf16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8)
                 : "l"(a), "l"(b), "r"(int(add)));
  else
    asm volatile(KOKKOSMLA_SS_N32("f16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8)
                 : "l"(a), "l"(b), "r"(int(add)));
#else
  (void)d, (void)a, (void)b, (void)add;
#endif
}

/// d (64 x 64) = A B^T (+ d when `add`) over 16 columns: A (64 rows) and B
/// (64 rows) K-major in shared memory. bf16 when Bf16, fp16 otherwise.
template <bool Bf16>
__device__ inline void product_n64(float (&d)[32], std::uint64_t a, std::uint64_t b, bool add) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_SS_N64("bf16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "l"(a), "l"(b), "r"(int(add)));
  else
    asm volatile(KOKKOSMLA_SS_N64("f16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "l"(a), "l"(b), "r"(int(add)));
#else
  (void)d, (void)a, (void)b, (void)add;
#endif
}

/// d (64 x N) = A B^T (+ d when `add`) over 16 columns, N = 32 or 64.
template <bool Bf16, int Accumulators>
__device__ inline void product(float (&d)[Accumulators], std::uint64_t a, std::uint64_t b, bool add) {
  static_assert(Accumulators == 16 || Accumulators == 32, "N = 32 or 64");
  if constexpr (Accumulators == 16)
    product_n32<Bf16>(d, a, b, add);
  else
    product_n64<Bf16>(d, a, b, add);
}

/// d (64 x 128) = A B^T (+ d when `add`) over 16 columns: A (64 rows) and B
/// (128 rows) K-major in shared memory. bf16 when Bf16, fp16 otherwise.
template <bool Bf16>
__device__ inline void product_n128(float (&d)[64], std::uint64_t a, std::uint64_t b, bool add) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_SS_N128("bf16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24),
                   KOKKOSMLA_F8(d, 32), KOKKOSMLA_F8(d, 40), KOKKOSMLA_F8(d, 48), KOKKOSMLA_F8(d, 56)
                 : "l"(a), "l"(b), "r"(int(add)));
  else
    asm volatile(KOKKOSMLA_SS_N128("f16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24),
                   KOKKOSMLA_F8(d, 32), KOKKOSMLA_F8(d, 40), KOKKOSMLA_F8(d, 48), KOKKOSMLA_F8(d, 56)
                 : "l"(a), "l"(b), "r"(int(add)));
#else
  (void)d, (void)a, (void)b, (void)add;
#endif
}

/// d (64 x 64) += A B over 16 rows of B: A (64 x 16) in registers as
/// mma.sync's m16n8k16 A fragments (warp w: rows 16w ..), B (16 x 64) MN-major
/// in shared memory.
template <bool Bf16>
__device__ inline void product_n64_transposed(float (&d)[32], const unsigned (&a)[4], std::uint64_t b) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_RS_N64_TRANSPOSED("bf16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(KOKKOSMLA_RS_N64_TRANSPOSED("f16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
#endif
}

/// [d0 d1] (64 x 128) += A B over 16 rows of B: A (64 x 16) in registers as
/// mma.sync's m16n8k16 A fragments, B (16 x 128) MN-major in shared memory as
/// two 64-column blocks (the descriptor's leading offset apart); d0 holds
/// columns 0 .. 63, d1 64 .. 127. One product where two m64n64 would read A twice.
template <bool Bf16>
__device__ inline void product_n128_transposed(float (&d0)[32], float (&d1)[32], const unsigned (&a)[4],
                                               std::uint64_t b) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_RS_N128_TRANSPOSED("bf16")
                 : KOKKOSMLA_F8(d0, 0), KOKKOSMLA_F8(d0, 8), KOKKOSMLA_F8(d0, 16), KOKKOSMLA_F8(d0, 24),
                   KOKKOSMLA_F8(d1, 0), KOKKOSMLA_F8(d1, 8), KOKKOSMLA_F8(d1, 16), KOKKOSMLA_F8(d1, 24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(KOKKOSMLA_RS_N128_TRANSPOSED("f16")
                 : KOKKOSMLA_F8(d0, 0), KOKKOSMLA_F8(d0, 8), KOKKOSMLA_F8(d0, 16), KOKKOSMLA_F8(d0, 24),
                   KOKKOSMLA_F8(d1, 0), KOKKOSMLA_F8(d1, 8), KOKKOSMLA_F8(d1, 16), KOKKOSMLA_F8(d1, 24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#else
  (void)d0, (void)d1, (void)a, (void)b;
#endif
}

/// d (64 x 64) += A B over 16 rows of B: A (64 x 16) K-major and B (16 x 64)
/// MN-major, both in shared memory.
template <bool Bf16>
__device__ inline void product_n64_transposed(float (&d)[32], std::uint64_t a, std::uint64_t b) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  if constexpr (Bf16)
    asm volatile(KOKKOSMLA_SS_N64_TRANSPOSED("bf16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "l"(a), "l"(b), "r"(1));
  else
    asm volatile(KOKKOSMLA_SS_N64_TRANSPOSED("f16")
                 : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
                 : "l"(a), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
#endif
}

/// Issues o += P V as one group: P one A operand per 16 keys (mma.sync A
/// fragments in registers, unsigned[4], or a shared-memory descriptor), V a
/// swizzled tile of `keys` rows read transposed, chunk c of o from the
/// tile's 64-column block first_block + c. Columns: of one product, 64, or
/// 128 (two chunks a product; P in registers), which the prefill kernel
/// measured 2-3 % faster and the decode kernel's scores group 22 % slower
/// (docs/performance.md).
template <bool Bf16, int Columns = 64, int Chunks, int Steps, class A>
__device__ inline void issue_values(float (&o)[Chunks][32], const A (&pa)[Steps], unsigned tile_at, int keys,
                                    int first_block) {
#pragma unroll
  for (int c = 0; c < Chunks; ++c) pin(o[c]);
  // One descriptor; each product's is an offset of it (one addition, not four instructions).
  const Operand values(tile_at + first_block * keys * 128, keys * 128, kAtomBytes);
  fence();
#pragma unroll
  for (int j = 0; j < Steps; ++j) {
    if constexpr (Columns == 128) {
      static_assert(Chunks % 2 == 0 && std::is_same<A, unsigned[4]>::value, "chunk pairs, P in registers");
#pragma unroll
      for (int c = 0; c < Chunks; c += 2)
        product_n128_transposed<Bf16>(o[c], o[c + 1], pa[j], values.at(c * keys * 128 + j * 16 * 128));
    } else {
      static_assert(Columns == 64, "products of 64 or 128 columns");
#pragma unroll
      for (int c = 0; c < Chunks; ++c)
        product_n64_transposed<Bf16>(o[c], pa[j], values.at(c * keys * 128 + j * 16 * 128));
    }
  }
  commit();
}

#define KOKKOSMLA_TF32_SS_N64                                                                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"                                                    \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
#define KOKKOSMLA_TF32_RS_N64                                                                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"                                                    \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"

/// d (64 x 64) = A B^T (+ d when `add`) over 8 columns in TF32: A (64 rows)
/// and B (64 rows) K-major fp32 tiles in shared memory.
__device__ inline void product_tf32_n64(float (&d)[32], std::uint64_t a, std::uint64_t b, bool add) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(KOKKOSMLA_TF32_SS_N64
               : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
               : "l"(a), "l"(b), "r"(int(add)));
#else
  (void)d, (void)a, (void)b, (void)add;
#endif
}

/// d (64 x 64) += A B over 8 rows of B in TF32: A (64 x 8) in registers as
/// mma.sync's m16n8k8 TF32 A fragments, B^T (64 rows of 8) K-major in shared memory.
__device__ inline void product_tf32_n64(float (&d)[32], const unsigned (&a)[4], std::uint64_t b) {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  asm volatile(KOKKOSMLA_TF32_RS_N64
               : KOKKOSMLA_F8(d, 0), KOKKOSMLA_F8(d, 8), KOKKOSMLA_F8(d, 16), KOKKOSMLA_F8(d, 24)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
#endif
}

/// The position of key `key` in a tile of V^T for TF32 products from scores
/// in registers: within each 8 keys, key 2i at i and key 2i + 1 at i + 4. A
/// thread's score accumulators of an n8 tile (columns 2t, 2t + 1) then are
/// its TF32 A fragment's columns t and t + 4 (pack_tf32_probabilities): no
/// exchange between lanes.
__host__ __device__ constexpr int tf32_value_position(int key) {
  return (key & ~7) | ((key & 1) << 2) | ((key & 7) >> 1);
}

/// The TF32 A fragments of P = p (rounded) for products over 8 keys each, V^T
/// stored in tf32_value_position's order: tile j of p is keys 8j .. 8j + 7.
template <int N>
__device__ inline void pack_tf32_probabilities(unsigned (&pa)[N / 4][4], const float (&p)[N]) {
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    pa[j][0] = to_tf32(p[4 * j]);      // (row g, key 2t)
    pa[j][1] = to_tf32(p[4 * j + 2]);  // (row g + 8, key 2t)
    pa[j][2] = to_tf32(p[4 * j + 1]);  // (row g, key 2t + 1)
    pa[j][3] = to_tf32(p[4 * j + 3]);  // (row g + 8, key 2t + 1)
  }
}

/// Issues o += P V in TF32 as one group: P one A fragment per 8 keys
/// (pack_tf32_probabilities), V^T a tile of `Rows` rows (the head dimension)
/// stored as blocks of 32 keys (128-byte rows, swizzled); chunk c of o from
/// rows 64c .. 64c + 63.
template <int Rows, int Chunks, int Steps>
__device__ inline void issue_tf32_values(float (&o)[Chunks][32], const unsigned (&pa)[Steps][4],
                                         unsigned tile_at) {
#pragma unroll
  for (int c = 0; c < Chunks; ++c) pin(o[c]);
  fence();
#pragma unroll
  for (int j = 0; j < Steps; ++j)
#pragma unroll
    for (int c = 0; c < Chunks; ++c)
      product_tf32_n64(o[c], pa[j], descriptor(tile_at + (j / 4) * Rows * 128 + c * 64 * 128 + 32 * (j % 4), 0,
                                               kAtomBytes));
  commit();
}

#undef KOKKOSMLA_TF32_SS_N64
#undef KOKKOSMLA_TF32_RS_N64
#undef KOKKOSMLA_F8
#undef KOKKOSMLA_SS_N32
#undef KOKKOSMLA_SS_N64
#undef KOKKOSMLA_SS_N128
#undef KOKKOSMLA_RS_N64_TRANSPOSED
#undef KOKKOSMLA_SS_N64_TRANSPOSED
#undef KOKKOSMLA_RS_N128_TRANSPOSED

}  // namespace wgmma
}  // namespace Impl
}  // namespace KokkosMLA

#endif
