#ifndef KOKKOSMLA_CACHE_HPP
#define KOKKOSMLA_CACHE_HPP
// Attention over a latent KV cache, as an inference engine runs it: queries
// of sequences of different lengths in one call, contiguous or paged caches,
// decoupled RoPE, split-KV decoding, and appending new tokens. See docs/serving.md.

#include <KokkosMLA_Attention.hpp>
#include <KokkosMLA_Fp8.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace KokkosMLA {

/// A latent cache of B sequences. Token s of sequence b is
///   contiguous (block_table empty): latent(b, s, :)
///   paged:                          latent(block_table(b, s / P), s % P, :), P = latent.extent(1)
/// k_rope, the decoupled-RoPE keys (Dr wide, shared by all heads), is indexed
/// the same way. In the packed layout of FlashMLA, k_rope is empty and
/// latent is R + Dr wide: the latent, then the RoPE keys, side by side.
/// An FP8 cache (storage not Native) keeps its tokens in fp8.tokens instead,
/// indexed the same way, with latent and k_rope empty; queries, weights and
/// outputs stay in the plan's Scalar (KokkosMLA_Fp8.hpp, docs/serving.md).
template <class Scalar, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
struct LatentCache {
  using Tokens = Kokkos::View<Scalar***, Kokkos::LayoutRight, MemorySpace>;
  using Table = Kokkos::View<const int**, Kokkos::LayoutRight, MemorySpace>;
  using Lengths = Kokkos::View<const int*, Kokkos::LayoutRight, MemorySpace>;

  Tokens latent;      ///< (B, capacity, W) or (pages, page_size, W); W = R, or R + Dr packed
  Tokens k_rope;      ///< (same first extents, Dr), or empty
  Table block_table;  ///< (B, pages per sequence) page indices, or empty for a contiguous cache
  Lengths seqlens;    ///< (B) tokens each sequence holds, the new ones included
  CacheStorage storage = CacheStorage::Native;
  Fp8Tokens<MemorySpace> fp8;  ///< the tokens and scales of an FP8 storage
};

/// The arguments of one cache-attention call. Query i of sequence b sits at
/// position seqlens(b) - Tq + i and, when causal, attends to positions <= its own.
/// With query_offsets, sequences have different numbers of queries (packed).
///
/// Layout is that of q, q_rope, w_uk, w_uv, out and lse: LayoutRight (the
/// kernels' own), LayoutLeft, or LayoutStride, which also takes LayoutRight
/// and LayoutLeft views and slices of wider arrays, e.g. the first 128 of
/// 192 columns of a (B, Tq, H, 192) query projection. q and q_rope are read
/// where they lie when their heads are unit-stride and their rows evenly
/// spaced and 16-byte aligned (such slices are); other views that are not
/// row-major without gaps are read through row-major copies made per call
/// (out copied back); lse is written where it lies at any strides; the
/// cache, indices and offsets stay LayoutRight.
template <class Scalar, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          class Layout = Kokkos::LayoutRight>
struct CacheArguments {
  static_assert(std::is_same<Layout, Kokkos::LayoutRight>::value ||
                    std::is_same<Layout, Kokkos::LayoutLeft>::value ||
                    std::is_same<Layout, Kokkos::LayoutStride>::value,
                "KokkosMLA::CacheArguments: Layout must be LayoutRight, LayoutLeft or LayoutStride");
  using ConstRank4 = Kokkos::View<const Scalar****, Layout, MemorySpace>;
  using ConstRank3 = Kokkos::View<const Scalar***, Layout, MemorySpace>;
  using Rank4 = Kokkos::View<Scalar****, Layout, MemorySpace>;
  using Lse = Kokkos::View<compute_type<Scalar>***, Layout, MemorySpace>;

