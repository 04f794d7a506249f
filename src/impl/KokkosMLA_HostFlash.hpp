#ifndef KOKKOSMLA_HOSTFLASH_HPP
#define KOKKOSMLA_HOSTFLASH_HPP
// Flash attention on one CPU core, for the host kernels of prefill
// (FlashHostKernel) and cache attention (DecodeHostKernel). A team is one
// thread that owns up to kRows query rows; the rows run across the vector
// lanes, so no product needs a horizontal sum and no key tile a transpose:
//   queries  Qt (width x rows), transposed once per team, times scale * log2 e;
//   scores   St (keys x rows) = K Qt: per key block, kb keys' elements
//            broadcast against nv vectors of Qt's row (kb x nv FMAs per width
//            step, in registers), K read in place through row pointers (so a
//            paged cache needs no gather), the next block's rows prefetched;
//   softmax  per vector of rows: the tile's max, the rescale factor, P = 2^(St
//            - max) in St's place, the running sum, all lane-parallel;
//   P V      O (rows x out) = O * factor + P V: a block of 4 rows x 4 vectors
//            of columns in registers, per key 4 broadcasts of P and 4 loads of V.
// Key rows are read where they lie: a kernel's caller keeps them from lying
// a multiple of 4 KiB apart, which would put a tile's rows in one L1 set
// (FlashHostKernel::key_row_stride).
// Masks come from two arrays: last[i], the last key position row i sees, and
// the tile's key positions (INT_MAX for keys that do not exist or are masked).

#include "KokkosMLA_HostVector.hpp"
#include "KokkosMLA_OnlineSoftmax.hpp"

#include <climits>
#include <cstddef>
#include <cstdint>

namespace KokkosMLA {
namespace Impl {

template <class T>
struct HostFlash {
  using V = typename HostVector<T>::V;
  using M = typename HostVector<T>::M;
  using I = typename HostVector<T>::I;  // M's lane: last[] and key positions compare in it
  static constexpr int kLanes = host_lanes<T>();
  static constexpr int kRowVectors = 4;  ///< most vectors of rows a team owns
  static constexpr int kRows = kRowVectors * kLanes;
  static constexpr int kKeys = 64;  ///< keys per tile
  static constexpr int kLine = 64 / int(sizeof(T));  ///< elements of a 64-byte cache line
  /// Accumulators of the score block: half the vector registers (32 with AVX-512, 16 before).
  static constexpr int kAccumulators = KOKKOSMLA_HOST_VECTOR_BYTES == 64 ? 16 : 8;
  static constexpr int kOutRows = kLanes % 4 == 0 ? 4 : kLanes;  ///< rows of a P V block
  static constexpr int kOutVectors = kAccumulators / kOutRows;   ///< column vectors of a P V block

  int rows = 0;       ///< query rows, <= kRows
  int row_pad = 0;    ///< rows rounded up to whole vectors
  int width = 0;      ///< columns of Qt's rows (the score product's depth)
  int out_width = 0;  ///< columns of V and O
  int out_ld = 0;     ///< out_width rounded up to whole vectors

  /// Element offsets of a team's arrays (the int arrays in I's units, then rounded up to T's).
  struct Layout {
    std::size_t qt, st, o, max, sum, factor, last, positions, zero, total;
  };
  static int round_up(int x, int to) { return (x + to - 1) / to * to; }
  HostFlash() = default;
  HostFlash(int rows_, int width_, int out_width_)
      : rows(rows_),
        row_pad(round_up(rows_, kLanes)),
        width(width_),
        out_width(out_width_),
        out_ld(round_up(out_width_, kLanes)) {}

  Layout layout() const {
    Layout l;
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
      const std::size_t start = at;
      at += (n + kLanes - 1) / kLanes * kLanes;  // every array starts at a whole vector
      return start;
    };
    const std::size_t ints = (sizeof(I) + sizeof(T) - 1) / sizeof(T);
    l.qt = take(std::size_t(width) * row_pad);
    l.st = take(std::size_t(kKeys) * row_pad);
    l.o = take(std::size_t(row_pad) * out_ld);
    l.max = take(row_pad);
    l.sum = take(row_pad);
    l.factor = take(row_pad);
    l.last = take(row_pad * ints);
    l.positions = take(kKeys * ints);
    l.zero = take(std::size_t(width > out_width ? width : out_width));
    l.total = at;
    return l;
  }
  std::size_t scratch_elements() const { return layout().total; }

  /// The team's arrays, in its scratch of scratch_elements() elements.
  struct Tiles {
    T *qt, *st, *o, *max, *sum, *factor, *zero;
    I *last, *positions;
  };
  Tiles tiles(T* scratch) const {
    const Layout l = layout();
    return {scratch + l.qt,
            scratch + l.st,
            scratch + l.o,
            scratch + l.max,
            scratch + l.sum,
            scratch + l.factor,
            scratch + l.zero,
            reinterpret_cast<I*>(scratch + l.last),
            reinterpret_cast<I*>(scratch + l.positions)};
  }

