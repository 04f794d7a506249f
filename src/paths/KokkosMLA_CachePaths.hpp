#ifndef KOKKOSMLA_CACHEPATHS_HPP
#define KOKKOSMLA_CACHEPATHS_HPP
// Cache attention on the portable kernels (float and double, every backend):
//   CacheRegisters: queries absorbed by a team GEMM, attention by DecodeKernel
//     with its accumulators in registers (in parts, merged by lse), outputs
//     up-projected by a team GEMM: where its rows and columns fit a team;
//   CacheBlocked: queries absorbed and outputs up-projected by team GEMMs,
//     attention by DecodeBlockedKernel (16 rows per team, register-blocked
//     products over 32-key tiles in large team scratch; GPUs);
//   (both project by batched cuBLAS GEMMs instead where the build has cuBLAS
//   and rows of D and R values are whole 16-byte multiples;)
//   CacheHost: queries absorbed and outputs up-projected by ProjectHostKernel,
//     attention by DecodeHostKernel, both on a CPU core's vector unit (hosts);
//   CacheGemm: queries absorbed, the attention and outputs up-projected by
//     GEMMs of the BLAS around a softmax kernel, over the cache's tokens
//     gathered into a contiguous array (many heads on GPUs);
//   CacheLatent: the latent kernel absorbs, attends and up-projects in one
//     launch, or with split-KV one that attends in parts and one that merges
//     and up-projects; the one path of sparse (top-k) attention.

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_DecodeBlockedKernel.hpp"
#include "impl/KokkosMLA_DecodeHostKernel.hpp"
#include "impl/KokkosMLA_GatherKernel.hpp"
#include "impl/KokkosMLA_ProjectHostKernel.hpp"
#include "impl/KokkosMLA_RowSoftmaxKernel.hpp"
#include "impl/KokkosMLA_Splits.hpp"
#include "impl/KokkosMLA_StridedGemm.hpp"
#include "impl/KokkosMLA_SumPartsKernel.hpp"
#include "impl/KokkosMLA_Tiling.hpp"
#include "impl/KokkosMLA_Widen.hpp"

