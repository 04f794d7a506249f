#ifndef KOKKOSMLA_FLASHSM90KERNEL_HPP
#define KOKKOSMLA_FLASHSM90KERNEL_HPP
// Flash attention on Hopper's warpgroup products (sm_90a): the Decompressed
// prefill's attention for 16-bit q, K and V, and for float ones with TF32
// products (Options::allow_tf32), head_dim 64 or 128, fp32 accumulation and
// an fp32 online softmax.
//
// A team is two warpgroups (256 threads) over 128 query rows of one (batch,
// head), 64 per warpgroup; teams take tiles in the mma.sync kernel's order
// (FlashOperands::locate). The queries stay in team scratch; K and V arrive in
// 128-key tiles (two buffers each) in wgmma's 128-byte-swizzled layout,
// copied by TMA from one thread, and one copy of a tile serves both groups. Per
// tile j a warpgroup
//   issues S_j = Q K_j^T   (D / 16 m64n128k16 products, both operands in scratch),
//   issues O += P_{j-1} V_{j-1}   (m64nDk16 products, P from registers, V read
//                          transposed), so that the tensor cores run the
//                          previous tile's values while
//   the softmax of S_j runs once S_j is done (max, exponentials, sums), and
//   rescales O once the products into it are done.
// Registers per thread: 64 scores, 32 for P packed, D / 2 for O. No team
// barrier per tile: a buffer is filled when both groups have released its
// last tile (an mbarrier each way), and the groups take turns issuing their
// products (named barriers), so that one's softmax runs under the other's
// products. A buffer is refilled as soon as both groups release it: K_{j+2}
// and V_{j+1} are requested during tile j. Masks are applied
// only on tiles that cross the causal diagonal or the last key. Scratch:
// 32 + 4 x 32 KB at D = 128 (161 KB), half that at D = 64: a Kokkos with the
// CUDA shared-memory opt-in. A third V buffer (193 KB), so that filling V
// never waits for the other group, measured 2-3 % slower. (Before TMA every
// thread issued 16 cp.async copies a tile, and a copying warpgroup issuing
// them all was 11-13 % slower: docs/performance.md.)
//
// Float (TF32): elements of 4 bytes, 64-key tiles (scratch 64 + 4 x 32 KB at
// D = 128), m64n64k8 products. TF32 products read both operands K-major, so
// V arrives transposed: V^T (B, H, D, S padded to 32), written by the path
// after the decompression with each 8 keys in wgmma::tf32_value_position's
// order, so that P's A fragments are the score registers as they are. Q and P
// are rounded to TF32; K and V^T are read as stored (their low bits ignored).

#include "cuda/sm90a/KokkosMLA_Barriers.hpp"
#include "cuda/sm90a/KokkosMLA_Tma.hpp"
#include "cuda/sm90a/KokkosMLA_WarpgroupSoftmax.hpp"
#include "cuda/sm90a/KokkosMLA_Wgmma.hpp"
#include "impl/KokkosMLA_FlashTensorKernel.hpp"

namespace KokkosMLA {
namespace Impl {

template <class T, int D>
struct FlashSm90Kernel : FlashOperands<T, D> {
  using Base = FlashOperands<T, D>;
  using Base::batch, Base::causal, Base::heads, Base::k, Base::keys, Base::lse, Base::out, Base::q,
      Base::queries, Base::scale, Base::scratch_level, Base::v;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static constexpr bool kTf32 = std::is_same<T, float>::value;
  using Element = std::conditional_t<kTf32, float, std::uint16_t>;
  using Ops = Mma<T>;
  static constexpr bool kBf16 = std::is_same<T, Kokkos::Experimental::bhalf_t>::value;
  static constexpr int kBytes = int(sizeof(Element));
  static constexpr int kGroups = 2, kThreads = 128 * kGroups;
  static constexpr int kRows = 64 * kGroups;        // query rows a team: one product's M per warpgroup
  static constexpr int kKeys = kTf32 ? 64 : 128;    // keys a tile: the score product's N
  static constexpr int kScores = kKeys / 2;         // score accumulators a thread
  static constexpr int kChunks = D / 64;            // 64-column blocks of O (one m64n64 value product each)
  static constexpr int kPieces = D * kBytes / 16;   // 16-byte pieces a row
  static constexpr int kSteps = D * kBytes / 32;    // score products: 32 bytes of the contraction each
  static constexpr int kBlocks = D * kBytes / 128;  // 128-byte column blocks of a row
  static constexpr int kQueryBytes = kRows * D * kBytes;
  static constexpr int kTileBytes = kKeys * D * kBytes;
  static constexpr int kKeyStages = 2, kValueStages = 2;             // tile buffers
  static constexpr int kBarriers = 2 * (kKeyStages + kValueStages);  // full and empty, of each buffer
  static constexpr int kKeysMap = 0, kValuesMap = 1;                 // tile_maps: K's, then V's
  static constexpr int kCopier = 128;                                 // the thread that issues the copies
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 1>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;
  /// TMA maps of K and V (tma::kMapWords words each, in device memory): K
  /// as the rank-4 tensor (D, H, S, B) read in boxes of 128 bytes x kKeys
  /// keys, keys past S arriving as zeros; V the same for 16-bit T, V^T
  /// (value_shape) for float.
  const std::uint64_t* tile_maps = nullptr;

