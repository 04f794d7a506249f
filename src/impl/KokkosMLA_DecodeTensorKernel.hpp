#ifndef KOKKOSMLA_DECODETENSORKERNEL_HPP
#define KOKKOSMLA_DECODETENSORKERNEL_HPP
// Cache attention on tensor cores, for 16-bit caches of DeepSeek's widths
// (latent R = 512, RoPE keys Dr = 64) or of a latent alone (R = 512, Dr = 0)
// on CUDA GPUs of compute capability 8.0 and newer. The plan absorbs the
// queries first (qa = q w_uk^T per head, a batched cuBLAS GEMM, 16-bit) and
// up-projects after (out = oa w_uv); this kernel is the attention between,
// over the 576-wide rows [latent, RoPE key] (512-wide without RoPE):
//   S = [qa, q_rope] [latent, k_rope]^T * scale,  oa = softmax(S) latent.
//
// A team is 4 warps over 16 query rows of one sequence (its heads and query
// tokens, flattened) and one part of its keys. A warp cannot hold 16 rows of
// both the 576-wide queries and the 512-wide oa in registers, so the warps
// split the work by columns: warp w keeps columns 144w .. 144w+143 of the
// query rows as mma.sync A fragments (36 registers; 128 columns and 32
// registers without RoPE) and owns output columns 128w .. 128w+127 (64
// accumulator registers). Per step of 16 keys:
//   each warp's partial S over its 144 columns (18 m16n8k16 products) goes to
//   shared memory; after a barrier every warp sums the four partials in the
//   same order (so all hold the same S), runs the online softmax on it, and
//   accumulates P V for its columns (16 products), P staying in registers.
// Key tiles (16 keys x 576, 18 KB) are double-buffered: the copy of the next
// tile overlaps this one's arithmetic. Asking for tiles 16-48 keys further
// ahead into L2 as well (prefetch.global.L2) made it 8-12 % slower on the
// H200: the extra L2 lookups cost more than the latency they hid. Two tiles
// and the partial scores take 41.5 KB, within what Kokkos lets a 128-thread
// team have (48 KB less its team-reduction reserve); three tiles would not
// fit. So on H = 16, where the kernel streams the cache once, each team has
// one tile in flight: 80-88 % of the copy bandwidth on the H200.
//
// float data (Options::emulate_fp32, T = SplitTf32: 3xTF32 products, about
// fp32's accuracy; Options::allow_tf32, T = float: TF32 products): the same
// steps on fp32 tiles (16 keys x 580 words, 37 KB; two tiles and the partials
// 78 KB, so a Kokkos with the CUDA shared-memory opt-in, and 2 teams an SM)
// with m16n8k8 products; operands read from shared memory as they lie, the
// rows padded to hit 32 banks (TensorOps' FloatTensorOperands does the same
// for the prefill).
//
// FP8 caches take DecodeFp8TensorKernel (the same team and steps on staged
// tokens, KokkosMLA_DecodeFp8TensorKernel.hpp). Sparse attention: each query
// token's listed keys (ListedKeys) are a sequence of their own, read through
// the same lookup.
//
// Teams of one sequence and part are adjacent in the league, so that a
// sequence's row groups (8 for 128 heads) read its keys from L2 once fetched.
// With several parts (split-KV), each writes fp32 oa and lse, and
// DecodeMergeKernel combines them; with one, the kernel writes oa in 16 bits.

#include <KokkosMLA_Cache.hpp>

#include "KokkosMLA_Fp8Tiles.hpp"
#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_Launch.hpp"
#include "KokkosMLA_Splits.hpp"
#include "KokkosMLA_TensorOps.hpp"

#if KOKKOSMLA_ENABLE_SM80
namespace KokkosMLA {
namespace Impl {

/// What the tensor-core decode kernels (DecodeTensorKernel here,
/// DecodeSm90Kernel on Hopper) share: their operands, and how a team finds
/// its sequence's rows (Rows a team) and its part's keys (whole Keys-key
/// steps but the last). T is the operand type (SplitTf32: float data).
template <class T, int Rows, int Keys, bool Listed>
struct DecodeOperands {
  using Scalar = typename DataOf<T>::type;
  static constexpr int kRank = 512;   // latent width: oa's columns
  static constexpr int kRows = Rows;  // query rows per team
  static constexpr int kKeys = Keys;  // keys per step
  const Scalar* qa;                   // (B, Tq, H, R) absorbed queries, unscaled
  HeadRows<const Scalar> q_rope;      // (B, Tq, H, Dr)
  LatentKeys<Scalar> cache;           // rows of R latent and Dr RoPE elements (addressing only with FP8)
  Fp8Keys fp8;                        // the tokens of an FP8 cache
  ListedKeys listed;                  // Listed (sparse attention): each query token's keys as a sequence
  Scalar* oa;                         // (B, Tq, H, R), with one part
  float* parts;                       // (splits, B Tq H, R) then (splits, B Tq H) lse, with several
  LseRows<float> lse;                 // (B, Tq, H) or empty, with one part
  std::int64_t batch, queries, heads;
  int splits = 1;
  float scale;
  bool causal;
  int scratch_level = 0;

