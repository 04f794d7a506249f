#ifndef KOKKOSMLA_LATENTPATHS_HPP
#define KOKKOSMLA_LATENTPATHS_HPP
// Prefill over the latent (src/impl/KokkosMLA_LatentKernels.hpp): Fused, one
// launch; Absorbed, the same steps as three launches through a (B, T, H, R)
// workspace, each with less scratch; FusedRow, the Fused steps for short
// sequences, a team per query row (src/impl/KokkosMLA_FusedRowKernel.hpp).
// Portable: every backend, any team size.

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_FusedRowKernel.hpp"
#include "impl/KokkosMLA_Tiling.hpp"

#include <sstream>

namespace KokkosMLA {
namespace Impl {

/// team_size=.. query_tile=.. head_group=.. weight_chunk=.. key_tile=.. scratch=..B@levelN
inline std::string describe_latent_tiles(const LaunchConfig& c) {
  std::ostringstream o;
  o << "team_size=" << c.team_size << " query_tile=" << c.query_tile << " head_group=" << c.head_group
    << " weight_chunk=" << c.weight_chunk << " key_tile=" << c.key_tile << " scratch=" << c.scratch_bytes
    << "B@level" << c.scratch_level;
  return o.str();
}

/// What the Fused and Absorbed paths share: tiles fitted for the kernel of
/// step TilesOf, and latent kernels bound to a call.
template <class Scalar, class ExecSpace, LatentStep TilesOf>
class LatentPrefill : public PlannedPrefill<Scalar, ExecSpace> {
 public:
  static constexpr bool available = !is_half_precision<Scalar>::value;
  using Call = typename PlannedPrefill<Scalar, ExecSpace>::Call;

  LatentPrefill(const PrefillProblem& p) : problem_(p) {
    config_.backend = p.backend;
    config_.team_size = p.backend.team_size;
    apply(config_, tiles_for(p));
  }
  /// The tiles of problem p's latent kernel, fitted to its scratch budget.
  static Fitted<LatentTiles> tiles_for(const PrefillProblem& p) {
    return latent_tiles(latent_kernel<ExecSpace, Scalar, TilesOf>(p.shape), p.shape.keys, p.backend);
  }
  std::string describe() const override { return describe_latent_tiles(config_); }

 protected:
  /// The kernel of one step on the call's data; lse only where given.
  template <LatentStep Step>
  LatentKernel<ExecSpace, Scalar, Step> bound(const Call& c, LseRows<Scalar> lse, Scalar* workspace) const {
    LatentKernel<ExecSpace, Scalar, Step> k = latent_kernel<ExecSpace, Scalar, Step>(problem_.shape);
    k.tiles = latent_tiles_of(config_);
    k.scale = Scalar(problem_.scale);
    k.causal = problem_.options.causal;
    k.q = head_rows(c.q);
    k.cache.latent = c.latent.data();
    k.cache.latent_ld = std::int64_t(latent_row_stride(c.latent));
    k.w_uk = weight_rows(c.w_uk);
    k.w_uv = weight_rows(c.w_uv);
    k.out = head_rows(c.out);
    k.lse = lse;
    k.workspace = workspace;
    return k;
  }

  PrefillProblem problem_;
  LaunchConfig config_;
};

template <class Scalar, class ExecSpace>
class FusedPath final : public LatentPrefill<Scalar, ExecSpace, LatentStep::Fused> {
  using Base = LatentPrefill<Scalar, ExecSpace, LatentStep::Fused>;

 public:
  /// The last of the portable paths: takes whatever reaches it.
  static bool applicable(const PrefillProblem&) { return true; }
  static Algorithm algorithm(const PrefillProblem&) { return Algorithm::Fused; }

  FusedPath(const ExecSpace&, const PrefillProblem& p) : Base(p) {}
  static constexpr Path id = Path::Fused;
  Path path() const override { return id; }
  Algorithm algorithm() const override { return Algorithm::Fused; }
  std::size_t workspace_bytes() const override { return 0; }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    launch_tiled(exec, "KokkosMLA::Fused", this->template bound<LatentStep::Fused>(c, c.lse, nullptr),
                 this->config_);
  }
};

/// Algorithm::Fused over sequences of at most FusedRowKernel::kMaxKeys keys:
/// a team per query row (one warp on GPUs), its steps a single pass each.
/// Taken by default on GPUs where the Fused path's own tiles would give every
/// row a team of its own (few rows over short sequences, as in the original
/// example), where this kernel's chain of steps is the shorter; on any
/// backend when named.
template <class Scalar, class ExecSpace>
class FusedRowPath final : public PlannedPrefill<Scalar, ExecSpace> {
  using Kernel = FusedRowKernel<ExecSpace, Scalar>;

