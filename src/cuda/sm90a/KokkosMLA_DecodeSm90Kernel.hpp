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
// queries stay in team scratch; keys come in 64-key tiles (64 x 576, 72 KB),
// two deep. The warpgroups have roles, so that one's softmax runs while the
// other's products keep the tensor cores busy:
//   the scores group, per tile i: S = Q K_i^T over all 576 columns (36
//     m64n64k16 products, both operands in scratch), the online softmax, P_i
//     (16-bit) written over the tile's RoPE block (which only S reads) and
//     the rows' running maxima published, then O[:, 0:256] rescaled and
//     += P_i V_i (P from registers), and the tile released;
//   the values group, per tile i: once both groups are done with tile i - 1,
//     tile i + 1 copied into its buffer (by TMA from one thread where the
//     tile's 64 keys are consecutive cache rows, else cp.async through L2
//     only, the cache rows looked up a tile ahead), then, once P_i is
//     published, its rows' corrections computed from the published maxima,
//     O[:, 256:512] rescaled and += P_i V_i (P and V from scratch).
// No team barrier per tile: mbarriers say when a key tile has landed (full),
// when the scores group is done with it (empty; the values group is done
// with its own), and when P_i is published and used. 128 fp32 accumulators
// a thread in both groups. 72 KB of queries and 2 x 72 KB of tiles take
// 218 KB: a Kokkos with the CUDA shared-memory opt-in (one team per SM);
// the plan takes the mma.sync path elsewhere, and below 32 query rows per
// sequence, where this kernel's 64-row products are mostly empty
// (kDecodeSm90MinRows; docs/performance.md, which also gives the 32-key
// design this one replaced).
//
// FP8 caches: a third warpgroup, the dequantiser, reads each tile's tokens
// from the cache into registers (two passes of 16 keys ahead of its
// stores) and writes them dequantised into the 16-bit tile buffers, once
// both other groups are done with the buffer's last tile (the empty
// barrier counts both); the tiles, scratch and products are the 16-bit
// cache's. The groups' registers are set apart (setmaxnreg): the
// dequantiser needs few, the scores group most (KokkosMLA_Fp8Tiles.hpp).
// Over a dense FP8 cache at 128 heads and more (two teams a token's 128
// rows, the same keys) the two teams run as a pair (PairedTeams, a
// thread-block cluster of two): each dequantiser takes half of every
// tile's keys and writes them into both teams' buffers (its own, and its
// partner's by st.async counted on the partner's full barrier), and each
// team's consumers release a tile in both teams, so that every token is
// dequantised once, not once a team.
// Sparse attention reads each query token's listed keys (ListedKeys) as a
// sequence of its own.
//
// Operands, part ranges and the writing of oa and lse are the mma.sync
// kernel's (DecodeOperands): with several parts, each writes fp32 oa and lse
// and DecodeMergeKernel combines them.

#include "cuda/sm90a/KokkosMLA_Barriers.hpp"
#include "cuda/sm90a/KokkosMLA_Tma.hpp"
#include "cuda/sm90a/KokkosMLA_WarpgroupSoftmax.hpp"
#include "cuda/sm90a/KokkosMLA_Wgmma.hpp"
#include "impl/KokkosMLA_DecodeTensorKernel.hpp"

