#ifndef KOKKOSMLA_CACHEPATHS_HPP
#define KOKKOSMLA_CACHEPATHS_HPP
// Cache attention on the portable kernels (float and double, every backend):
//   CacheRegisters: queries absorbed by a team GEMM, attention by DecodeKernel
//     with its accumulators in registers (in parts, merged by lse), outputs
//     up-projected by a team GEMM: where its rows and columns fit a team;
//   CacheBlocked: queries absorbed and outputs up-projected by team GEMMs,
//     attention by DecodeBlockedKernel (16 rows per team, register-blocked
//     products over 32-key tiles in large team scratch; GPUs);
//   CacheHost: queries absorbed and outputs up-projected by ProjectHostKernel,
//     attention by DecodeHostKernel, both on a CPU core's vector unit (hosts);
//   CacheLatent: the latent kernel absorbs, attends and up-projects in one
//     launch, or with split-KV one that attends in parts and one that merges
//     and up-projects; the one path of sparse (top-k) attention.

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_DecodeBlockedKernel.hpp"
#include "impl/KokkosMLA_DecodeHostKernel.hpp"
#include "impl/KokkosMLA_ProjectHostKernel.hpp"
#include "impl/KokkosMLA_Splits.hpp"
#include "impl/KokkosMLA_Tiling.hpp"

#include <algorithm>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

/// A latent kernel of a cache problem's extents (cache pointers unset).
template <class ExecSpace, class T, LatentStep Step>
LatentKernel<ExecSpace, T, Step> cache_kernel(const CacheShape& s, int splits) {
  Shape plain;
  plain.batch = s.batch;
  plain.queries = s.queries;
  plain.keys = s.capacity;
  plain.heads = s.heads;
  plain.head_dim = s.head_dim;
  plain.latent_dim = s.latent_dim;
  LatentKernel<ExecSpace, T, Step> k = latent_kernel<ExecSpace, T, Step>(plain);
  k.rope_dim = s.rope_dim;
  k.splits = splits;
  return k;
}

/// The GPU kernel of cache attention: oa in registers, R <= 4 * team size.
template <class ExecSpace, class T, LatentStep Step>
using RegisterKernel = DecodeKernel<ExecSpace, T, Step, 4>;

/// What both portable cache paths share: tiles, split count, workspace, and
/// latent kernels bound to a call.
template <class Scalar, class ExecSpace>
class PortableCache : public PlannedCache<Scalar, ExecSpace> {
 public:
  static constexpr bool available = !is_half_precision<Scalar>::value;
  using Call = typename PlannedCache<Scalar, ExecSpace>::Call;

  /// With tiles f for the attending kernel of demand d; the register path
  /// keeps qa (then oa) of every row ahead of the split parts.
  PortableCache(const CacheProblem& p, const Fitted<LatentTiles>& f, const ScratchDemand& d, bool keeps_rows)
      : problem_(p) {
    config_.backend = p.backend;
    config_.team_size = p.backend.team_size;
    apply(config_, f);
    splits_ = split_count(split_inputs(p, f, d), p.options.kv_splits);
    const CacheShape& s = p.shape;
    const std::int64_t rows = s.batch * s.queries * s.heads;
    parts_at_ = keeps_rows ? rows * s.latent_dim : 0;
    workspace_ = Impl::workspace<Scalar, typename ExecSpace::memory_space>(
        "KokkosMLA::CachePlan::workspace",
        parts_at_ + (splits_ > 1 ? splits_ * rows * (s.latent_dim + 1) : 0));
  }
  int splits() const override { return splits_; }
  std::size_t workspace_bytes() const override { return workspace_.span() * sizeof(Scalar); }

