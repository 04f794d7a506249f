#ifndef KOKKOSMLA_DECOMPRESSEDPATHS_HPP
#define KOKKOSMLA_DECOMPRESSEDPATHS_HPP
// Decompressed prefill: K = latent W_uk and V = latent W_uv as one GEMM each
// (cuBLAS, the host BLAS of Kokkos Kernels' TPL, or Kokkos Kernels' own
// GEMM: gemm_strided_rows) into the workspace,
// then the attention. Four paths differ in how: on CUDA by GEMMs (float and
// double); else by a flash kernel per (batch, head, query tile): on hosts the
// one written for a core's vector unit; on GPUs the register-blocked one
// where its tile fits and is well used; else the portable one (any backend,
// any team size).

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_FlashHostKernel.hpp"
#include "impl/KokkosMLA_RowSoftmaxKernel.hpp"
#include "impl/KokkosMLA_StridedGemm.hpp"
#include "impl/KokkosMLA_Tiling.hpp"

#include <algorithm>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

/// What both Decompressed paths share: the K and V workspace and the GEMMs that fill it.
template <class Scalar, class ExecSpace>
class DecompressedPrefill : public PlannedPrefill<Scalar, ExecSpace> {
 public:
  static constexpr bool available = !is_half_precision<Scalar>::value;
  static Algorithm algorithm(const PrefillProblem&) { return Algorithm::Decompressed; }
  using Call = typename PlannedPrefill<Scalar, ExecSpace>::Call;

  /// K and V rows row_stride elements apart (0: H D, no gap).
  explicit DecompressedPrefill(const PrefillProblem& p, std::int64_t row_stride = 0)
      : problem_(p),
        row_stride_(row_stride > 0 ? row_stride : p.shape.heads * p.shape.head_dim),
        kv_(Impl::workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::Plan::workspace",
                                                                      2 * kv_span())) {}
  Algorithm algorithm() const override { return Algorithm::Decompressed; }
  std::size_t workspace_bytes() const override { return kv_.span() * sizeof(Scalar); }

 protected:
  /// Elements of K (and of V): B S rows, row_stride_ apart.
  std::int64_t kv_span() const { return problem_.shape.batch * problem_.shape.keys * row_stride_; }
  /// K then V, each (B, S, H, D) with rows row_stride_ apart, in the workspace; returns K (V follows it).
  Scalar* decompress(const ExecSpace& exec, const Call& c) const {
    const Shape& s = problem_.shape;
    // The latent is a (B*S) x R matrix (its rows apart by its row stride, a
    // slice of a packed array) and w_uk an R x (H*D) one: their product is
    // K as (B, S, H, D), one GEMM for all heads (gemm_weights).
    const std::int64_t rows = s.batch * s.keys;
    const std::int64_t ld = latent_row_stride(c.latent);
    Scalar* ws = kv_.data();
    // The GEMM libraries name their own kernels; the region tells tools they belong to this library.
    Kokkos::Profiling::pushRegion("KokkosMLA::Decompressed::gemm");
    gemm_weights(exec, rows, s.heads, s.head_dim, s.latent_dim, c.latent.data(), ld, weight_rows(c.w_uk), ws,
                 row_stride_);
    gemm_weights(exec, rows, s.heads, s.head_dim, s.latent_dim, c.latent.data(), ld, weight_rows(c.w_uv),
                 ws + kv_span(), row_stride_);
    Kokkos::Profiling::popRegion();
    return ws;
  }
  /// A flash kernel of type Kernel over K (and V after it) for the call, with
  /// its tiles or grid (none for the host kernel, whose tiles are fixed).
  template <class Kernel, class... Tiles>
  Kernel flash_kernel(const Call& c, const Scalar* k, int scratch_level, const Tiles&... tiles) const {
    const Shape& s = problem_.shape;
    return Kernel{head_rows(c.q),
                  k,
                  k + kv_span(),
                  head_rows(c.out),
                  c.lse,
                  s.batch,
                  s.queries,
                  s.keys,
                  s.heads,
                  s.head_dim,
                  tiles...,
                  Scalar(problem_.scale),
                  problem_.options.causal,
                  scratch_level};
  }

  PrefillProblem problem_;
  std::int64_t row_stride_;
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> kv_;
};

/// The portable flash kernel, tiles fitted to its scratch budget (level 1 when level 0 is too small).
template <class Scalar, class ExecSpace>
class DecompressedPortablePath final : public DecompressedPrefill<Scalar, ExecSpace> {
  using Base = DecompressedPrefill<Scalar, ExecSpace>;

 public:
  static bool applicable(const PrefillProblem& p) { return p.wanted == Algorithm::Decompressed; }