namespace KokkosMLA {
namespace Impl {

template <class T, int Rope, CacheStorage Storage = CacheStorage::Native, bool Listed = false>
struct DecodeSm90Kernel
    : DecodeOperands<T, 64, 64, Listed> {  // 64 query rows a team (one product's M), 64-key tiles
  using Base = DecodeOperands<T, 64, 64, Listed>;
  using Base::cache, Base::heads, Base::qa, Base::queries, Base::scale, Base::scratch_level;
  using Base::kKeys, Base::kRank, Base::kRows;
  static_assert(Rope == 64 || Rope == 0, "RoPE keys of 64, or none");
  using Element = std::uint16_t;
  using Ops = Mma<T>;
  static constexpr bool kBf16 = std::is_same<T, Kokkos::Experimental::bhalf_t>::value;
  static constexpr int kRope = Rope, kWidth = kRank + kRope;
  static constexpr bool kFp8 = Storage != CacheStorage::Native, kListed = Listed;
  static_assert(!kFp8 || Rope == 64, "FP8 tokens of DeepSeek's widths");
  // Scores and values groups, and with FP8 tokens the dequantiser.
  static constexpr int kScoresGroup = 0, kValuesGroup = 1, kDequantiser = 2;
  static constexpr int kGroups = kFp8 ? 3 : 2, kGroupThreads = 128, kThreads = kGroupThreads * kGroups;
  // With three groups, registers a thread of each (the launch bounds give
  // all 168): the scores group holds S, O and P, the values group O, the
  // dequantiser two passes of token pieces; 232 + 160 + 112 = 3 x 168, each
  // the least that ptxas fits without spills (the listed per-block variant
  // spills 72 bytes).
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static constexpr int kScoresRegisters = 232, kValuesRegisters = 160, kDequantiserRegisters = 112;
  static_assert(!kFp8 || kScoresRegisters + kValuesRegisters + kDequantiserRegisters <= 3 * kLaunchRegisters,
                "the groups share what the launch gave");
  static constexpr int kStages = 2;  // key tiles: one in use, the next landing
  // The named barrier of the scores and values groups (0 is the team's).
  static constexpr int kConsumersBarrier = 1;
  using Fp8Tiles = Fp8KeyTiles<T, kFp8 ? Storage : CacheStorage::Fp8PerBlock, kKeys, kGroupThreads, 1>;
  static constexpr int kSteps = kWidth / 16;         // k16 score steps: 36 (32)
  static constexpr int kScores = kKeys / 2;          // score accumulators per thread: 32 (16)
  static constexpr int kGroupOut = kRank / 2;        // output columns of the scores and values groups: 256
  static constexpr int kChunks = kGroupOut / 64;     // n64 products per k16 step: 4
  static constexpr int kPieces = kWidth / 8;         // 16-byte pieces per row: 72 (64)
  static constexpr int kQueryBytes = kWidth / 64 * kRows * 128;
  static constexpr int kTileBytes = kWidth / 64 * kKeys * 128;
  // A published P: 64 rows x kKeys keys as one swizzled 64-column block (the
  // products' K-major layout). With 64-key tiles of RoPE keys it is written
  // over the tile's RoPE block, which only S reads: no room of its own.
  static constexpr bool kProbabilitiesInTile = kKeys == 64 && kRope == 64;
  static constexpr int kProbabilityBytes = kRows * 128;
  static constexpr int kPublishedBytes = kProbabilitiesInTile ? 0 : 2 * kProbabilityBytes;
  static constexpr int kMaximaBytes = 2 * kRows * int(sizeof(float));  // each tile's row maxima, two deep
  static constexpr int kBarriers = 2 * kStages + 2 * 2;  // full and empty, of each key tile and each P
  static_assert(kWidth % 64 == 0 && kKeys % 16 == 0 && kKeys <= 64, "whole swizzled blocks and steps");
  static_assert(kRows % 8 == 0 && kTileBytes % wgmma::kAtomBytes == 0, "blocks on 1024-byte boundaries");
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads, 1>;

  /// TMA maps of the cache's latent rows and RoPE rows (key_row_shape), where
  /// every whole tile's keys are consecutive rows (16-bit caches, contiguous
  /// or in pages of a multiple of 64 keys), or null: tiles copied by cp.async.
  const std::uint64_t* tile_maps = nullptr;
  /// Kernels that copy by TMA where tile_maps say so (not FP8 tokens, which
  /// are dequantised, nor listed keys, which are scattered rows).
  static constexpr bool kTmaTiles = !kFp8 && !Listed;
  /// How TMA sees `rows` cache rows of `width` 16-bit values, `ld` apart:
  /// boxes of 64 keys by one 64-column swizzled block.
  static tma::TensorShape key_row_shape(std::int64_t rows, std::int64_t width, std::int64_t ld) {
    return {2, {std::uint64_t(width), std::uint64_t(rows)}, {std::uint64_t(ld) * sizeof(Element)}, {64, kKeys}};
  }
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  /// Key rows are copied through L2 alone (cp.async.cg): with 200 KB of
  /// scratch, L1 keeps too little to allocate the copies in (through L1 the
  /// kernel ran at 1.65 TB/s on H = 16, 40 % of the copy bandwidth).
  static constexpr CopyVia kCopyVia = CopyVia::L2;

  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return std::size_t(kQueryBytes) + kStages * std::size_t(kTileBytes) + kPublishedBytes + kMaximaBytes +
           kBarriers * sizeof(std::uint64_t) + wgmma::kAtomBytes;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const { run<1>(team); }
  /// The team's work, alone (Teams = 1) or as one of a pair (PairedTeams).
  template <int Teams>
  KOKKOS_INLINE_FUNCTION void run(const Member& team) const {
#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
    attend<Teams>(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::DecodeSm90Kernel: this GPU's code was built without sm_90a instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM90A_DEVICE_CODE
  /// Where a team's scratch holds what (see the top of the file).
  struct Scratch {
    char* queries;
    sync::Ring keys;           // key tiles; empty: the scores group is done with one
    sync::Ring probabilities;  // published P and row maxima; empty: the values group is done with one
    char* published;           // P of tiles 0, 1 (not kProbabilitiesInTile)
    float* maxima;  // (2, kRows): each tile's running row maxima; at the end the final max and sums
    /// Where tile i's P is published.
    __device__ char* probabilities_of(int i) const {
      if constexpr (kProbabilitiesInTile)
        return keys.buffer(i) + kRank / 64 * kKeys * 128;
      else
        return published + i % 2 * kProbabilityBytes;
    }
  };
  __device__ static Scratch carve(char* raw) {
    char* at = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + wgmma::kAtomBytes - 1) &
                                       ~std::uintptr_t(wgmma::kAtomBytes - 1));
    char* queries = at;
    char* key_tiles = queries + kQueryBytes;
    char* published = key_tiles + kStages * kTileBytes;
    auto* maxima = reinterpret_cast<float*>(published + kPublishedBytes);
    auto* barriers = reinterpret_cast<std::uint64_t*>(reinterpret_cast<char*>(maxima) + kMaximaBytes);
    return {queries,
            {key_tiles, barriers, barriers + kStages, kStages, kTileBytes},
            {nullptr, barriers + 2 * kStages, barriers + 2 * kStages + 2, 2, 0},
            published,
            maxima};
  }

  /// Starts copying the team's 64 query rows [qa, q_rope] (zeros past the
  /// sequence's last row) into the swizzled query tile, as one group.
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
    commit_copies();
  }

