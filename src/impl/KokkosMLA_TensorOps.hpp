#ifndef KOKKOSMLA_TENSOROPS_HPP
#define KOKKOSMLA_TENSOROPS_HPP
// Tensor-core building blocks for CUDA GPUs of compute capability 8.0 and
// newer (mma.sync, ldmatrix, cp.async through inline PTX), and the operand
// handling of FlashTensorKernel per element type:
//   16-bit (half_t, bhalf_t): m16n8k16 products, 64-key steps, K and V
//     fragments by ldmatrix (V transposed), P packed from the accumulators;
//   float: m16n8k8 products, TF32 (q and P rounded to TF32, K and V
//     truncated) or 3xTF32 (each operand split into two TF32 parts, three
//     products: about fp32's accuracy); 32-key steps (two fp32 tiles of 64
//     keys would not fit the 48 KB of a Kokkos team).
// Built where the build declares them (KOKKOSMLA_ENABLE_SM80 in
// KokkosMLA_config.hpp); the portable kernels serve every other target.

#include <KokkosMLA_Precision.hpp>
#include <KokkosMLA_config.hpp>

#include "KokkosMLA_Compat.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#if KOKKOSMLA_ENABLE_SM80
// Device code of the tensor-core kernels exists only in passes for compute
// capability 8.0 and newer; their kernels abort, naming themselves, elsewhere.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KOKKOSMLA_SM80_DEVICE_CODE 1
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace KokkosMLA {
namespace Impl {

/// Throws std::invalid_argument, naming the argument, unless p is aligned to
/// `bytes`: the tensor-core kernels read and copy their operands in pairs and
/// 16-byte pieces.
inline void require_aligned(const char* caller, const char* name, const void* p, std::size_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    throw std::invalid_argument(std::string(caller) + ": " + name + "'s data must be " +
                                std::to_string(bytes) + "-byte aligned for the tensor-core path");
}

/// One tensor-core product c += a b (m16n8k16 for 16-bit types, m16n8k8 for
/// TF32), and for 16-bit types the packing of two floats into an operand pair.
template <class T>
struct Mma;

#if KOKKOSMLA_HAS_BHALF
template <>
struct Mma<Kokkos::Experimental::bhalf_t> {
  KOKKOS_INLINE_FUNCTION static void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
  }
  KOKKOS_INLINE_FUNCTION static unsigned pack(float lo, float hi) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
#else
    (void)lo, (void)hi;
    return 0;
#endif
  }
};
#endif

/// fp16 products, whatever Kokkos' half_t is: Mma<half_t>, and the latent
/// products of the FP8 decode kernel (whose e4m3 values are exact in fp16).
struct Fp16Mma {
  KOKKOS_INLINE_FUNCTION static void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
  }
  KOKKOS_INLINE_FUNCTION static unsigned pack(float lo, float hi) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
#else
    (void)lo, (void)hi;
    return 0;
#endif
  }
};

#if KOKKOSMLA_HAS_HALF
template <>
struct Mma<Kokkos::Experimental::half_t> : Fp16Mma {};
#endif

/// The shared-window address of a team-scratch pointer.
KOKKOS_INLINE_FUNCTION unsigned shared_address(const void* p) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  return unsigned(__cvta_generic_to_shared(p));
#else
  (void)p;
  return 0;
#endif
}

/// Four 8x8 16-bit matrices from shared memory, transposed: lane l gives the
/// address of row l % 8 of matrix l / 8, and register i receives this lane's
/// pair of matrix i (column lane / 4, rows 2 (lane % 4) and the next).
KOKKOS_INLINE_FUNCTION void load_matrices_transposed(const std::uint16_t* row, unsigned (&r)[4]) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  const unsigned address = shared_address(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  (void)row, (void)r;
#endif
}