  KOKKOS_INLINE_FUNCTION std::int64_t row_groups() const { return (queries * heads + Rows - 1) / Rows; }

  /// Row n (query t * H + head h) of sequence b's RoPE queries.
  KOKKOS_INLINE_FUNCTION const Scalar* rope_row(std::int64_t b, std::int64_t n) const {
    return q_rope.at(b * queries + n / heads, n % heads);
  }

  /// Keys of sequence b (Listed: of query token b).
  KOKKOS_INLINE_FUNCTION std::int64_t length(std::int64_t b) const {
    if constexpr (Listed)
      return listed.counts[b];
    else
      return cache.length(b);
  }
  /// The cache row of key k of sequence b (Listed: of query token b). A
  /// compile-time choice: as a branch, the lookup of lists cost the wgmma
  /// kernel 150 bytes of spills.
  KOKKOS_INLINE_FUNCTION std::int64_t key_row(std::int64_t b, std::int64_t k) const {
    if constexpr (Listed)
      return listed.rows[b * listed.ld + k];
    else
      return cache.row(b, k);
  }
  std::int64_t league_size() const { return batch * splits * row_groups(); }

  /// Keys of sequence b that part p attends to.
  KOKKOS_INLINE_FUNCTION void part_range(std::int64_t length, int p, std::int64_t& begin,
                                         std::int64_t& end) const {
    const std::int64_t steps = (length + Keys - 1) / Keys, per_part = (steps + splits - 1) / splits;
    begin = p * per_part * Keys;
    end = (p + 1) * per_part * Keys < length ? (p + 1) * per_part * Keys : length;
    if (begin > end) begin = end;
  }