  ConstRank4 q;       ///< (B, Tq, H, D)
  ConstRank4 q_rope;  ///< (B, Tq, H, Dr) with a RoPE part, else empty
  LatentCache<Scalar, MemorySpace> cache;
  ConstRank3 w_uk;  ///< (R, H, D)
  ConstRank3 w_uv;  ///< (R, H, D)
  Rank4 out;        ///< (B, Tq, H, D)
  Lse lse;          ///< (B, Tq, H) natural-log log-sum-exp of each row (float for 16-bit Scalars), or empty
  /// Variable query counts (speculative decoding with per-sequence drafts,
  /// chunked prefill), as the engines' cu_seqlens_q: (B + 1) offsets into
  /// packed queries, 0 first and nondecreasing. Sequence b's queries are rows
  /// query_offsets(b) .. query_offsets(b + 1) - 1 of q, q_rope and out, which
  /// are then (1, total, H, ...), and of lse, (1, total, H); its last query
  /// sits at position seqlens(b) - 1. A sequence may have none. Empty: every
  /// sequence has q.extent(1) queries.
  typename LatentCache<Scalar, MemorySpace>::Lengths query_offsets;
  /// Sparse attention (DeepSeek-V3.2's top-k): (B, Tq, topk) positions in its
  /// sequence that each query row attends to, in any order, -1 for an unused
  /// entry; a position listed twice counts twice in the softmax. The indices
  /// replace the causal mask: they say what a row sees (with the index checks
  /// on, each lies in [-1, seqlens(b))). A row with no valid entry gets out 0
  /// and lse +inf. Empty: dense attention.
  Kokkos::View<const int***, Kokkos::LayoutRight, MemorySpace> indices;
  /// Attention sinks: (H) one logit per head that joins every row's softmax
  /// denominator with no value: out is scaled by 1 / (1 + exp(sink - lse))
  /// and lse becomes log(exp(lse) + exp(sink)) (rows with no key keep out 0,
  /// lse +inf). Empty: none.
  Kokkos::View<const compute_type<Scalar>*, Kokkos::LayoutRight, MemorySpace> sinks;
};

/// Extents of a cache-attention problem. capacity: the most tokens a sequence
/// can hold (latent.extent(1) when contiguous, pages per sequence * page size when paged).
struct CacheShape {
  std::int64_t batch = 0;
  std::int64_t queries = 0;  ///< Tq: 1 for decoding, a few for speculative decoding
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t latent_dim = 0;
  std::int64_t rope_dim = 0;  ///< Dr, 0 without a RoPE part
  std::int64_t capacity = 0;
  /// Queries packed with CacheArguments::query_offsets; queries is then the
  /// most that one sequence has (the plan pads each sequence to that many).
  bool packed_queries = false;
  /// Sparse attention: the entries of each row's index list (0: dense).
  std::int64_t topk = 0;
  /// How the cache stores its tokens (FP8 storages take the Widened path).
  CacheStorage storage = CacheStorage::Native;

  friend bool operator==(const CacheShape& a, const CacheShape& b) {
    return a.batch == b.batch && a.queries == b.queries && a.heads == b.heads && a.head_dim == b.head_dim &&
           a.latent_dim == b.latent_dim && a.rope_dim == b.rope_dim && a.capacity == b.capacity &&
           a.packed_queries == b.packed_queries && a.topk == b.topk && a.storage == b.storage;
  }
  friend bool operator!=(const CacheShape& a, const CacheShape& b) { return !(a == b); }
};

std::string to_string(const CacheShape& s);