  /// The TMA view of K, and for 16-bit T of V, each (B, S, H, D) in the workspace.
  static tma::TensorShape tile_shape(std::int64_t batch, std::int64_t keys, std::int64_t heads) {
    const std::uint64_t row = std::uint64_t(D) * kBytes;
    return {4,
            {std::uint64_t(D), std::uint64_t(heads), std::uint64_t(keys), std::uint64_t(batch)},
            {row, row * heads, row * heads * keys},
            {128 / kBytes, 1, std::uint32_t(kKeys), 1},
            kBytes};
  }

  /// Keys of a row of V^T (float T): S rounded up to whole 32-key boxes.
  static std::int64_t padded_keys(std::int64_t keys) { return (keys + 31) / 32 * 32; }

  /// The TMA view of V^T (float T), (B, H, D, padded_keys) with each 8 keys
  /// in wgmma::tf32_value_position's order, read in boxes of 32 keys x D rows.
  static tma::TensorShape value_shape(std::int64_t batch, std::int64_t keys, std::int64_t heads) {
    const std::uint64_t padded = std::uint64_t(padded_keys(keys)), row = padded * kBytes;
    return {4,
            {padded, std::uint64_t(D), std::uint64_t(heads), std::uint64_t(batch)},
            {row, row * D, row * D * heads},
            {32, std::uint32_t(D), 1, 1},
            kBytes};
  }

  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return std::size_t(kQueryBytes) + (kKeyStages + kValueStages) * std::size_t(kTileBytes) +
           kBarriers * sizeof(std::uint64_t) + wgmma::kAtomBytes;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t query_tiles() const { return (queries + kRows - 1) / kRows; }
  std::int64_t league_size() const { return query_tiles() * batch * heads; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
    attend(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::FlashSm90Kernel: this GPU's code was built without sm_90a instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  /// Copies the team's query rows (zeros past the last; floats rounded to
  /// TF32) into the swizzled query tile with ordinary loads: q need only hold
  /// element pairs.
  __device__ void stage_queries(const Element* head, std::int64_t q0, char* tile, int rank) const {
    constexpr int kPasses = kRows * kPieces / kThreads;
    static_assert(kRows * kPieces % kThreads == 0, "whole passes");
    float word[kPasses][4];  // 32-bit words as bit patterns; every load in flight before the first store
    KOKKOSMLA_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int i = rank + pass * kThreads, row = i / kPieces, piece = i % kPieces;
      const auto* from = reinterpret_cast<const float*>(head + (q0 + row) * q.row + 16 / kBytes * piece);
      const bool valid = q0 + row < queries;
      KOKKOSMLA_UNROLL
      for (int w = 0; w < 4; ++w) {
        word[pass][w] = valid ? from[w] : 0.f;
        if constexpr (kTf32) word[pass][w] = rounded_to_tf32(word[pass][w]);
      }
    }
    KOKKOSMLA_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int i = rank + pass * kThreads;
      store_shared(
          reinterpret_cast<float*>(tile + wgmma::swizzled_byte_offset(kRows, i / kPieces, 16 * (i % kPieces))),
          word[pass]);
    }
  }

  __device__ void attend(const Member& team) const {
    const int rank = team.team_rank(), group = rank / 128, lane = rank % 32;
    const int t = lane % 4;                                             // fragment column pair
    const int row0 = 64 * group + 16 * ((rank % 128) / 32) + lane / 4;  // this thread's rows: row0, row0 + 8
    const FlashTile at = this->locate(team.league_rank(), query_tiles());
    const std::int64_t q0 = at.tile * kRows;
    const auto* qh = reinterpret_cast<const Element*>(q.at(at.b * queries, at.h));

    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    char* query_tile =
        reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + wgmma::kAtomBytes - 1) &
                                ~std::uintptr_t(wgmma::kAtomBytes - 1));
    char* key_tiles = query_tile + kQueryBytes;
    char* value_tiles = key_tiles + kKeyStages * kTileBytes;
    const unsigned queries_at = shared_address(query_tile) + 64 * group * 128;