  /// Split-KV of the attending kernel: its teams cover tokens x heads rows
  /// each; parts at least four key tiles long.
  static SplitInputs split_inputs(const CacheProblem& p, const Fitted<LatentTiles>& f,
                                  const ScratchDemand& d) {
    const CacheShape& s = p.shape;
    SplitInputs in;
    in.teams_per_part = double(s.batch * ((s.queries + f.tiles.tokens - 1) / f.tiles.tokens) *
                               ((s.heads + f.tiles.heads - 1) / f.tiles.heads));
    in.slots = p.backend.resident_teams(d, f.bytes);
    in.capacity = keys_per_row(s);
    in.min_part = 4 * std::int64_t(f.tiles.key_tile);
    return in;
  }

  /// The keys a query row attends to at most: its index list, or its sequence.
  static std::int64_t keys_per_row(const CacheShape& s) { return s.topk > 0 ? s.topk : s.capacity; }

  /// The latent tiles both paths start from: Split and Fused attend alike.
  /// Sparse attention gives each query token its own keys: a team owns one.
  static Fitted<LatentTiles> latent_fit(const CacheProblem& p) {
    CacheShape s = p.shape;
    if (s.topk > 0) s.queries = 1;
    return latent_tiles(cache_kernel<ExecSpace, Scalar, LatentStep::Split>(s, 1), keys_per_row(s), p.backend);
  }

 protected:
  std::string describe_tiles() const {
    std::ostringstream o;
    o << "splits=" << splits_ << " team_size=" << config_.team_size << " query_tile=" << config_.query_tile
      << " head_group=" << config_.head_group << " weight_chunk=" << config_.weight_chunk
      << " key_tile=" << config_.key_tile << " scratch=" << config_.scratch_bytes << "B@level"
      << config_.scratch_level << " workspace=" << workspace_bytes() << "B";
    return o.str();
  }

  template <LatentStep Step>
  LatentKernel<ExecSpace, Scalar, Step> bound(const Call& a) const {
    const CacheShape& s = problem_.shape;
    LatentKernel<ExecSpace, Scalar, Step> k = cache_kernel<ExecSpace, Scalar, Step>(s, splits_);
    k.cache = latent_keys<Scalar>(a.cache, s.latent_dim, s.rope_dim);
    k.tiles = latent_tiles_of(config_);
    k.scale = Scalar(problem_.scale);
    k.causal = problem_.options.causal;
    k.q = head_rows(a.q);
    k.q_rope = head_rows(a.q_rope);
    k.w_uk = a.w_uk.data();
    k.w_uv = a.w_uv.data();
    k.out = head_rows(a.out);
    k.lse = a.lse.size() > 0 ? a.lse.data() : nullptr;
    k.workspace = workspace_.data();
    k.parts = workspace_.data() + parts_at_;
    k.indices = a.indices.size() > 0 ? a.indices.data() : nullptr;
    k.topk = s.topk;
    return k;
  }

  /// Tiles of the per-head projections (team GEMMs): the smaller of the
  /// absorption's and the up-projection's, one set for both.
  void plan_projections() {
    auto tiles = [&](auto absorbs) {
      return project_tiles(project_kernel<decltype(absorbs)::value>(), problem_.backend).tiles;
    };
    const ProjectTiles absorb = tiles(std::true_type()), up = tiles(std::false_type());
    config_.project_rows = std::min(absorb.rows, up.rows);
    config_.project_columns = std::min(absorb.columns, up.columns);
    config_.project_chunk = std::min(absorb.chunk, up.chunk);
  }

  /// qa = scale q w_uk^T into the workspace; attend(), which leaves oa in
  /// qa's place or its parts; the parts merged; out = oa w_uv.
  template <class Attend>
  void absorb_attend_project(const ExecSpace& exec, const Call& a, Attend attend) const {
    Scalar* const qa = workspace_.data();  // then oa: (B, Tq, H, R)
    const CacheShape& s = problem_.shape;
    project<true>(exec, "KokkosMLA::CacheAttention::absorb", head_rows(a.q), packed_rows(qa, s.heads, s.latent_dim),
                  a.w_uk.data(), Scalar(problem_.scale));
    attend();
    if (splits_ > 1)
      launch_tiled(exec, "KokkosMLA::CacheAttention::merge", bound<LatentStep::Merge>(a), config_);
    project<false>(exec, "KokkosMLA::CacheAttention::up_project", packed_rows<const Scalar>(qa, s.heads, s.latent_dim),
                   head_rows(a.out), a.w_uv.data(), Scalar(1));
  }

