#ifndef KOKKOSMLA_FLASHTENSORKERNEL_HPP
#define KOKKOSMLA_FLASHTENSORKERNEL_HPP
// Flash attention on tensor cores: the Decompressed algorithm's attention for
// 16-bit q, K and V on CUDA GPUs of compute capability 8.0 and newer, with
// fp32 accumulation and an fp32 online softmax.
//
// A team is 4 warps over 64 query rows of one (batch, head); warp w owns rows
// 16w .. 16w+15 for the whole key loop. Its query rows stay in registers as
// mma.sync A fragments (m16n8k16, loaded once); per step of 64 keys each warp
// computes
//   S = Q K^T      (16 x 64: 8 column tiles x D/16 mma),
//   online softmax on S's accumulator registers (row max and sum across the
//                  four lanes of a row by shuffles),
//   O += P V       (16 x D: P's accumulator layout is exactly the A fragment
//                  layout of the next mma, so P never leaves registers).
// K and V tiles (64 x D, rows padded by 8 elements so that ldmatrix reads hit
// 32 distinct banks) arrive by asynchronous copies that overlap the
// arithmetic: V of this step while S is computed, K of the next step while the
// softmax and P V run. Both tiles, 35 KB at D = 128, fit the 48 KB of shared
// memory a Kokkos team may have; a second buffer of each would not. Masks are
// applied only on tiles that cross the causal diagonal or the last key; the
// heaviest (last) query tiles start first.
// Compiled only where the target has mma.sync for 16-bit types; the portable
// path (a float plan) serves every other backend.

#include <KokkosMLA_Precision.hpp>

#include "KokkosMLA_Compat.hpp"

#include <cstdint>

#if defined(KOKKOS_ENABLE_CUDA) && (KOKKOSMLA_HAS_HALF || KOKKOSMLA_HAS_BHALF) &&                \
    (defined(KOKKOS_ARCH_AMPERE) || defined(KOKKOS_ARCH_ADA89) || defined(KOKKOS_ARCH_HOPPER) || \
     defined(KOKKOS_ARCH_BLACKWELL))
#define KOKKOSMLA_TENSOR_CORES 1
#endif

#ifdef KOKKOSMLA_TENSOR_CORES
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace KokkosMLA {
namespace Impl {

/// One m16n8k16 tensor-core product, c += a b, and the packing of two floats
/// into the A operand's 16-bit pairs, per 16-bit type.
template <class T>
struct Mma;

#if KOKKOSMLA_HAS_BHALF
template <>
struct Mma<Kokkos::Experimental::bhalf_t> {
  KOKKOS_INLINE_FUNCTION static void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
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
#ifdef __CUDA_ARCH__
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
#else
    (void)lo, (void)hi;
    return 0;
#endif
  }
};
#endif

#if KOKKOSMLA_HAS_HALF
template <>
struct Mma<Kokkos::Experimental::half_t> {
  KOKKOS_INLINE_FUNCTION static void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
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
#ifdef __CUDA_ARCH__
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
#else
    (void)lo, (void)hi;
    return 0;
#endif
  }
};
#endif

/// Four 8x8 16-bit matrices from shared memory, transposed: lane l gives the
/// address of row l % 8 of matrix l / 8, and register i receives this lane's
/// pair of matrix i (column lane / 4, rows 2 (lane % 4) and the next).
KOKKOS_INLINE_FUNCTION void load_matrices_transposed(const std::uint16_t* row, unsigned (&r)[4]) {
#ifdef __CUDA_ARCH__
  const unsigned address = unsigned(__cvta_generic_to_shared(row));
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
#ifdef __CUDA_ARCH__
  const unsigned address = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  (void)row, (void)r;
#endif
}

/// Starts an asynchronous copy of 16 bytes into shared memory; with
/// valid == false it writes zeros and reads nothing.
KOKKOS_INLINE_FUNCTION void copy_async(std::uint16_t* to, const std::uint16_t* from, bool valid) {
#ifdef __CUDA_ARCH__
  const unsigned address = unsigned(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from),
               "r"(valid ? 16 : 0));
#else
  (void)to, (void)from, (void)valid;
#endif
}

