#ifndef KOKKOSMLA_DECODESM90KERNEL_HPP
#define KOKKOSMLA_DECODESM90KERNEL_HPP
// Cache attention on Hopper's warpgroup products (sm_90a), for 16-bit caches
// of DeepSeek's widths (latent R = 512, RoPE keys Dr = 64, or Dr = 0): the
// attention between the absorption and the up-projection of the
// DecodeSm90 path, over the 576-wide rows [latent, RoPE key]:
//   S = [qa, q_rope] [latent, k_rope]^T * scale,  oa = softmax(S) latent.
//
// A team is two warpgroups (256 threads) over 64 query rows of one sequence
// (64 heads of a token, or all heads of Tq tokens, flattened) and one part of
// its keys: each latent tile is read once for 64 rows, as FlashMLA does, where
// the mma.sync kernel (DecodeTensorKernel) reads it once per 16. The 64 x 576
// queries stay in team scratch for the whole part; 32-key tiles (32 x 576,
// 36 KB) are copied by cp.async (through L2 only) three deep: the tile after
// next is requested while this one's products run. Per tile:
//   each warpgroup computes S over its half of the 576 columns (18 m64n32k16
//   products, both operands in scratch), the halves are exchanged through
//   scratch and added (a + b in both groups: the same bits), both groups run
//   the same online softmax, and each accumulates P V into its 256 of the
//   512 output columns (8 m64n64k16 products, P from registers, V the same
//   tile read transposed): 128 fp32 accumulators per thread, 255 registers.
// 72 + 3 x 36 KB of tiles and 16 KB of exchange take 197 KB: a Kokkos with
// the CUDA shared-memory opt-in (one team per SM); the plan takes the
// mma.sync path elsewhere, and below 64 query rows per sequence, where this
// kernel's 64-row products are mostly empty (docs/performance.md).
//
// The step is serial: products, exchange, softmax, products. Measured on the
// H200 and dropped: issuing the next tile's S before this tile's softmax (a
// second set of score accumulators: 0.93 ms instead of 0.63 at B = 128,
// H = 128, S = 4096, the extra registers spilled), or this tile's P V and the
// next S back to back with the row lookups a step ahead (0.68 ms, spills);
// four warpgroups of 128 output columns each (128 registers a thread) spilled
// 0.5 KB a thread. The kernel issues about a quarter of the tensor-core peak:
// FlashMLA's overlap of softmax and products needs warp-specialised
// producers and TMA, which this kernel does not have.
//
// FP8 caches: tokens staged as stored, two tiles deep, and dequantised by
// the team a step ahead into the other of two 16-bit tiles, under the score
// products of this one (KokkosMLA_Fp8Tiles.hpp; 202 KB of scratch). Sparse attention reads each query token's
// listed keys (ListedKeys) as a sequence of its own.
//
// Operands, part ranges and the writing of oa and lse are the mma.sync
// kernel's (DecodeOperands): with several parts, each writes fp32 oa and lse
// and DecodeMergeKernel combines them.

#include "cuda/sm90a/KokkosMLA_WarpgroupSoftmax.hpp"
#include "cuda/sm90a/KokkosMLA_Wgmma.hpp"
#include "impl/KokkosMLA_DecodeTensorKernel.hpp"