/// As above, not transposed: register i receives row lane / 4, columns
/// 2 (lane % 4) and the next, of matrix i.
KOKKOS_INLINE_FUNCTION void load_matrices(const std::uint16_t* row, unsigned (&r)[4]) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  const unsigned address = shared_address(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  (void)row, (void)r;
#endif
}

/// Four floats to and from shared memory (st.shared.v4 / ld.shared.v4).
/// Team-scratch pointers reach the compiler as generic ones, whose loads wait
/// on the long scoreboard like global loads.
KOKKOS_INLINE_FUNCTION void store_shared(float* at, const float (&v)[4]) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  const unsigned address = shared_address(at);
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(v[0]), "f"(v[1]), "f"(v[2]),
               "f"(v[3])
               : "memory");
#else
  (void)at, (void)v;
#endif
}

KOKKOS_INLINE_FUNCTION void load_shared(const float* at, float (&v)[4]) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  const unsigned address = shared_address(at);
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "r"(address)
               : "memory");
#else
  (void)at, v[0] = v[1] = v[2] = v[3] = 0;
#endif
}

/// A 32-bit word of shared memory at `address`, a shared-window address
/// (shared_address): one register, where a generic pointer takes two.
KOKKOS_INLINE_FUNCTION unsigned load_shared_word(unsigned address) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  unsigned v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
#else
  (void)address;
  return 0;
#endif
}
KOKKOS_INLINE_FUNCTION void store_shared_word(unsigned address, unsigned v) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
#else
  (void)address, (void)v;
#endif
}

/// 16 bytes stored into shared memory at a shared-window address: 32-bit
/// address arithmetic, where team-scratch pointers reach the compiler as
/// generic 64-bit ones.
KOKKOS_INLINE_FUNCTION void store_shared_16(unsigned address, uint4 v) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
#else
  (void)address, (void)v;
#endif
}

/// 16 (load_global_8: 8) bytes of global memory that no thread writes
/// during the kernel, read into registers without allocating in L1
/// (streamed cache rows, which a large team scratch leaves L1 little room for).
KOKKOS_INLINE_FUNCTION uint4 load_global_16(const void* from) {
  uint4 v{0, 0, 0, 0};
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(from));
#else
  (void)from;
#endif
  return v;
}
KOKKOS_INLINE_FUNCTION uint2 load_global_8(const void* from) {
  uint2 v{0, 0};
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(from));
#else
  (void)from;
#endif
  return v;
}

/// Which caches an asynchronous copy's source passes through: L2 only
/// (cp.async.cg), or L1 as well (cp.async.ca).
enum class CopyVia { L2, L1 };

/// Starts an asynchronous copy of 16 bytes into shared memory; with
/// valid == false it writes zeros and reads nothing.
template <CopyVia Via = CopyVia::L2>
KOKKOS_INLINE_FUNCTION void copy_async(void* to, const void* from, bool valid) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  const unsigned address = shared_address(to);
  if constexpr (Via == CopyVia::L1)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from),
                 "r"(valid ? 16 : 0));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from),
                 "r"(valid ? 16 : 0));
#else
  (void)to, (void)from, (void)valid;
#endif
}