  /// A projection kernel of the problem's extents (pointers unset).
  template <bool Absorb>
  ProjectKernel<ExecSpace, Scalar, Absorb> project_kernel() const {
    const CacheShape& s = problem_.shape;
    ProjectKernel<ExecSpace, Scalar, Absorb> k;
    k.rows = s.batch * s.queries;
    k.heads = s.heads;
    k.dim = s.head_dim;
    k.rank = s.latent_dim;
    return k;
  }

  template <bool Absorb>
  void project(const ExecSpace& exec, const char* label, HeadRows<const Scalar> from, HeadRows<Scalar> to,
               const Scalar* w, Scalar alpha) const {
    if constexpr (is_host_space<ExecSpace>()) {
      if (host_projections_) return project_on_host<Absorb>(exec, label, from, to, w, alpha);
    }
    auto k = project_kernel<Absorb>();
    k.tiles = {config_.project_rows, config_.project_columns, config_.project_chunk};
    k.from = from;
    k.to = to;
    k.w = w;
    k.alpha = alpha;
    launch_tiled(exec, label, k, config_);
  }

  /// The projections on a host core's vector unit (ProjectHostKernel), one
  /// team per (head, block of rows).
  template <bool Absorb>
  void project_on_host(const ExecSpace& exec, const char* label, HeadRows<const Scalar> from, HeadRows<Scalar> to,
                       const Scalar* w, Scalar alpha) const {
    const CacheShape& s = problem_.shape;
    ProjectHostKernel<ExecSpace, Scalar, Absorb> k;
    k.from = from;
    k.to = to;
    k.w = w;
    k.rows = s.batch * s.queries;
    k.heads = s.heads;
    k.dim = s.head_dim;
    k.rank = s.latent_dim;
    k.alpha = alpha;
    launch_on_host(exec, label, k, k.scratch_bytes(), problem_.backend);
  }

  CacheProblem problem_;
  LaunchConfig config_;
  bool host_projections_ = false;  ///< project() on ProjectHostKernel (host paths)
  int splits_ = 1;
  std::int64_t parts_at_ = 0;  ///< where the split parts start in the workspace
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> workspace_;
};

template <class Scalar, class ExecSpace>
class CacheLatentPath final : public PortableCache<Scalar, ExecSpace> {
  using Base = PortableCache<Scalar, ExecSpace>;

 public:
  /// The last cache path: takes whatever reaches it, sparse attention too.
  static bool applicable(const CacheProblem&) { return true; }

  CacheLatentPath(const ExecSpace&, const CacheProblem& p)
      : Base(p, Base::latent_fit(p), demand_of<Kokkos::LaunchBounds<>>(p.backend.team_size), false) {}
  static constexpr Path id = Path::CacheLatent;
  Path path() const override { return id; }
  std::string describe() const override { return this->describe_tiles(); }
  void run(const ExecSpace& exec, const typename Base::Call& a) const override {
    using Step = LatentStep;
    // One kernel absorbs, attends and up-projects; split-KV adds one that merges and up-projects.
    if (this->splits_ == 1) {
      launch_tiled(exec, "KokkosMLA::CacheAttention", this->template bound<Step::Fused>(a), this->config_);
      return;
    }
    launch_tiled(exec, "KokkosMLA::CacheAttention::split", this->template bound<Step::Split>(a),
                 this->config_);
    launch_tiled(exec, "KokkosMLA::CacheAttention::combine", this->template bound<Step::Combine>(a),
                 this->config_);
  }
};

template <class Scalar, class ExecSpace>
class CacheRegistersPath final : public PortableCache<Scalar, ExecSpace> {
  using Base = PortableCache<Scalar, ExecSpace>;

