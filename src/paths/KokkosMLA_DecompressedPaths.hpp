#ifndef KOKKOSMLA_DECOMPRESSEDPATHS_HPP
#define KOKKOSMLA_DECOMPRESSEDPATHS_HPP
// Decompressed prefill: K = latent W_uk and V = latent W_uv as one GEMM each
// (cuBLAS, the host BLAS of Kokkos Kernels' TPL, or Kokkos Kernels' own
// GEMM: gemm_strided_rows) into the workspace,
// then flash attention per (batch, head, query tile). Three paths differ in
// the flash kernel: on hosts the one written for a core's vector unit; on
// GPUs the register-blocked one where its tile fits and is well used; else
// the portable one (any backend, any team size).

#include "KokkosMLA_PathUnit.hpp"
#include "impl/KokkosMLA_FlashHostKernel.hpp"
#include "impl/KokkosMLA_StridedGemm.hpp"
#include "impl/KokkosMLA_Tiling.hpp"

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

  explicit DecompressedPrefill(const PrefillProblem& p)
      : problem_(p),
        kv_(Impl::workspace<Scalar, typename ExecSpace::memory_space>("KokkosMLA::Plan::workspace",
                                                                      2 * Impl::kv_elements(p.shape))) {}
  Algorithm algorithm() const override { return Algorithm::Decompressed; }
  std::size_t workspace_bytes() const override { return kv_.span() * sizeof(Scalar); }

 protected:
  /// K then V, each (B, S, H, D), in the workspace; returns K (V follows it).
  Scalar* decompress(const ExecSpace& exec, const Call& c) const {
    const Shape& s = problem_.shape;
    // The latent is a (B*S) x R matrix (its rows apart by its row stride, a
    // slice of a packed array) and w_uk an R x (H*D) one: their product is
    // K as (B, S, H, D), one GEMM for all heads.
    const std::int64_t rows = s.batch * s.keys, cols = s.heads * s.head_dim;
    const std::int64_t ld = latent_row_stride(c.latent);
    Scalar* ws = kv_.data();
    // The GEMM libraries name their own kernels; the region tells tools they belong to this library.
    Kokkos::Profiling::pushRegion("KokkosMLA::Decompressed::gemm");
    gemm_strided_rows(exec, rows, cols, s.latent_dim, c.latent.data(), ld, c.w_uk.data(), ws);
    gemm_strided_rows(exec, rows, cols, s.latent_dim, c.latent.data(), ld, c.w_uv.data(), ws + rows * cols);
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
                  k + Impl::kv_elements(s),
                  c.out.data(),
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

/// The host flash kernel (launched as every host kernel: launch_on_host).
template <class Scalar, class ExecSpace>
class DecompressedHostPath final : public DecompressedPrefill<Scalar, ExecSpace> {
  using Base = DecompressedPrefill<Scalar, ExecSpace>;
  using Kernel = FlashHostKernel<ExecSpace, Scalar>;

 public:
  static constexpr bool available = Base::available && is_host_space<ExecSpace>();
  static bool applicable(const PrefillProblem& p) { return p.wanted == Algorithm::Decompressed; }

  DecompressedHostPath(const ExecSpace&, const PrefillProblem& p) : Base(p) {}
  static constexpr Path id = Path::DecompressedHost;
  Path path() const override { return id; }
  std::string describe() const override {
    const Kernel k = prototype();
    std::ostringstream o;
    o << "team_size=1 query_tile=" << Kernel::kRows << " flash=host key_tile=" << Kernel::Flash::kKeys
      << " vector=" << KOKKOSMLA_HOST_VECTOR_BYTES << "B scratch=" << k.scratch_bytes() << "B@level"
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
