#ifndef KOKKOSMLA_WARPGROUPSOFTMAX_HPP
#define KOKKOSMLA_WARPGROUPSOFTMAX_HPP
// The online softmax of the wgmma attention kernels (DecodeSm90Kernel,
// FlashSm90Kernel) on a warpgroup's score accumulators (KokkosMLA_Wgmma.hpp):
// a thread holds rows g and g + 8 of its warp's 16, its entry i at row
// (i / 2) % 2 and column 8 (i / 4) + 2t + i % 2 of the tile. The running max
// is in log2 units of the scaled logits (exp(x) = exp2(x log2(e))), and each
// lane sums its own columns (the four lanes of a row add theirs at the end).

#include "impl/KokkosMLA_TensorOps.hpp"

namespace KokkosMLA {
namespace Impl {
namespace wgmma {

/// The online-softmax update for scores already in log2 units once
/// multiplied by scale2 >= 0: updates the running max m and sums l, sets
/// `correction` to what the accumulators of earlier tiles must be multiplied
/// by, and leaves the unnormalised probabilities exp2(s scale2 - max) in s
/// (one FFMA and one exponential an entry). A row that has seen no key yet
/// keeps max -inf and contributes zeros.
template <int N>
__device__ inline void softmax_scores(float (&s)[N], float (&m)[2], float (&l)[2], float (&correction)[2],
                                      float scale2) {
  // Four partial maxima and sums a row (by n8 tile), so that the reductions
  // are four short chains of dependent instructions, not one long one.
  constexpr int kParts = N / 4 < 4 ? N / 4 : 4;
  float mx[2][kParts], sum[2][kParts];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int k = 0; k < kParts; ++k) mx[r][k] = -INFINITY, sum[r][k] = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i)
    mx[(i / 2) % 2][(i / 4) % kParts] = fmaxf(mx[(i / 2) % 2][(i / 4) % kParts], s[i]);
  float shift[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int k = 1; k < kParts; ++k) mx[r][0] = fmaxf(mx[r][0], mx[r][k]);
    mx[r][0] = fmaxf(mx[r][0], __shfl_xor_sync(0xffffffffu, mx[r][0], 1));
    mx[r][0] = fmaxf(mx[r][0], __shfl_xor_sync(0xffffffffu, mx[r][0], 2));
    const float top = fmaxf(m[r], mx[r][0] == -INFINITY ? -INFINITY : mx[r][0] * scale2);
    const float base = top == -INFINITY ? 0.f : top;
    correction[r] = fast_exp2(m[r] - base);  // 0 while m is -inf
    m[r] = top;
    shift[r] = -base;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int r = (i / 2) % 2;
    s[i] = fast_exp2(fmaf(s[i], scale2, shift[r]));
    sum[r][(i / 4) % kParts] += s[i];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_sum = sum[r][0];
#pragma unroll
    for (int k = 1; k < kParts; ++k) tile_sum += sum[r][k];
    l[r] = l[r] * correction[r] + tile_sum;
  }
}

/// One tile's online softmax: scores times scale2 (log2 units of the scaled
/// logits), columns from visible0 / visible1 on (rows g, g + 8) masked where
/// `edge`. Tiles off the edge with a non-negative scale take the short path;
/// the others are scaled and masked first (a masked -inf times a scale of 0
/// would be NaN).
template <int N>
__device__ inline void online_softmax(float (&s)[N], float (&m)[2], float (&l)[2], float (&correction)[2],
                                      bool edge, int visible0, int visible1, int t, float scale2) {
  if (!edge && scale2 >= 0.f) return softmax_scores(s, m, l, correction, scale2);
  const int limit[2] = {edge ? visible0 - 2 * t : 2 * N,
                        edge ? visible1 - 2 * t : 2 * N};  // a tile has 2N columns
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i] *= scale2;
    if (8 * (i / 4) + (i % 2) >= limit[(i / 2) % 2]) s[i] = -INFINITY;
  }
  softmax_scores(s, m, l, correction, 1.f);
}

/// Multiplies accumulators laid out as the scores by their row's correction.
template <int N>
__device__ inline void rescale(float (&o)[N], const float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] *= correction[(i / 2) % 2];
}

/// The A fragments of P = s (16-bit, as Ops packs it) for products over 16
/// keys each: tiles 2j and 2j + 1 of s are keys 16j .. 16j + 15.
template <class Ops, int N>
__device__ inline void pack_probabilities(unsigned (&pa)[N / 8][4], const float (&p)[N]) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    pa[j][0] = Ops::pack(p[8 * j], p[8 * j + 1]);
    pa[j][1] = Ops::pack(p[8 * j + 2], p[8 * j + 3]);
    pa[j][2] = Ops::pack(p[8 * j + 4], p[8 * j + 5]);
    pa[j][3] = Ops::pack(p[8 * j + 6], p[8 * j + 7]);
  }
}

}  // namespace wgmma
}  // namespace Impl
}  // namespace KokkosMLA

#endif