  /// A team's share: sequence b (of `length` keys), part `part`, query rows
  /// from `first`, and keys: the part's [begin, end) and of those, the ones its rows see, up
  /// to team_end (the last row sees most), masked per row from edge_from on.
  struct TeamShare {
    std::int64_t b, first, length, begin, end, team_end, edge_from;
    int part;
  };
  KOKKOS_INLINE_FUNCTION TeamShare team_share(std::int64_t league_rank) const {
    const std::int64_t groups = row_groups(), rows = queries * heads;
    TeamShare s;
    s.part = int(league_rank / groups % splits);
    s.b = league_rank / (groups * splits);
    s.first = league_rank % groups * Rows;
    s.length = length(s.b);
    part_range(s.length, s.part, s.begin, s.end);
    const std::int64_t last = (s.first + Rows < rows ? s.first + Rows : rows) - 1;
    s.team_end = visible_end(s, last);
    s.edge_from = visible_end(s, s.first);
    return s;
  }
  /// The end of the keys of the share that query row n (token n / H) sees:
  /// with causal masks, keys up to length - Tq + n / H.
  KOKKOS_INLINE_FUNCTION std::int64_t visible_end(const TeamShare& s, std::int64_t n) const {
    const std::int64_t row_end =
        causal && n < queries * heads ? s.length - queries + n / heads + 1 : s.length;
    return row_end < s.end ? row_end : s.end;
  }

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  /// Normalises and writes a thread's rows n0 and n0 + 8 of oa and their
  /// lse, once the quad's sums (lanes 4g .. 4g + 3 hold a row's columns) are
  /// added: to oa and lse with one part, to the part's fp32 rows otherwise.
  /// columns(r, put) calls put(column, x, y) for each pair of columns of row
  /// n0 + 8r that the thread holds; `writes_lse`: this thread writes the lse.
  template <class Columns>
  __device__ void finish_rows(const float (&m)[2], float (&l)[2], std::int64_t b, int part, std::int64_t n0,
                              bool writes_lse, Columns columns) const {
    const std::int64_t rows = queries * heads, all_rows = batch * rows;
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const std::int64_t n = n0 + 8 * r;
      if (n >= rows) continue;
      const std::int64_t row = b * rows + n;
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
      const float row_lse = l[r] > 0.f ? m[r] * 0.6931471805599453f + logf(l[r]) : -INFINITY;
      if (splits == 1) {
        columns(r, [&](int column, float x, float y) {
          if constexpr (std::is_same<Scalar, float>::value)
            *reinterpret_cast<float2*>(oa + row * kRank + column) = make_float2(x * inv, y * inv);
          else
            *reinterpret_cast<unsigned*>(oa + row * kRank + column) = Mma<T>::pack(x * inv, y * inv);
        });
        if (lse && writes_lse) lse[row] = reported_lse(row_lse);
      } else {
        float* out = parts + (part * all_rows + row) * kRank;
        columns(r, [&](int column, float x, float y) {
          *reinterpret_cast<float2*>(out + column) = make_float2(x * inv, y * inv);
        });
        if (writes_lse) parts[splits * all_rows * kRank + part * all_rows + row] = row_lse;
      }
    }
  }
#endif
};

template <class T, int Rope, CacheStorage Storage = CacheStorage::Native, bool Listed = false>
struct DecodeTensorKernel : DecodeOperands<T, 16, 16, Listed> {  // 16 query rows a team, 16 keys a step
  using Base = DecodeOperands<T, 16, 16, Listed>;
  using Base::batch, Base::cache, Base::causal, Base::heads, Base::lse, Base::oa, Base::parts, Base::q_rope,
      Base::qa, Base::queries, Base::scale, Base::splits, Base::scratch_level, Base::part_range,
      Base::row_groups;
  using Base::kKeys, Base::kRank, Base::kRows;
  static_assert(Rope == 64 || Rope == 0, "RoPE keys of 64, or none");
  using Data = typename Base::Scalar;
  // float data (T float: TF32 products; SplitTf32: 3xTF32): fp32 tiles, m16n8k8 products.
  static constexpr bool kFloat = std::is_same<Data, float>::value;
  static constexpr bool kSplit = std::is_same<T, SplitTf32>::value;
  using Element = std::conditional_t<kFloat, float, std::uint16_t>;
  using Ops = Mma<T>;              // 16-bit T
  using A = Tf32Parts<kSplit, 4>;  // float data
  using B = Tf32Parts<kSplit, 2>;
  static constexpr int kRope = Rope, kWidth = kRank + kRope;
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static_assert(Storage == CacheStorage::Native, "FP8 tokens take DecodeFp8TensorKernel");
  // Staged rows: 16-bit, +16 bytes (ldmatrix hits 32 banks); fp32, +4 words
  // (580 = 4 mod 32: a warp's K reads, key g column t, and V reads, key 2t
  // or 2t + 1 column g, hit 32 banks).
  static constexpr int kLd = kWidth + (kFloat ? 4 : 8);
  static constexpr int kWarpColumns = kWidth / kWarps;        // score-contraction columns per warp: 144 (128)
  static constexpr int kSliceWidth = kFloat ? 8 : 16;         // columns of a product: k8 (TF32) or k16
  static constexpr int kSlices = kWarpColumns / kSliceWidth;  // 9 (8) k16 slices, 18 (16) k8
  static constexpr int kWarpOut = kRank / kWarps;             // 128 output columns per warp
  static constexpr int kOutTiles = kWarpOut / 8;              // 16 n8 tiles
  static constexpr int kPieceElements = 16 / int(sizeof(Element));  // elements of a 16-byte copy
  static constexpr int kLatentPieces = kRank / kPieceElements;      // 16-byte copies per latent row: 64 (128)
  static constexpr int kRopePieces = kRope / kPieceElements;        // and per RoPE key: 8 (16), or none
  static_assert(kRank % 16 == 0 && kWarpColumns % 16 == 0, "slices do not straddle the RoPE part");
  using QFragments = std::conditional_t<kFloat, float[kSlices][4], unsigned[kSlices][4]>;
  static constexpr bool needs_full_team = true;
  // Registers capped for 3 teams per SM (166 per thread, a 16-byte stack frame):
  // 2 teams per SM were 7-8 % slower. fp32 tiles (78 KB a team) let an SM hold 2.
  static constexpr int kTeamsPerSM = kFloat ? 2 : 3;
  using bounds = Kokkos::LaunchBounds<kThreads, kTeamsPerSM>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  /// Key rows are copied through L1 (cp.async.ca): on the H200 the kernel
  /// ran 6-10 % faster than with copies through L2 alone (cp.async.cg), at
  /// the same DRAM traffic.
  static constexpr CopyVia kCopyVia = CopyVia::L1;