 public:
  /// When the register kernel's rows and columns fit level-0 scratch and a
  /// team: on GPUs for R up to 4 * 128, on hosts (one thread per team) only
  /// for R <= 4. Dense attention only.
  static bool applicable(const CacheProblem& p) {
    if (p.shape.topk > 0) return false;
    const Fitted<LatentTiles> d = register_fit(p);
    return d.level == 0 && register_prototype(p).fits(d.tiles, p.backend.team_size);
  }

  CacheRegistersPath(const ExecSpace&, const CacheProblem& p)
      : Base(p, register_fit(p),
             demand_of<typename RegisterKernel<ExecSpace, Scalar, LatentStep::Split>::bounds>(
                 p.backend.team_size),
             true) {
    this->plan_projections();
  }
  static constexpr Path id = Path::CacheRegisters;
  Path path() const override { return id; }
  std::string describe() const override { return "(accumulators in registers) " + this->describe_tiles(); }

  void run(const ExecSpace& exec, const typename Base::Call& a) const override {
    this->absorb_attend_project(exec, a, [&] {
      using Step = LatentStep;
      if (this->splits_ == 1)
        launch_tiled(exec, "KokkosMLA::CacheAttention::attend",
                     RegisterKernel<ExecSpace, Scalar, Step::Attend>(this->template bound<Step::Attend>(a)),
                     this->config_);
      else
        launch_tiled(exec, "KokkosMLA::CacheAttention::split",
                     RegisterKernel<ExecSpace, Scalar, Step::Split>(this->template bound<Step::Split>(a)),
                     this->config_);
    });
  }

 private:
  static RegisterKernel<ExecSpace, Scalar, LatentStep::Split> register_prototype(const CacheProblem& p) {
    return RegisterKernel<ExecSpace, Scalar, LatentStep::Split>(
        cache_kernel<ExecSpace, Scalar, LatentStep::Split>(p.shape, 1));
  }
  static Fitted<LatentTiles> register_fit(const CacheProblem& p) {
    return decode_tiles(register_prototype(p), p.shape.capacity, p.backend);
  }
};

template <class Scalar, class ExecSpace>
class CacheBlockedPath final : public PortableCache<Scalar, ExecSpace> {
  using Base = PortableCache<Scalar, ExecSpace>;
  using Prototype = DecodeBlockedKernel<ExecSpace, Scalar, LatentStep::Split>;

 public:
  /// On GPUs whose team scratch holds the kernel's tiles, for R <= 512 and
  /// R + Dr <= 576; dense attention only.
  static bool applicable(const CacheProblem& p) {
    const CacheShape& s = p.shape;
    return !p.backend.host && s.topk == 0 && Prototype::fits(s.latent_dim, s.rope_dim) &&
           Prototype::scratch_bytes_for(s.latent_dim, s.rope_dim) <= p.backend.scratch_budget(demand(p));
  }

  CacheBlockedPath(const ExecSpace&, const CacheProblem& p) : Base(p, blocked_fit(p), demand(p), true) {
    this->plan_projections();
  }
  static constexpr Path id = Path::CacheBlocked;
  Path path() const override { return id; }
  std::string describe() const override {
    std::ostringstream o;
    o << "(register-blocked) splits=" << this->splits_ << " team_size=" << Prototype::kThreads
      << " rows=" << Prototype::kRows << " key_tile=" << Prototype::kKeys
      << " scratch=" << this->config_.scratch_bytes << "B@level0 workspace=" << this->workspace_bytes()
      << "B";
    return o.str();
  }

  void run(const ExecSpace& exec, const typename Base::Call& a) const override {
    this->absorb_attend_project(exec, a, [&] {
      if (this->splits_ == 1)
        attend(exec, DecodeBlockedKernel<ExecSpace, Scalar, LatentStep::Attend>(
                         this->template bound<LatentStep::Attend>(a)));
      else
        attend(exec, DecodeBlockedKernel<ExecSpace, Scalar, LatentStep::Split>(
                         this->template bound<LatentStep::Split>(a)));
    });
  }

