#ifndef KOKKOSMLA_ABSORBEDTENSORPATH_HPP
#define KOKKOSMLA_ABSORBEDTENSORPATH_HPP
// What the tensor-core cache paths (DecodeTensorSm80, DecodeSm90) share:
// queries absorbed (qa = q w_uk^T per head) and outputs up-projected
// (out = oa w_uv) by batched cuBLAS GEMMs with fp32 accumulation, around a
// path's own attention kernel (attend_absorbed), which reads qa from the
// workspace and writes oa in its place, in parts merged by lse. With sparse
// indices, each query token's valid positions are first compacted into a
// list of their cache rows (ListedKeys) that the kernel reads as a sequence
// of its own. Defined in KokkosMLA_AbsorbedTensorPath.cpp, built where
// KOKKOSMLA_ENABLE_SM80.

#include "impl/KokkosMLA_LatentKernels.hpp"
#include "paths/KokkosMLA_PathUnit.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
class AbsorbedTensorPath : public PlannedCache<Scalar, ExecSpace> {
 public:
  using Call = typename PlannedCache<Scalar, ExecSpace>::Call;
  int splits() const override { return splits_; }
  std::size_t workspace_bytes() const override {
    return qa_.span() * sizeof(Scalar) + parts_.span() * sizeof(float) +
           listed_rows_.span() * sizeof(std::int64_t) + listed_counts_.span() * sizeof(int);
  }
  /// Checks the operands' alignment, absorbs, attends, up-projects.
  void run(const ExecSpace& exec, const Call& call) const override;
  /// With sparse indices lists each query token's keys first; then the path's kernel.
  void attend_absorbed(const ExecSpace& exec, const Call& call, Scalar* qa) const final;

 protected:
  /// Workspace for qa (then oa) and, with several parts, their fp32 oa and
  /// lse; the kernel reads q_rope in pieces of `q_rope_alignment` bytes.
  AbsorbedTensorPath(const CacheProblem& p, int splits, std::size_t q_rope_alignment);

  CacheProblem problem_;
  int splits_ = 1;
  std::size_t q_rope_alignment_ = 4;
  Kokkos::View<Scalar*, typename ExecSpace::memory_space> qa_;    ///< (B, Tq, H, R) qa, then oa
  Kokkos::View<float*, typename ExecSpace::memory_space> parts_;  ///< the split parts' fp32 oa and lse
  /// Sparse attention: the cache rows of each query token's valid positions
  /// (B Tq, topk), and their counts (B Tq).
  Kokkos::View<std::int64_t*, typename ExecSpace::memory_space> listed_rows_;
  Kokkos::View<int*, typename ExecSpace::memory_space> listed_counts_;

  /// The listed keys of sparse attention (filled by attend_absorbed), or none.
  ListedKeys listed() const;
  /// The path's attention kernel: qa in, oa out in its place, in parts merged by lse.
  virtual void attend_kernel(const ExecSpace& exec, const Call& call, Scalar* qa) const = 0;
};

/// Whether the tensor-core kernels take a cache of these widths: R = 512,
/// Dr = 64 or 0 (64 in FP8 storage); dense or sparse.
inline bool tensor_cache_widths(const CacheShape& s) {
  return s.latent_dim == 512 && (s.rope_dim == 64 || (s.rope_dim == 0 && s.storage == CacheStorage::Native));
}

}  // namespace Impl
}  // namespace KokkosMLA

#endif