  static constexpr std::size_t kAlignment = 16;
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes() {
    return 2 * std::size_t(kKeys) * kLd * sizeof(Element) +
           std::size_t(kWarps) * kRows * kKeys * sizeof(float) + kAlignment;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
#ifdef KOKKOSMLA_SM80_DEVICE_CODE
    attend(team);
#elif defined(__CUDA_ARCH__)
    (void)team;
    Kokkos::abort("KokkosMLA::DecodeTensorKernel: this GPU's code was built without sm_80 instructions");
#else
    (void)team;
#endif
  }

#ifdef KOKKOSMLA_SM80_DEVICE_CODE
  /// Starts copying keys k0 .. k0 + kKeys - 1 of sequence b (zeros from `end`
  /// on) into a tile as one group. Thread `rank` copies key rank / 8: the
  /// latent's and RoPE key's 16-byte pieces rank % 8 + 8j (eight threads read
  /// 128 contiguous bytes per j); one cache-row lookup per thread.
  __device__ void stage(std::int64_t b, std::int64_t k0, std::int64_t end, Element* tile, int rank) const {
    static_assert(kThreads == 8 * kKeys && kLatentPieces % 8 == 0 && kRopePieces % 8 == 0,
                  "eight threads per key, whole pieces each");
    constexpr int kStride = 8 * kPieceElements;  // elements between a thread's pieces
    const int key = rank / 8, piece = rank % 8;
    const bool valid = k0 + key < end;
    const std::int64_t row = valid ? this->key_row(b, k0 + key) : 0;
    const Data* latent = cache.latent + row * cache.latent_ld + piece * kPieceElements;
    Element* to = tile + key * kLd + piece * kPieceElements;
    KOKKOSMLA_UNROLL
    for (int j = 0; j < kLatentPieces / 8; ++j)
      copy_async<kCopyVia>(to + kStride * j, latent + kStride * j, valid);
    if constexpr (kRope > 0) {
      const Data* rope = cache.rope + row * cache.rope_ld + piece * kPieceElements;
      KOKKOSMLA_UNROLL
      for (int j = 0; j < kRopePieces / 8; ++j)
        copy_async<kCopyVia>(to + kRank + kStride * j, rope + kStride * j, valid);
    }
    commit_copies();
  }

  __device__ void attend(const Member& team) const {
    const int rank = hidden_from_compiler(team.team_rank()), warp = rank / 32, lane = rank % 32;
    const int g = lane / 4, t = lane % 4;  // fragment row and column pair
    const auto share = this->team_share(team.league_rank());
    const std::int64_t b = share.b, begin = share.begin, team_end = share.team_end;

    auto* raw = static_cast<char*>(team.team_scratch(scratch_level).get_shmem(scratch_bytes()));
    auto* tiles = reinterpret_cast<Element*>((reinterpret_cast<std::uintptr_t>(raw) + kAlignment - 1) &
                                             ~std::uintptr_t(kAlignment - 1));
    float* partial = reinterpret_cast<float*>(tiles + 2 * kKeys * kLd);  // (warp, row, key)

    if (begin < team_end) stage(b, begin, team_end, tiles, rank);

    // Rows g and g + 8 of the team, columns kWarpColumns warp .. of [qa, q_rope], as A fragments.
    const std::int64_t n0 = share.first + g;
    QFragments qf;
    load_queries(qf, b, n0, warp * kWarpColumns, t);

    float o[kOutTiles][4];
    KOKKOSMLA_UNROLL
    for (int n = 0; n < kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units), lane's sums
    const float scale2 = scale * 1.4426950408889634f;        // exp(x) = exp2(x log2(e))

    // Key positions are below 2^30 (validated): the loop counts in 32 bits.
    const int key_end = int(team_end), mask_from = int(share.edge_from);
    const int visible0 = int(this->visible_end(share, n0)), visible1 = int(this->visible_end(share, n0 + 8));
    for (int k0 = int(begin), step = 0; k0 < key_end; k0 += kKeys, ++step) {
      const Element* tile = next_tile(team, b, k0, key_end, step, tiles, rank);
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, { 0.f, 0.f, 0.f, 0.f }};
      partial_scores(s, qf, tile + warp * kWarpColumns, lane);
      exchange_partial_scores(team, s, partial, warp, g, t);
      const bool edge = k0 + kKeys > mask_from;
      softmax_step(s, o, m, l, edge, visible0 - k0, visible1 - k0, t, scale2);
      accumulate(o, s, tile + warp * kWarpOut, lane);
    }
    team.team_barrier();  // with one part, oa overwrites qa columns other warps may not have read yet
    finish(o, m, l, b, share.part, n0, t, warp);
  }