 private:
  static ScratchDemand demand(const CacheProblem&) {
    return demand_of<typename Prototype::bounds>(Prototype::kThreads, kAnyTeamScratch);
  }
  /// The kernel's fixed tiles: 16 rows of whole heads where they fit (else of
  /// whole tokens of fewer heads), 32 keys.
  static Fitted<LatentTiles> blocked_fit(const CacheProblem& p) {
    LatentTiles t;
    t.heads = clamp_tile(p.shape.heads, Prototype::kRows);
    t.tokens = clamp_tile(p.shape.queries, Prototype::kRows / t.heads);
    t.key_tile = Prototype::kKeys;
    t.weight_chunk = 1;  // the kernel stages no weights
    return {t, 0, Prototype::scratch_bytes_for(p.shape.latent_dim, p.shape.rope_dim)};
  }
  template <class Kernel>
  void attend(const ExecSpace& exec, Kernel k) const {
    k.quad_cache = k.quad_rows();
    launch(exec, "KokkosMLA::CacheAttention::attend_blocked", k, Kernel::kThreads,
           this->config_.scratch_bytes, true, typename Kernel::bounds());
  }
};

template <class Scalar, class ExecSpace>
class CacheHostPath final : public PortableCache<Scalar, ExecSpace> {
  using Base = PortableCache<Scalar, ExecSpace>;
  using Prototype = DecodeHostKernel<ExecSpace, Scalar, LatentStep::Split>;

 public:
  static constexpr bool available = Base::available && is_host_space<ExecSpace>();
  /// Every problem on a host, sparse attention too.
  static bool applicable(const CacheProblem&) { return true; }

  CacheHostPath(const ExecSpace&, const CacheProblem& p) : Base(p, host_fit(p), demand(), true) {
    this->host_projections_ = true;
  }
  static constexpr Path id = Path::CacheHost;
  Path path() const override { return id; }
  std::string describe() const override {
    return "(vector unit, " + std::to_string(KOKKOSMLA_HOST_VECTOR_BYTES) + "B) " + this->describe_tiles();
  }

  void run(const ExecSpace& exec, const typename Base::Call& a) const override {
    this->absorb_attend_project(exec, a, [&] {
      if (this->splits_ == 1)
        attend(exec, DecodeHostKernel<ExecSpace, Scalar, LatentStep::Attend>(
                         this->template bound<LatentStep::Attend>(a)));
      else
        attend(exec, DecodeHostKernel<ExecSpace, Scalar, LatentStep::Split>(
                         this->template bound<LatentStep::Split>(a)));
    });
  }

 private:
  static ScratchDemand demand() { return demand_of<Kokkos::LaunchBounds<>>(1, kAnyTeamScratch); }
  /// Up to kRows rows of whole heads (else whole tokens of fewer heads), a
  /// key tile of the kernel's; sparse attention one token per team.
  static Fitted<LatentTiles> host_fit(const CacheProblem& p) {
    const CacheShape& s = p.shape;
    LatentTiles t;
    t.heads = clamp_tile(s.heads, Prototype::kRows);
    t.tokens = s.topk > 0 ? 1 : clamp_tile(s.queries, Prototype::kRows / t.heads);
    t.key_tile = Prototype::Flash::kKeys;
    t.weight_chunk = 1;  // the kernel stages no weights
    const std::size_t bytes =
        Prototype(cache_kernel<ExecSpace, Scalar, LatentStep::Split>(s, 1)).scratch_bytes(t);
    return {t, p.backend.level_holding(bytes), bytes};
  }
  template <class Kernel>
  void attend(const ExecSpace& exec, const Kernel& k) const {
    launch_on_host(exec, "KokkosMLA::CacheAttention::attend_host", k, this->config_.scratch_bytes,
                   this->problem_.backend);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