namespace Impl {
/// Throws std::invalid_argument naming the argument and extents (and, when
/// check_indices, any seqlens or block-table entry out of range); returns the shape.
template <class Scalar, class MemorySpace, class Layout>
CacheShape validate_cache_arguments(const char* caller, const CacheArguments<Scalar, MemorySpace, Layout>& a,
                                    bool check_indices);

/// The arguments with the query-side views as LayoutStride (what every
/// layout converts to; LayoutRight arguments stay as they are).
template <class Scalar, class MemorySpace, class Layout>
CacheArguments<Scalar, MemorySpace, Kokkos::LayoutStride> strided(
    const CacheArguments<Scalar, MemorySpace, Layout>& a) {
  CacheArguments<Scalar, MemorySpace, Kokkos::LayoutStride> s;
  s.q = a.q;
  s.q_rope = a.q_rope;
  s.cache = a.cache;
  s.w_uk = a.w_uk;
  s.w_uv = a.w_uv;
  s.out = a.out;
  s.lse = a.lse;
  s.query_offsets = a.query_offsets;
  s.indices = a.indices;
  s.sinks = a.sinks;
  return s;
}

/// The arguments as CacheArguments of LayoutRight or LayoutStride, the two
/// that the library's functions are built for.
template <class Scalar, class MemorySpace, class Layout>
decltype(auto) built_layout(const CacheArguments<Scalar, MemorySpace, Layout>& a) {
  if constexpr (std::is_same<Layout, Kokkos::LayoutLeft>::value)
    return strided(a);
  else
    return (a);
}

/// append_to_cache on new tokens of any layout (viewed as LayoutStride);
/// those that are not row-major without gaps are copied after the checks.
template <class Scalar, class ExecSpace>
void append_strided(
    const ExecSpace& exec, const LatentCache<Scalar, typename ExecSpace::memory_space>& cache,
    const Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>& new_latent,
    const Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>& new_k_rope,
    const Options& opt);

/// A cache-attention path planned for one problem (src/paths/): what a CachePlan holds.
template <class Scalar, class ExecSpace>
class PlannedCache;
/// Padded copies of packed queries and their results (KokkosMLA_PackedQueries.hpp).
template <class Scalar, class ExecSpace>
class PackedQueries;
}  // namespace Impl

/// A cache-attention problem bound to an execution space: chooses the tiles
/// and the number of key splits once and owns the split workspace, so that
/// execute() allocates nothing (but for Path::DecodeSm90's 256 bytes of TMA
/// maps at its first call over each cache; docs/serving.md, "CUDA graphs").
/// The softmax scale defaults to 1/sqrt(D + Dr).
/// Instances as for Plan. Run concurrent executions on separate CachePlans.
///
/// float and double plans on CUDA with 128 or more query rows a sequence
/// (heads x Tq) compute by cuBLAS GEMMs (Path::CacheGemm) over the tokens
/// gathered into the workspace (up to 1 GiB; workspace_bytes() says how much).
/// 16-bit Scalars take the tensor-core path on CUDA GPUs of compute
/// capability 8.0 and newer for DeepSeek's widths (latent_dim 512, rope_dim
/// 64) and for latent_dim 512 without RoPE (rope_dim 0): queries absorbed
/// and outputs up-projected by cuBLAS (fp32 accumulation), the attention by
/// an mma.sync kernel with an fp32 softmax; on H100/H200 builds with sm_90a
/// code and a Kokkos that grants 197 KB of team scratch, by a wgmma kernel
/// (Path::DecodeSm90) when a sequence has at least 32 query rows (heads x Tq).
/// The cache rows must then be 16-byte aligned (as Kokkos allocates them) and
/// q_rope 4-byte aligned (16-byte on DecodeSm90). Every other case gathers the
/// sequences' tokens into a float cache, runs a float CachePlan and rounds out
/// to Scalar. FP8 caches (shape.storage not Native) of DeepSeek's widths take
/// the same tensor-core kernels with 16-bit Scalars (dequantised tile by tile;
/// DecodeSm90 needs the large team scratch, the mma.sync kernel runs on any
/// Kokkos, in 32-key steps where the scratch holds them); every other FP8 case
/// takes Path::Widened: the tokens dequantised into a cache of
/// compute_type<Scalar>, a plan of that type run on it.
template <class Scalar, class ExecSpace = Kokkos::DefaultExecutionSpace>
class CachePlan {
  static_assert(is_supported_scalar<Scalar>,
                "KokkosMLA::CachePlan: Scalar must be float, double, or a 16-bit type of "
                "KokkosMLA_Precision.hpp that this Kokkos has");
  static_assert(Impl::is_supported_space<ExecSpace>,
                "KokkosMLA::CachePlan: ExecSpace must be Kokkos::DefaultExecutionSpace or "
                "Kokkos::DefaultHostExecutionSpace");

 public:
  using execution_space = ExecSpace;
  using memory_space = typename ExecSpace::memory_space;
  using arguments = CacheArguments<Scalar, memory_space>;

  /// Throws std::invalid_argument for non-positive extents (rope_dim may be 0),
  /// capacity < queries, a non-finite scale or kv_splits < 0.
  CachePlan(const ExecSpace& exec, const CacheShape& shape, const Options& opt = {});