  /// Rows n0 and n0 + 8 of sequence b's [qa, q_rope] (zeros past the last
  /// row), columns from `column` on, as A fragments: 16-bit pairs (columns
  /// 2t, 2t + 1, then + 8, per k16 slice), or floats (columns t, t + 4 per k8
  /// slice; rounded to TF32 once for TF32 products, split where used for 3xTF32).
  __device__ void load_queries(QFragments& qf, std::int64_t b, std::int64_t n0, int column, int t) const {
    const std::int64_t rows = queries * heads;
    const Data* const qa_seq = qa + b * rows * kRank;
    const Data* const rope[2] = {this->rope_row(b, n0), this->rope_row(b, n0 + 8)};
    auto at = [&](int r, int col) -> const Data* {
      const std::int64_t n = n0 + 8 * r;
      return col < kRank ? qa_seq + n * kRank + col : rope[r] + (col - kRank);
    };
    const bool valid[2] = {n0 < rows, n0 + 8 < rows};
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < kSlices; ++kk) {
      KOKKOSMLA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i % 2, col = column + kk * kSliceWidth + (i / 2) * (kSliceWidth / 2);
        if constexpr (kFloat) {
          const float x = valid[r] ? at(r, col + t)[0] : 0.f;
          qf[kk][i] = kSplit ? x : rounded_to_tf32(x);
        } else {
          qf[kk][i] = valid[r] ? *reinterpret_cast<const unsigned*>(at(r, col + 2 * t)) : 0u;
        }
      }
    }
  }

  /// The tile of keys k0 .. k0 + kKeys - 1 (step `step` of the part),
  /// visible to the team, every warp done with the other tile and the
  /// partials of the step before, and the next tile's copies started into it.
  __device__ const Element* next_tile(const Member& team, std::int64_t b, int k0, int key_end, int step,
                                      Element* tiles, int rank) const {
    const int buffer = step % 2;
    wait_copies<0>();
    team.team_barrier();  // the tile is visible; every warp is done with the other buffer and the partials
    if (k0 + kKeys < key_end) stage(b, k0 + kKeys, key_end, tiles + (buffer ^ 1) * kKeys * kLd, rank);
    return tiles + buffer * kKeys * kLd;
  }

  /// Replaces this warp's partial scores s (N n8 tiles of keys) by the sums
  /// over the four warps, added in the same order in every warp (so all hold
  /// the same S). `partial` is (warp, 16 keys, row, 16): a lane's scores of
  /// row g (then g + 8), keys 2t, 2t + 1, 8 + 2t, 9 + 2t of each 16, are
  /// four adjacent floats at 4t: one 16-byte access each, and the eight
  /// lanes of a quarter-warp (rows g, g + 1) cover the 32 banks once.
  template <int N>
  __device__ static void exchange_partial_scores(const Member& team, float (&s)[N][4], float* partial,
                                                 int warp, int g, int t) {
    static_assert(N % 2 == 0, "whole 16-key steps");
    constexpr int kHalves = N / 2;
    auto at = [&](int w, int h, int r) {
      return partial + ((w * kHalves + h) * kRows + g + 8 * r) * 16 + 4 * t;
    };
    KOKKOSMLA_UNROLL
    for (int h = 0; h < kHalves; ++h) {
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r)
        store_shared(at(warp, h, r),
                     {s[2 * h][2 * r], s[2 * h][2 * r + 1], s[2 * h + 1][2 * r], s[2 * h + 1][2 * r + 1]});
    }
    team.team_barrier();
    float sum[kHalves][2][4] = {};  // (16 keys, row g / g + 8): keys as stored
    KOKKOSMLA_UNROLL
    for (int w = 0; w < kWarps; ++w) {
      KOKKOSMLA_UNROLL
      for (int h = 0; h < kHalves; ++h) {
        KOKKOSMLA_UNROLL
        for (int r = 0; r < 2; ++r) {
          float v[4];
          load_shared(at(w, h, r), v);
          KOKKOSMLA_UNROLL
          for (int e = 0; e < 4; ++e) sum[h][r][e] += v[e];
        }
      }
    }
    KOKKOSMLA_UNROLL
    for (int h = 0; h < kHalves; ++h) {
      KOKKOSMLA_UNROLL
      for (int r = 0; r < 2; ++r) {
        s[2 * h][2 * r] = sum[h][r][0], s[2 * h][2 * r + 1] = sum[h][r][1];
        s[2 * h + 1][2 * r] = sum[h][r][2], s[2 * h + 1][2 * r + 1] = sum[h][r][3];
      }
    }
  }

  /// s = Q K^T over this warp's kWarpColumns columns of the tile (rows from `ks`), in
  /// two interleaved sums (even and odd slices) so that consecutive products
  /// do not wait on each other. ldmatrix matrices: (keys +0, col +0), (+0, +8),
  /// (+8, +0), (+8, +8).
  /// float data: K's B fragments read as they lie (key g, columns t and t + 4).
  __device__ static void partial_scores(float (&s)[2][4], const QFragments& qf, const Element* ks, int lane) {
    float odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, { 0.f, 0.f, 0.f, 0.f }};
    KOKKOSMLA_UNROLL
    for (int kk = 0; kk < kSlices; ++kk) {
      float(&sum)[2][4] = kk % 2 ? odd : s;
      if constexpr (kFloat) {
        const A a = A::as_is(qf[kk]);
        const Element* k = ks + (lane / 4) * kLd + kk * 8 + lane % 4;
        KOKKOSMLA_UNROLL
        for (int n = 0; n < 2; ++n) {
          const float kb[2] = {k[n * 8 * kLd], k[n * 8 * kLd + 4]};
          multiply(sum[n], a, B::as_is(kb));
        }
      } else {
        const int row = (lane % 8) + 8 * (lane / 16), col = 8 * ((lane / 8) % 2);
        unsigned kb[4];
        load_matrices(ks + row * kLd + kk * 16 + col, kb);
        Ops::run(sum[0], qf[kk], kb[0], kb[1]);
        Ops::run(sum[1], qf[kk], kb[2], kb[3]);
      }
    }
    KOKKOSMLA_UNROLL
    for (int n = 0; n < 2; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) s[n][e] += odd[n][e];
    }
  }

  /// o += P V over this warp's 128 output columns (from `vs`), V transposed
  /// by ldmatrix: matrices (keys +0, col +0), (+8, +0), (+0, +8), (+8, +8).
  /// float data: each k8 slice's keys permuted (logical t <-> stored 2t,
  /// t + 4 <-> 2t + 1), which changes no sum and makes P's A fragment the
  /// score accumulators as they are; V read as it lies (keys 2t, 2t + 1, column g).
  __device__ static void accumulate(float (&o)[kOutTiles][4], const float (&p)[2][4], const Element* vs,
                                    int lane) {
    if constexpr (kFloat) {
      const int g = lane / 4, t = lane % 4;
      KOKKOSMLA_UNROLL
      for (int n = 0; n < 2; ++n) {
        const float pn[4] = {p[n][0], p[n][2], p[n][1], p[n][3]};
        const A a = A::rounded(pn);
        const Element* v = vs + (n * 8 + 2 * t) * kLd + g;
        KOKKOSMLA_UNROLL
        for (int dn = 0; dn < kOutTiles; ++dn) {
          const float vb[2] = {v[dn * 8], v[kLd + dn * 8]};
          multiply(o[dn], a, B::as_is(vb));
        }
      }
    } else {
      const int row = (lane % 8) + 8 * ((lane / 8) % 2), col = 8 * (lane / 16);
      const unsigned pa[4] = {Ops::pack(p[0][0], p[0][1]), Ops::pack(p[0][2], p[0][3]),
                              Ops::pack(p[1][0], p[1][1]), Ops::pack(p[1][2], p[1][3])};
      KOKKOSMLA_UNROLL
      for (int dn = 0; dn < kOutTiles / 2; ++dn) {
        unsigned vb[4];
        load_matrices_transposed(vs + row * kLd + dn * 16 + col, vb);
        Ops::run(o[2 * dn], pa, vb[0], vb[1]);
        Ops::run(o[2 * dn + 1], pa, vb[2], vb[3]);
      }
    }
  }

  /// Scales the step's scores, masks keys from visible0 / visible1 on (rows g,
  /// g + 8) on an edge step, updates the running max and sums, rescales o
  /// (times o_ratio as well: a change of o's unit), and leaves the
  /// unnormalised probabilities in s. A row that has seen no key yet keeps
  /// max -inf and contributes zeros.
  template <int N>
  __device__ static void softmax_step(float (&s)[N][4], float (&o)[kOutTiles][4], float (&m)[2],
                                      float (&l)[2], bool edge, int visible0, int visible1, int t,
                                      float scale2, float o_ratio = 1.f) {
    const int visible[2] = {visible0, visible1};
    float mx[2] = {m[0], m[1]};
    KOKKOSMLA_UNROLL
    for (int n = 0; n < N; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= scale2;
        if (edge && n * 8 + 2 * t + (e & 1) >= visible[e / 2]) s[n][e] = -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
      }
    }
    float base[2];
    KOKKOSMLA_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];
      const float correction = fast_exp2(m[r] - base[r]);  // 0 while m is -inf
      m[r] = mx[r];
      l[r] *= correction;
      const float o_correction = correction * o_ratio;
      // Most steps, once the maxima settle, keep every row of the warp as
      // it is: 2 kOutTiles multiplications a row saved.
      if (__all_sync(0xffffffffu, o_correction == 1.f)) continue;
      KOKKOSMLA_UNROLL
      for (int n = 0; n < kOutTiles; ++n) o[n][2 * r] *= o_correction, o[n][2 * r + 1] *= o_correction;
    }
    KOKKOSMLA_UNROLL
    for (int n = 0; n < N; ++n) {
      KOKKOSMLA_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[n][e] = fast_exp2(s[n][e] - base[e / 2]);
        l[e / 2] += s[n][e];
      }
    }
  }

  /// Normalises and writes this lane's oa of rows n0 and n0 + 8 (this
  /// warp's columns), and lse.
  __device__ void finish(const float (&o)[kOutTiles][4], const float (&m)[2], float (&l)[2], std::int64_t b,
                         int part, std::int64_t n0, int t, int warp) const {
    this->finish_rows(m, l, b, part, n0, warp == 0 && t == 0, [&](int r, auto&& put) {
      KOKKOSMLA_UNROLL
      for (int j = 0; j < kOutTiles; ++j) put(warp * kWarpOut + 8 * j + 2 * t, o[j][2 * r], o[j][2 * r + 1]);
    });
  }