  DecompressedPortablePath(const ExecSpace&, const PrefillProblem& p)
      : Base(p), fitted_(flash_tiles<ExecSpace, Scalar>(p.shape, p.backend)) {}
  static constexpr Path id = Path::DecompressedPortable;
  Path path() const override { return id; }
  std::string describe() const override {
    std::ostringstream o;
    o << "team_size=" << this->problem_.backend.team_size << " query_tile=" << fitted_.tiles.query_tile
      << " flash=portable key_tile=" << fitted_.tiles.key_tile << " scratch=" << fitted_.bytes << "B@level"
      << fitted_.level;
    return o.str();
  }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    const auto f = this->template flash_kernel<FlashAttentionKernel<ExecSpace, Scalar>>(
        c, this->decompress(exec, c), fitted_.level, fitted_.tiles);
    launch(exec, "KokkosMLA::Decompressed::flash", f, this->problem_.backend.team_size, fitted_.bytes);
  }

 private:
  Fitted<FlashTiles> fitted_;
};

/// The register-blocked flash kernel (GPUs), in the first variant whose tile
/// covers the head dimension, fits its scratch budget and is well used.
template <class Scalar, class ExecSpace>
class DecompressedBlockedPath final : public DecompressedPrefill<Scalar, ExecSpace> {
  using Base = DecompressedPrefill<Scalar, ExecSpace>;

 public:
  static constexpr bool available = Base::available && !is_host_space<ExecSpace>();
  static bool applicable(const PrefillProblem& p) {
    return p.wanted == Algorithm::Decompressed &&
           flash_choice<ExecSpace, Scalar>(p.shape, p.backend).variant != FlashVariant::Portable;
  }

  DecompressedBlockedPath(const ExecSpace&, const PrefillProblem& p)
      : Base(p), choice_(flash_choice<ExecSpace, Scalar>(p.shape, p.backend)) {}
  static constexpr Path id = Path::DecompressedBlocked;
  Path path() const override { return id; }
  std::string describe() const override {
    std::ostringstream o;
    o << "team_size=" << choice_.grid.team_threads << " query_tile=" << choice_.tiles.query_tile
      << " flash=" << to_string(choice_.variant) << " key_tile=" << choice_.tiles.key_tile
      << " scratch=" << choice_.bytes << "B@level0";
    return o.str();
  }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    const Scalar* k = this->decompress(exec, c);
    if (choice_.variant == FlashVariant::Large)
      launch_variant<FlashVariant::Large>(exec, c, k);
    else if (choice_.variant == FlashVariant::Narrow)
      launch_variant<FlashVariant::Narrow>(exec, c, k);
    else
      launch_variant<FlashVariant::Wide>(exec, c, k);
  }

 private:
  template <FlashVariant V>
  void launch_variant(const ExecSpace& exec, const typename Base::Call& c, const Scalar* k) const {
    const auto f = this->template flash_kernel<FlashBlockedOf<ExecSpace, Scalar, V>>(c, k, 0, choice_.grid);
    launch(exec, "KokkosMLA::Decompressed::flash", f, choice_.grid.team_threads, choice_.bytes, true,
           typename FlashBlock<V>::bounds());
  }

  FlashChoice choice_;
};

/// Attention by GEMMs: per block of query rows (on GPUs, of every batch
/// element whose scores fit), the scores S = Q K^T of every (batch element,
/// head) by one batched GEMM into the workspace, the softmax in place
/// (RowSoftmaxKernel), then out = P V by a second one. The products run at
/// the GEMM library's rate, for one write and one read of the scores: in
/// exact fp32 on the H200 the prefill took 1.4-1.7x less time than with the
/// blocked flash kernel (T = 1K-32K, D = 128), and 0.1 ms less at
/// (4, 1024, 16, 64, 256). Taken by default for float and double on CUDA
/// (cuBLAS) from 128 queries where D > 64, or D >= 64 and B > 1; elsewhere
/// when named (Options::path), which tests it on every backend.
template <class Scalar, class ExecSpace>
class DecompressedGemmPath final : public DecompressedPrefill<Scalar, ExecSpace> {
  using Base = DecompressedPrefill<Scalar, ExecSpace>;

 public:
  /// Queries from which the path is taken by default: below it one launch
  /// of the flash kernel costs less than three per block.
  static constexpr std::int64_t kMinQueries = 128;
  /// Head dimensions from which it is, for one batch element: at D = 64 a
  /// score's two products are too short to pay for its trip through memory
  /// when a block holds all of a sequence's rows (on the H200,
  /// (4, 1024, 16, 64, 256) in blocks of one batch element took 0.953 ms
  /// against the blocked kernel's 0.932). Blocks over several batch
  /// elements hold fewer rows, and so compute less of the causal square:
  /// from D = 64 there (that shape 0.751 against 0.923-0.929 ms on an H100;
  /// smaller D not measured).
  static constexpr std::int64_t kMinHeadDim = 65, kMinGroupedHeadDim = 64;
  static bool applicable(const PrefillProblem& p) {
    if (p.wanted != Algorithm::Decompressed) return false;
    if (p.options.path) return true;  // asked for by name (visit_if_applicable has checked which)
#if KOKKOSMLA_ENABLE_CUBLAS
    return is_cuda_space<ExecSpace>() && p.shape.queries >= kMinQueries &&
           p.shape.head_dim >= (p.shape.batch > 1 ? kMinGroupedHeadDim : kMinHeadDim);
#else
    return false;
#endif
  }