  /// Asynchronous on exec, except for the index check of
  /// Options::check_cache_indices. Throws std::invalid_argument, before any
  /// launch and without touching out, when the arguments do not match the plan.
  void execute(const ExecSpace& exec, const arguments& args) const;
  /// As above, for arguments of another layout (CacheArguments). q and q_rope
  /// are read where they lie when each head's values are contiguous, rows are
  /// evenly spaced and 16-byte aligned (slices of a wider projection, say);
  /// other views that are not row-major without gaps are copied into
  /// row-major buffers the plan allocates at the first call that needs them
  /// and keeps (out copied back), so later calls allocate nothing; lse is
  /// written where it lies at any strides.
  template <class Layout, std::enable_if_t<!std::is_same<Layout, Kokkos::LayoutRight>::value, int> = 0>
  void execute(const ExecSpace& exec, const CacheArguments<Scalar, memory_space, Layout>& args) const {
    execute_strided(exec, Impl::strided(args));
  }

  const CacheShape& shape() const { return shape_; }
  /// Parts each sequence's keys are split into (1: no split).
  int splits() const;
  double scale() const { return scale_; }
  /// The execution path chosen for this problem and backend.
  Path path() const;
  /// Bytes this plan holds for its executions (a widened plan's included).
  std::size_t workspace_bytes() const;
  /// One line: path, splits, team size, tiles and scratch, for logs.
  std::string describe() const;

  /// For benchmarks of the attention step alone: attends with queries already
  /// absorbed, qa (B, Tq, H, R) unscaled, writing oa in its place (args' q,
  /// w_uk, w_uv and out are not read). Only the DecodeTensorSm80 path has a
  /// separate attention step; other paths throw std::logic_error.
  void impl_attend_absorbed(const ExecSpace& exec, const arguments& args, Scalar* qa) const;

 private:
  void execute_strided(const ExecSpace& exec,
                       const CacheArguments<Scalar, memory_space, Kokkos::LayoutStride>& args) const;
  /// The extents against the plan and, with Options::check_cache_indices, the indices.
  template <class Arguments>
  void check(const ExecSpace& exec, const Arguments& args) const;
  /// The launches, on arguments already checked, as the paths read them:
  /// q and q_rope where reads_in_place, the others row-major without gaps.
  void run(const ExecSpace& exec,
           const CacheArguments<Scalar, memory_space, Kokkos::LayoutStride>& args) const;

  CacheShape shape_;
  Options options_;
  double scale_ = 1;
  std::shared_ptr<const Impl::PlannedCache<Scalar, ExecSpace>> path_;
  std::shared_ptr<const Impl::PackedQueries<Scalar, ExecSpace>> packed_;  ///< with packed_queries
  /// Rows' lse where sinks are given without an lse to write: (B Tq H).
  Kokkos::View<compute_type<Scalar>*, memory_space> sink_lse_;
  Impl::CopyBuffers<memory_space> copies_;  ///< arguments that are not read in place
};

/// The extents of a call's arguments (as CachePlan wants them); throws as execute() does.
template <class Scalar, class MemorySpace, class Layout>
CacheShape cache_shape(const CacheArguments<Scalar, MemorySpace, Layout>& args, const Options& opt = {}) {
  return Impl::validate_cache_arguments("KokkosMLA::cache_shape", Impl::built_layout(args),
                                        opt.check_cache_indices);
}

/// Plans and executes once; serving loops should hold a CachePlan.
template <class ExecSpace, class Scalar, class Layout>
void cache_attention(const ExecSpace& exec,
                     const CacheArguments<Scalar, typename ExecSpace::memory_space, Layout>& args,
                     const Options& opt = {}) {
  Options planned = opt;
  const CacheShape shape = Impl::validate_cache_arguments("KokkosMLA::cache_attention",
                                                          Impl::built_layout(args), opt.check_cache_indices);
  planned.check_cache_indices = false;  // just checked
  CachePlan<Scalar, ExecSpace>(exec, shape, planned).execute(exec, args);
}