#endif
};

/// Most parts per sequence a decode merge takes: more only add merge work.
constexpr int kMostDecodeParts = 64;

/// Combines the parts of DecodeTensorKernel: oa (16-bit) and lse of each row
/// from the parts' fp32 oa weighted by exp(lse_p - lse). A team per row, a
/// thread per 4 columns; a part that saw no key (lse -inf) has weight 0, a
/// row that saw none gets 0. Each thread issues four parts' 16-byte loads
/// at once, the first four before it reads the lse: with the loads behind
/// per-part branches, column after column, the merge took 19 us beside the
/// attention's 197 on B = 128, H = 16, S = 4096 (Nsight Compute); this way
/// 9-10 us.
template <class T>
struct DecodeMergeKernel {
  static constexpr int kRank = 512;  // DecodeTensorKernel's
  static constexpr int kThreads = kRank / 4;
  static constexpr int kMaxSplits = kMostDecodeParts;
  static constexpr bool needs_full_team = true;
  using bounds = Kokkos::LaunchBounds<kThreads>;
  using Member = typename Kokkos::TeamPolicy<Kokkos::Cuda, bounds>::member_type;

  const float* parts;  // (splits, rows, R) then (splits, rows) lse
  T* oa;               // (rows, R)
  LseRows<float> lse;  // (rows) or empty
  std::int64_t rows;
  int splits;
  int scratch_level = 0;