    // Query row r sits at key position offset + r and, when causal, sees keys up to it.
    const std::int64_t offset = keys - queries;
    auto row_end = [&](std::int64_t r) { return causal && offset + r + 1 < keys ? offset + r + 1 : keys; };
    const std::int64_t last = (q0 + kRows < queries ? q0 + kRows : queries) - 1;
    // Key positions are below 2^31 (validated): the loop counts in 32 bits.
    const int tiles = int((row_end(last) + kKeys - 1) / kKeys);  // every row sees key 0: at least one
    const int mask_from = int(row_end(q0 + 64 * group));         // this group's first row sees fewest
    const int visible0 = int(row_end(q0 + row0)), visible1 = int(row_end(q0 + row0 + 8));

    // Tile i lives in buffer i % 2 of its ring. full: its bytes have landed
    // (the copying thread announces them); empty: both groups are done with
    // it. The n-th use of a buffer is its barriers' phase n.
    std::uint64_t* barriers = reinterpret_cast<std::uint64_t*>(value_tiles + kValueStages * kTileBytes);
    const sync::Ring keys_ring{key_tiles, barriers, barriers + kKeyStages, kKeyStages, kTileBytes};
    const sync::Ring values_ring{value_tiles, barriers + 2 * kKeyStages,
                                 barriers + 2 * kKeyStages + kValueStages, kValueStages, kTileBytes};
    if (rank == 0)  // full: the copier's one arrival a phase; empty: every thread's
      for (const sync::Ring* ring : {&keys_ring, &values_ring}) ring->init(1, kThreads);
    team.team_barrier();
    // One thread of group 1, the group that releases tiles last, copies every
    // tile by TMA as soon as its buffer is free: K_{j+2} once both groups
    // have S_j, V_{j+1} once both have O += P_{j-1} V_{j-1}.
    const bool copier = rank == kCopier;
    auto fill = [&](int tensor, const sync::Ring& ring, int i) {
      if (i >= ring.stages) ring.await_release(i - ring.stages);
      tma::expect_bytes(ring.full_of(i), kTileBytes);
      const std::uint64_t* map = tile_maps + tensor * tma::kMapWords;
      if (kTf32 && tensor == kValuesMap) {  // V^T: blocks of 32 keys x D rows
        KOKKOSMLA_UNROLL
        for (int block = 0; block < kKeys / 32; ++block)
          tma::load_box(ring.buffer(i) + block * D * 128, map, i * kKeys + 32 * block, 0, int(at.h), int(at.b),
                        ring.full_of(i));
      } else {  // K (and 16-bit V): blocks of 128 bytes x kKeys keys
        KOKKOSMLA_UNROLL
        for (int block = 0; block < kBlocks; ++block)
          tma::load_box(ring.buffer(i) + block * kKeys * 128, map, 128 / kBytes * block, int(at.h), i * kKeys,
                        int(at.b), ring.full_of(i));
      }
    };
    // The groups take turns issuing products (named barriers 1 and 2), so
    // that one's softmax runs while the tensor cores work for the other.
    auto take_turn = [&] { sync::named_wait(1 + group, kThreads); };
    auto pass_turn = [&] { sync::named_arrive(2 - group, kThreads); };

    if (copier) {
      for (int i = 0; i < kKeyStages && i < tiles; ++i) fill(kKeysMap, keys_ring, i);
      for (int i = 0; i < kValueStages && i < tiles; ++i) fill(kValuesMap, values_ring, i);
    }
    stage_queries(qh, q0, query_tile, rank);  // under the copies
    wgmma::fence_shared_writes();
    team.team_barrier();          // the queries visible
    if (group == 1) pass_turn();  // group 0 goes first

    float o[kChunks][32];
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) KOKKOSMLA_UNROLL
    for (int i = 0; i < 32; ++i) o[c][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, correction[2];
    const float scale2 = scale * 1.4426950408889634f;
    float s[kScores];  // defined before the first product: undefined, ptxas serializes products (C7515)
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kScores; ++i) s[i] = 0.f;