 public:
  static constexpr bool available = !is_half_precision<Scalar>::value;
  static bool applicable(const PrefillProblem& p) {
    if (p.wanted != Algorithm::Fused || p.shape.keys > Kernel::kMaxKeys) return false;
    if (p.options.path) return true;  // asked for by name
    if (p.backend.host) return false;
    const LatentTiles fused = FusedPath<Scalar, ExecSpace>::tiles_for(p).tiles;
    return fused.rows() == 1 && fused.key_tile >= p.shape.keys;
  }
  static Algorithm algorithm(const PrefillProblem&) { return Algorithm::Fused; }

  FusedRowPath(const ExecSpace&, const PrefillProblem& p) : problem_(p) {}
  static constexpr Path id = Path::FusedRow;
  Path path() const override { return id; }
  Algorithm algorithm() const override { return Algorithm::Fused; }
  std::size_t workspace_bytes() const override { return 0; }
  std::string describe() const override {
    std::ostringstream o;
    o << "team_size=" << team_size() << " (a query row a team), operands "
      << (staged() ? "staged in scratch" : "read in place");
    return o.str();
  }
  void run(const ExecSpace& exec, const typename PlannedPrefill<Scalar, ExecSpace>::Call& c) const override {
    const Shape& s = problem_.shape;
    Kernel k;
    k.q = head_rows(c.q);
    k.latent = c.latent.data();
    k.latent_ld = std::int64_t(latent_row_stride(c.latent));
    k.w_uk = weight_rows(c.w_uk);
    k.w_uv = weight_rows(c.w_uv);
    k.out = head_rows(c.out);
    k.lse = c.lse;
    k.batch = s.batch, k.queries = s.queries, k.keys = s.keys, k.heads = s.heads;
    k.dim = s.head_dim, k.rank = s.latent_dim;
    k.scale = Scalar(problem_.scale);
    k.causal = problem_.options.causal;
    k.staged = staged();
    k.in_pieces = k.rows_are_pieces();
    const std::size_t bytes = k.scratch_bytes();
    k.scratch_level = problem_.backend.level_holding(bytes);
    launch(exec, "KokkosMLA::FusedRow", k, team_size(), bytes);
  }

 private:
  /// Whether teams stage their rows' operands: they are few, and the team's
  /// scratch then fits level 0 (GPUs copy into it asynchronously).
  bool staged() const {
    const Shape& s = problem_.shape;
    const std::size_t bytes =
        Kernel::ScratchView::shmem_size(Kernel::scratch_elements(s.keys, s.head_dim, s.latent_dim, true));
    return Kernel::stages(s.keys, s.head_dim, s.latent_dim) && problem_.backend.level_holding(bytes) == 0;
  }
  int team_size() const { return problem_.backend.host ? 1 : Kernel::kGpuThreads; }

  PrefillProblem problem_;
};

template <class Scalar, class ExecSpace>
class AbsorbedPath final : public LatentPrefill<Scalar, ExecSpace, LatentStep::Attend> {
  using Base = LatentPrefill<Scalar, ExecSpace, LatentStep::Attend>;

 public:
  static bool applicable(const PrefillProblem& p) { return p.wanted == Algorithm::Absorbed; }
  static Algorithm algorithm(const PrefillProblem&) { return Algorithm::Absorbed; }

  AbsorbedPath(const ExecSpace&, const PrefillProblem& p)
      : Base(p),
        workspace_(Impl::workspace<Scalar, typename ExecSpace::memory_space>(
            "KokkosMLA::Plan::workspace",
            p.shape.batch * p.shape.queries * p.shape.heads * p.shape.latent_dim)) {}  // qa, then oa
  static constexpr Path id = Path::Absorbed;
  Path path() const override { return id; }
  Algorithm algorithm() const override { return Algorithm::Absorbed; }
  std::size_t workspace_bytes() const override { return workspace_.span() * sizeof(Scalar); }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    Scalar* ws = workspace_.data();
    // Only the attend step has the softmax state, so only it writes lse.
    launch_tiled(exec, "KokkosMLA::Absorbed::absorb", this->template bound<LatentStep::Absorb>(c, {}, ws),
                 this->config_);
    launch_tiled(exec, "KokkosMLA::Absorbed::attend", this->template bound<LatentStep::Attend>(c, c.lse, ws),
                 this->config_);
    launch_tiled(exec, "KokkosMLA::Absorbed::up_project",
                 this->template bound<LatentStep::UpProject>(c, {}, ws), this->config_);
  }

 private:
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> workspace_;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