  /// Eight values-group threads copy a key, in passes of kPassKeys keys.
  static constexpr int kPassKeys = kGroupThreads / 8, kPasses = kKeys / kPassKeys;
  static_assert(kKeys % kPassKeys == 0, "whole passes");

  /// The cache rows of this thread's keys of the tile from key k0 (one a
  /// pass; 0 from `end` on), looked up a tile ahead of their copies so that
  /// these do not wait for the block table; of a tile copied by TMA, its
  /// first row alone, in thread 0's row[0] (0 elsewhere).
  template <int Passes = kPasses>
  struct RowsOf {
    std::int64_t row[Passes];
  };
  using TileRows = RowsOf<kPasses>;
  template <int Passes = kPasses>
  __device__ RowsOf<Passes> tile_rows(std::int64_t b, std::int64_t k0, std::int64_t end, int thread) const {
    const bool by_tma = copied_by_tma(k0, end);
    RowsOf<Passes> r;
    KOKKOSMLA_UNROLL
    for (int pass = 0; pass < Passes; ++pass) {
      const std::int64_t k = k0 + thread / 8 + kPassKeys * pass;
      r.row[pass] = by_tma ? (pass == 0 && thread == 0 ? this->key_row(b, k0) : 0)
                           : (k < end ? this->key_row(b, k) : 0);
    }
    return r;
  }
  /// Whether the tile from key k0 is copied by TMA: it is whole and the
  /// cache has maps (its 64 keys are then consecutive rows).
  __device__ bool copied_by_tma(std::int64_t k0, std::int64_t end) const {
    return kTmaTiles && tile_maps && k0 + kKeys <= end;
  }

