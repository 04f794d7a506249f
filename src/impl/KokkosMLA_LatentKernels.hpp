#ifndef KOKKOSMLA_LATENTKERNELS_HPP
#define KOKKOSMLA_LATENTKERNELS_HPP
// Attention in the latent space (Algorithm::Fused and Algorithm::Absorbed, and
// attention over a latent cache).
//
// A team owns a block of rows: `heads` consecutive heads times `tokens`
// consecutive query tokens of one batch element, stored head-major (row
// g * tokens + i is head h0 + g, token t0 + i). Every row reads the same
// latent tiles, so one staged tile serves all heads of the team. Three steps:
//   absorb:     qa = scale * q . w_uk[:, h, :]^T   (rows x R), w_uk staged in chunks
//   attend:     oa = softmax(qa . latent^T + scale * q_rope . k_rope^T) latent
//               (rows x R), online softmax; also the rows' log-sum-exp
//   up_project: out = oa . w_uv[:, h, :]          (rows x D), w_uv staged in chunks
// The Fused kernel runs all three in one launch with qa and oa in scratch; the
// Absorbed algorithm runs one kernel per step through a (B, T, H, R) workspace.
// Split-KV (flash-decoding) divides each sequence's keys among `splits` teams:
// the Split step writes each part's oa and log-sum-exp to a workspace, and
// the Combine step merges the parts by their log-sum-exp and up-projects once
// (the up-projection is linear, so merging in the latent space is exact);
// Merge merges only, for DecodeKernel's path, which up-projects separately.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_TeamOps.hpp"

namespace KokkosMLA {
namespace Impl {

/// Where the keys of a sequence live: key s of sequence b is row
/// page * page_size + s % page_size of `latent` (and of `rope`), where page is
/// block_table[b][s / page_size], or b itself for a contiguous cache.
template <class T>
struct LatentKeys {
  const T* latent = nullptr;
  std::int64_t latent_ld = 0;  ///< elements from one row to the next: R, or R + Dr when packed
  const T* rope = nullptr;     ///< decoupled-RoPE keys (Dr wide), or null
  std::int64_t rope_ld = 0;
  const int* block_table = nullptr;  ///< (B, table_ld) page numbers, or null
  std::int64_t table_ld = 0;
  std::int64_t page_size = 1;
  int page_shift = -1;           ///< log2(page_size) where that is a power of two (set_page_size), else -1
  const int* lengths = nullptr;  ///< keys of sequence b, or null: `keys` for every sequence
  std::int64_t keys = 0;

