#ifndef KOKKOSMLA_CACHEPATHS_HPP
#define KOKKOSMLA_CACHEPATHS_HPP
// Cache attention on the portable kernels (float and double, every backend):
//   CacheRegisters: queries absorbed by a team GEMM, attention by DecodeKernel
//     with its accumulators in registers (in parts, merged by lse), outputs
//     up-projected by a team GEMM: where its rows and columns fit a team;
//   CacheLatent: the latent kernel absorbs, attends and up-projects in one
//     launch, or with split-KV one that attends in parts and one that merges
//     and up-projects.

#include "KokkosMLA_PathUnit.hpp"
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
    in.capacity = s.capacity;
    in.min_part = 4 * std::int64_t(f.tiles.key_tile);
    return in;
  }

  /// The latent tiles both paths start from: Split and Fused attend alike.
  static Fitted<LatentTiles> latent_fit(const CacheProblem& p) {
    return latent_tiles(cache_kernel<ExecSpace, Scalar, LatentStep::Split>(p.shape, 1), p.shape.capacity,
                        p.backend);
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
    k.q = a.q.data();
    k.q_rope = a.q_rope.data();
    k.w_uk = a.w_uk.data();
    k.w_uv = a.w_uv.data();
    k.out = a.out.data();
    k.lse = a.lse.size() > 0 ? a.lse.data() : nullptr;
    k.workspace = workspace_.data();
    k.parts = workspace_.data() + parts_at_;
    return k;
  }

  CacheProblem problem_;
  LaunchConfig config_;
  int splits_ = 1;
  std::int64_t parts_at_ = 0;  ///< where the split parts start in the workspace
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> workspace_;
};

template <class Scalar, class ExecSpace>
class CacheLatentPath final : public PortableCache<Scalar, ExecSpace> {
  using Base = PortableCache<Scalar, ExecSpace>;

 public:
  /// The last cache path: takes whatever reaches it.
  static bool applicable(const CacheProblem&) { return true; }

  CacheLatentPath(const ExecSpace&, const CacheProblem& p)
      : Base(p, Base::latent_fit(p), demand_of<Kokkos::LaunchBounds<>>(p.backend.team_size), false) {}
  Path path() const override { return Path::CacheLatent; }
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
  /// team: on GPUs for R up to 4 * 128, on hosts (one thread per team) only for R <= 4.
  static bool applicable(const CacheProblem& p) {
    const Fitted<LatentTiles> d = register_fit(p);
    return d.level == 0 && register_prototype(p).fits(d.tiles, p.backend.team_size);
  }

  CacheRegistersPath(const ExecSpace&, const CacheProblem& p)
      : Base(p, register_fit(p),
             demand_of<typename RegisterKernel<ExecSpace, Scalar, LatentStep::Split>::bounds>(
                 p.backend.team_size),
             true) {
    auto tiles = [&](auto absorbs) {
      return project_tiles(project_kernel<decltype(absorbs)::value>(), p.backend).tiles;
    };
    const ProjectTiles absorb = tiles(std::true_type()), up = tiles(std::false_type());
    // One set of tiles for both: the smaller of each.
    this->config_.project_rows = std::min(absorb.rows, up.rows);
    this->config_.project_columns = std::min(absorb.columns, up.columns);
    this->config_.project_chunk = std::min(absorb.chunk, up.chunk);
  }
  Path path() const override { return Path::CacheRegisters; }
  std::string describe() const override { return "(accumulators in registers) " + this->describe_tiles(); }

  void run(const ExecSpace& exec, const typename Base::Call& a) const override {
    using Step = LatentStep;
    Scalar* const qa = this->workspace_.data();  // then oa: (B, Tq, H, R)
    project<true>(exec, "KokkosMLA::CacheAttention::absorb", a.q.data(), qa, a.w_uk.data(),
                  Scalar(this->problem_.scale));
    if (this->splits_ == 1) {
      launch_tiled(exec, "KokkosMLA::CacheAttention::attend",
                   RegisterKernel<ExecSpace, Scalar, Step::Attend>(this->template bound<Step::Attend>(a)),
                   this->config_);
    } else {
      launch_tiled(exec, "KokkosMLA::CacheAttention::split",
                   RegisterKernel<ExecSpace, Scalar, Step::Split>(this->template bound<Step::Split>(a)),
                   this->config_);
      launch_tiled(exec, "KokkosMLA::CacheAttention::merge", this->template bound<Step::Merge>(a),
                   this->config_);
    }
    project<false>(exec, "KokkosMLA::CacheAttention::up_project", qa, a.out.data(), a.w_uv.data(), Scalar(1));
  }

 private:
  static RegisterKernel<ExecSpace, Scalar, LatentStep::Split> register_prototype(const CacheProblem& p) {
    return RegisterKernel<ExecSpace, Scalar, LatentStep::Split>(
        cache_kernel<ExecSpace, Scalar, LatentStep::Split>(p.shape, 1));
  }
  static Fitted<LatentTiles> register_fit(const CacheProblem& p) {
    return decode_tiles(register_prototype(p), p.shape.capacity, p.backend);
  }

  /// A projection kernel of the problem's extents (pointers unset).
  template <bool Absorb>
  ProjectKernel<ExecSpace, Scalar, Absorb> project_kernel() const {
    const CacheShape& s = this->problem_.shape;
    ProjectKernel<ExecSpace, Scalar, Absorb> k;
    k.rows = s.batch * s.queries;
    k.heads = s.heads;
    k.dim = s.head_dim;
    k.rank = s.latent_dim;
    return k;
  }

  template <bool Absorb>
  void project(const ExecSpace& exec, const char* label, const Scalar* from, Scalar* to, const Scalar* w,
               Scalar alpha) const {
    auto k = project_kernel<Absorb>();
    k.tiles = {this->config_.project_rows, this->config_.project_columns, this->config_.project_chunk};
    k.from = from;
    k.to = to;
    k.w = w;
    k.alpha = alpha;
    launch_tiled(exec, label, k, this->config_);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