  /// Starts copying keys k0 .. k0 + kKeys - 1 of sequence b (zeros from
  /// `end` on; their cache rows `rows`) into a swizzled tile, as one group:
  /// each thread the latent's 16-byte pieces piece + 8j (128 contiguous
  /// bytes per j) and RoPE piece `piece` of its key of each pass.
  __device__ void stage_keys(std::int64_t k0, std::int64_t end, const TileRows& rows, char* tile,
                             int thread) const {
    static_assert(kRope / 8 <= 8, "at most one RoPE piece per thread");
    const int piece = thread % 8;
    KOKKOSMLA_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int key = thread / 8 + kPassKeys * pass;
      const bool valid = k0 + key < end;
      const T* latent = cache.latent + rows.row[pass] * cache.latent_ld + 8 * piece;
      KOKKOSMLA_UNROLL
      for (int j = 0; j < kRank / 64; ++j)
        copy_async<kCopyVia>(tile + wgmma::swizzled_offset(kKeys, key, 64 * j + 8 * piece), latent + 64 * j,
                             valid);
      if constexpr (kRope > 0)
        copy_async<kCopyVia>(tile + wgmma::swizzled_offset(kKeys, key, kRank + 8 * piece),
                             cache.rope + rows.row[pass] * cache.rope_ld + 8 * piece, valid);
    }
    commit_copies();
  }

  /// One thread copies a whole tile of keys, cache rows `row` .. row + 63,
  /// by TMA, its bytes counted on the tile's full barrier.
  __device__ void load_keys(std::int64_t row, char* tile, std::uint64_t* full) const {
    static_assert(kKeys == 64, "a 16-bit tile is one box of 64 keys a block");
    tma::expect_bytes(full, kTileBytes);
    KOKKOSMLA_UNROLL
    for (int block = 0; block < kRank / 64; ++block)
      tma::load_box(tile + block * kKeys * 128, tile_maps, 64 * block, int(row), full);
    if constexpr (kRope > 0)
      tma::load_box(tile + kRank / 64 * kKeys * 128, tile_maps + tma::kMapWords, 0, int(row), full);
  }

  /// The values group puts key tile i of a 16-bit cache into its ring
  /// buffer, whose earlier tile both groups are done with: a whole tile with
  /// maps by TMA (thread 0, with the row in `rows`), else its copies started
  /// (from `rows`); `rows` then set to tile i + 1's; each thread's arrival
  /// on the tile's full barrier counted as its copies land. Nothing past the
  /// part's keys (no one waits for it), but an empty copy group: one group a fill.
  __device__ void fill(const Scratch& sc, int i, std::int64_t b, std::int64_t begin, std::int64_t key_end,
                       int thread, TileRows& rows) const {
    const std::int64_t k0 = begin + std::int64_t(i) * kKeys;
    if (k0 >= key_end) {
      commit_copies();
      return;
    }
    if (copied_by_tma(k0, key_end)) {
      if (thread == 0)
        load_keys(rows.row[0], sc.keys.buffer(i), sc.keys.full_of(i));
      else
        sc.keys.filled(i);
      commit_copies();  // one copy group a fill, as ever
    } else {
      stage_keys(k0, key_end, rows, sc.keys.buffer(i), thread);
      sc.keys.filled_when_copied(i);
    }
    rows = tile_rows(b, k0 + kKeys, key_end, thread);
  }