  void set_page_size(std::int64_t size) {
    page_size = size;
    page_shift = -1;
    for (int shift = 0; shift < 31; ++shift)
      if (std::int64_t(1) << shift == size) page_shift = shift;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t length(std::int64_t b) const { return lengths ? lengths[b] : keys; }
  KOKKOS_INLINE_FUNCTION std::int64_t row(std::int64_t b, std::int64_t s) const {
    if (!block_table) return b * page_size + s;
    // Positions and page sizes are below 2^30 (validated): 32 bits are enough. Pages of a
    // power of two (16, 64, 256 in engines) take a shift and a mask, not a division.
    const int position = int(s), size = int(page_size);
    const int page = page_shift >= 0 ? position >> page_shift : position / size;
    const int within = page_shift >= 0 ? position & (size - 1) : position % size;
    return std::int64_t(block_table[b * table_ld + page]) * page_size + within;
  }
};

/// Sparse attention's keys for the tensor-core decode kernels: the cache
/// rows of each query token's valid positions, in order, compacted from
/// CacheArguments::indices (ListKeysKernel): row b of `rows` lists counts[b]
/// rows. Rows, not positions: a kernel finds a key's row with one load, not
/// two dependent ones (list, then block table) ahead of its copies.
struct ListedKeys {
  const std::int64_t* rows = nullptr;  ///< (B Tq, ld)
  const int* counts = nullptr;         ///< (B Tq), or null: dense attention
  std::int64_t ld = 0;
};

/// How the rows of `tokens`, a LatentCache's latent or its FP8 tokens, are
/// addressed (as `latent`; no RoPE part).
template <class T, class Cache, class Tokens>
LatentKeys<T> cache_rows(const Cache& cache, const Tokens& tokens) {
  LatentKeys<T> k;
  k.latent = tokens.data();
  k.latent_ld = std::int64_t(tokens.extent(2));
  k.block_table = cache.block_table.size() > 0 ? cache.block_table.data() : nullptr;
  k.table_ld = std::int64_t(cache.block_table.extent(1));
  k.set_page_size(std::int64_t(tokens.extent(1)));
  k.lengths = cache.seqlens.data();
  k.keys = (k.block_table ? k.table_ld : 1) * k.page_size;
  return k;
}

/// The addressing of `from`'s rows (block table, pages, lengths) for
/// elements of another type, without their data: kept here, beside the
/// fields, so that a field added to LatentKeys is copied too.
template <class T, class U>
LatentKeys<T> same_rows(const LatentKeys<U>& from) {
  LatentKeys<T> k;
  k.block_table = from.block_table;
  k.table_ld = from.table_ld;
  k.page_size = from.page_size;
  k.page_shift = from.page_shift;
  k.lengths = from.lengths;
  k.keys = from.keys;
  return k;
}

/// How a LatentCache's rows are addressed; rope_dim > 0 without k_rope means packed.
template <class Scalar, class Cache>
LatentKeys<Scalar> latent_keys(const Cache& cache, std::int64_t rank, std::int64_t rope_dim) {
  LatentKeys<Scalar> k = cache_rows<Scalar>(cache, cache.latent);
  if (rope_dim > 0) {
    const bool packed = cache.k_rope.size() == 0;
    k.rope = packed ? cache.latent.data() + rank : cache.k_rope.data();
    k.rope_ld = packed ? k.latent_ld : rope_dim;
  }
  return k;
}

/// Reads element (i, j) of keys s0 + i of sequence b, column j of a cache
/// array; with `positions` (sparse attention), of key positions[s0 + i]
/// instead, 0 where that is -1 (an unused entry, masked).
template <class T>
struct KeyRows {
  const LatentKeys<T>* keys;
  const T* base;
  std::int64_t ld, b, s0;
  const int* positions = nullptr;
  KOKKOS_INLINE_FUNCTION T operator()(int i, int j) const {
    const std::int64_t s = positions ? std::int64_t(positions[s0 + i]) : s0 + i;
    return s < 0 ? T(0) : base[keys->row(b, s) * ld + j];
  }
};

struct LatentTiles {
  int tokens = 1;        ///< query tokens per team
  int heads = 1;         ///< heads per team
  int key_tile = 1;      ///< latent rows staged per step
  int weight_chunk = 1;  ///< rows of w_uk / w_uv staged per step
  KOKKOS_INLINE_FUNCTION int rows() const { return tokens * heads; }
};

/// Which steps a kernel runs, and so which scratch arrays it needs.
enum class LatentStep { Fused, Absorb, Attend, UpProject, Split, Combine, Merge };

template <class ExecSpace, class T, LatentStep Step>
struct LatentKernel {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchView =
      Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr bool absorbs =
      Step == LatentStep::Fused || Step == LatentStep::Absorb || Step == LatentStep::Split;
  static constexpr bool attends =
      Step == LatentStep::Fused || Step == LatentStep::Attend || Step == LatentStep::Split;
  static constexpr bool projects =
      Step == LatentStep::Fused || Step == LatentStep::UpProject || Step == LatentStep::Combine;
  static constexpr bool combines = Step == LatentStep::Combine || Step == LatentStep::Merge;
  // Any team size works; no register cap.
  static constexpr bool needs_full_team = false;
  using bounds = Kokkos::LaunchBounds<>;

  HeadRows<const T> q;       // (B, T, H, D)
  HeadRows<const T> q_rope;  // (B, T, H, Dr), or null
  LatentKeys<T> cache;
  HeadRows<const T> w_uk;  // (R, H, D)
  HeadRows<const T> w_uv;  // (R, H, D)
  HeadRows<T> out;         // (B, T, H, D)
  LseRows<T> lse;          // (B, T, H), or empty when not asked for
  // Absorbed: (B, T, H, R), qa after Absorb, oa after Attend (in place).
  // Merge: (B, T, H, R), the merged oa.
  T* workspace = nullptr;
  // Split, Combine and Merge: (splits, B, T, H, R) parts of oa, then (splits, B, T, H) their lse.
  T* parts = nullptr;
  std::int64_t batch = 0, queries = 0, heads = 0, dim = 0, rank = 0, rope_dim = 0;
  int splits = 1;
  int team_threads = 1;  ///< the most threads a team is launched with: its partial sums
  LatentTiles tiles;
  T scale = 1;
  bool causal = true;
  int scratch_level = 0;
  // Sparse attention: (B, T, topk) key positions of each query row, -1
  // unused; teams then own one token each (tiles.tokens = 1).
  const int* indices = nullptr;
  std::int64_t topk = 0;