  std::int64_t league_size() const { return rows; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t row = team.league_rank();
    const int c = 4 * team.team_rank();
    // Parts p0 .. p0 + 3 of this thread's columns (the last part again past the end).
    auto load_group = [&](int p0, float4(&v)[4]) {
      KOKKOSMLA_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int p = p0 + j < splits ? p0 + j : splits - 1;
        v[j] = *reinterpret_cast<const float4*>(parts + (p * rows + row) * kRank + c);
      }
    };
    float4 v[4];
    load_group(0, v);  // in flight while the weights are worked out
    const float* part_lse = parts + splits * rows * kRank + row;
    LseMerge<float> merge;
    for (int p = 0; p < splits; ++p) merge.see(part_lse[p * rows]);
    for (int p = 0; p < splits; ++p) merge.add(part_lse[p * rows]);
    float x[4] = {0.f, 0.f, 0.f, 0.f};
    for (int p0 = 0; p0 < splits; p0 += 4) {
      if (p0 > 0) load_group(p0, v);
      KOKKOSMLA_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int p = p0 + j;
        const float w = p < splits ? merge.share(merge.weight(part_lse[p * rows])) : 0.f;
        if (w > 0.f) x[0] += w * v[j].x, x[1] += w * v[j].y, x[2] += w * v[j].z, x[3] += w * v[j].w;
      }
    }
    KOKKOSMLA_UNROLL
    for (int j = 0; j < 4; ++j) oa[row * kRank + c + j] = T(x[j]);
    if (lse && team.team_rank() == 0) lse[row] = merge.lse();
  }
};

/// Runs a bound decode kernel (DecodeTensorKernel, DecodeSm90Kernel), then,
/// with several parts, their merge into k.oa and k.lse.
template <class Kernel>
void attend_decode(const Kokkos::Cuda& exec, const char* label, const Kernel& k) {
  using Merge = DecodeMergeKernel<typename Kernel::Scalar>;
  static_assert(Merge::kRank == Kernel::kRank, "the merge's rows are the kernel's");
  launch(exec, label, k, Kernel::kThreads, Kernel::scratch_bytes(), true, typename Kernel::bounds());
  if (k.splits > 1)
    launch(exec, "KokkosMLA::CacheAttention::merge_tensor",
           Merge{k.parts, k.oa, k.lse, k.batch * k.queries * k.heads, k.splits}, Merge::kThreads, 0, true,
           typename Merge::bounds());
}

/// The problem a decode kernel sees: with sparse indices (topk > 0) each
/// query token is a sequence of its own (Tq = 1) whose keys are its listed
/// positions, at most topk.
inline CacheShape decode_shape(CacheShape s) {
  if (s.topk > 0) {
    s.batch *= s.queries;
    s.queries = 1;
    s.capacity = s.topk;
    s.topk = 0;
  }
  return s;
}

/// A decode kernel (DecodeTensorKernel, DecodeSm90Kernel: the same fields)
/// bound to a call, the attention between absorption and up-projection:
/// qa (B Tq H, R) in, oa out in its place, in parts merged by lse.
template <class Kernel, class T>
Kernel bound_decode_kernel(const CacheShape& s, int splits, float scale, bool causal,
                           const CacheArguments<T, Kokkos::Cuda::memory_space, Kokkos::LayoutStride>& a,
                           T* qa, float* parts, const ListedKeys& listed) {
  Kernel k;
  k.qa = qa;
  k.q_rope = head_rows(a.q_rope);
  if (s.storage == CacheStorage::Native) {
    k.cache = latent_keys<T>(a.cache, s.latent_dim, s.rope_dim);
  } else {
    k.fp8 = fp8_keys(a.cache);
    k.cache = same_rows<T>(k.fp8.tokens);  // the tokens' addressing: rows and lengths
  }
  k.oa = qa;  // each team reads its rows' qa before it writes their oa
  k.parts = parts;
  k.lse = lse_rows(a.lse);
  const CacheShape kernel_shape = decode_shape(s);
  k.listed = listed;
  k.batch = kernel_shape.batch;
  k.queries = kernel_shape.queries;
  k.heads = kernel_shape.heads;
  k.splits = splits;
  k.scale = scale;
  k.causal = causal && s.topk == 0;  // listed keys are what a row sees
  return k;
}