/// Writes the latents (B, Tn, R) of each sequence's Tn newest tokens, and
/// their RoPE keys (B, Tn, Dr) when the cache has a RoPE part, into the cache:
/// token i of sequence b goes to position seqlens(b) - Tn + i, so seqlens
/// already count the new tokens. An FP8 cache gets them quantised
/// (docs/serving.md, "FP8 latent cache"): rounded to fp32, divided by their
/// scale, rounded to e4m3 to nearest with ties to even and saturated to
/// +-448; Fp8PerBlock scales are amax / 448 of each token's 128-channel
/// blocks (fp8_block_scale). Asynchronous on exec (but see
/// Options::check_cache_indices); throws std::invalid_argument before any
/// launch on mismatched extents, indices out of range or unusable scales.
/// new_latent and new_k_rope may be LayoutRight, LayoutLeft or LayoutStride
/// views: those whose (b, t) rows are evenly spaced and whose last dimension
/// is unit-stride (e.g. the latent and RoPE columns of a packed (B, Tn, R + Dr)
/// projection) are read where they lie; others through row-major copies
/// made per call (the call then waits for them).
template <class ExecSpace, class Scalar, class NewLatent,
          class NewRope = typename CacheArguments<Scalar, typename ExecSpace::memory_space>::ConstRank3>
void append_to_cache(const ExecSpace& exec,
                     const LatentCache<Scalar, typename ExecSpace::memory_space>& cache,
                     const NewLatent& new_latent, const NewRope& new_k_rope = {}, const Options& opt = {}) {
  static_assert(Impl::check_view<Scalar, ExecSpace, NewLatent, 3, false>() &&
                    Impl::check_view<Scalar, ExecSpace, NewRope, 3, false>(),
                "");
  using Strided = Kokkos::View<const Scalar***, Kokkos::LayoutStride, typename ExecSpace::memory_space>;
  Impl::append_strided(exec, cache, Strided(new_latent), Strided(new_k_rope), opt);
}

#define KOKKOSMLA_DECLARE_CACHE_INSTANCE(SCALAR, SPACE)                                             \
  extern template class CachePlan<SCALAR, SPACE>;                                                   \
  extern template CacheShape Impl::validate_cache_arguments(                                        \
      const char*, const CacheArguments<SCALAR, SPACE::memory_space>&, bool);                       \
  extern template CacheShape Impl::validate_cache_arguments(                                        \
      const char*, const CacheArguments<SCALAR, SPACE::memory_space, Kokkos::LayoutStride>&, bool); \
  extern template void Impl::append_strided(                                                        \
      const SPACE&, const LatentCache<SCALAR, SPACE::memory_space>&,                                \
      const Kokkos::View<const SCALAR***, Kokkos::LayoutStride, SPACE::memory_space>&,              \
      const Kokkos::View<const SCALAR***, Kokkos::LayoutStride, SPACE::memory_space>&, const Options&);
#if KOKKOSMLA_HAS_HALF
#define KOKKOSMLA_DECLARE_CACHE_HALF(SPACE) \
  KOKKOSMLA_DECLARE_CACHE_INSTANCE(Kokkos::Experimental::half_t, SPACE)
#else
#define KOKKOSMLA_DECLARE_CACHE_HALF(SPACE)
#endif
#if KOKKOSMLA_HAS_BHALF
#define KOKKOSMLA_DECLARE_CACHE_BHALF(SPACE) \
  KOKKOSMLA_DECLARE_CACHE_INSTANCE(Kokkos::Experimental::bhalf_t, SPACE)
#else
#define KOKKOSMLA_DECLARE_CACHE_BHALF(SPACE)
#endif
#define KOKKOSMLA_DECLARE_CACHE_INSTANCES(SPACE)  \
  KOKKOSMLA_DECLARE_CACHE_INSTANCE(float, SPACE)  \
  KOKKOSMLA_DECLARE_CACHE_INSTANCE(double, SPACE) \
  KOKKOSMLA_DECLARE_CACHE_HALF(SPACE) KOKKOSMLA_DECLARE_CACHE_BHALF(SPACE)
KOKKOSMLA_DECLARE_CACHE_INSTANCES(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_DECLARE_CACHE_INSTANCES(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA

#endif