  /// Element offsets of the team's scratch arrays; a step's unused ones are empty.
  struct Layout {
    std::size_t rows_d, stage, qa, qr, oa, p, max, sum, rescale, partial, total;
  };
  KOKKOS_INLINE_FUNCTION Layout layout(const LatentTiles& t) const {
    const std::size_t rows = std::size_t(t.rows());
    // Weight chunks and key tiles are never live at once: they share `stage`.
    const std::size_t weights = (absorbs || projects) ? std::size_t(t.weight_chunk) * (dim + 1) : 0;
    const std::size_t keys =
        attends ? std::size_t(t.key_tile) * (rank + 1 + (rope_dim ? rope_dim + 1 : 0)) : 0;
    ScratchLayout<T> c;
    Layout l;
    l.rows_d = c.take((absorbs || projects) ? rows * dim : 0);  // q rows, then out rows
    l.stage = c.take(max_of(weights, keys));
    l.qa = c.take((absorbs || attends) ? rows * rank : 0);
    l.qr = c.take(attends ? rows * rope_dim : 0);
    l.oa = c.take((attends || projects || combines) ? rows * rank : 0);
    // Combine keeps each row's weights of the splits where Attend keeps probabilities.
    l.p = c.take(attends ? rows * t.key_tile : combines ? rows * splits : 0);
    l.max = c.take(attends ? rows : 0);
    l.sum = c.take(attends ? rows : 0);
    l.rescale = c.take(attends ? rows : 0);
    l.partial = c.take(attends ? 4 * std::size_t(team_threads) : 0);
    l.total = c.used;
    return l;
  }
  std::size_t scratch_bytes(const LatentTiles& t) const { return ScratchView::shmem_size(layout(t).total); }

  KOKKOS_INLINE_FUNCTION int token_tiles() const { return int((queries + tiles.tokens - 1) / tiles.tokens); }
  KOKKOS_INLINE_FUNCTION int head_groups() const { return int((heads + tiles.heads - 1) / tiles.heads); }
  KOKKOS_INLINE_FUNCTION int parts_per_row() const { return Step == LatentStep::Split ? splits : 1; }
  std::int64_t league_size() const { return batch * head_groups() * token_tiles() * parts_per_row(); }

  /// The rows a team owns, and for Split, which part of the keys.
  struct Block {
    std::int64_t b, t0, h0;
    int tokens, heads, part;
    KOKKOS_INLINE_FUNCTION int rows() const { return tokens * heads; }
  };
  KOKKOS_INLINE_FUNCTION Block block_of(std::int64_t league) const {
    const int ntt = token_tiles(), nhg = head_groups();
    // The last token tiles see the most keys under causality: start them first.
    const int tt = ntt - 1 - int(league % ntt);
    const int hg = int((league / ntt) % nhg);
    Block k;
    k.part = int((league / (std::int64_t(ntt) * nhg)) % parts_per_row());
    k.b = league / (std::int64_t(ntt) * nhg * parts_per_row());
    k.t0 = std::int64_t(tt) * tiles.tokens;
    k.h0 = std::int64_t(hg) * tiles.heads;
    k.tokens = int(min_of<std::int64_t>(tiles.tokens, queries - k.t0));
    k.heads = int(min_of<std::int64_t>(tiles.heads, heads - k.h0));
    return k;
  }