  /// The dequantiser (FP8 tokens), per tile i: its share of the tile's
  /// tokens (all of them, or with a pair of teams the half from key
  /// 32 * cluster rank) read into registers by passes of 16 keys, two passes
  /// ahead of their stores (the cache rows a tile ahead of those),
  /// dequantised into buffer i % 2 (of both teams of a pair) once every
  /// group that reads it is done with tile i - 2, and published on the
  /// tile's full barrier (a pair: the partner's half counted there in bytes).
  template <int Teams>
  __device__ void dequantise_tiles(const Scratch& sc, int tiles, std::int64_t b, std::int64_t begin,
                                   std::int64_t key_end, int thread) const {
    constexpr int kOwnPasses = kPasses / Teams;
    static_assert(kOwnPasses % 2 == 0, "passes in pairs: one piece in flight while the other is stored");
    const Fp8Tiles tokens = fp8_tiles();
    const unsigned partner = Teams == 1 ? 0u : cluster::rank() ^ 1u;
    const int own = Teams == 1 ? 0 : kKeys / Teams * int(cluster::rank());  // first key of the share
    auto rows_of = [&](int i, int me) {
      return tile_rows<kOwnPasses>(b, begin + std::int64_t(i) * kKeys + own, key_end, me);
    };
    RowsOf<kOwnPasses> rows = rows_of(0, thread), next = rows_of(1, thread);
    auto load = [&](const RowsOf<kOwnPasses>& r, int i, int pass, int me) {
      const std::int64_t k = begin + std::int64_t(i) * kKeys + own + me / 8 + kPassKeys * pass;
      return Fp8Tiles::load_piece(tokens.token(r.row[pass]), me % 8, k < key_end);
    };
    typename Fp8Tiles::TokenPiece pieces[2] = {load(rows, 0, 0, thread), load(rows, 0, 1, thread)};
    for (int i = 0; i < tiles; ++i) {
      // Hidden once a tile: the stores' 40 offsets are not kept in registers across tiles.
      const int me = hidden_from_compiler(thread), key = own + me / 8, piece = me % 8;
      if (i >= kStages) sc.keys.await_release<Teams == 2>(i - kStages);
      const unsigned tile_at = shared_address(sc.keys.buffer(i));
      unsigned partner_tile = 0, partner_full = 0;  // the same buffer and its full barrier, in the partner
      if constexpr (Teams == 2) {
        partner_tile = cluster::peer_address(tile_at, partner);
        partner_full = cluster::peer_address(sync::address_of(sc.keys.full_of(i)), partner);
      }
      auto put = [&](int k, int column, uint4 bits) {
        const unsigned offset = wgmma::swizzled_offset(kKeys, k, column);
        store_shared_16(tile_at + offset, bits);
        if constexpr (Teams == 2) cluster::store_remote_16(partner_tile + offset, bits, partner_full);
      };
      KOKKOSMLA_UNROLL
      for (int pass = 0; pass < kOwnPasses; ++pass) {
        tokens.put_piece(pieces[pass % 2], key + kPassKeys * pass, piece, put);
        pieces[pass % 2] = pass + 2 < kOwnPasses ? load(rows, i, pass + 2, me)
                                                 : load(next, i + 1, pass + 2 - kOwnPasses, me);
      }
      wgmma::fence_shared_writes();
      if (Teams == 2 && me == 0)
        tma::expect_bytes(sc.keys.full_of(i), kTileBytes / 2);  // the partner's half, and this arrival
      else
        sc.keys.filled(i);
      rows = next;
      next = rows_of(i + 2, me);
    }
  }

  /// This thread (Teams = 1) or its warp (a pair) is done with key tile i:
  /// with a pair, in both teams, whose dequantisers both write it.
  template <int Teams>
  __device__ static void release_key_tile(const Scratch& sc, int i) {
    if constexpr (Teams == 1) {
      sc.keys.release(i);
    } else {
      __syncwarp();  // every lane's products done
      if (lane() == 0) {
        std::uint64_t* empty = sc.keys.empty + i % kStages;
        sync::arrive(empty);
        cluster::arrive_remote(cluster::peer_address(sync::address_of(empty), cluster::rank() ^ 1u));
      }
    }
  }
  __device__ static int lane() {
    int r;
    asm("mov.u32 %0, %%laneid;\n" : "=r"(r));
    return r;
  }