/// Closes the group of copies started since the last commit.
KOKKOS_INLINE_FUNCTION void commit_copies() {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most N committed groups of this thread are in flight.
template <int N>
KOKKOS_INLINE_FUNCTION void wait_copies() {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <>
struct Mma<float> {
  KOKKOS_INLINE_FUNCTION static void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
  }
};

/// 2^x by the special-function unit (relative error about 2^-22; 2^-inf = 0):
/// exp2f without fast-math adds range handling the softmax does not need.
KOKKOS_INLINE_FUNCTION float fast_exp2(float x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
#else
  (void)x;
  return 0;
#endif
}

/// x rounded to TF32 (10 explicit mantissa bits, to nearest, ties away), by
/// integer arithmetic on its bits: half a unit of the last kept bit added to
/// the magnitude (a carry moves into the exponent as rounding up should), the
/// 13 bits below cleared. For finite x this is cvt.rna.tf32.f32's value, in
/// two integer instructions; for values that are stored.
KOKKOS_INLINE_FUNCTION unsigned to_tf32(float x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
#else
  (void)x;
  return 0;
#endif
}

/// x as a TF32 operand of a product, rounded as to_tf32 rounds it, in one
/// instruction: the tensor cores ignore the 13 low mantissa bits of a TF32
/// operand, so only the half unit is added and the clearing is theirs.
KOKKOS_INLINE_FUNCTION unsigned tf32_operand(float x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  return __float_as_uint(x) + 0x1000u;
#else
  (void)x;
  return 0;
#endif
}

/// x rounded to TF32 (to_tf32), as a float.
KOKKOS_INLINE_FUNCTION float rounded_to_tf32(float x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  return __uint_as_float(to_tf32(x));
#else
  (void)x;
  return 0.f;
#endif
}

/// Operand handling of a warp's 16 query rows for 16-bit T. Fragment
/// coordinates: g = lane / 4 (row), t = lane % 4 (column pair).
template <class T, int D>
struct TensorOperands {
  using Element = std::uint16_t;
  static constexpr int kKeys = 64;                  // keys per step
  static constexpr int kLdK = D + 8, kLdV = D + 8;  // staged rows (+16 bytes: ldmatrix hits 32 banks)
  using QFragments = unsigned[D / 16][4];

  /// Rows r0 and r1 (null past the last query) as A fragments over D.
  __device__ static void load_q(QFragments& qa, const Element* r0, const Element* r1, int t) {
    auto pair = [](const Element* row, int col) {
      return row ? *reinterpret_cast<const unsigned*>(row + col) : 0u;
    };
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = pair(r0, kk * 16 + 2 * t);
      qa[kk][1] = pair(r1, kk * 16 + 2 * t);
      qa[kk][2] = pair(r0, kk * 16 + 8 + 2 * t);
      qa[kk][3] = pair(r1, kk * 16 + 8 + 2 * t);
    }
  }

  /// s = Q K^T over one staged K tile. ldmatrix row addresses: lane l gives
  /// row l % 8 of matrix l / 8, here (keys +0, d +0), (+0, +8), (+8, +0), (+8, +8).
  __device__ static void scores(float (&s)[kKeys / 8][4], const QFragments& qa, const Element* ks, int lane) {
    const int row = (lane % 8) + 8 * (lane / 16), col = 8 * ((lane / 8) % 2);
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kKeys / 8; n += 2) {
        unsigned kb[4];
        load_matrices(ks + (n * 8 + row) * kLdK + kk * 16 + col, kb);
        Mma<T>::run(s[n], qa[kk], kb[0], kb[1]);
        Mma<T>::run(s[n + 1], qa[kk], kb[2], kb[3]);
      }
    }
  }

  /// o += P V, P being the probabilities in s's accumulator layout (which is
  /// the A fragment layout); V transposed by ldmatrix, matrices (keys +0, d +0),
  /// (+8, +0), (+0, +8), (+8, +8).
  __device__ static void accumulate(float (&o)[D / 8][4], const float (&p)[kKeys / 8][4], const Element* vs,
                                    int lane) {
    const int row = (lane % 8) + 8 * ((lane / 8) % 2), col = 8 * (lane / 16);
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const unsigned pa[4] = {
          Mma<T>::pack(p[2 * kk][0], p[2 * kk][1]), Mma<T>::pack(p[2 * kk][2], p[2 * kk][3]),
          Mma<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), Mma<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
      KOKKOSMLA_UNROLL
      for (int dn = 0; dn < D / 16; ++dn) {
        unsigned vb[4];
        load_matrices_transposed(vs + (kk * 16 + row) * kLdV + dn * 16 + col, vb);
        Mma<T>::run(o[2 * dn], pa, vb[0], vb[1]);
        Mma<T>::run(o[2 * dn + 1], pa, vb[2], vb[3]);
      }
    }
  }

  /// Two adjacent outputs.
  __device__ static void store(Element* at, float a, float b) {
    *reinterpret_cast<unsigned*>(at) = Mma<T>::pack(a, b);
  }
};