  DecompressedGemmPath(const ExecSpace&, const PrefillProblem& p)
      : Base(p),
        blocking_(blocking(p.shape, p.backend, p.options.causal)),
        scores_(Impl::workspace<Scalar, memory_space>(
            "KokkosMLA::Plan::scores", blocking_.rows * blocking_.batches * p.shape.heads * p.shape.keys)),
        pointers_("KokkosMLA::Plan::gemm_pointers",
                  blocking_.batches > 1 ? grouped_gemm_pointers(blocking_.batches, p.shape.heads) : 0) {}
  static constexpr Path id = Path::DecompressedGemm;
  Path path() const override { return id; }
  std::size_t workspace_bytes() const override {
    return Base::workspace_bytes() + scores_.span() * sizeof(Scalar) +
           pointers_.span() * sizeof(std::uintptr_t);
  }
  std::string describe() const override {
    std::ostringstream o;
    o << "team_size=" << this->problem_.backend.team_size << " query_block=" << blocking_.rows
      << " batches_per_block=" << blocking_.batches << " score_step=" << blocking_.step
      << " attention=gemms scores=" << scores_.span() * sizeof(Scalar) << "B";
    return o.str();
  }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    const Shape& s = this->problem_.shape;
    const Scalar* k = this->decompress(exec, c);
    const Scalar* v = k + this->kv_span();
    const std::int64_t width = s.heads * s.head_dim;  // K and V rows: (H, D) each
    const auto q = head_rows(c.q);
    const auto out = head_rows(c.out);
    // Batch element b's rows of q and out lie T rows further than b - 1's, its K and V rows S further.
    const std::int64_t q_step = s.queries * q.row, out_step = s.queries * out.row, kv_step = s.keys * width;
    // Keys that the last of the query rows before t_end sees: query t sees
    // key positions up to S - T + t when causal (S >= T, validated), all otherwise.
    auto keys_seen_before = [&](std::int64_t t_end) {
      return this->problem_.options.causal ? std::min(s.keys, s.keys - s.queries + t_end) : s.keys;
    };
    for (std::int64_t b0 = 0; b0 < s.batch; b0 += blocking_.batches)
      for (std::int64_t t0 = 0; t0 < s.queries; t0 += blocking_.rows) {
        const std::int64_t batches = std::min(blocking_.batches, s.batch - b0);
        const std::int64_t rows = std::min(blocking_.rows, s.queries - t0);
        const std::int64_t columns = keys_seen_before(t0 + rows);
        // The scores of (batch element, head) pairs, each rows x columns, one after another.
        const GroupedMatrices<Scalar> p{scores_.data(), columns, rows * columns, s.heads * rows * columns};
        // In steps of rows, each as far as its last row sees: the softmax
        // reads no column past a row's last visible key.
        for (std::int64_t r0 = 0; r0 < rows; r0 += blocking_.step) {
          const std::int64_t step = std::min(blocking_.step, rows - r0);
          gemm_groups(exec, batches, s.heads, step, keys_seen_before(t0 + r0 + step), s.head_dim,
                      GroupedMatrices<const Scalar>{q.at(b0 * s.queries + t0 + r0, 0), q.row, q.head, q_step},
                      GroupedMatrices<const Scalar>{k + b0 * kv_step, width, s.head_dim, kv_step}, true,
                      GroupedMatrices<Scalar>{p.data + r0 * columns, p.ld, p.step, p.group_step}, pointers_);
        }
        launch(exec, "KokkosMLA::Decompressed::softmax",
               RowSoftmaxKernel<ExecSpace, Scalar>{p.data, c.lse, columns, rows, t0, b0, batches, s.queries,
                                                   s.keys, s.heads, Scalar(this->problem_.scale),
                                                   this->problem_.options.causal},
               softmax_team_size<Scalar>(columns, whole_vectors<Scalar>(columns),
                                         this->problem_.backend.team_size),
               0);
        gemm_groups(exec, batches, s.heads, rows, s.head_dim, columns,
                    GroupedMatrices<const Scalar>{p.data, p.ld, p.step, p.group_step},
                    GroupedMatrices<const Scalar>{v + b0 * kv_step, width, s.head_dim, kv_step}, false,
                    GroupedMatrices<Scalar>{out.at(b0 * s.queries + t0, 0), out.row, out.head, out_step},
                    pointers_);
      }
  }

 private:
  using memory_space = typename ExecSpace::memory_space;
  /// A block of the attention: `rows` query rows of `batches` batch elements,
  /// every head; its scores computed `step` rows at a time.
  struct Blocking {
    std::int64_t rows, batches, step;
  };
  /// A causal block also computes the hidden half of its diagonal tile, a
  /// fraction rows / T more products, so blocks are as small as keeps the
  /// GEMMs efficient: on a GPU, rows x batch elements x heads about 16K, 128
  /// tiles of 128 x 128 for P V (on the H200, (1, 4096, 16, 128, 512) took
  /// 1.7x, 1.3x and 1.07x the time with 2K, 4K and 8K, and 32K the same), so
  /// a block takes every batch element whose scores fit and as few rows as
  /// fill the GPU with them; on a host (whose BLAS calls go one matrix at
  /// a time), 128 rows of one batch element. At most 1 GiB of scores, which
  /// long sequences reach first.
  static Blocking blocking(const Shape& s, const Backend& be, bool causal) {
    constexpr std::int64_t kRowsTimesHeads = 16384, kHostRows = 128;
    constexpr std::int64_t kScores = (std::int64_t(1) << 30) / std::int64_t(sizeof(Scalar));
    const std::int64_t per_row = s.heads * s.keys;  // scores of one query row of one batch element
    const std::int64_t batches =
        be.host ? 1 : std::max<std::int64_t>(1, std::min(s.batch, kScores / per_row));
    const std::int64_t wanted = be.host ? kHostRows : kRowsTimesHeads / (batches * s.heads);
    const std::int64_t rows =
        std::max<std::int64_t>(1, std::min({wanted, kScores / (batches * per_row), s.queries}));
    return {rows, batches, causal ? score_step(rows, be) : rows};
  }
  /// Rows of one scores GEMM in a block of `rows`: a causal block's rows
  /// see more keys row by row, so its scores GEMM is split into steps, each
  /// only as wide as its last row sees, of at least 512 rows on GPUs (the
  /// 1,024-row blocks at H = 16 take two: steps of 256 rows ran cuBLAS'
  /// smaller tiles, 12 % slower a product, and gained only on the first
  /// blocks, docs/performance.md; the 128-row blocks at H = 128 take one)
  /// and of 32 on hosts (their 128-row blocks take four, which tests the
  /// steps there).
  static std::int64_t score_step(std::int64_t rows, const Backend& be) {
    const std::int64_t min_step = be.host ? 32 : 512;
    return rows >= 2 * min_step ? std::max(min_step, (rows + 3) / 4) : rows;
  }

  Blocking blocking_;
  Kokkos::View<Scalar*, memory_space> scores_;
  Kokkos::View<std::uintptr_t*, memory_space> pointers_;
};