  /// Copies the block's rows between a (B, T, H, width) tensor and a rows x width
  /// matrix in scratch, one head's tokens at a time (those rows are evenly strided).
  template <bool ToScratch>
  KOKKOS_INLINE_FUNCTION void move_rows(const Member& team, const Block& k, HeadRows<T> tensor,
                                        std::int64_t width, Mat<T> rows) const {
    for (int g = 0; g < k.heads; ++g) {
      const Mat<T> global{tensor.at(k.b * queries + k.t0, k.h0 + g), tensor.row};
      const Mat<T> local{rows.ptr + std::int64_t(g) * k.tokens * rows.ld, rows.ld};
      if (ToScratch)
        team_copy(team, k.tokens, int(width), Mat<const T>{global.ptr, global.ld}, local);
      else
        team_copy(team, k.tokens, int(width), Mat<const T>{local.ptr, local.ld}, global);
    }
  }

  /// As above for a row-major tensor.
  template <bool ToScratch>
  KOKKOS_INLINE_FUNCTION void move_rows(const Member& team, const Block& k, T* tensor, std::int64_t width,
                                        Mat<T> rows) const {
    move_rows<ToScratch>(team, k, packed_rows(tensor, heads, width), width, rows);
  }
  /// Queries, read into scratch only.
  KOKKOS_INLINE_FUNCTION void read_rows(const Member& team, const Block& k, HeadRows<const T> tensor,
                                        std::int64_t width, Mat<T> rows) const {
    move_rows<true>(team, k, as_mutable(tensor), width, rows);
  }

  /// Row i of the block's RoPE queries (the row of row_index(k, i)).
  KOKKOS_INLINE_FUNCTION const T* query_rope(const Block& k, int i) const {
    return q_rope.at(k.b * queries + k.t0 + i % k.tokens, k.h0 + i / k.tokens);
  }

  /// Element of lse-shaped (B, T, H) data for row i of the block.
  KOKKOS_INLINE_FUNCTION std::int64_t row_index(const Block& k, int i) const {
    return (k.b * queries + k.t0 + i % k.tokens) * heads + k.h0 + i / k.tokens;
  }

  /// Where part `part` of the split workspace starts: its oa rows, then its lse.
  KOKKOS_INLINE_FUNCTION T* part_oa(int part) const { return parts + part * batch * queries * heads * rank; }
  KOKKOS_INLINE_FUNCTION T* part_lse(int part) const {
    return parts + splits * batch * queries * heads * rank + part * batch * queries * heads;
  }

  /// Where an attending step leaves its rows' oa: the part's slot in a split
  /// step, else the workspace (over qa).
  KOKKOS_INLINE_FUNCTION T* attended(const Block& k) const {
    return Step == LatentStep::Split ? part_oa(k.part) : workspace;
  }
  /// Row `at`'s lse (-inf for no key) into the part's slot in a split step,
  /// else into lse when asked for, as reported (+inf for no key).
  KOKKOS_INLINE_FUNCTION void store_row_lse(const Block& k, std::int64_t at, T lse_at) const {
    if (Step == LatentStep::Split)
      part_lse(k.part)[at] = lse_at;
    else if (lse)
      lse[at] = reported_lse(lse_at);
  }

  /// The rows' log-sum-exp: into the part's slot in a split step (-inf for a
  /// row with no key), else into lse when asked for, as reported (+inf). Ends with a barrier.
  KOKKOS_INLINE_FUNCTION void store_lse(const Member& team, const Block& k, int rows,
                                        SoftmaxRows<T> st) const {
    if (Step == LatentStep::Split)
      softmax_log_sum_exp(team, rows, st, [&](int i) -> T& { return part_lse(k.part)[row_index(k, i)]; });
    else if (lse)
      softmax_log_sum_exp(
          team, rows, st, [&](int i) -> T& { return lse[row_index(k, i)]; }, true);
  }

  /// qa = scale * q_rows . w_uk[:, h, :]^T, head by head, w_uk staged in chunks.
  KOKKOS_INLINE_FUNCTION void absorb(const Member& team, const Block& k, Mat<T> q_rows, T* stage,
                                     Mat<T> qa) const {
    const int d = int(dim);
    for (int g = 0; g < k.heads; ++g) {
      const std::int64_t row0 = std::int64_t(g) * k.tokens;
      for (std::int64_t r0 = 0; r0 < rank; r0 += tiles.weight_chunk) {
        const int n = int(min_of<std::int64_t>(tiles.weight_chunk, rank - r0));
        team_copy(team, n, d, Mat<const T>{w_uk.at(r0, k.h0 + g), w_uk.row}, Mat<T>{stage, dim + 1});
        team_gemm(team, k.tokens, n, d, scale, Mat<const T>{q_rows.ptr + row0 * q_rows.ld, q_rows.ld},
                  TransposedB<T>{stage, dim + 1}, Mat<T>{qa.ptr + row0 * qa.ld + r0, qa.ld},
                  static_cast<const T*>(nullptr), false);
      }
    }
  }