namespace KokkosMLA {
namespace Impl {

template <class T, int Rope, CacheStorage Storage = CacheStorage::Native, bool Listed = false>
struct DecodeSm90Kernel
    : DecodeOperands<T, 64, 32, Listed> {  // 64 query rows a team: one product's M; 32 keys a tile
  using Base = DecodeOperands<T, 64, 32, Listed>;
  using Base::batch, Base::cache, Base::causal, Base::heads, Base::lse, Base::oa, Base::parts, Base::q_rope,
      Base::qa, Base::queries, Base::scale, Base::splits, Base::scratch_level, Base::part_range,
      Base::row_groups;
  using Base::kKeys, Base::kRank, Base::kRows;
  static_assert(Rope == 64 || Rope == 0, "RoPE keys of 64, or none");
  using Element = std::uint16_t;
  using Ops = Mma<T>;
  static constexpr bool kBf16 = std::is_same<T, Kokkos::Experimental::bhalf_t>::value;
  static constexpr int kRope = Rope, kWidth = kRank + kRope;
  static constexpr int kGroups = 2, kThreads = 128 * kGroups;
  static constexpr bool kFp8 = Storage != CacheStorage::Native;
  static_assert(!kFp8 || Rope == 64, "FP8 tokens of DeepSeek's widths");
  // 16-bit caches: three tiles in scratch, two in flight while one is used.
  // FP8 tokens: staged two tiles deep (one of 21 KB in flight) and dequantised
  // a step ahead into two 16-bit tiles, under this tile's score products.
  static constexpr int kStages = kFp8 ? 2 : 3;
  using Fp8Tiles = Fp8KeyTiles<T, kFp8 ? Storage : CacheStorage::Fp8PerBlock, 32, 256, 2>;
  static constexpr int kSteps = kWidth / 16 / kGroups;  // k16 score steps per warpgroup: 18 (16)
  static constexpr int kScores = kKeys / 2;             // score accumulators per thread: 16
  static constexpr int kGroupOut = kRank / kGroups;     // output columns per warpgroup: 256
  static constexpr int kChunks = kGroupOut / 64;        // n64 products per k16 step: 4
  static constexpr int kPieces = kWidth / 8;            // 16-byte pieces per row: 72 (64)
  static constexpr int kQueryBytes = kWidth / 64 * kRows * 128;
  static constexpr int kTileBytes = kWidth / 64 * kKeys * 128;
  static constexpr int kExchangeFloats = kScores * 128;  // one warpgroup's scores
  static_assert(kWidth % 64 == 0 && kKeys % 16 == 0 && kKeys % 8 == 0, "whole swizzled blocks and steps");
  static_assert(kRows % 8 == 0 && kTileBytes % wgmma::kAtomBytes == 0, "blocks on 1024-byte boundaries");
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 1>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  /// Key rows are copied through L2 alone (cp.async.cg): with 200 KB of
  /// scratch, L1 keeps too little to allocate the copies in (through L1 the
  /// kernel ran at 1.65 TB/s on H = 16, 40 % of the copy bandwidth).
  static constexpr CopyVia kCopyVia = CopyVia::L2;

  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return std::size_t(kQueryBytes) + kStages * std::size_t(kTileBytes) +
           kGroups * kExchangeFloats * sizeof(float) + (kFp8 ? Fp8Tiles::kScratchBytes : 0) +
           wgmma::kAtomBytes;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
    attend(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::DecodeSm90Kernel: this GPU's code was built without sm_90a instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  /// Starts copying the team's 64 query rows [qa, q_rope] (zeros past the
  /// sequence's last row) into the swizzled query tile.
  __device__ void stage_queries(std::int64_t b, std::int64_t first, char* to, int rank) const {
    const std::int64_t rows = queries * heads;
    const auto* qa_seq = reinterpret_cast<const Element*>(qa) + b * rows * kRank;
    for (int i = rank; i < kRows * kPieces; i += kThreads) {
      const int row = i / kPieces, piece = i % kPieces;
      const std::int64_t n = first + row;
      const bool valid = n < rows;
      const Element* from =
          !valid              ? qa_seq
          : piece < kRank / 8 ? qa_seq + n * kRank + 8 * piece
                              : reinterpret_cast<const Element*>(this->rope_row(b, n)) + (8 * piece - kRank);
      copy_async<CopyVia::L2>(to + wgmma::swizzled_offset(kRows, row, 8 * piece), from, valid);
    }
  }

  /// Starts copying keys k0 .. k0 + kKeys - 1 of sequence b (zeros from
  /// `end` on) into a swizzled tile as one group (an empty group from `end`
  /// on, so that every step commits one): eight threads per key, each the
  /// latent's 16-byte pieces piece + 8j (128 contiguous bytes per j) and RoPE
  /// piece `piece`; one cache-row lookup per thread.
  __device__ void stage_keys(std::int64_t b, std::int64_t k0, std::int64_t end, char* tile, int rank) const {
    static_assert(kRope / 8 <= 8, "at most one RoPE piece per thread");
    static_assert(kKeys * 8 == kThreads, "eight threads per key");
    const int piece = rank % 8, key = rank / 8;
    if (k0 >= end) return commit_copies();
    const bool valid = k0 + key < end;
    const std::int64_t row = valid ? this->key_row(b, k0 + key) : 0;
    const T* latent = cache.latent + row * cache.latent_ld + 8 * piece;
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kRank / 64; ++j)
      copy_async<kCopyVia>(tile + wgmma::swizzled_offset(kKeys, key, 64 * j + 8 * piece), latent + 64 * j,
                           valid);
    if constexpr (kRope > 0)
      copy_async<kCopyVia>(tile + wgmma::swizzled_offset(kKeys, key, kRank + 8 * piece),
                           cache.rope + row * cache.rope_ld + 8 * piece, valid);
    commit_copies();
  }

  __device__ void attend(const Member& team) const {
    const int rank = team.team_rank(), group = rank / 128, lane = rank % 32;
    const int g = lane / 4, t = lane % 4;           // fragment row and column pair
    const int row0 = 16 * ((rank % 128) / 32) + g;  // this thread's rows: row0, row0 + 8
    const std::int64_t groups = row_groups();
    const std::int64_t group_of_rows = team.league_rank() % groups;
    const int part = int(team.league_rank() / groups % splits);
    const std::int64_t b = team.league_rank() / (groups * splits);
    const std::int64_t rows = queries * heads, first = group_of_rows * kRows;

    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    char* query_tile =
        reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + wgmma::kAtomBytes - 1) &
                                ~std::uintptr_t(wgmma::kAtomBytes - 1));
    char* key_tiles = query_tile + kQueryBytes;
    float* exchange = reinterpret_cast<float*>(key_tiles + kStages * kTileBytes);  // (group, quad, thread, 4)
    char* staging = reinterpret_cast<char*>(exchange + kGroups * kExchangeFloats);  // FP8 tokens

    // Query row n of the sequence is token n / H: it sees keys up to length - Tq + n / H.
    const std::int64_t length = this->length(b);
    auto row_end = [&](std::int64_t n) {
      return causal && n < rows ? length - queries + n / heads + 1 : length;
    };
    std::int64_t begin, end;
    part_range(length, part, begin, end);
    const std::int64_t last = (first + kRows < rows ? first + kRows : rows) - 1;
    const std::int64_t team_end = row_end(last) < end ? row_end(last) : end;     // the last row sees most
    const std::int64_t edge_from = row_end(first) < end ? row_end(first) : end;  // masks from here on
    const std::int64_t n0 = first + row0, n1 = n0 + 8;
    const std::int64_t end0 = row_end(n0) < end ? row_end(n0) : end;
    const std::int64_t end1 = row_end(n1) < end ? row_end(n1) : end;

    float o[kChunks][32];
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) KOKKOSMLA_UNROLL
    for (int i = 0; i < 32; ++i) o[c][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units), lane's sums
    const float scale2 = scale * 1.4426950408889634f;        // exp(x) = exp2(x log2(e))
    const unsigned queries_at = unsigned(__cvta_generic_to_shared(query_tile));