/// x as a TF32 operand as it is: the tensor core ignores the 13 low mantissa
/// bits, i.e. truncates (relative error below 2^-10), for no instruction.
KOKKOS_INLINE_FUNCTION unsigned as_tf32(float x) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  return __float_as_uint(x);
#else
  (void)x;
  return 0;
#endif
}

/// The float operands of one m16n8k8 product, N per lane (4 of A, 2 of B):
/// with Split (3xTF32) each x is big + small, big = x rounded to TF32 and
/// small = the rest truncated to TF32, so x is kept to 2^-21 of itself
/// (small's sign is that of big's rounding error, so its truncation errs
/// either way); without, big alone (TF32). Both parts are passed as bits of
/// which the tensor cores ignore the 13 low ones, so the split takes three
/// instructions an element (big's half unit, its clearing for the
/// subtraction, the subtraction), where rounding both parts took five.
template <bool Split, int N>
struct Tf32Parts {
  unsigned big[N], small[N];

  /// x as the tensor core reads it: TF32 truncates (free), 3xTF32 splits.
  KOKKOS_INLINE_FUNCTION static Tf32Parts as_is(const float (&x)[N]) {
    Tf32Parts p;
    KOKKOSMLA_UNROLL
    for (int i = 0; i < N; ++i) {
      if constexpr (Split) {
        p.big[i] = tf32_operand(x[i]);
        p.small[i] = as_tf32(x[i] - bits_as_float(p.big[i] & 0xffffe000u));
      } else {
        p.big[i] = as_tf32(x[i]);
      }
    }
    return p;
  }

  /// x rounded: TF32 rounds to nearest, 3xTF32 splits.
  KOKKOS_INLINE_FUNCTION static Tf32Parts rounded(const float (&x)[N]) {
    if constexpr (Split) {
      return as_is(x);
    } else {
      Tf32Parts p;
      KOKKOSMLA_UNROLL
      for (int i = 0; i < N; ++i) p.big[i] = tf32_operand(x[i]);
      return p;
    }
  }

 private:
  KOKKOS_INLINE_FUNCTION static float bits_as_float(unsigned u) {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    return __uint_as_float(u);
#else
    (void)u;
    return 0;
#endif
  }
};

/// c += a b on the tensor cores: one TF32 product, or with Split three
/// (small a big b, big a small b, then big a big b; small a small b, below
/// 2^-22 of the product, is left out). The tensor cores round their sums
/// toward zero, so with Split the three go into a fresh accumulator that is
/// then added to c by an fp32 addition (to nearest): accumulated in place over
/// a long contraction, the biased roundings cost 3xTF32 a factor of 10 in error
/// (7e-6 against fp32's 5e-7 on (1,4096,16,128,512)).
template <bool Split>
KOKKOS_INLINE_FUNCTION void multiply(float (&c)[4], const Tf32Parts<Split, 4>& a,
                                     const Tf32Parts<Split, 2>& b) {
  if constexpr (Split) {
    float t[4] = {0.f, 0.f, 0.f, 0.f};
    Mma<float>::run(t, a.small, b.big[0], b.big[1]);
    Mma<float>::run(t, a.big, b.small[0], b.small[1]);
    Mma<float>::run(t, a.big, b.big[0], b.big[1]);
    KOKKOSMLA_UNROLL
    for (int i = 0; i < 4; ++i) c[i] += t[i];
  } else {
    Mma<float>::run(c, a.big, b.big[0], b.big[1]);
  }
}