  /// The last key position row i of the block may see: its own position when
  /// causal (query t of a sequence of `length` keys sits at length - T + t),
  /// else the sequence's last.
  KOKKOS_INLINE_FUNCTION std::int64_t last_key(const Block& k, int i) const {
    const std::int64_t length = cache.length(k.b);
    return causal ? length - queries + k.t0 + i % k.tokens : length - 1;
  }

  /// The keys the block's rows attend to in this part: [begin, end).
  struct KeyRange {
    std::int64_t begin, end;
  };
  KOKKOS_INLINE_FUNCTION KeyRange key_range(const Block& k) const {
    // Sparse: the entries of the token's index list; dense: the block's last token sees the most.
    const std::int64_t length = indices ? topk : cache.length(k.b);
    KeyRange r{0, indices ? topk : last_key(k, k.tokens - 1) + 1};
    if (Step == LatentStep::Split) {
      // Parts are whole key tiles of the sequence, the same for every block.
      const std::int64_t per_part = (length + splits - 1) / splits;
      const std::int64_t chunk = (per_part + tiles.key_tile - 1) / tiles.key_tile * tiles.key_tile;
      const std::int64_t begin = min_of(r.end, k.part * chunk);
      r = {begin, min_of(r.end, begin + chunk)};
    }
    return r;
  }

  /// oa = softmax_causal(qa . latent^T + scale * qr . rope^T) . latent,
  /// normalised, over the block's key range; latent (and rope) staged in tiles.
  KOKKOS_INLINE_FUNCTION void attend(const Member& team, const Block& k, Mat<T> qa, Mat<T> qr, T* stage,
                                     Mat<T> p, SoftmaxRows<T> st, T* partial, Mat<T> oa) const {
    const int rows = k.rows(), r = int(rank), dr = int(rope_dim);
    // Sparse: every entry is a key position (unused ones masked below).
    const int* positions = indices ? indices + (k.b * queries + k.t0) * topk : nullptr;
    auto visible = [&](int i) { return positions ? topk - 1 : last_key(k, i); };
    const KeyRange range = key_range(k);
    const Mat<T> latent_tile{stage, rank + 1}, rope_tile{stage + tiles.key_tile * (rank + 1), rope_dim + 1};
    softmax_init(team, rows, st);
    for (std::int64_t s0 = range.begin; s0 < range.end; s0 += tiles.key_tile) {
      const int n = int(min_of<std::int64_t>(tiles.key_tile, range.end - s0));
      team_gather(team, n, r, KeyRows<T>{&cache, cache.latent, cache.latent_ld, k.b, s0, positions},
                  latent_tile);
      team_gemm_long_k(team, rows, n, r, T(1), Mat<const T>{qa.ptr, qa.ld},
                       TransposedB<T>{latent_tile.ptr, latent_tile.ld}, p, false, partial);
      if (dr > 0) {
        team_gather(team, n, dr, KeyRows<T>{&cache, cache.rope, cache.rope_ld, k.b, s0, positions},
                    rope_tile);
        team_gemm_long_k(team, rows, n, dr, scale, Mat<const T>{qr.ptr, qr.ld},
                         TransposedB<T>{rope_tile.ptr, rope_tile.ld}, p, true, partial);
      }
      if (positions) mask_unused(team, rows, n, positions + s0, p);
      softmax_update(team, rows, n, s0, visible, p, st);
      team_gemm(team, rows, r, n, T(1), Mat<const T>{p.ptr, p.ld}, PlainB<T>{latent_tile.ptr, latent_tile.ld},
                oa, st.rescale, s0 > range.begin);
    }
    softmax_normalize(team, rows, r, oa, st);
    store_lse(team, k, rows, st);
  }