    // Key positions are below 2^30 (validated): the loop counts in 32 bits.
    const int key_end = int(team_end), mask_from = int(edge_from), visible0 = int(end0), visible1 = int(end1);
    auto tile_at = [&](int stage) {
      return unsigned(__cvta_generic_to_shared(key_tiles + stage * kTileBytes));
    };
    stage_queries(b, first, query_tile, rank);  // in the first tile's group
    if constexpr (kFp8) {
      fp8_tiles().start(*this, b, begin, key_end, staging, rank);
      Fp8Tiles::wait_first();
      team.team_barrier();
      dequantise(staging, 0, key_tiles, rank);
    } else {
      stage_keys(b, begin, key_end, key_tiles, rank);
      stage_keys(b, begin + kKeys, key_end, key_tiles + kTileBytes, rank);
    }

    float s[kScores];  // defined before the first product: undefined, ptxas serialized every product (C7515)
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kScores; ++i) s[i] = 0.f;
    for (int k0 = int(begin), step = 0, stage = 0; k0 < key_end;
         k0 += kKeys, ++step, stage = stage + 1 < kStages ? stage + 1 : 0) {
      // FP8: the next tile's tokens. 16-bit: this tile's group (the first: and
      // the queries'); the next may still run.
      if constexpr (kFp8)
        Fp8Tiles::wait_next();
      else
        wait_copies<kStages - 2>();
      wgmma::fence_shared_writes();
      team.team_barrier();  // the tile visible; every group done with the tile before it
      issue_partial_scores(s, queries_at, tile_at(stage), group);
      if constexpr (kFp8) {
        // Under the products: the tile Stages on fetched, the next one dequantised into the other tile.
        fp8_tiles().fetch_ahead(*this, b, k0, key_end, staging, step, rank);
        dequantise(staging, step + 1, key_tiles + (stage + 1) % kStages * kTileBytes, rank);
      } else {
        // The tile after next into the last one's buffer: row lookups and copies under the products.
        stage_keys(b, k0 + (kStages - 1) * kKeys, key_end,
                   key_tiles + (stage + kStages - 1) % kStages * kTileBytes, rank);
      }
      wgmma::wait<0>();
      wgmma::pin(s);
      exchange_partial_scores(team, s, exchange, group, rank % 128);
      const bool edge = k0 + kKeys > mask_from;
      float correction[2];
      wgmma::online_softmax(s, m, l, correction, edge, visible0 - k0, visible1 - k0, t, scale2);
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) wgmma::rescale(o[c], correction);
      issue_accumulate(o, s, tile_at(stage), group);
      wgmma::wait<0>();
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) wgmma::pin(o[c]);
    }
    wait_copies<0>();     // the queries' copies, when the part had no key
    team.team_barrier();  // with one part, oa overwrites the team's qa rows: every copy of them is done
    finish(o, m, l, b, part, n0, t, group);
  }

  __device__ Fp8Tiles fp8_tiles() const { return Fp8Tiles{this->fp8}; }

  /// Dequantises the staged tokens of the part's tile `tile` into the swizzled tile `to`.
  __device__ void dequantise(char* staging, int tile, char* to, int rank) const {
    fp8_tiles().dequantise(Fp8Tiles::slot(staging, tile), rank, [&](int key, int column, uint4 bits) {
      *reinterpret_cast<uint4*>(to + wgmma::swizzled_offset(kKeys, key, column)) = bits;
    });
  }

  /// Issues s = Q K^T over this warpgroup's half of the columns (the first
  /// product overwrites s), as one group.
  __device__ static void issue_partial_scores(float (&s)[kScores], unsigned queries_at, unsigned tile_at,
                                              int group) {
    wgmma::fence();
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kSteps; ++i) {
      const int step = group * kSteps + i, block = step / 4, within = 32 * (step % 4);
      wgmma::product_n32<kBf16>(
          s, wgmma::descriptor(queries_at + block * kRows * 128 + within, 0, wgmma::kAtomBytes),
          wgmma::descriptor(tile_at + block * kKeys * 128 + within, 0, wgmma::kAtomBytes), i > 0);
    }
    wgmma::commit();
  }

  /// Adds the other warpgroup's partial scores to this one's through
  /// scratch: threads of the same rank in the two groups hold the same (row,
  /// key) entries, and a + b = b + a, so both groups hold the same S.
  __device__ static void exchange_partial_scores(const Member& team, float (&s)[kScores], float* exchange,
                                                 int group, int thread) {
    KOKKOSMLA_UNROLL
    for (int q = 0; q < kScores / 4; ++q)
      store_shared(exchange + group * kExchangeFloats + (q * 128 + thread) * 4,
                   {s[4 * q], s[4 * q + 1], s[4 * q + 2], s[4 * q + 3]});
    team.team_barrier();
    KOKKOSMLA_UNROLL
    for (int q = 0; q < kScores / 4; ++q) {
      float v[4];
      load_shared(exchange + (1 - group) * kExchangeFloats + (q * 128 + thread) * 4, v);
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) s[4 * q + e] += v[e];
    }
  }

  /// Issues o += P V over this warpgroup's 256 output columns, as one group:
  /// P from the scores' registers (tiles 2j, 2j + 1 are the A fragment of
  /// keys 16j ..), V the tile's latent columns read transposed.
  __device__ static void issue_accumulate(float (&o)[kChunks][32], const float (&p)[kScores],
                                          unsigned tile_at, int group) {
    unsigned pa[kKeys / 16][4];
    wgmma::pack_probabilities<Ops>(pa, p);
    wgmma::issue_values<kBf16>(o, pa, tile_at, kKeys, group * kChunks);
  }

  /// Normalises and writes this thread's oa of rows n0 and n0 + 8 (this
  /// warpgroup's columns), and lse.
  __device__ void finish(const float (&o)[kChunks][32], const float (&m)[2], float (&l)[2], std::int64_t b,
                         int part, std::int64_t n0, int t, int group) const {
    this->finish_rows(m, l, b, part, n0, group == 0 && t == 0, [&](int r, auto&& put) {
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) KOKKOSMLA_UNROLL
      for (int j = 0; j < 8; ++j)
        put(group * kGroupOut + 64 * c + 8 * j + 2 * t, o[c][4 * j + 2 * r], o[c][4 * j + 2 * r + 1]);
    });
  }
#endif
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