  /// Queries (padding rows included), running sums and outputs 0, running
  /// max -inf, the zero row zero, every row masked (last = -1) until the
  /// caller puts its rows' queries and last keys.
  void start(const Tiles& t) const {
    for (std::size_t e = 0; e < std::size_t(width) * row_pad; ++e) t.qt[e] = T(0);
    for (int i = 0; i < row_pad; ++i) {
      t.max[i] = negative_infinity<T>();
      t.sum[i] = T(0);
      t.last[i] = -1;
    }
    for (int e = 0; e < row_pad * out_ld; ++e) t.o[e] = T(0);
    for (int d = 0; d < (width > out_width ? width : out_width); ++d) t.zero[d] = T(0);
  }

  /// Qt's columns from .. from + length of rows 0 .. n: factor times the
  /// elements of row(i), a pointer. A vector of rows at a time, one column
  /// each store: stores a row apart (row_pad elements) would each touch
  /// another line of Qt.
  template <class Row>
  void put_queries(const Tiles& t, int n, Row row, int from, int length, T factor) const {
    for (int i0 = 0; i0 < n; i0 += kLanes) {
      const T* r[kLanes];
      for (int l = 0; l < kLanes; ++l) r[l] = i0 + l < n ? row(i0 + l) : t.zero;  // padding rows stay 0
      for (int c = 0; c < length; ++c) {
        V x;
        for (int l = 0; l < kLanes; ++l) x[l] = r[l][c];
        store_vector(t.qt + std::size_t(from + c) * row_pad + i0, factor * x);
      }
    }
  }

  /// St (+)= K Qt[from .. from + depth) for the tile's n keys (rows keys[j]
  /// of `depth` elements); rows of keys past n read the zero row.
  /// next: the first next_n rows of the tile after this one (at most
  /// kMostBlockKeys are used), prefetched while the last block computes.
  void scores(const Tiles& t, const T* const* keys, int n, int from, int depth, bool accumulate,
              const T* const* next = nullptr, int next_n = 0) const {
    switch (row_pad / kLanes) {
      case 1:
        return score_blocks<1>(t, keys, n, from, depth, accumulate, next, next_n);
      case 2:
        return score_blocks<2>(t, keys, n, from, depth, accumulate, next, next_n);
      case 3:
        return score_blocks<3>(t, keys, n, from, depth, accumulate, next, next_n);
      default:
        return score_blocks<4>(t, keys, n, from, depth, accumulate, next, next_n);
    }
  }

  static constexpr int kMostBlockKeys = 8;
  /// Keys per score block for nv vectors of rows: about kAccumulators / nv, a
  /// power of two, at most kMostBlockKeys: each key is a pointer the loop holds, and 16 of
  /// them outnumber the general registers (the compiler parked ten in vector
  /// registers, a move beside each FMA on the FMA ports).
  static constexpr int score_keys(int nv) {
    return kAccumulators / nv >= kMostBlockKeys ? kMostBlockKeys : kAccumulators / nv >= 4 ? 4 : 2;
  }

  /// A hint to bring p's line into L2 (no fault, no effect on results).
  static void prefetch(const T* p) { __builtin_prefetch(p, 0, 2); }

  template <int NV>
  void score_blocks(const Tiles& t, const T* const* keys, int n, int from, int depth, bool accumulate,
                    const T* const* next, int next_n) const {
    constexpr int KB = score_keys(NV);
    static_assert(kKeys % KB == 0, "a tile holds whole score blocks: every block's rows of St exist");
    for (int j0 = 0; j0 < n; j0 += KB) {
      const T* k[KB];
      for (int j = 0; j < KB; ++j) k[j] = j0 + j < n ? keys[j0 + j] : t.zero;
      V acc[KB][NV];
      for (int j = 0; j < KB; ++j)
        for (int v = 0; v < NV; ++v)
          acc[j][v] = accumulate ? load_vector(t.st + (j0 + j) * row_pad + v * kLanes) : V{};
      const T* q = t.qt + std::size_t(from) * row_pad;
      // The rows the next block reads (this tile's, or after its last block
      // the next tile's first), a line each per line of this block's: their
      // first reads would otherwise wait on memory at the block's start.
      const bool last_block = j0 + KB >= n;
      const T* const* ahead = last_block ? next : keys + j0 + KB;
      const int ahead_n = min_of(KB, last_block ? next_n : n - j0 - KB);
      for (int d0 = 0; d0 < depth; d0 += kLine) {
        for (int j = 0; j < ahead_n; ++j) prefetch(ahead[j] + d0);
        const int d1 = min_of(d0 + kLine, depth);
        // Unrolled: a key pointer the registers cannot hold is stored and reloaded once per 4 steps.
        KOKKOSMLA_HOST_UNROLL_4
        for (int d = d0; d < d1; ++d, q += row_pad) {
          V qv[NV];
          for (int v = 0; v < NV; ++v) qv[v] = load_vector(q + v * kLanes);
          for (int j = 0; j < KB; ++j) {
            const T kd = k[j][d];
            for (int v = 0; v < NV; ++v) acc[j][v] += kd * qv[v];
          }
        }
      }
      for (int j = 0; j < KB; ++j)
        for (int v = 0; v < NV; ++v) store_vector(t.st + (j0 + j) * row_pad + v * kLanes, acc[j][v]);
    }
  }