/// The host flash kernel (launched as every host kernel: launch_on_host).
template <class Scalar, class ExecSpace>
class DecompressedHostPath final : public DecompressedPrefill<Scalar, ExecSpace> {
  using Base = DecompressedPrefill<Scalar, ExecSpace>;
  using Kernel = FlashHostKernel<ExecSpace, Scalar>;

 public:
  static constexpr bool available = Base::available && is_host_space<ExecSpace>();
  static bool applicable(const PrefillProblem& p) { return p.wanted == Algorithm::Decompressed; }

  DecompressedHostPath(const ExecSpace&, const PrefillProblem& p)
      : Base(p, Kernel::key_row_stride(p.shape.heads, p.shape.head_dim)) {}
  static constexpr Path id = Path::DecompressedHost;
  Path path() const override { return id; }
  std::string describe() const override {
    const Kernel k = prototype();
    std::ostringstream o;
    o << "team_size=1 query_tile=" << Kernel::kTeamRows << " row_groups=" << k.groups()
      << " flash=host key_tile=" << Kernel::Flash::kKeys << " vector=" << KOKKOSMLA_HOST_VECTOR_BYTES
      << "B scratch=" << k.scratch_bytes() << "B@level"
      << this->problem_.backend.level_holding(k.scratch_bytes());
    return o.str();
  }
  void run(const ExecSpace& exec, const typename Base::Call& c) const override {
    const Kernel k = this->template flash_kernel<Kernel>(c, this->decompress(exec, c), 0);
    launch_on_host(exec, "KokkosMLA::Decompressed::flash_host", k, k.scratch_bytes(), this->problem_.backend);
  }

 private:
  Kernel prototype() const {
    const Shape& s = this->problem_.shape;
    Kernel k{};
    k.queries = s.queries;
    k.dim = s.head_dim;
    return k;
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