/// Closes the group of copies started since the last commit.
KOKKOS_INLINE_FUNCTION void commit_copies() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most N committed groups of this thread are in flight.
template <int N>
KOKKOS_INLINE_FUNCTION void wait_copies() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <class T, int D>
struct FlashTensorKernel {
  static_assert(D % 16 == 0 && D <= 128, "head_dim must be a multiple of 16, at most 128");
  static constexpr int kThreads = 128;   // 4 warps
  static constexpr int kRows = 64;       // query rows per team, 16 per warp
  static constexpr int kKeys = 64;       // keys per step
  static constexpr int kLd = D + 8;      // staged row length in elements (+16 bytes: conflict-free)
  static constexpr int kChunks = D / 8;  // 16-byte pieces per row
  static constexpr int kScoreTiles = kKeys / 8;
  static constexpr int kOutTiles = D / 8;
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 2>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  const T* q;  // (B, T, H, D)
  const T* k;  // (B, S, H, D)
  const T* v;  // (B, S, H, D)
  T* out;      // (B, T, H, D)
  float* lse;  // (B, T, H), or null when not asked for
  std::int64_t batch, queries, keys, heads;
  float scale;
  bool causal;
  int scratch_level = 0;

  static constexpr std::size_t kAlignment = 16;
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return 2 * std::size_t(kKeys) * kLd * sizeof(std::uint16_t) + kAlignment;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t query_tiles() const { return (queries + kRows - 1) / kRows; }
  std::int64_t league_size() const { return query_tiles() * batch * heads; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef __CUDA_ARCH__
    attend(team);
#else
    (void)team;
#endif
  }

#ifdef __CUDA_ARCH__
  /// Starts copying keys k0 .. k0+63 of one head into a tile (zeros past the
  /// last key) as one group: thread `rank` copies piece rank % kChunks of rows
  /// rank / kChunks + i * kThreads / kChunks.
  __device__ void stage(const std::uint16_t* head, std::uint16_t* tile, std::int64_t k0, int rank) const {
    constexpr int kRowsPerPass = kThreads / kChunks;
    const int part = rank % kChunks, first = rank / kChunks;
    const std::int64_t stride = heads * D;
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kKeys / kRowsPerPass; ++i) {
      const int key = first + i * kRowsPerPass;
      const bool valid = k0 + key < keys;
      copy_async(tile + key * kLd + part * 8, head + (valid ? (k0 + key) * stride + part * 8 : 0), valid);
    }
    commit_copies();
  }

  /// Two 16-bit elements of row `row` at column `col`, or zeros past the last query.
  __device__ unsigned query_pair(const std::uint16_t* qh, std::int64_t row, int col) const {
    return row < queries ? *reinterpret_cast<const unsigned*>(qh + row * heads * D + col) : 0u;
  }

  __device__ void attend(const Member& team) const {
    const int rank = team.team_rank(), warp = rank / 32, lane = rank % 32;
    const int g = lane / 4, t = lane % 4;  // fragment row and column pair
    const std::int64_t heads_total = batch * heads;
    const std::int64_t tile = query_tiles() - 1 - team.league_rank() / heads_total;
    const std::int64_t b = (team.league_rank() % heads_total) / heads, h = team.league_rank() % heads;
    const std::int64_t q0 = tile * kRows;

    const auto* qh = reinterpret_cast<const std::uint16_t*>(q) + (b * queries * heads + h) * D;
    const auto* kh = reinterpret_cast<const std::uint16_t*>(k) + (b * keys * heads + h) * D;
    const auto* vh = reinterpret_cast<const std::uint16_t*>(v) + (b * keys * heads + h) * D;
    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    auto* ks = reinterpret_cast<std::uint16_t*>((reinterpret_cast<std::uintptr_t>(raw) + kAlignment - 1) &
                                                ~std::uintptr_t(kAlignment - 1));
    std::uint16_t* vs = ks + kKeys * kLd;

    const std::int64_t offset = keys - queries;  // query r sits at key position offset + r
    const std::int64_t last_row = (q0 + kRows < queries ? q0 + kRows : queries) - 1;
    const std::int64_t key_end = causal && offset + last_row + 1 < keys ? offset + last_row + 1 : keys;
    stage(kh, ks, 0, rank);
    stage(vh, vs, 0, rank);

    // This lane's two rows of the warp's 16, as A fragments over D.
    const std::int64_t row0 = q0 + warp * 16 + g, row1 = row0 + 8;
    unsigned qa[D / 16][4];
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = query_pair(qh, row0, kk * 16 + 2 * t);
      qa[kk][1] = query_pair(qh, row1, kk * 16 + 2 * t);
      qa[kk][2] = query_pair(qh, row0, kk * 16 + 8 + 2 * t);
      qa[kk][3] = query_pair(qh, row1, kk * 16 + 8 + 2 * t);
    }

    float o[kOutTiles][4];
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    // Running max (in log2 units of the scaled logits) and this lane's partial sums.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float scale2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2(e))
    // ldmatrix row addresses: lane l gives row l % 8 of matrix l / 8. For K
    // (not transposed) matrices 0-3 are (keys +0, d +0), (+0, +8), (+8, +0),
    // (+8, +8); for V (transposed) (keys +0, d +0), (+8, +0), (+0, +8), (+8, +8).
    const int krow = (lane % 8) + 8 * (lane / 16), kcol = 8 * ((lane / 8) % 2);
    const int vrow = (lane % 8) + 8 * ((lane / 8) % 2), vcol = 8 * (lane / 16);

    for (std::int64_t k0 = 0; k0 < key_end; k0 += kKeys) {
      wait_copies<1>();  // this step's K (its V may still be in flight)
      team.team_barrier();

      float s[kScoreTiles][4];
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kScoreTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      KOKKOSMLA_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) {
        KOKKOSMLA_UNROLL
        for (int n = 0; n < kScoreTiles; n += 2) {
          unsigned kb[4];
          load_matrices(ks + (n * 8 + krow) * kLd + kk * 16 + kcol, kb);
          Mma<T>::run(s[n], qa[kk], kb[0], kb[1]);
          Mma<T>::run(s[n + 1], qa[kk], kb[2], kb[3]);
        }
      }
      team.team_barrier();  // every warp is done with K: fetch the next step's
      if (k0 + kKeys < key_end)
        stage(kh, ks, k0 + kKeys, rank);
      else
        commit_copies();  // an empty group keeps the counting uniform

      // Scale, mask where this warp's rows meet the diagonal or the last key,
      // and the new row maxima (rows g and g + 8 of the warp).
      const std::int64_t warp_row = q0 + warp * 16;
      const bool edge = k0 + kKeys > keys || (causal && k0 + kKeys - 1 > offset + warp_row);
      int visible[2] = {kKeys, kKeys};  // keys of this step each row sees
      if (edge) KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const std::int64_t end =
            causal && offset + row0 + 8 * r + 1 < keys ? offset + row0 + 8 * r + 1 : keys;
        visible[r] = int(end - k0 < kKeys ? end - k0 : kKeys);
      }
      float mx[2] = {m[0], m[1]};
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kScoreTiles; ++n) KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] = n * 8 + 2 * t + (e & 1) < visible[e / 2] ? s[n][e] * scale2 : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
      }
      float correction[2];
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        correction[r] = exp2f(m[r] - mx[r]);  // 0 on the first step (m = -inf, mx finite)
        m[r] = mx[r];
        l[r] *= correction[r];
      }
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kScoreTiles; ++n) KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - m[e / 2]);
        l[e / 2] += s[n][e];
      }
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kOutTiles; ++n) {
        o[n][0] *= correction[0], o[n][1] *= correction[0];
        o[n][2] *= correction[1], o[n][3] *= correction[1];
      }

      wait_copies<1>();  // this step's V (the next K may still be in flight)
      team.team_barrier();
      // O += P V, 16 keys at a time.
      KOKKOSMLA_UNROLL
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const unsigned pa[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                                Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                                Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
        KOKKOSMLA_UNROLL
        for (int dn = 0; dn < D / 16; ++dn) {
          unsigned vb[4];
          load_matrices_transposed(vs + (kk * 16 + vrow) * kLd + dn * 16 + vcol, vb);
          Mma<T>::run(o[2 * dn], pa, vb[0], vb[1]);
          Mma<T>::run(o[2 * dn + 1], pa, vb[2], vb[3]);
        }
      }
      team.team_barrier();  // every warp is done with V: fetch the next step's
      if (k0 + kKeys < key_end)
        stage(vh, vs, k0 + kKeys, rank);
      else
        commit_copies();
    }
    wait_copies<0>();

    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    auto* oh = reinterpret_cast<std::uint16_t*>(out) + (b * queries * heads + h) * D;
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const std::int64_t row = r == 0 ? row0 : row1;
      if (row >= queries) continue;
      const float inv = 1.f / l[r];
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kOutTiles; ++n)
        *reinterpret_cast<unsigned*>(oh + row * heads * D + n * 8 + 2 * t) =
            Mma<T>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (lse && t == 0) lse[(b * queries + row) * heads + h] = m[r] * 0.6931471805599453f + logf(l[r]);
    }
  }
#endif
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_TENSOR_CORES
#endif