  /// The online-softmax step over the tile's n keys (positions in t.positions):
  /// masked scores to -inf, each row's new max, its rescale factor and sum,
  /// and St replaced by P = 2^(St - max).
  void softmax(const Tiles& t, int n) const {
    const V minus_inf = splat(negative_infinity<T>());
    for (int v0 = 0; v0 < row_pad; v0 += kLanes) {
      M last_key;
      std::memcpy(&last_key, t.last + v0, sizeof last_key);
      const V old_max = load_vector(t.max + v0);
      V top = old_max;
      for (int j = 0; j < n; ++j) {
        T* s = t.st + j * row_pad + v0;
        const M hidden = M{} + I(t.positions[j]) > last_key;
        const V x = select(hidden, minus_inf, load_vector(s));
        store_vector(s, x);
        top = max_vector(top, x);
      }
      // A row that has seen no key keeps max -inf: subtract 0 there, so its
      // probabilities are 2^-inf = 0 rather than NaN.
      const V shift = select(top == minus_inf, V{}, top);
      V sum = V{};
      for (int j = 0; j < n; ++j) {
        T* s = t.st + j * row_pad + v0;
        const V p = exp2_vector(load_vector(s) - shift);
        store_vector(s, p);
        sum += p;
      }
      const V factor = exp2_vector(old_max - shift);
      store_vector(t.factor + v0, factor);
      store_vector(t.sum + v0, load_vector(t.sum + v0) * factor + sum);
      store_vector(t.max + v0, top);
    }
  }

  /// O = O * factor + P V over the tile's n keys (rows values[j], out_width
  /// elements). Column blocks outside, row blocks inside: one block's columns
  /// of the tile's values stay in L1 while every row block reads them.
  void accumulate(const Tiles& t, const T* const* values, int n) const {
    const int whole = out_width / kLanes * kLanes;
    int c0 = 0;
    for (; c0 + kOutVectors * kLanes <= whole; c0 += kOutVectors * kLanes)
      for (int i0 = 0; i0 < row_pad; i0 += kOutRows) accumulate_block<kOutVectors>(t, values, n, i0, c0);
    for (; c0 < whole; c0 += kLanes)
      for (int i0 = 0; i0 < row_pad; i0 += kOutRows) accumulate_block<1>(t, values, n, i0, c0);
    for (; c0 < out_width; ++c0)  // columns past the last whole vector, one by one
      for (int i = 0; i < row_pad; ++i) {
        T x = t.o[i * out_ld + c0] * t.factor[i];
        for (int j = 0; j < n; ++j) x += t.st[j * row_pad + i] * values[j][c0];
        t.o[i * out_ld + c0] = x;
      }
  }

  template <int NV>
  void accumulate_block(const Tiles& t, const T* const* values, int n, int i0, int c0) const {
    V acc[kOutRows][NV];
    for (int r = 0; r < kOutRows; ++r)
      for (int v = 0; v < NV; ++v)
        acc[r][v] = load_vector(t.o + (i0 + r) * out_ld + c0 + v * kLanes) * t.factor[i0 + r];
    for (int j = 0; j < n; ++j) {
      V x[NV];
      for (int v = 0; v < NV; ++v) x[v] = load_vector(values[j] + c0 + v * kLanes);
      const T* p = t.st + j * row_pad + i0;
      for (int r = 0; r < kOutRows; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] += p[r] * x[v];
    }
    for (int r = 0; r < kOutRows; ++r)
      for (int v = 0; v < NV; ++v) store_vector(t.o + (i0 + r) * out_ld + c0 + v * kLanes, acc[r][v]);
  }

  /// Row i's natural-log lse (-inf for a row that saw no key).
  static T row_lse(const Tiles& t, int i) {
    const T ln2 = T(0.6931471805599453);
    return softmax_lse(t.max[i] * ln2, t.sum[i]);
  }
  /// Row i's output, normalised, into `to` (out_width elements).
  void finish_row(const Tiles& t, int i, T* to) const {
    for (int c = 0; c < out_width; ++c) to[c] = normalized(t.o[i * out_ld + c], t.sum[i]);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