/// Operand handling of float data, TF32 (Split false) or 3xTF32 (Split true).
/// TF32: q and the probabilities are rounded (q once, when loaded), K and V
/// (read from shared memory by every warp, where a conversion per read would
/// double the instructions per product) are truncated. 3xTF32: every operand
/// split into two TF32 parts where it is used, q too (both parts of q in
/// registers would take 128 of them at D = 128). Within every 8-wide
/// contraction step the index is permuted (logical t <-> stored 2t,
/// t + 4 <-> 2t + 1), which changes no sum over it and lets each lane read
/// adjacent pairs: q and K as float2, and P directly from the score
/// accumulators (no shuffles). Padding: K rows read as float2 at 8g + 2t words
/// (rows 8 + D words apart), V rows 2t and 2t + 1 at column g (rows 4 + D
/// words apart): 32 distinct banks each.
template <int D, bool Split>
struct FloatTensorOperands {
  using Element = float;
  static constexpr int kKeys = 32;
  static constexpr int kLdK = D + 8, kLdV = D + 4;
  using QFragments = float[D / 8][4];
  using A = Tf32Parts<Split, 4>;
  using B = Tf32Parts<Split, 2>;

  __device__ static void load_q(QFragments& qa, const Element* r0, const Element* r1, int t) {
    auto pair = [](const Element* row, int col) {
      return row ? *reinterpret_cast<const float2*>(row + col) : make_float2(0.f, 0.f);
    };
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < D / 8; ++kk) {
      const float2 x0 = pair(r0, kk * 8 + 2 * t), x1 = pair(r1, kk * 8 + 2 * t);
      const float x[4] = {x0.x, x1.x, x0.y, x1.y};
      const A rounded = A::rounded(x);
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) qa[kk][i] = Split ? x[i] : __uint_as_float(rounded.big[i]);
    }
  }

  __device__ static void scores(float (&s)[kKeys / 8][4], const QFragments& qa, const Element* ks, int lane) {
    const int g = lane / 4, t = lane % 4;
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < D / 8; ++kk) {
      const A a = A::as_is(qa[kk]);
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kKeys / 8; ++n) {
        const float2 kb = *reinterpret_cast<const float2*>(ks + (n * 8 + g) * kLdK + kk * 8 + 2 * t);
        const float b[2] = {kb.x, kb.y};
        multiply(s[n], a, B::as_is(b));
      }
    }
  }

  __device__ static void accumulate(float (&o)[D / 8][4], const float (&p)[kKeys / 8][4], const Element* vs,
                                    int lane) {
    const int g = lane / 4, t = lane % 4;
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kKeys / 8; ++n) {
      const float pn[4] = {p[n][0], p[n][2], p[n][1], p[n][3]};
      const A a = A::rounded(pn);
      const Element* v0 = vs + (n * 8 + 2 * t) * kLdV + g;
      KOKKOSMLA_UNROLL
      for (int dn = 0; dn < D / 8; ++dn) {
        const float b[2] = {v0[dn * 8], v0[kLdV + dn * 8]};
        multiply(o[dn], a, B::as_is(b));
      }
    }
  }

  __device__ static void store(Element* at, float a, float b) {
    *reinterpret_cast<float2*>(at) = make_float2(a, b);
  }
};

template <int D>
struct TensorOperands<float, D> : FloatTensorOperands<D, false> {};

/// Tag of float data multiplied as 3xTF32 (Options::emulate_fp32).
struct SplitTf32 {};

template <int D>
struct TensorOperands<SplitTf32, D> : FloatTensorOperands<D, true> {};

/// The element type of an operand type: float for SplitTf32, T itself otherwise.
template <class T>
struct DataOf {
  using type = T;
};
template <>
struct DataOf<SplitTf32> {
  using type = float;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_ENABLE_SM80

namespace KokkosMLA {
namespace Impl {

/// Waits for the copies into team scratch that this thread started by
/// cp.async (a team barrier then makes every thread's copies the team's);
/// on every backend, where kernels without cp.async copied at once.
KOKKOS_INLINE_FUNCTION void wait_own_copies() {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  commit_copies();
  wait_copies<0>();
#endif
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
