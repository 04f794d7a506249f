#ifndef KOKKOSMLA_DECODEHOSTKERNEL_HPP
#define KOKKOSMLA_DECODEHOSTKERNEL_HPP
// Cache attention on CPUs: the Attend and Split steps of the latent kernel,
// on absorbed queries qa (B, Tq, H, R) that the plan computes before (and
// up-projects after). A team of one thread owns a block of up to
// HostFlash::kRows query rows of one sequence (its heads and tokens, as the
// latent kernel's blocks) and one part of its keys; the products run on the
// core's vector unit (KokkosMLA_HostFlash.hpp) with the cache's rows read in
// place through the block table: scores against [latent, k_rope] in two
// steps (R, then Dr wide), P V against the latent rows. Sparse attention
// reads the token's index list; an unused entry (-1) reads the zero row and
// is masked.

#include "KokkosMLA_HostFlash.hpp"
#include "KokkosMLA_LatentKernels.hpp"

namespace KokkosMLA {
namespace Impl {

template <class ExecSpace, class T, LatentStep Step>
struct DecodeHostKernel : LatentKernel<ExecSpace, T, Step> {
  static_assert(Step == LatentStep::Attend || Step == LatentStep::Split,
                "DecodeHostKernel runs Attend or Split");
  using Base = LatentKernel<ExecSpace, T, Step>;
  using typename Base::Block;
  using typename Base::KeyRange;
  using typename Base::Member;
  using Flash = HostFlash<T>;
  static constexpr int kRows = Flash::kRows;

  DecodeHostKernel() = default;
  explicit DecodeHostKernel(const Base& b) : Base(b) {}

  Flash flash(const LatentTiles& t) const {
    return Flash(t.rows(), int(this->rank + this->rope_dim), int(this->rank));
  }
  std::size_t scratch_bytes(const LatentTiles& t) const {
    return Base::ScratchView::shmem_size(flash(t).scratch_elements());
  }

  void operator()(const Member& team) const {
    const Block k = this->block_of(team.league_rank());
    const int rows = k.rows(), r = int(this->rank), dr = int(this->rope_dim);
    const Flash f = flash(this->tiles);
    typename Base::ScratchView scratch(team.team_scratch(this->scratch_level), f.scratch_elements());
    const typename Flash::Tiles t = f.tiles(scratch.data());
    f.start(t);

    // Qt: [qa, scale q_rope] of the block's rows, in base-2 units.
    const T log2e = T(1.4426950408889634);
    const int* positions =
        this->indices ? this->indices + (k.b * this->queries + k.t0) * this->topk : nullptr;
    f.put_queries(
        t, rows, [&](int i) { return this->workspace + this->row_index(k, i) * r; }, 0, r, log2e);
    if (dr > 0)
      f.put_queries(
          t, rows, [&](int i) { return this->query_rope(k, i); }, r, dr, this->scale * log2e);
    for (int i = 0; i < rows; ++i)
      t.last[i] = typename Flash::I(positions ? this->topk - 1 : this->last_key(k, i));

    const auto& c = this->cache;
    const KeyRange range = this->key_range(k);
    // Key i of the range's cache row, or -1 for an unused index entry.
    const auto row_of = [&](std::int64_t i) -> std::int64_t {
      const std::int64_t s = positions ? std::int64_t(positions[i]) : i;
      return s < 0 ? -1 : c.row(k.b, s);
    };
    // A cache row's latent values, the zero row for an unused entry.
    const auto latent_of = [&](std::int64_t row) { return row < 0 ? t.zero : c.latent + row * c.latent_ld; };
    const T* latent_rows[Flash::kKeys];
    const T* rope_rows[Flash::kKeys];
    const T* next_rows[Flash::kMostBlockKeys];
    for (std::int64_t s0 = range.begin; s0 < range.end; s0 += Flash::kKeys) {
      const int n = int(min_of<std::int64_t>(Flash::kKeys, range.end - s0));
      for (int j = 0; j < n; ++j) {
        const std::int64_t row = row_of(s0 + j);
        latent_rows[j] = latent_of(row);
        rope_rows[j] = row < 0 ? t.zero : c.rope + row * c.rope_ld;
        t.positions[j] = row < 0 ? typename Flash::I(INT_MAX) : typename Flash::I(s0 + j);
      }
      // The next tile's first latent rows, prefetched during this one's last score block.
      const int next_n = int(min_of<std::int64_t>(Flash::kMostBlockKeys, range.end - s0 - n));
      for (int j = 0; j < next_n; ++j) next_rows[j] = latent_of(row_of(s0 + n + j));
      f.scores(t, latent_rows, n, 0, r, false, next_rows, next_n);
      if (dr > 0) f.scores(t, rope_rows, n, r, dr, true);
      f.softmax(t, n);
      f.accumulate(t, latent_rows, n);
    }

    T* const result = this->attended(k);
    for (int i = 0; i < rows; ++i) {
      const std::int64_t at = this->row_index(k, i);
      f.finish_row(t, i, result + at * r);
      this->store_row_lse(k, at, Flash::row_lse(t, i));
    }
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