/// f(Kernel<T, Rope, Storage, Listed>()) for the decode kernel a problem of
/// shape s takes: by its cache's storage (FP8 with 16-bit T only) and RoPE
/// width (FP8 tokens have RoPE keys of 64); Listed with sparse indices.
template <template <class, int, CacheStorage, bool> class Kernel, class T, bool Listed, class F>
decltype(auto) with_decode_kernel_of(const CacheShape& s, F&& f) {
  if constexpr (is_half_precision<T>::value) {
    if (s.storage == CacheStorage::Fp8PerBlock) return f(Kernel<T, 64, CacheStorage::Fp8PerBlock, Listed>());
    if (s.storage == CacheStorage::Fp8PerTensor)
      return f(Kernel<T, 64, CacheStorage::Fp8PerTensor, Listed>());
  }
  return s.rope_dim > 0 ? f(Kernel<T, 64, CacheStorage::Native, Listed>())
                        : f(Kernel<T, 0, CacheStorage::Native, Listed>());
}
template <template <class, int, CacheStorage, bool> class Kernel, class T, class F>
decltype(auto) with_decode_kernel(const CacheShape& s, F&& f) {
  return s.topk > 0 ? with_decode_kernel_of<Kernel, T, true>(s, f)
                    : with_decode_kernel_of<Kernel, T, false>(s, f);
}

/// attend_in_parts' default `attend`: a kernel bound to the call needs nothing more.
struct AttendAsBound {
  template <class K>
  void operator()(const Kokkos::Cuda& exec, const char* label, const K& kernel) const {
    attend_decode(exec, label, kernel);
  }
};

/// The attention step of a tensor-core cache path: the decode kernel
/// Kernel of operand type T (DataOf<T> data) and of the cache's storage and
/// RoPE width, bound to the call and run in parts (launched as `label`), qa
/// in, oa out in its place; with sparse indices over the listed keys.
/// `attend(exec, label, kernel)` runs it (attend_decode), after setting what
/// a path's kernel has beyond the call (the Hopper kernel's TMA maps, its
/// teams in pairs).
template <template <class, int, CacheStorage, bool> class Kernel, class T,
          class Data = typename DataOf<T>::type, class Attend = AttendAsBound>
void attend_in_parts(const Kokkos::Cuda& exec, const char* label, const CacheShape& s, int splits,
                     float scale, bool causal,
                     const CacheArguments<Data, Kokkos::Cuda::memory_space, Kokkos::LayoutStride>& a,
                     Data* qa, float* parts, const ListedKeys& listed, const Attend& attend = {}) {
  with_decode_kernel<Kernel, T>(s, [&](auto kernel) {
    auto bound = bound_decode_kernel<decltype(kernel)>(s, splits, scale, causal, a, qa, parts, listed);
    attend(exec, label, bound);
  });
}

/// A decode kernel's scratch per team for caches of shape s.
template <template <class, int, CacheStorage, bool> class Kernel, class T>
std::size_t decode_scratch_bytes(const CacheShape& s) {
  return with_decode_kernel<Kernel, T>(s, [](auto kernel) { return decltype(kernel)::scratch_bytes(); });
}

/// The level-0 scratch the backend lets a decode kernel's teams have.
template <template <class, int, CacheStorage, bool> class Kernel, class T>
std::size_t decode_scratch_budget(const Backend& be) {
  using K = Kernel<T, 64, CacheStorage::Native, false>;  // the same teams without RoPE or with FP8 tokens
  return be.scratch_budget(demand_of<typename K::bounds>(K::kThreads, kAnyTeamScratch));
}

/// Parts per sequence for a decode kernel (split_count): its teams of kRows
/// query rows, as many at once as its bounds and scratch let an SM hold,
/// parts at least 256 keys long, at most what the merge takes.
template <template <class, int, CacheStorage, bool> class Kernel, class T>
int decode_splits(const CacheShape& problem, const Backend& be, int requested) {
  using K = Kernel<T, 64, CacheStorage::Native, false>;
  const CacheShape s = decode_shape(problem);
  SplitInputs in;
  in.teams_per_part = double(s.batch * ((s.queries * s.heads + K::kRows - 1) / K::kRows));
  in.slots = be.resident_teams(demand_of<typename K::bounds>(K::kThreads, kAnyTeamScratch),
                               decode_scratch_bytes<Kernel, T>(s));
  in.capacity = s.capacity;
  in.min_part = 256;
  in.most = in.most_requested = kMostDecodeParts;
  return split_count(in, requested);
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif  // KOKKOSMLA_ENABLE_SM80
#endif