  /// Logits of unused index entries (-1) to -inf: they weigh 0, and a row
  /// whose entries are all unused ends as a row that saw no key.
  KOKKOS_INLINE_FUNCTION static void mask_unused(const Member& team, int rows, int n, const int* positions,
                                                 Mat<T> p) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * n), [&](const int e) {
      if (positions[e % n] < 0) p(e / n, e % n) = negative_infinity<T>();
    });
    team.team_barrier();
  }

  /// oa = the parts' oa weighted by exp(their lse), normalised; lse = the
  /// log of the total weight. A part that saw no key (lse = -inf) is skipped,
  /// whatever its oa holds.
  KOKKOS_INLINE_FUNCTION void combine(const Member& team, const Block& k, Mat<T> weights, Mat<T> oa) const {
    const int rows = k.rows(), r = int(rank);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
      const std::int64_t at = row_index(k, i);
      LseMerge<T> merge;
      for (int s = 0; s < splits; ++s) merge.see(part_lse(s)[at]);
      for (int s = 0; s < splits; ++s) weights(i, s) = merge.add(part_lse(s)[at]);
      for (int s = 0; s < splits; ++s) weights(i, s) = merge.share(weights(i, s));
      if (lse) lse[at] = merge.lse();
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * r), [&](const int e) {
      const int i = e / r, j = e % r;
      const std::int64_t at = row_index(k, i) * rank + j;
      T sum = 0;
      for (int s = 0; s < splits; ++s)
        if (weights(i, s) != T(0)) sum += weights(i, s) * part_oa(s)[at];
      oa(i, j) = sum;
    });
    team.team_barrier();
  }

  /// out_rows = oa . w_uv[:, h, :], head by head, w_uv staged in chunks.
  KOKKOS_INLINE_FUNCTION void up_project(const Member& team, const Block& k, Mat<T> oa, T* stage,
                                         Mat<T> out_rows) const {
    const int d = int(dim);
    for (int g = 0; g < k.heads; ++g) {
      const std::int64_t row0 = std::int64_t(g) * k.tokens;
      for (std::int64_t r0 = 0; r0 < rank; r0 += tiles.weight_chunk) {
        const int n = int(min_of<std::int64_t>(tiles.weight_chunk, rank - r0));
        team_copy(team, n, d, Mat<const T>{w_uv.at(r0, k.h0 + g), w_uv.row}, Mat<T>{stage, dim});
        team_gemm(team, k.tokens, d, n, T(1), Mat<const T>{oa.ptr + row0 * oa.ld + r0, oa.ld},
                  PlainB<T>{stage, dim}, Mat<T>{out_rows.ptr + row0 * out_rows.ld, out_rows.ld},
                  static_cast<const T*>(nullptr), r0 > 0);
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Block k = block_of(team.league_rank());
    const Layout l = layout(tiles);
    ScratchView scratch(team.team_scratch(scratch_level), l.total);
    T* base = scratch.data();
    const Mat<T> rows_d{base + l.rows_d, dim}, qa{base + l.qa, rank}, qr{base + l.qr, rope_dim};
    const Mat<T> oa{base + l.oa, rank};
    const Mat<T> p{base + l.p, combines ? splits : tiles.key_tile};
    const SoftmaxRows<T> st{base + l.max, base + l.sum, base + l.rescale};
    T* stage = base + l.stage;

    if (absorbs) {
      read_rows(team, k, q, dim, rows_d);
      absorb(team, k, rows_d, stage, qa);
    }
    if (Step == LatentStep::Absorb) move_rows<false>(team, k, workspace, rank, qa);
    if (Step == LatentStep::Attend) move_rows<true>(team, k, workspace, rank, qa);
    if (attends && rope_dim > 0) read_rows(team, k, q_rope, rope_dim, qr);
    if (attends) attend(team, k, qa, qr, stage, p, st, base + l.partial, oa);
    if (Step == LatentStep::Attend) move_rows<false>(team, k, workspace, rank, oa);
    if (Step == LatentStep::Split) move_rows<false>(team, k, part_oa(k.part), rank, oa);
    if (Step == LatentStep::UpProject) move_rows<true>(team, k, workspace, rank, oa);
    if (combines) combine(team, k, p, oa);
    if (Step == LatentStep::Merge) move_rows<false>(team, k, workspace, rank, oa);
    if (projects) {
      up_project(team, k, oa, stage, rows_d);
      move_rows<false>(team, k, out, dim, rows_d);
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
