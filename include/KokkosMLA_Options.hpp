#ifndef KOKKOSMLA_OPTIONS_HPP
#define KOKKOSMLA_OPTIONS_HPP

#include <cstdint>
#include <optional>
#include <string>

namespace KokkosMLA {

/// How the attention is computed; all give the same result up to rounding.
enum class Algorithm {
  Auto,          ///< a cost model picks one of the three below from the shapes and backend
  Fused,         ///< one launch: absorbed query, attention over the latent, up-projection
  Decompressed,  ///< K and V by two GEMMs into a workspace, then flash attention per head
  Absorbed,      ///< the Fused steps as three launches through a workspace
};

std::string to_string(Algorithm a);

/// The execution path a Plan or CachePlan runs: one kernel family, chosen
/// once from an ordered list (fastest first, the portable paths last).
enum class Path {
  Fused,                 ///< prefill: the latent kernel, one launch
  Absorbed,              ///< prefill: the latent kernels, three launches through a workspace
  DecompressedPortable,  ///< prefill: K and V by GEMM, the portable flash kernel (any team size)
  DecompressedBlocked,   ///< prefill: K and V by GEMM, the register-blocked flash kernel (GPUs)
  FlashTensorSm80,       ///< prefill: K and V by cuBLAS, the mma.sync flash kernel (16-bit, TF32)
  Widened,               ///< 16-bit plans off the tensor-core paths, FP8 caches: a plan on widened copies
  CacheLatent,           ///< cache attention: the portable latent kernel (split-KV by lse)
  CacheRegisters,        ///< cache attention: accumulators in registers, projections as team GEMMs (GPUs)
  CacheBlocked,          ///< cache attention: register-blocked products in large team scratch (GPUs)
  DecodeTensorSm80,      ///< cache attention: cuBLAS projections, the mma.sync decode kernel (16-bit)
  DecompressedHost,      ///< prefill: K and V by GEMM, the flash kernel on a CPU core's vector unit (hosts)
  CacheHost,             ///< cache attention: the attention on a CPU core's vector unit (hosts)
  DecodeSm90,            ///< cache attention: cuBLAS projections, the wgmma decode kernel (16-bit, Hopper)
  FlashSm90,             ///< prefill: K and V by cuBLAS, the wgmma flash kernel (16-bit, TF32; Hopper)
  DecompressedGemm,      ///< prefill: K and V by GEMM, attention by GEMMs around a softmax kernel (float, double)
  CacheGemm,             ///< cache attention: projections and attention by GEMMs around a softmax kernel (float, double)
  FusedRow,              ///< prefill (Fused): a team per query row over a sequence of at most 64 keys, one launch
};

std::string to_string(Path p);

struct Options {
  /// Softmax scale. When unset: 1/sqrt(D) for attention() and Plan, and
  /// 1/sqrt(D + Dr) for cache attention (the query's whole width, RoPE part
  /// included, as DeepSeek's 1/sqrt(192)). Must be finite.
  std::optional<double> scale;
  /// Query i attends to key positions <= its own (S - T + i); false: to all keys.
  bool causal = true;
  Algorithm algorithm = Algorithm::Auto;
  /// Print the chosen algorithm and tiles to stderr when a Plan is made.
  bool verbose = false;
  /// Cache attention: into how many parts each sequence's keys are split, one
  /// team per part, merged by log-sum-exp (flash-decoding); 0 lets the plan
  /// choose from the number of query rows and the backend. The 16-bit
  /// tensor-core path takes at most 64 (CachePlan::splits() reports the count used).
  int kv_splits = 0;
  /// Cache attention and append_to_cache: copy seqlens and the block table to
  /// the host and check every entry before launching. That synchronises with
  /// the device; a serving loop that guarantees valid indices may turn it off.
  bool check_cache_indices = true;
  /// float plans on CUDA GPUs of compute capability 8.0 and newer: run on
  /// tensor cores in TF32, whose products keep 10 mantissa bits of each
  /// operand (relative error 2^-11 rounded, 2^-10 truncated;
  /// docs/performance.md states the bound on out): prefill by the
  /// Decompressed algorithm (head_dim 64 or 128; on Hopper the wgmma
  /// kernel, FlashSm90, elsewhere mma.sync), and cache attention over
  /// native caches of latent 512 with RoPE 64 or none (the DecodeTensorSm80
  /// path, where Kokkos lets a team have 78 KB of scratch; from 128 query
  /// rows a sequence, Tq x H, attention by cuBLAS's TF32 GEMMs instead, which
  /// measured faster there). Every other plan ignores it.
  bool allow_tf32 = false;
  /// float plans on CUDA GPUs of compute capability 8.0 and newer: run the
  /// mma.sync tensor-core paths (also on Hopper: Hopper's warpgroup
  /// products measured 15x PyTorch's fp32 error with 3xTF32) with fp32
  /// accuracy: every product
  /// of the attention as three TF32 products of the operands' high and low
  /// parts (3xTF32), the GEMMs around it in fp32. Its error stays within
  /// twice that of plain fp32 (docs/performance.md); it takes precedence
  /// over allow_tf32. Cache attention from 128 query rows a sequence takes
  /// exact fp32 GEMMs instead where cuBLAS is (faster there, and as
  /// accurate). Every other plan ignores it.
  bool emulate_fp32 = false;
  /// Runs this execution path instead of the plan's choice (A/B comparisons
  /// of kernels, reproducing a result across machines): a Plan or CachePlan
  /// throws std::invalid_argument when that path is not built for its scalar
  /// type and backend or does not take the problem. Unset: the first path of
  /// the ordered list (README, "Execution paths") that takes it.
  std::optional<Path> path;
};

/// Extents of one problem: q (batch, queries, heads, head_dim),
/// latent (batch, keys, latent_dim), w_uk and w_uv (latent_dim, heads, head_dim).
/// keys >= queries; query i sits at key position keys - queries + i.
struct Shape {
  std::int64_t batch = 0;
  std::int64_t queries = 0;
  std::int64_t keys = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t latent_dim = 0;

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.batch == b.batch && a.queries == b.queries && a.keys == b.keys && a.heads == b.heads &&
           a.head_dim == b.head_dim && a.latent_dim == b.latent_dim;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
};

std::string to_string(const Shape& s);

/// Useful floating-point operations of each algorithm for this shape.
struct FlopCount {
  double decompressed = 0;  ///< 4*B*S*R*H*D + attention over D
  double absorbed = 0;      ///< 4*B*T*H*D*R + attention over R (Fused and Absorbed)
};
FlopCount flop_count(const Shape& s, bool causal);

}  // namespace KokkosMLA

#endif