  template <int Teams>
  __device__ void attend(const Member& team) const {
    const int rank = hidden_from_compiler(team.team_rank());
    const int group = rank / kGroupThreads, thread = rank % kGroupThreads;
    const int lane = rank % 32, t = lane % 4;        // fragment column pair
    const int row0 = 16 * (thread / 32) + lane / 4;  // this thread's rows: row0, row0 + 8 (both groups)
    const auto share = this->team_share(team.league_rank());
    const std::int64_t b = share.b, first = share.first, begin = share.begin, team_end = share.team_end;
    const Scratch sc = carve(static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes())));
    // Key positions are below 2^30 (validated): tiles count in 32 bits.
    const int tiles = int((team_end - begin + kKeys - 1) / kKeys);

    if (rank == 0) {
      // One group arrives on each barrier; on the key tiles' empty ones with
      // FP8 tokens, both groups that read the tiles (the dequantiser fills
      // them), and with a pair of teams both teams' groups, a warp at a time.
      constexpr int kTileReaders = Teams == 1 ? 2 * kGroupThreads : Teams * 2 * kGroupThreads / 32;
      for (int i = 0; i < kBarriers; ++i) {
        const bool key_tile_empty = i >= kStages && i < 2 * kStages;
        sync::init(sc.keys.full + i, kFp8 && key_tile_empty ? kTileReaders : kGroupThreads);
      }
      if constexpr (Teams == 2) cluster::publish_inits();
    }
    meet<Teams>(team);
    stage_queries(b, first, sc.queries, rank);
    TileRows key_rows{};  // of the values group's next fill (16-bit caches)
    if (!kFp8 && group == kValuesGroup) {
      key_rows = tile_rows(b, begin, team_end, thread);
      fill(sc, 0, b, begin, team_end, thread, key_rows);
      wait_copies<1>();  // the queries' group: the oldest
    } else {
      wait_copies<0>();
    }
    wgmma::fence_shared_writes();
    team.team_barrier();  // the queries visible

    // Each role's work in one branch from its registers' setting on: ptxas
    // allocates the branch under that setting, and code after a merge of
    // branches under the least of them.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units), lane's sums
    if (group == kScoresGroup) {
      if constexpr (kFp8) wgmma::set_registers<kScoresRegisters, kLaunchRegisters>();
      const std::int64_t n0 = first + row0;
      const int visible0 = int(this->visible_end(share, n0) - begin);
      const int visible1 = int(this->visible_end(share, n0 + 8) - begin);
      float o[kChunks][32];
      zero(o);
      score_tiles<Teams>(sc, o, m, l, tiles, int(share.edge_from - begin), visible0, visible1, row0, t);
      // The values group takes the rows' final max and sums (each row's sum on its lane t = 0).
      consumers_meet();  // both groups done with the tiles' maxima
      float sum[2] = {l[0], l[1]};
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
        if (t == 0) sc.maxima[row0 + 8 * r] = m[r], sc.maxima[kRows + row0 + 8 * r] = sum[r];
      }
      consumers_meet();
      finish(o, m, l, b, share.part, n0, t, group);
    } else if (group == kValuesGroup) {
      if constexpr (kFp8) wgmma::set_registers<kValuesRegisters, kLaunchRegisters>();
      float o[kChunks][32];
      zero(o);
      value_tiles<Teams>(sc, o, m, tiles, b, begin, team_end, row0, thread, key_rows);
      consumers_meet();
      consumers_meet();  // the scores group's final max and sums written
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r)
        m[r] = sc.maxima[row0 + 8 * r], l[r] = t == 0 ? sc.maxima[kRows + row0 + 8 * r] : 0.f;
      finish(o, m, l, b, share.part, first + row0, t, group);
    } else if constexpr (kFp8) {
      wgmma::set_registers<kDequantiserRegisters, kLaunchRegisters>();
      dequantise_tiles<Teams>(sc, tiles, b, begin, team_end, thread);
    }
    meet<Teams>(team);  // all done with the barriers (a pair: the partner's too): the block's next team sets
                        // them up anew
    if (rank == 0)
      for (int i = 0; i < kBarriers; ++i) sync::invalidate(sc.keys.full + i);
  }

  /// The team's threads meet, or a pair's: what each wrote before is visible to all after.
  template <int Teams>
  __device__ static void meet(const Member& team) {
    if constexpr (Teams == 1)
      team.team_barrier();
    else
      cluster::meet();
  }

  /// The scores and values groups meet (a named barrier of their 256
  /// threads; each warp converged first, as bar.sync expects, since the
  /// mbarrier waits' loops sit in inline PTX).
  __device__ static void consumers_meet() {
    __syncwarp();
    sync::named_wait(kConsumersBarrier, 2 * kGroupThreads);
  }
  __device__ static void zero(float (&o)[kChunks][32]) {
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) KOKKOSMLA_UNROLL
    for (int i = 0; i < 32; ++i) o[c][i] = 0.f;
  }

  /// The scores group: per tile, S (both operands in scratch), the online
  /// softmax (keys from `mask_from` on masked past visible0 / visible1,
  /// counted from the part's first key), P and the rows' maxima published,
  /// and O[:, 0:256] += P V. The tile is released as soon as these products
  /// are done, so that the values group refills its buffer while the next
  /// tile's S runs. (Releasing it during the next S, by waiting for all but
  /// the last group, and issuing the next tile's S before this tile's
  /// softmax, into a second set of scores, both made ptxas serialise the
  /// products, C7514; the second also spilled 130-250 bytes a thread.)
  template <int Teams>
  __device__ void score_tiles(const Scratch& sc, float (&o)[kChunks][32], float (&m)[2], float (&l)[2],
                              int tiles, int mask_from, int visible0, int visible1, int row0, int t) const {
    const float scale2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2(e))
    float s[kScores];  // defined before the first product: undefined, ptxas serialized every product (C7515)
    KOKKOSMLA_UNROLL
    for (int i = 0; i < kScores; ++i) s[i] = 0.f;
    for (int i = 0; i < tiles; ++i) {
      const int k0 = i * kKeys;
      // Both made once a tile, from lane 0: uniform, not 36 hoisted per-thread descriptors.
      const wgmma::Operand queries_at(wgmma::uniform_shared_address(sc.queries), 0, wgmma::kAtomBytes);
      const unsigned tile_at = wgmma::uniform_shared_address(sc.keys.buffer(i));
      sc.keys.await(i);
      wgmma::fence_shared_writes();
      issue_scores(s, queries_at, tile_at);
      wgmma::wait<0>();  // S_i
      wgmma::pin(s);
      float correction[2];
      wgmma::online_softmax(s, m, l, correction, k0 + kKeys > mask_from, visible0 - k0, visible1 - k0, t,
                            scale2);
      unsigned pa[kKeys / 16][4];
      wgmma::pack_probabilities<Ops>(pa, s);
      if (i >= 2) sc.probabilities.await_release(i - 2);
      publish(sc, i, pa, m, row0, t);
      sc.probabilities.filled(i);
      rescale_unless_unchanged(o, correction);
      wgmma::issue_values<kBf16>(o, pa, tile_at, kKeys, 0);
      wgmma::wait<0>();  // the tensor cores take S_{i+1} after these products in any case
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) wgmma::pin(o[c]);
      release_key_tile<Teams>(sc, i);
    }
  }

  /// The values group: per tile, the next tile filled into the buffer the
  /// previous one leaves (16-bit caches; with FP8 tokens the dequantiser
  /// fills it once this group too has released the previous tile), then
  /// O[:, 256:512] rescaled by the correction of the published row maxima
  /// (the scores group's arithmetic, so the same bits) and += P V from scratch.
  template <int Teams>
  __device__ void value_tiles(const Scratch& sc, float (&o)[kChunks][32], float (&m)[2], int tiles,
                              std::int64_t b, std::int64_t begin, std::int64_t key_end, int row0, int thread,
                              TileRows& rows) const {
    for (int i = 0; i < tiles; ++i) {
      wgmma::wait<0>();  // O += P_{i-1} V_{i-1} (unconditional: ptxas serialises products otherwise, C7514)
      KOKKOSMLA_UNROLL
      for (int c = 0; c < kChunks; ++c) wgmma::pin(o[c]);
      if (i > 0) {
        sc.probabilities.release(i - 1);
        if constexpr (kFp8)
          release_key_tile<Teams>(sc, i - 1);  // to the dequantiser(s)
        else
          sc.keys.await_release(i - 1);
      }
      // Hidden once a tile: the copies' offsets are not kept in registers across tiles.
      if constexpr (!kFp8) fill(sc, i + kStages - 1, b, begin, key_end, hidden_from_compiler(thread), rows);
      sc.probabilities.await(i);
      sc.keys.await(i);
      wgmma::fence_shared_writes();
      const float* maxima = sc.maxima + i % 2 * kRows;
      float correction[2];
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const float top = maxima[row0 + 8 * r];
        correction[r] = fast_exp2(m[r] - (top == -INFINITY ? 0.f : top));
        m[r] = top;
      }
      rescale_unless_unchanged(o, correction);
      const wgmma::Operand p(wgmma::uniform_shared_address(sc.probabilities_of(i)), 0,
                             wgmma::kAtomBytes);
      std::uint64_t pd[kKeys / 16];
      KOKKOSMLA_UNROLL
      for (int j = 0; j < kKeys / 16; ++j) pd[j] = p.at(32 * j);
      wgmma::issue_values<kBf16>(o, pd, wgmma::uniform_shared_address(sc.keys.buffer(i)), kKeys,
                                 kChunks);
    }
    wgmma::wait<0>();
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) wgmma::pin(o[c]);
    wait_copies<0>();  // nothing of this part still landing in scratch
  }

  __device__ Fp8Tiles fp8_tiles() const { return Fp8Tiles{this->fp8}; }

  /// Rescales o by its rows' corrections, unless every row of the warp keeps
  /// its max (all corrections 1: most tiles once the max has settled), which
  /// saves 128 multiplications a thread on the path to the next products.
  __device__ static void rescale_unless_unchanged(float (&o)[kChunks][32], const float (&correction)[2]) {
    if (__all_sync(0xffffffffu, correction[0] == 1.f && correction[1] == 1.f)) return;
    KOKKOSMLA_UNROLL
    for (int c = 0; c < kChunks; ++c) wgmma::rescale(o[c], correction);
  }

  /// Writes this thread's P fragments (rows row0 and row0 + 8, keys 16j + 2t
  /// and 16j + 8 + 2t) into tile i's published P, K-major, and (lane t = 0)
  /// its rows' running maxima; visible to the values group's products. The
  /// warp's fragments of 16 keys are four 8 x 8 matrices (rows + 8 in odd
  /// ones, keys + 8 in the last two), stored by one stmatrix.
  __device__ static void publish(const Scratch& sc, int i, const unsigned (&pa)[kKeys / 16][4],
                                 const float (&m)[2], int row0, int t) {
    const int lane = 4 * (row0 % 16) + t, matrix = lane / 8;  // this lane gives row lane % 8 of `matrix`
    const int row = row0 - row0 % 16 + 8 * (matrix % 2) + lane % 8;
    const unsigned published = shared_address(sc.probabilities_of(i));
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kKeys / 16; ++j)
      wgmma::store_matrices(published + wgmma::swizzled_offset(kRows, row, 16 * j + 8 * (matrix / 2)), pa[j]);
    if (t == 0) sc.maxima[i % 2 * kRows + row0] = m[0], sc.maxima[i % 2 * kRows + row0 + 8] = m[1];
    wgmma::fence_shared_writes();
  }

  /// Issues s = Q K^T over all kWidth columns (the first product overwrites
  /// s), as one group: the 64 query rows against the tile's keys.
  __device__ static void issue_scores(float (&s)[kScores], const wgmma::Operand& queries_at,
                                      unsigned tile_at) {
    const wgmma::Operand keys_at(tile_at, 0, wgmma::kAtomBytes);
    wgmma::fence();
    KOKKOSMLA_UNROLL
    for (int step = 0; step < kSteps; ++step) {
      const int block = step / 4, within = 32 * (step % 4);
      wgmma::product<kBf16>(s, queries_at.at(block * kRows * 128 + within),
                            keys_at.at(block * kKeys * 128 + within), step > 0);
    }
    wgmma::commit();
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

/// A DecodeSm90Kernel of FP8 tokens whose teams run in pairs, a cluster of
/// two (kClusterTeams, set at its launch), the two teams of 64 rows of one
/// token's 128 heads (league ranks 2j and 2j + 1: the same sequence, part
/// and keys), which share each tile's dequantisation (see the top of the file).
template <class Kernel>
struct PairedTeams : Kernel {
  static_assert(Kernel::kFp8, "pairs share the dequantisation of FP8 tokens");
  static constexpr int kClusterTeams = 2;
  explicit PairedTeams(const Kernel& k) : Kernel(k) {}
  KOKKOS_INLINE_FUNCTION void operator()(const typename Kernel::Member& team) const {
    this->template run<2>(team);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