#include <algorithm>
#include <cmath>
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
    k.w_uk = weight_rows(a.w_uk);
    k.w_uv = weight_rows(a.w_uv);
    k.out = head_rows(a.out);
    k.lse = lse_rows(a.lse);
    k.workspace = workspace_.data();
    k.parts = workspace_.data() + parts_at_;
    k.indices = a.indices.size() > 0 ? a.indices.data() : nullptr;
    k.topk = s.topk;
    return k;
  }

  /// How the per-head projections run: by the BLAS where it is cuBLAS and
  /// the rows allow (project_by_blas), else by team GEMMs, whose tiles are
  /// the smaller of the absorption's and the up-projection's, one set for both.
  void plan_projections() {
    blas_projections_ = calls_cublas<ExecSpace>() && rows_alike_in_every_layout(problem_.shape);
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
    project<true>(exec, "KokkosMLA::CacheAttention::absorb", head_rows(a.q),
                  packed_rows(qa, s.heads, s.latent_dim), weight_rows(a.w_uk), Scalar(problem_.scale));
    attend();
    if (splits_ > 1)
      launch_tiled(exec, "KokkosMLA::CacheAttention::merge", bound<LatentStep::Merge>(a), config_);
    project<false>(exec, "KokkosMLA::CacheAttention::up_project",
                   packed_rows<const Scalar>(qa, s.heads, s.latent_dim), head_rows(a.out),
                   weight_rows(a.w_uv), Scalar(1));
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
               HeadRows<const Scalar> w, Scalar alpha) const {
    if constexpr (is_host_space<ExecSpace>()) {
      if (host_projections_) return project_on_host<Absorb>(exec, label, from, to, w, alpha);
    }
    if (blas_projections_) return project_by_blas<Absorb>(exec, from, to, w, alpha);
    auto k = project_kernel<Absorb>();
    k.tiles = {config_.project_rows, config_.project_columns, config_.project_chunk};
    k.from = from;
    k.to = to;
    k.w = w;
    k.alpha = alpha;
    launch_tiled(exec, label, k, config_);
  }

  /// Whether rows of D and of R values are whole 16-byte multiples: cuBLAS
  /// picks its kernel, and with it the order of its sums, by the operands'
  /// alignment, and only such rows are aligned alike in a row-major array
  /// and in an aligned slice of a wider one, which must give the same bits.
  static bool rows_alike_in_every_layout(const CacheShape& s) {
    return (s.head_dim * sizeof(Scalar)) % 16 == 0 && (s.latent_dim * sizeof(Scalar)) % 16 == 0;
  }

  /// The projections as one batched GEMM over heads of the BLAS (cuBLAS,
  /// exact products), as CacheGemm projects: absorbing qa_h = alpha q_h
  /// w_uk_h^T, up-projecting out_h = oa_h w_uv_h. On the H200 (B = 128,
  /// H = 16, fp32) the layer took 0.22-0.28 ms less than with ProjectKernel's
  /// team GEMMs (docs/performance.md).
  template <bool Absorb>
  void project_by_blas(const ExecSpace& exec, HeadRows<const Scalar> from, HeadRows<Scalar> to,
                       HeadRows<const Scalar> w, Scalar alpha) const {
    const CacheShape& s = problem_.shape;
    const std::int64_t cols = Absorb ? s.latent_dim : s.head_dim, inner = Absorb ? s.head_dim : s.latent_dim;
    gemm_heads(exec, s.heads, s.batch * s.queries, cols, inner, head_matrices(from), head_matrices(w), Absorb,
               head_matrices(to), FloatGemm::Fp32, double(alpha));
  }

  /// The projections on a host core's vector unit (ProjectHostKernel), one
  /// team per (head, block of rows).
  template <bool Absorb>
  void project_on_host(const ExecSpace& exec, const char* label, HeadRows<const Scalar> from,
                       HeadRows<Scalar> to, HeadRows<const Scalar> w, Scalar alpha) const {
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
  bool blas_projections_ = false;  ///< project() by the BLAS (GPU paths with cuBLAS)
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

/// Cache attention by GEMMs (float and double): qa = q w_uk^T by one GEMM
/// per head, the RoPE queries beside it as rows [qa, q_rope]; per chunk of
/// sequences, their tokens gathered into a contiguous array of [latent,
/// RoPE key] rows (zeros past each length), the scores of a sequence's
/// Tq x H rows against its keys by batched GEMMs (one per part of its
/// keys: the whole capacity where a chunk's sequences fill the GPU, else
/// kKeyPart keys; chunking_for), the softmax in place (CacheSoftmaxKernel),
/// P latent by one batched GEMM over every (sequence, part) and, with
/// several parts, the parts summed (split-K: a few sequences' 128 rows x
/// 512 columns alone would leave most of a GPU idle); out = oa w_uv by one
/// GEMM per head. The products run at the
/// BLAS's rate, which pays where many rows share each token. Taken by
/// default on CUDA (cuBLAS) from kMinRows rows per sequence; elsewhere
/// when named (Options::path), which tests it on every backend. Dense
/// attention over a native cache; kv_splits does not apply (one pass).
template <class Scalar, class ExecSpace>
class CacheGemmPath final : public PlannedCache<Scalar, ExecSpace> {
  using memory_space = typename ExecSpace::memory_space;

 public:
  static constexpr bool available = !is_half_precision<Scalar>::value;
  /// Query rows (Tq x H) of a sequence from which the path is taken by
  /// default: on the H200 at 16 and 32 rows it took 3-4x the blocked
  /// kernel's time, whose tiles then waste nothing.
  static constexpr std::int64_t kMinRows = 128;
  /// Bytes of the gathered tokens, scores and partial products of a chunk of
  /// sequences (as many as fit, in chunks of equal size).
  static constexpr std::int64_t kChunkBytes = std::int64_t(1) << 30;
  /// Keys of a part of the split-K product (on GPUs where one part would
  /// leave P latent's tiles short of whole waves: chunking_for).
  static constexpr std::int64_t kKeyPart = 1024;

  static bool applicable(const CacheProblem& p) {
    const CacheShape& s = p.shape;
    if (s.topk > 0 || s.storage != CacheStorage::Native) return false;
    if (p.options.path) return true;  // asked for by name
#if KOKKOSMLA_ENABLE_CUBLAS
    return is_cuda_space<ExecSpace>() && s.queries * s.heads >= kMinRows && sequence_fits_chunk(s);
#else
    return false;
#endif
  }

  /// Whether one sequence's tokens, scores and partial products fit
  /// kChunkBytes: the default takes no more (a chunked prefill of thousands
  /// of queries would need gigabytes of scores a sequence).
  static bool sequence_fits_chunk(const CacheShape& s) {
    return per_sequence(s, std::min(kKeyPart, s.capacity)) * std::int64_t(sizeof(Scalar)) <= kChunkBytes;
  }

  /// Keys of a part and sequences of a chunk.
  struct Chunking {
    std::int64_t part, sequences;
  };

  /// key_part 0: as chunking_for chooses (hosts: kKeyPart keys).
  CacheGemmPath(const ExecSpace&, const CacheProblem& p, std::int64_t chunk_bytes = kChunkBytes,
                std::int64_t key_part = 0)
      : CacheGemmPath(p, key_part > 0     ? in_parts_of(p.shape, key_part, chunk_bytes)
                         : p.backend.host ? in_parts_of(p.shape, kKeyPart, chunk_bytes)
                                          : chunking_for(p.shape, p.backend.multiprocessors(), chunk_bytes)) {
  }
  /// On a GPU of `multiprocessors`: the whole capacity in one part (no
  /// partial sums), with the largest equal chunk of sequences, of at least a
  /// quarter of the fullest that fits, whose 128 x 128 output tiles of P latent
  /// keep 90 % of their waves busy; where no such chunk is, kKeyPart keys
  /// with as many sequences as fit. On the H200 at B = 128, H = 128 one part
  /// took 3-6 % off the step where the fullest chunk fills the waves (Tq = 1,
  /// S = 4096: 64 sequences, 256 tiles on 132 multiprocessors; and Tq = 2);
  /// at Tq = 1, S = 8192 the fullest chunk (43 sequences, 172 tiles) does not,
  /// and one of 32 does. Three parts of 2816 keys, which would have filled
  /// the waves of 43 sequences, made that step 6 % slower than 1024-key
  /// parts (docs/performance.md, "Key parts that fill whole waves").
  static Chunking chunking_for(const CacheShape& s, double multiprocessors, std::int64_t chunk_bytes) {
    const std::int64_t most = chunk_sequences(s, s.capacity, chunk_bytes);
    const double tiles_a_sequence =
        double(((s.queries * s.heads + 127) / 128) * ((s.latent_dim + 127) / 128));
    for (std::int64_t chunks = (s.batch + most - 1) / most; chunks <= s.batch; ++chunks) {
      const std::int64_t n = (s.batch + chunks - 1) / chunks;
      if (4 * n < most) break;
      const double tiles = double(n) * tiles_a_sequence;
      if (tiles / (std::ceil(tiles / multiprocessors) * multiprocessors) >= 0.9) return {s.capacity, n};
    }
    return in_parts_of(s, kKeyPart, chunk_bytes);
  }
  static constexpr Path id = Path::CacheGemm;
  Path path() const override { return id; }
  int splits() const override { return 1; }
  std::size_t workspace_bytes() const override {
    return (absorbed_.span() + chunk_space_.span()) * sizeof(Scalar);
  }
  std::string describe() const override {
    std::ostringstream o;
    o << "(attention by gemms" << (float_gemm_ == FloatGemm::Tf32 ? ", tf32" : "")
      << ") sequences_per_gemm=" << chunk_ << " key_part=" << part_ << " parts=" << parts_
      << " workspace=" << workspace_bytes() << "B";
    return o.str();
  }

  void run(const ExecSpace& exec, const typename PlannedCache<Scalar, ExecSpace>::Call& a) const override {
    const CacheShape& s = problem_.shape;
    const std::int64_t n_rows = rows(), w = width(), tokens = s.batch * s.queries, keys = padded_keys();
    const HeadRows<const Scalar> w_uk = weight_rows(a.w_uk), w_uv = weight_rows(a.w_uv);
    // [qa, q_rope]: (B Tq, H, R + Dr), then oa in the first R columns.
    const HeadRows<Scalar> qa{absorbed_.data(), s.heads * w, w};
    const auto q = head_rows(a.q);
    gemm(exec, s.heads, tokens, s.latent_dim, s.head_dim, head_matrices(q), head_matrices(w_uk), true,
         head_matrices(qa));
    if (s.rope_dim > 0)
      convert_rows(exec, "KokkosMLA::CacheAttention::rope_queries", head_rows(a.q_rope),
                   HeadRows<Scalar>{qa.ptr + s.latent_dim, qa.row, qa.head}, tokens, s.heads, s.rope_dim);
    const LatentKeys<Scalar> cache = latent_keys<Scalar>(a.cache, s.latent_dim, s.rope_dim);
    // The chunk's space: tokens (n, keys, w), scores (n, parts, rows, part), partial products.
    Scalar* const gathered = chunk_space_.data();
    Scalar* const scores = gathered + chunk_ * keys * w;
    Scalar* const partial = scores + chunk_ * n_rows * keys;
    const LseRows<compute_type<Scalar>> lse = lse_rows(a.lse);
    for (std::int64_t b0 = 0; b0 < s.batch; b0 += chunk_) {
      const std::int64_t n = std::min(chunk_, s.batch - b0);
      Scalar* const rows_of_chunk = qa.ptr + b0 * n_rows * w;
      gather_tokens(exec, "KokkosMLA::CacheAttention::gather",
                    GatherKernel<ExecSpace, Scalar, Scalar>{cache, gathered, keys, s.latent_dim, w, b0, n});
      // Part j of each sequence's scores: its rows [qa, q_rope] against keys j part .. (j + 1) part - 1.
      for (std::int64_t j = 0; j < parts_; ++j)
        gemm(exec, n, n_rows, part_, w, {rows_of_chunk, w, n_rows * w},
             {gathered + j * part_ * w, w, keys * w}, true,
             {scores + j * n_rows * part_, part_, parts_ * n_rows * part_});
      launch(exec, "KokkosMLA::CacheAttention::softmax",
             CacheSoftmaxKernel<ExecSpace, Scalar>{scores, lse, a.cache.seqlens.data(), b0, n, s.queries,
                                                   s.heads, part_, parts_, s.capacity, Scalar(problem_.scale),
                                                   problem_.options.causal},
             softmax_team_size<Scalar>(s.capacity, whole_vectors<Scalar>(part_), problem_.backend.team_size),
             0, false, CacheSoftmaxBounds());
      // P latent for every (sequence, part), over the rows the scores were made of, or into parts summed
      // after.
      const bool split = parts_ > 1;
      gemm(exec, n * parts_, n_rows, s.latent_dim, part_, {scores, part_, n_rows * part_},
           {gathered, w, part_ * w}, false,
           split ? HeadMatrices<Scalar>{partial, s.latent_dim, n_rows * s.latent_dim}
                 : HeadMatrices<Scalar>{rows_of_chunk, w, n_rows * w});
      if (split)
        Kokkos::parallel_for("KokkosMLA::CacheAttention::sum_parts",
                             Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(
                                 exec, 0, n * n_rows * s.latent_dim),
                             SumPartsKernel<Scalar>{partial, rows_of_chunk, n_rows, s.latent_dim, parts_, w});
    }
    const auto out = head_rows(a.out);
    gemm(exec, s.heads, tokens, s.head_dim, s.latent_dim, head_matrices(read_only(qa)), head_matrices(w_uv),
         false, head_matrices(out));
  }

 private:
  /// gemm_heads in the plan's products (TF32 where allowed).
  void gemm(const ExecSpace& exec, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
            HeadMatrices<const Scalar> a, HeadMatrices<const Scalar> b, bool transpose_b,
            HeadMatrices<Scalar> c) const {
    gemm_heads(exec, batch, m, n, k, a, b, transpose_b, c, float_gemm_);
  }
  std::int64_t rows() const { return problem_.shape.queries * problem_.shape.heads; }
  std::int64_t width() const { return problem_.shape.latent_dim + problem_.shape.rope_dim; }
  /// The capacity rounded up to whole parts (the keys past it gathered as zeros, never seen).
  std::int64_t padded_keys() const { return parts_ * part_; }
  /// Elements of one sequence's gathered tokens, scores and partial products, with keys in parts of `part`.
  static std::int64_t per_sequence(const CacheShape& s, std::int64_t part) {
    const std::int64_t parts = (s.capacity + part - 1) / part, rows = s.queries * s.heads;
    return parts * part * (s.latent_dim + s.rope_dim + rows) + (parts > 1 ? parts * rows * s.latent_dim : 0);
  }
  CacheGemmPath(const CacheProblem& p, Chunking c)
      : problem_(p),
        part_(c.part),
        parts_((p.shape.capacity + part_ - 1) / part_),
        chunk_(c.sequences),
        float_gemm_(p.options.allow_tf32 && !p.options.emulate_fp32 ? FloatGemm::Tf32 : FloatGemm::Fp32),
        absorbed_(workspace<Scalar, memory_space>("KokkosMLA::CachePlan::absorbed",
                                                  p.shape.batch * rows() * width())),
        chunk_space_(workspace<Scalar, memory_space>("KokkosMLA::CachePlan::gathered",
                                                     chunk_ * per_sequence(p.shape, part_))) {}
  /// Keys in parts of `part` (at most the capacity), as many sequences a chunk as fit.
  static Chunking in_parts_of(const CacheShape& s, std::int64_t part, std::int64_t chunk_bytes) {
    const std::int64_t p = std::min(part, s.capacity);
    return {p, chunk_sequences(s, p, chunk_bytes)};
  }
  /// Sequences a chunk of at most chunk_bytes holds with keys in parts of
  /// `part`, the batch in chunks of equal size.
  static std::int64_t chunk_sequences(const CacheShape& s, std::int64_t part, std::int64_t chunk_bytes) {
    const std::int64_t most = std::max<std::int64_t>(
        1, std::min(s.batch, chunk_bytes / (per_sequence(s, part) * std::int64_t(sizeof(Scalar)))));
    const std::int64_t chunks = (s.batch + most - 1) / most;
    return (s.batch + chunks - 1) / chunks;
  }

  CacheProblem problem_;
  std::int64_t part_, parts_, chunk_;
  FloatGemm float_gemm_;
  Kokkos::View<Scalar*, memory_space> absorbed_, chunk_space_;
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