    keys_ring.await(0);
    wgmma::fence_shared_writes();
    take_turn();
    issue_scores(s, queries_at, shared_address(key_tiles));
    pass_turn();
    wgmma::wait<0>();
    keys_ring.release(0);
    if (copier && kKeyStages < tiles) fill(kKeysMap, keys_ring, kKeyStages);
    wgmma::pin(s);
    wgmma::online_softmax(s, m, l, correction, kKeys > mask_from, visible0, visible1, t, scale2);
    unsigned pa[kKeys * kBytes / 32][4];  // P's A fragments: one a product over 32 bytes of keys
    for (int j = 1; j < tiles; ++j) {
      const int k0 = j * kKeys;
      keys_ring.await(j);
      values_ring.await(j - 1);
      wgmma::fence_shared_writes();
      pack_probabilities(pa, s);
      take_turn();
      issue_scores(s, queries_at, shared_address(keys_ring.buffer(j)));
      issue_values(o, pa, shared_address(values_ring.buffer(j - 1)));
      pass_turn();
      wgmma::wait<1>();  // S_j
      wgmma::pin(s);
      keys_ring.release(j);
      if (copier && j + kKeyStages < tiles) fill(kKeysMap, keys_ring, j + kKeyStages);
      wgmma::online_softmax(s, m, l, correction, k0 + kKeys > mask_from, visible0 - k0, visible1 - k0, t,
                            scale2);
      wgmma::wait<0>();  // O += P_{j-1} V_{j-1}
      values_ring.release(j - 1);
      if (copier && j - 1 + kValueStages < tiles) fill(kValuesMap, values_ring, j - 1 + kValueStages);
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) {
        wgmma::pin(o[c]);
        wgmma::rescale(o[c], correction);
      }
    }
    values_ring.await(tiles - 1);
    wgmma::fence_shared_writes();
    pack_probabilities(pa, s);
    take_turn();
    issue_values(o, pa, shared_address(values_ring.buffer(tiles - 1)));
    if (group == 0) pass_turn();  // group 1's last turn is passed to no one
    wgmma::wait<0>();
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) wgmma::pin(o[c]);
    finish(o, m, l, at, q0 + row0, t);
    team.team_barrier();  // every thread done with the barriers: the next team of this block sets them up
                          // anew
    if (rank == 0)
      for (int i = 0; i < kBarriers; ++i) sync::invalidate(barriers + i);
  }

  /// Issues s = Q K^T over D (the first product overwrites s) as one group:
  /// this warpgroup's 64 query rows against the tile's kKeys keys.
  __device__ static void issue_scores(float (&s)[kScores], unsigned queries_at, unsigned tile_at) {
    wgmma::fence();
    KOKKOSMLA_UNROLL
    for (int step = 0; step < kSteps; ++step) {
      const int block = step / 4, within = 32 * (step % 4);
      const std::uint64_t a = wgmma::descriptor(queries_at + block * kRows * 128 + within, 0, wgmma::kAtomBytes);
      const std::uint64_t b = wgmma::descriptor(tile_at + block * kKeys * 128 + within, 0, wgmma::kAtomBytes);
      if constexpr (kTf32)
        wgmma::product_tf32_n64(s, a, b, step > 0);
      else
        wgmma::product_n128<kBf16>(s, a, b, step > 0);
    }
    wgmma::commit();
  }

  /// P's A fragments from the probabilities in s.
  template <int N>
  __device__ static void pack_probabilities(unsigned (&pa)[N][4], const float (&s)[kScores]) {
    if constexpr (kTf32)
      wgmma::pack_tf32_probabilities(pa, s);
    else
      wgmma::pack_probabilities<Ops>(pa, s);
  }

  /// Issues o += P V as one group over the value tile at tile_at (V, or V^T for float).
  template <int N>
  __device__ static void issue_values(float (&o)[kChunks][32], const unsigned (&pa)[N][4], unsigned tile_at) {
    if constexpr (kTf32)
      wgmma::issue_tf32_values<D>(o, pa, tile_at);
    else
      wgmma::issue_values<kBf16, D>(o, pa, tile_at, kKeys, 0);
  }

  /// Normalises and writes this thread's outputs of rows row and row + 8, and lse.
  __device__ void finish(const float (&o)[kChunks][32], const float (&m)[2], float (&l)[2],
                         const FlashTile& at, std::int64_t row, int t) const {
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const std::int64_t n = row + 8 * r;
      if (n >= queries) continue;
      const float inv = 1.f / l[r];
      auto* to = reinterpret_cast<Element*>(out.at(at.b * queries + n, at.h)) + 2 * t;
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) KOKKOSMLA_UNROLL
      for (int j = 0; j < 8; ++j) {
        const float x = o[c][4 * j + 2 * r] * inv, y = o[c][4 * j + 2 * r + 1] * inv;
        if constexpr (kTf32)
          *reinterpret_cast<float2*>(to + 64 * c + 8 * j) = make_float2(x, y);
        else
          *reinterpret_cast<unsigned*>(to + 64 * c + 8 * j) = Ops::pack(x, y);
      }
      if (lse && t == 0) lse.at(at.b * queries + n, at.h) = m[r] * 0.6931471805599453f + logf(l[r]);
    }
  }
#endif
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
