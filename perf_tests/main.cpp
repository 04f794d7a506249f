// Times every algorithm on the shapes of the design brief (and the original
// example) and reports milliseconds per call, useful GFLOP/s (the Decompressed
// FLOP count, the same for every algorithm) and GB/s of compulsory traffic
// (q, latent, weights, out). On CUDA each call is timed on the GPU between two
// events behind a write that evicts L2, as PyTorch's baseline is timed
// (triton's do_bench; time_each_call). On hosts each iteration runs `batch`
// calls back to back and one fence, so per-call launch latency is included
// but fence latency is amortised; the reported time is per call. relerr is
// measured against the double-precision Decompressed path.
//
// tf32/..., fp32emu/..., bf16/... and fp16/... run Auto with
// Options::allow_tf32, with Options::emulate_fp32 (3xTF32) and in the 16-bit
// types (where Kokkos has them); relerr is then against the double path on
// the same (rounded) inputs.
//
// Decode benchmarks (decode/float/..., and decode/bf16/... and decode/fp16/...
// where Kokkos has the type: the tensor-core path on CUDA) time one CachePlan::execute per
// iteration on DeepSeek-V3 decode shapes (B=128, paged cache, RoPE part; and
// H=16 without RoPE) and report GB/s of the cache read once and useful
// GFLOP/s of the absorbed form.
// strided_q/bf16/<shape>/{contiguous,strided,left} and decode_strided_q/bf16/<shape>
// pass q (and q_rope) as slices of one (B, T, H, 192) query projection (read
// in place), or q as a LayoutLeft view (copied per call), against the
// contiguous rows of the same run; strided_q/bf16/<shape>/latent_slice the
// latent as the leading 512 columns of a packed (B, S, 576) KV projection,
// .../out_slice out as the leading 128 columns of a (B, T, H, 192) array,
// .../weight_halves w_uk and w_uv as the halves of one (R, H, 256) array
// (strided_q/float/... on CUDA: the same for the Decompressed fp32 path).
// decode/fp8/... and decode_attention/fp8/... run bf16 queries over an FP8
// cache in FlashMLA's token layout (Fp8PerBlock), GB/s counting its bytes;
// decode_sparse_attention/fp8|bf16/... time sparse attention (topk random
// positions per query token, DeepSeek-V3.2's shapes), FLOPs and bytes of the
// listed keys.
// decode_attention/bf16/... and fp16/... (CUDA with tensor cores) time the attention
// kernels of that path alone, on absorbed queries, as FlashMLA's benchmark
// times its kernel: FLOPs and bytes by FlashMLA's formulas.
// bf16/<shape>/FlashTensorSm80 and fp16/... (builds with sm_90a code) force
// the mma.sync prefill, for an A/B against the Hopper path Auto takes;
// float/<shape>/DecompressedBlocked (CUDA) the blocked flash kernel against
// attention by GEMMs, which Auto takes there, and double/<shape>/Auto the
// latter in double; on hosts float/<shape>/DecompressedHost and
// .../DecompressedGemm the host flash kernel against attention by GEMMs.
// decode_registers/float/..., decode_blocked/float/... and
// decode_gemm/float/... (CUDA) run the float decode on the CacheRegisters,
// CacheBlocked and CacheGemm paths (Options::path), for an A/B against
// decode/float/... in one run; decode_gemm/tf32/... the latter with TF32 products.
// decode/tf32/... and decode/fp32emu/... run the float decode with
// Options::allow_tf32 and Options::emulate_fp32 (FlashMLA's shapes).
//
//   kokkosmla_perf_tests --benchmark_filter='float/.*B4_T1024'   # one shape
//   kokkosmla_perf_tests --benchmark_filter='decode/'           # the decode shapes
//   kokkosmla_perf_tests --benchmark_format=json                # machine-readable

#include <KokkosMLA.hpp>

#include "HashFill.hpp"
#include "impl/KokkosMLA_Compat.hpp"

#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace KokkosMLA {
namespace Bench {

using Space = Kokkos::DefaultExecutionSpace;
template <class T>
using View1 = Kokkos::View<T*, Space>;

std::vector<Shape> shapes() {
  std::vector<Shape> s = {{2, 32, 32, 4, 16, 24},
                          {4, 1024, 1024, 16, 64, 256},
                          {1, 4096, 4096, 16, 128, 512},
                          {1, 4096, 4096, 128, 128, 512}};
  // Scaling in T at DeepSeek-V2-Lite width (H=16, D=128, R=512).
  for (std::int64_t t : {1024, 2048, 8192, 16384, 32768}) s.push_back({1, t, t, 16, 128, 512});
  return s;
}

template <class T>
struct Inputs {
  View1<T> q, latent, w_uk, w_uv, out;
  explicit Inputs(const Shape& s) {
    const std::int64_t qn = s.batch * s.queries * s.heads * s.head_dim;
    q = View1<T>("q", qn);
    out = View1<T>("out", qn);
    latent = View1<T>("latent", s.batch * s.keys * s.latent_dim);
    w_uk = View1<T>("w_uk", s.latent_dim * s.heads * s.head_dim);
    w_uv = View1<T>("w_uv", s.latent_dim * s.heads * s.head_dim);
    // Deterministic hash-based values on the device: never zeros, cheap for huge shapes.
    Test::fill_hash(q, 1, 1.0);
    Test::fill_hash(latent, 2, 1.0);
    Test::fill_hash(w_uk, 3, 1.0 / std::sqrt(double(s.latent_dim)));
    Test::fill_hash(w_uv, 4, 1.0 / std::sqrt(double(s.latent_dim)));
  }
};

template <class T, int Rank>
using Tensor = Kokkos::View<typename std::conditional<Rank == 4, T****, T***>::type, Kokkos::LayoutRight,
                            Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
struct Bound {
  Tensor<T, 4> q, out;
  Tensor<T, 3> latent, w_uk, w_uv;
  Bound(const Inputs<T>& in, const Shape& s)
      : q(in.q.data(), s.batch, s.queries, s.heads, s.head_dim),
        out(in.out.data(), s.batch, s.queries, s.heads, s.head_dim),
        latent(in.latent.data(), s.batch, s.keys, s.latent_dim),
        w_uk(in.w_uk.data(), s.latent_dim, s.heads, s.head_dim),
        w_uv(in.w_uv.data(), s.latent_dim, s.heads, s.head_dim) {}
};

/// ||out - want|| / ||want||, on the device.
template <class T>
double relative_distance(const View1<T>& out, const View1<double>& want) {
  double num = 0, den = 0;
  Kokkos::parallel_reduce(
      "KokkosMLA::bench::error", Kokkos::RangePolicy<Space>(0, out.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, double& n) {
        const double d = double(out(i)) - want(i);
        n += d * d;
      },
      num);
  Kokkos::parallel_reduce(
      "KokkosMLA::bench::norm", Kokkos::RangePolicy<Space>(0, out.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, double& n) { n += want(i) * want(i); }, den);
  return std::sqrt(num / den);
}

/// to = from, exactly: a reference's inputs are the T values themselves.
template <class T>
void widen(const View1<T>& from, const View1<double>& to) {
  Kokkos::parallel_for(
      "KokkosMLA::bench::widen", Kokkos::RangePolicy<Space>(0, from.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { to(i) = double(from(i)); });
}

/// ||out - ref|| / ||ref|| with ref from the double Decompressed path on the same inputs.
template <class T>
double relative_error(const Shape& s, const Inputs<T>& in) {
  Inputs<double> ref(s);  // same hash values in double, then overwrite with the exact T values
  widen(in.q, ref.q);
  widen(in.latent, ref.latent);
  widen(in.w_uk, ref.w_uk);
  widen(in.w_uv, ref.w_uv);
  Options opt;
  opt.algorithm = Algorithm::Decompressed;
  Bound<double> r(ref, s);
  Plan<double, Space>(Space(), s, opt).execute(Space(), r.q, r.latent, r.w_uk, r.w_uv, r.out);
  return relative_distance(in.out, ref.out);
}

template <class Call>
void time_each_call(benchmark::State& state, const Space& exec, Call call);

template <class T>
void run(benchmark::State& state, Shape s, Algorithm algorithm, Options opt) {
  opt.algorithm = algorithm;
  Inputs<T> in(s);
  Bound<T> v(in, s);
  Plan<T, Space> plan(Space(), s, opt);
  Space exec;
  plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out);  // warm-up
  exec.fence();
#ifdef KOKKOS_ENABLE_CUDA
  const int batch = 1;
  time_each_call(state, exec, [&] { plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out); });
#else
  // Enough calls per timed batch that a fence is noise.
  Kokkos::Timer probe;
  plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out);
  exec.fence();
  const int batch = int(std::min(1000.0, std::max(1.0, 2e-3 / probe.seconds())));
  for (auto _ : state) {
    Kokkos::Timer timer;
    for (int i = 0; i < batch; ++i) plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out);
    exec.fence();
    state.SetIterationTime(timer.seconds() / batch);
  }
#endif
  const FlopCount flops = flop_count(s, opt.causal);
  const double bytes =
      sizeof(T) * double(2 * s.batch * s.queries * s.heads * s.head_dim + s.batch * s.keys * s.latent_dim +
                         2 * s.latent_dim * s.heads * s.head_dim);
  state.counters["GFLOP"] =
      benchmark::Counter(flops.decompressed * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["batch"] = batch;
  state.counters["workspace_MB"] = double(plan.workspace_bytes()) * 1e-6;
  state.counters["inputs_MB"] = bytes * 1e-6;
  // Repetitions of one benchmark compute the same error: measure it once.
  static std::map<std::string, double> errors;
  const std::string key = to_string(s) + to_string(algorithm) + (opt.path ? to_string(*opt.path) : "");
  if (!errors.count(key)) errors[key] = s.queries <= 8192 ? relative_error(s, in) : std::nan("");
  state.counters["relerr"] = errors[key];
  state.SetLabel(to_string(plan.algorithm()) + (algorithm == Algorithm::Auto ? " (auto)" : "") + " on " +
                 to_string(plan.path()));
}

std::string shape_name(const Shape& s) {
  std::ostringstream o;
  o << "B" << s.batch << "_T" << s.queries << "_H" << s.heads << "_D" << s.head_dim << "_R" << s.latent_dim;
  return o.str();
}

template <class T>
void register_all(const char* type,
                  std::initializer_list<Algorithm> algorithms = {Algorithm::Auto, Algorithm::Fused,
                                                                 Algorithm::Decompressed,
                                                                 Algorithm::Absorbed},
                  const Options& base = {}) {
  for (const Shape& s : shapes())
    for (Algorithm a : algorithms) {
      const std::string name = std::string(type) + "/" + shape_name(s) + "/" + to_string(a);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [s, a, base](benchmark::State& st) { run<T>(st, s, a, base); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
    }
}

/// type/<shape>/<path> for the shapes whose head_dim the tensor-core paths
/// take: the plan forced onto one path (an A/B against type/<shape>/Auto in one run).
template <class T>
void register_prefill_on(const char* type, Path path) {
  Options opt;
  opt.path = path;
  for (const Shape& s : shapes()) {
    if (s.head_dim != 64 && s.head_dim != 128) continue;
    const std::string name = std::string(type) + "/" + shape_name(s) + "/" + to_string(path);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [s, opt](benchmark::State& st) { run<T>(st, s, Algorithm::Auto, opt); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  }
}

/// A DeepSeek-V3 decode problem: B sequences of `keys` tokens each in a paged
/// cache (pages in a scattered order), Tq new queries per sequence, RoPE part.
struct DecodeShape {
  std::int64_t batch, queries, heads, keys, page;
  std::int64_t head_dim = 128, latent_dim = 512, rope_dim = 64;
  std::int64_t topk = 0;  ///< sparse: positions each query token attends to (random, of its sequence)

  /// Keys a query token reads: all of its sequence's, or its topk.
  std::int64_t keys_read() const { return topk > 0 ? topk : keys; }
  /// Cache tokens a call reads: each sequence's once, or each query token's list.
  std::int64_t tokens_read() const { return topk > 0 ? batch * queries * topk : batch * keys; }
};

std::vector<DecodeShape> decode_shapes() {
  std::vector<DecodeShape> s;
  for (std::int64_t heads : {16, 128})
    for (std::int64_t queries : {1, 2})
      for (std::int64_t keys : {4096, 8192}) s.push_back({128, queries, heads, keys, 64});
  for (std::int64_t keys : {4096, 8192}) s.push_back({128, 1, 16, keys, 64, 128, 512, 0});  // no RoPE part
  s.push_back({32, 1, 16, 4096, 64});  // the CPU campaign's (perf_tests/compare_cpu.py)
  return s;
}

/// DeepSeek-V3.2's sparse decode as FlashMLA benchmarks it: B = 128, a cache
/// of 32768 tokens per sequence, 2048 positions per query token, 64 or 128
/// heads; and its sparse prefill: 4096 query tokens of one sequence, 128 heads.
std::vector<DecodeShape> sparse_decode_shapes() {
  std::vector<DecodeShape> s;
  for (std::int64_t heads : {64, 128})
    for (std::int64_t queries : {1, 2}) s.push_back({128, queries, heads, 32768, 64, 128, 512, 64, 2048});
  s.push_back({1, 4096, 128, 8192, 64, 128, 512, 64, 2048});
  return s;
}

/// Every sequence full (keys tokens); page i of the pool is (i * 7919) mod
/// pages, a bijection that scatters each sequence's pages.
inline void scatter_pages(const Kokkos::View<int**, Kokkos::LayoutRight, Space>& table,
                          const Kokkos::View<int*, Kokkos::LayoutRight, Space>& lengths, std::int64_t keys) {
  const std::int64_t per_sequence = std::int64_t(table.extent(1)),
                     pages = per_sequence * std::int64_t(table.extent(0));
  Kokkos::parallel_for(
      "KokkosMLA::bench::block_table", Kokkos::RangePolicy<Space>(0, pages),
      KOKKOS_LAMBDA(const std::int64_t i) {
        table(i / per_sequence, i % per_sequence) = int((i * 7919) % pages);
        if (i % per_sequence == 0) lengths(i / per_sequence) = int(keys);
      });
}

template <class T>
struct DecodeInputs {
  View1<T> q, q_rope, latent, k_rope, w_uk, w_uv, out;
  Kokkos::View<int**, Kokkos::LayoutRight, Space> block_table;
  Kokkos::View<int*, Kokkos::LayoutRight, Space> seqlens;
  Kokkos::View<int***, Kokkos::LayoutRight, Space> indices;  ///< sparse: (B, Tq, topk)
  CacheArguments<T> args;

  /// storage: an FP8 storage gets DeepSeek's keys quantised into tokens of
  /// the same pages by append_to_cache (the latent and RoPE buffers stay, unused).
  explicit DecodeInputs(const DecodeShape& d, CacheStorage storage = CacheStorage::Native) {
    const std::int64_t rows = d.batch * d.queries * d.heads, per_sequence = d.keys / d.page;
    const std::int64_t pages = d.batch * per_sequence;
    q = View1<T>("q", rows * d.head_dim);
    q_rope = View1<T>("q_rope", rows * d.rope_dim);
    out = View1<T>("out", rows * d.head_dim);
    latent = View1<T>("latent", pages * d.page * d.latent_dim);
    k_rope = View1<T>("k_rope", pages * d.page * d.rope_dim);
    w_uk = View1<T>("w_uk", d.latent_dim * d.heads * d.head_dim);
    w_uv = View1<T>("w_uv", d.latent_dim * d.heads * d.head_dim);
    Test::fill_hash(q, 11, 1.0);
    Test::fill_hash(q_rope, 12, 1.0);
    Test::fill_hash(latent, 13, 1.0);
    Test::fill_hash(k_rope, 14, 1.0);
    Test::fill_hash(w_uk, 15, 1.0 / std::sqrt(double(d.latent_dim)));
    Test::fill_hash(w_uv, 16, 1.0 / std::sqrt(double(d.latent_dim)));
    block_table = decltype(block_table)("block_table", d.batch, per_sequence);
    seqlens = decltype(seqlens)("seqlens", d.batch);
    scatter_pages(block_table, seqlens, d.keys);
    using C = CacheArguments<T>;
    args.q = typename C::ConstRank4(q.data(), d.batch, d.queries, d.heads, d.head_dim);
    if (d.rope_dim > 0)  // without RoPE, q_rope and k_rope stay absent (empty views)
      args.q_rope = typename C::ConstRank4(q_rope.data(), d.batch, d.queries, d.heads, d.rope_dim);
    args.w_uk = typename C::ConstRank3(w_uk.data(), d.latent_dim, d.heads, d.head_dim);
    args.w_uv = typename C::ConstRank3(w_uv.data(), d.latent_dim, d.heads, d.head_dim);
    args.out = typename C::Rank4(out.data(), d.batch, d.queries, d.heads, d.head_dim);
    args.cache.latent = typename LatentCache<T>::Tokens(latent.data(), pages, d.page, d.latent_dim);
    if (d.rope_dim > 0)
      args.cache.k_rope = typename LatentCache<T>::Tokens(k_rope.data(), pages, d.page, d.rope_dim);
    args.cache.block_table = block_table;
    args.cache.seqlens = seqlens;
    if (storage != CacheStorage::Native) quantise_cache(d, storage, pages);
    if (d.topk > 0) list_positions(d);
  }

  /// Sparse: each query token's topk positions drawn at random from its
  /// sequence (repeats possible, as an indexer's picks are not).
  void list_positions(const DecodeShape& d) {
    indices = decltype(indices)("indices", d.batch, d.queries, d.topk);
    const auto all = indices;
    const std::int64_t keys = d.keys;
    Kokkos::parallel_for(
        "KokkosMLA::bench::indices", Kokkos::RangePolicy<Space>(0, d.batch * d.queries * d.topk),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const std::uint64_t h = (std::uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull;
          all.data()[i] = int((h ^ (h >> 29)) % std::uint64_t(keys));
        });
    args.indices = indices;
  }

  /// The cache as FP8 tokens: every sequence's keys appended at once (the
  /// buffers read as (B, S, ...): the tokens' values are as random as before).
  void quantise_cache(const DecodeShape& d, CacheStorage storage, std::int64_t pages) {
    LatentCache<T> fp8;
    fp8.storage = storage;
    fp8.fp8.tokens = typename Fp8Tokens<Space::memory_space>::Bytes(
        "tokens", pages, d.page, fp8_token_bytes(storage, d.latent_dim, d.rope_dim));
    fp8.fp8.latent_scale = fp8.fp8.rope_scale = 1.f / 256;  // Fp8PerTensor: values in [-1, 1]
    fp8.block_table = block_table;
    fp8.seqlens = seqlens;
    using C = CacheArguments<T>;
    append_to_cache(Space(), fp8, typename C::ConstRank3(latent.data(), d.batch, d.keys, d.latent_dim),
                    typename C::ConstRank3(k_rope.data(), d.batch, d.keys, d.rope_dim));
    args.cache = fp8;
  }

  /// Bytes of one cached token.
  double token_bytes(const DecodeShape& d) const {
    return args.cache.storage == CacheStorage::Native
               ? double(sizeof(T) * (d.latent_dim + d.rope_dim))
               : double(fp8_token_bytes(args.cache.storage, d.latent_dim, d.rope_dim));
  }
};

/// ||out - ref|| / ||ref|| against the same problem (the T values) in double (on the same device).
template <class T>
double decode_relative_error(const DecodeShape& d, const DecodeInputs<T>& in) {
  DecodeInputs<double> ref(d);
  widen(in.q, ref.q);
  widen(in.q_rope, ref.q_rope);
  widen(in.latent, ref.latent);
  widen(in.k_rope, ref.k_rope);
  widen(in.w_uk, ref.w_uk);
  widen(in.w_uv, ref.w_uv);
  if (in.args.cache.storage != CacheStorage::Native) {  // the same FP8 tokens, dequantised to double
    LatentCache<double> fp8;
    fp8.storage = in.args.cache.storage;
    fp8.fp8 = in.args.cache.fp8;
    fp8.block_table = in.block_table;
    fp8.seqlens = in.seqlens;
    ref.args.cache = fp8;
  }
  CachePlan<double, Space>(Space(), cache_shape(ref.args)).execute(Space(), ref.args);
  return relative_distance(in.out, ref.out);
}

/// Times one call per iteration, after a warm-up call. On CUDA as the
/// PyTorch and FlashMLA baselines are timed (triton's do_bench): between two
/// events on the call's stream, each call behind a 256 MB write that evicts
/// L2 and keeps the GPU busy while the host enqueues the call, so that the
/// time is the GPU's alone: neither a cache still warm from the call before,
/// nor the host's launch latency, nor a fence (5-10 us) counts. Elsewhere
/// one fenced call by the host's clock.
template <class Call>
void time_each_call(benchmark::State& state, const Space& exec, Call call) {
  call();
  exec.fence();
#ifdef KOKKOS_ENABLE_CUDA
  Kokkos::View<int*, Space> flush(Kokkos::view_alloc(Kokkos::WithoutInitializing, "l2_flush"), 64 << 20);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    Kokkos::deep_copy(exec, flush, 0);
    cudaEventRecord(start, exec.cuda_stream());
    call();
    cudaEventRecord(stop, exec.cuda_stream());
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(1e-3 * double(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
#else
  for (auto _ : state) {
    Kokkos::Timer timer;
    call();
    exec.fence();
    state.SetIterationTime(timer.seconds());
  }
#endif
}

/// How a benchmark hands q (or the latent) to the library.
enum class QueryLayout { Contiguous, Strided, Left, LatentSlice, OutSlice, WeightHalves };
inline const char* to_string(QueryLayout l) {
  return l == QueryLayout::Contiguous    ? "contiguous"
         : l == QueryLayout::Strided     ? "strided"
         : l == QueryLayout::Left        ? "left"
         : l == QueryLayout::LatentSlice ? "latent_slice"
         : l == QueryLayout::OutSlice    ? "out_slice"
                                         : "weight_halves";
}

/// Prefill with q contiguous, the 128-wide part of DeepSeek's (B, T, H, 192)
/// query projection (a LayoutStride slice, read in place; the rest would be
/// q_rope), or a LayoutLeft view (a GPU's default layout, copied per call);
/// or (LatentSlice) with q contiguous and the latent the leading R columns of
/// a packed (B, S, R + 64) KV projection (read in place); or (OutSlice) out
/// the leading D columns of a (B, T, H, D + 64) array (written in place); or
/// (WeightHalves) w_uk and w_uv the halves of one (R, H, 2 D) array, as
/// DeepSeek's kv_b_proj weight holds them (read in place); timed alike.
template <class T>
void run_strided_q(benchmark::State& state, Shape s, QueryLayout layout) {
  Inputs<T> in(s);
  Bound<T> v(in, s);
  Kokkos::View<T****, Kokkos::LayoutRight, Space> projection("q_projection", s.batch, s.queries, s.heads,
                                                             s.head_dim + 64);
  const auto q =
      Kokkos::subview(projection, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, int(s.head_dim)));
  Kokkos::deep_copy(q, v.q);
  Kokkos::View<T***, Kokkos::LayoutRight, Space> kv_projection("kv_projection", s.batch, s.keys,
                                                               s.latent_dim + 64);
  const auto latent =
      Kokkos::subview(kv_projection, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, int(s.latent_dim)));
  Kokkos::deep_copy(latent, v.latent);
  Kokkos::View<T****, Kokkos::LayoutRight, Space> out_wide;
  if (layout == QueryLayout::OutSlice)
    out_wide = decltype(out_wide)("out_wide", s.batch, s.queries, s.heads, s.head_dim + 64);
  Kokkos::View<T***, Kokkos::LayoutRight, Space> kv_b("kv_b", s.latent_dim, s.heads, 2 * s.head_dim);
  const auto head_part = [&](int first) {
    return Kokkos::subview(kv_b, Kokkos::ALL, Kokkos::ALL, std::make_pair(first, first + int(s.head_dim)));
  };
  const auto w_uk = head_part(0), w_uv = head_part(int(s.head_dim));
  Kokkos::deep_copy(w_uk, v.w_uk);
  Kokkos::deep_copy(w_uv, v.w_uv);
  Kokkos::View<T****, Kokkos::LayoutLeft, Space> left;
  if (layout == QueryLayout::Left) {
    left = decltype(left)("q_left", s.batch, s.queries, s.heads, s.head_dim);
    Kokkos::deep_copy(left, v.q);
  }
  const Plan<T, Space> plan(Space(), s);
  const Space exec;
  if (layout == QueryLayout::Strided)
    time_each_call(state, exec, [&] { plan.execute(exec, q, v.latent, v.w_uk, v.w_uv, v.out); });
  else if (layout == QueryLayout::Left)
    time_each_call(state, exec, [&] { plan.execute(exec, left, v.latent, v.w_uk, v.w_uv, v.out); });
  else if (layout == QueryLayout::LatentSlice)
    time_each_call(state, exec, [&] { plan.execute(exec, v.q, latent, v.w_uk, v.w_uv, v.out); });
  else if (layout == QueryLayout::WeightHalves)
    time_each_call(state, exec, [&] { plan.execute(exec, v.q, v.latent, w_uk, w_uv, v.out); });
  else if (layout == QueryLayout::OutSlice)
    time_each_call(state, exec, [&] {
      plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv,
                   Kokkos::subview(out_wide, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL,
                                   std::make_pair(0, int(s.head_dim))));
    });
  else
    time_each_call(state, exec, [&] { plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out); });
  state.SetLabel((layout == QueryLayout::LatentSlice    ? std::string("latent slice")
                  : layout == QueryLayout::OutSlice     ? std::string("out slice")
                  : layout == QueryLayout::WeightHalves ? std::string("weight halves")
                                                        : "q " + std::string(to_string(layout))) +
                 ", on " + to_string(plan.path()));
}

template <class T>
void register_strided_q(const char* type) {
  for (const Shape& s : shapes()) {
    if (s.head_dim != 128 || s.queries != 4096) continue;
    for (QueryLayout layout : {QueryLayout::Contiguous, QueryLayout::Strided, QueryLayout::Left,
                               QueryLayout::LatentSlice, QueryLayout::OutSlice, QueryLayout::WeightHalves}) {
      const std::string name =
          std::string("strided_q/") + type + "/" + shape_name(s) + "/" + to_string(layout);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [s, layout](benchmark::State& st) { run_strided_q<T>(st, s, layout); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
    }
  }
}

/// A decode step with q and q_rope the two parts of one (B, Tq, H, 192)
/// query projection (LayoutStride slices), beside decode/type/<shape>'s
/// contiguous views in the same run.
template <class T>
void run_decode_strided_q(benchmark::State& state, DecodeShape d) {
  DecodeInputs<T> in(d);
  Kokkos::View<T****, Kokkos::LayoutRight, Space> projection("q_projection", d.batch, d.queries, d.heads,
                                                             d.head_dim + d.rope_dim);
  const int D = int(d.head_dim), width = int(d.head_dim + d.rope_dim);
  const auto q = Kokkos::subview(projection, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, D));
  const auto q_rope =
      Kokkos::subview(projection, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, std::make_pair(D, width));
  Kokkos::deep_copy(q, in.args.q);
  Kokkos::deep_copy(q_rope, in.args.q_rope);
  CacheArguments<T, Space::memory_space, Kokkos::LayoutStride> a;
  a.q = q;
  a.q_rope = q_rope;
  a.cache = in.args.cache;
  a.w_uk = in.args.w_uk;
  a.w_uv = in.args.w_uv;
  a.out = in.args.out;
  Options opt;
  opt.check_cache_indices = false;
  const CachePlan<T, Space> plan(Space(), cache_shape(a), opt);
  const Space exec;
  time_each_call(state, exec, [&] { plan.execute(exec, a); });
  state.SetLabel("q, q_rope strided, " + plan.describe());
}

/// A decode step on the plan's path, or on the path given (A/B in one run),
/// with `opt`'s products (TF32, 3xTF32).
template <class T>
void run_decode_with(benchmark::State& state, DecodeShape d, std::optional<Path> path,
                     CacheStorage storage = CacheStorage::Native, Options opt = {}) {
  DecodeInputs<T> in(d, storage);
  opt.check_cache_indices = false;  // as a serving loop would run it
  opt.path = path;
  CachePlan<T, Space> plan(Space(), cache_shape(in.args), opt);
  const Space exec;
  time_each_call(state, exec, [&] { plan.execute(exec, in.args); });
  const double rows = double(d.batch * d.queries * d.heads), R = double(d.latent_dim),
               Dr = double(d.rope_dim);
  const double flops = rows * (4 * d.head_dim * R + 2 * d.keys * (R + Dr) + 2 * d.keys * R);
  const double bytes =
      double(d.batch * d.keys) * in.token_bytes(d) + sizeof(T) * rows * (2 * d.head_dim + Dr);
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["splits"] = plan.splits();
  static std::map<std::string, double> errors;
  const std::string key = std::to_string(d.heads) + "/" + std::to_string(d.queries) + "/" +
                          std::to_string(d.keys) + "/" + std::to_string(d.rope_dim) + "/" +
                          to_string(storage) + "/" + plan.describe();  // each path and products its own
  if (!errors.count(key)) errors[key] = decode_relative_error(d, in);
  state.counters["relerr"] = errors[key];
  state.SetLabel(plan.describe());
}

template <class T>
void run_decode(benchmark::State& state, DecodeShape d) {
  run_decode_with<T>(state, d, std::nullopt);
}

template <class T, Path P>
void run_decode_on(benchmark::State& state, DecodeShape d) {
  run_decode_with<T>(state, d, P);
}

/// A float decode step with TF32 products (allow_tf32), or with 3xTF32 (emulate_fp32).
template <bool Emulate>
void run_decode_tensor_float(benchmark::State& state, DecodeShape d) {
  Options opt;
  opt.allow_tf32 = !Emulate;
  opt.emulate_fp32 = Emulate;
  run_decode_with<float>(state, d, std::nullopt, CacheStorage::Native, opt);
}

/// A float decode step by GEMMs (CacheGemm) with TF32 products.
void run_decode_gemm_tf32(benchmark::State& state, DecodeShape d) {
  Options opt;
  opt.allow_tf32 = true;
  run_decode_with<float>(state, d, Path::CacheGemm, CacheStorage::Native, opt);
}

std::string decode_name(const DecodeShape& d) {
  std::ostringstream o;
  o << "B" << d.batch << "_Tq" << d.queries << "_H" << d.heads << "_S" << d.keys << "_R" << d.latent_dim
    << "_Dr" << d.rope_dim << "_P" << d.page;
  if (d.topk > 0) o << "_K" << d.topk;
  return o.str();
}

/// Registers run(state, d) as kind/type/<shape> for every decode shape, only
/// for FlashMLA's (Tq = 1 and 2, RoPE 64), or for the sparse ones.
enum class DecodeShapes { All, FlashMLA, Sparse };
void register_decode_kind(const char* kind, const char* type, DecodeShapes shapes,
                          void (*run)(benchmark::State&, DecodeShape)) {
  for (const DecodeShape& d : shapes == DecodeShapes::Sparse ? sparse_decode_shapes() : decode_shapes()) {
    if (shapes == DecodeShapes::FlashMLA && (d.queries > 2 || d.rope_dim != 64)) continue;
    const std::string name = std::string(kind) + "/" + type + "/" + decode_name(d);
    benchmark::RegisterBenchmark(name.c_str(), [d, run](benchmark::State& st) { run(st, d); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  }
}

template <class T>
void register_decode(const char* type) {
  register_decode_kind("decode", type, DecodeShapes::All, &run_decode<T>);
}

#if KOKKOSMLA_ENABLE_SM80
/// The tensor-core decode path's attention alone (parts and merge) on a
/// DecodeShape's cache, with absorbed queries (B, Tq, H, 512) given: the
/// CachePlan's own attention step, as FlashMLA's benchmark times its kernel.
template <class T>
void run_decode_attention_with(benchmark::State& state, DecodeShape d, std::optional<Path> path,
                               CacheStorage storage = CacheStorage::Native) {
  DecodeInputs<T> in(d, storage);
  const std::int64_t rows = d.batch * d.queries * d.heads;
  View1<T> qa("qa", rows * d.latent_dim);
  Test::fill_hash(qa, 17, 1.0);
  Options opt;
  opt.path = path;
  const CachePlan<T, Space> plan(Space(), cache_shape(in.args), opt);
  if (plan.path() != Path::DecodeTensorSm80 && plan.path() != Path::DecodeSm90) {
    state.SkipWithError(("no separate attention step on path " + to_string(plan.path())).c_str());
    return;
  }
  const Space exec;
  time_each_call(state, exec, [&] { plan.impl_attend_absorbed(exec, in.args, qa.data()); });
  const double width = double(d.latent_dim + d.rope_dim);
  const double flops = double(rows) * d.keys_read() * (width + d.latent_dim) * 2;
  const double bytes =
      double(d.tokens_read()) * in.token_bytes(d) + sizeof(T) * rows * (width + d.latent_dim);
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["splits"] = plan.splits();
  state.SetLabel(plan.describe());
}

template <class T>
void run_decode_attention(benchmark::State& state, DecodeShape d) {
  run_decode_attention_with<T>(state, d, std::nullopt);
}

template <class T>
void run_decode_attention_sm80(benchmark::State& state, DecodeShape d) {
  run_decode_attention_with<T>(state, d, Path::DecodeTensorSm80);
}

/// The plan's attention step, and on Hopper builds the mma.sync kernel's beside it.
template <class T>
void register_decode_attention(const char* type) {
  register_decode_kind("decode_attention", type, DecodeShapes::FlashMLA, &run_decode_attention<T>);
#if KOKKOSMLA_ENABLE_SM90A
  register_decode_kind("decode_attention_sm80", type, DecodeShapes::FlashMLA, &run_decode_attention_sm80<T>);
#endif
}
#endif

#ifdef KOKKOS_ENABLE_CUDA
/// The CachePlan's execute() captured once into a CUDA graph (index checks
/// off) and replayed: what a serving engine's graph of a decode step costs.
template <class T, CacheStorage Storage = CacheStorage::Native>
void run_decode_graph(benchmark::State& state, DecodeShape d) {
  DecodeInputs<T> in(d, Storage);
  Options opt;
  opt.check_cache_indices = false;
  const Space exec =
      Impl::two_instances(Space())[0];  // a stream of its own: the default one cannot be captured
  const CachePlan<T, Space> plan(exec, cache_shape(in.args), opt);
  plan.execute(exec, in.args);  // sets up the cuBLAS handle outside the capture
  exec.fence();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t replay = nullptr;
  if (cudaStreamBeginCapture(exec.cuda_stream(), cudaStreamCaptureModeGlobal) != cudaSuccess) {
    state.SkipWithError("cudaStreamBeginCapture failed");
    return;
  }
  plan.execute(exec, in.args);
  if (cudaStreamEndCapture(exec.cuda_stream(), &graph) != cudaSuccess ||
      cudaGraphInstantiate(&replay, graph, 0) != cudaSuccess) {
    state.SkipWithError("capturing the decode step failed");
    return;
  }
  time_each_call(state, exec, [&] { cudaGraphLaunch(replay, exec.cuda_stream()); });
  cudaGraphExecDestroy(replay);
  cudaGraphDestroy(graph);
  state.counters["splits"] = plan.splits();
  state.SetLabel(plan.describe());
}

template <class T>
void register_decode_graph(const char* type) {
  register_decode_kind("decode_graph", type, DecodeShapes::FlashMLA, &run_decode_graph<T>);
}
#endif

/// A 16-bit type's decode benchmarks: the CachePlan, and on tensor cores the attention kernel alone.
template <class T>
void register_decode_16bit(const char* type) {
  register_decode<T>(type);
#if KOKKOSMLA_ENABLE_SM80
  register_decode_attention<T>(type);
#endif
}

#if KOKKOSMLA_HAS_BHALF
/// bf16 queries and weights over FlashMLA's FP8 tokens (Fp8PerBlock): the
/// CachePlan, and on tensor cores its attention step alone.
void run_decode_fp8(benchmark::State& state, DecodeShape d) {
  run_decode_with<Kokkos::Experimental::bhalf_t>(state, d, std::nullopt, CacheStorage::Fp8PerBlock);
}
#if KOKKOSMLA_ENABLE_SM80
void run_decode_attention_fp8(benchmark::State& state, DecodeShape d) {
  run_decode_attention_with<Kokkos::Experimental::bhalf_t>(state, d, std::nullopt, CacheStorage::Fp8PerBlock);
}
void run_decode_attention_fp8_sm80(benchmark::State& state, DecodeShape d) {
  run_decode_attention_with<Kokkos::Experimental::bhalf_t>(state, d, Path::DecodeTensorSm80,
                                                           CacheStorage::Fp8PerBlock);
}
#endif

void register_decode_fp8() {
  register_decode_kind("decode", "fp8", DecodeShapes::FlashMLA, &run_decode_fp8);
#ifdef KOKKOS_ENABLE_CUDA
  register_decode_kind("decode_graph", "fp8", DecodeShapes::FlashMLA,
                       &run_decode_graph<Kokkos::Experimental::bhalf_t, CacheStorage::Fp8PerBlock>);
#endif
#if KOKKOSMLA_ENABLE_SM80
  register_decode_kind("decode_attention", "fp8", DecodeShapes::FlashMLA, &run_decode_attention_fp8);
#if KOKKOSMLA_ENABLE_SM90A
  register_decode_kind("decode_attention_sm80", "fp8", DecodeShapes::FlashMLA,
                       &run_decode_attention_fp8_sm80);
#endif
  // Sparse decode's attention step (index listing included), FP8 as FlashMLA stores it and bf16.
  register_decode_kind("decode_sparse_attention", "fp8", DecodeShapes::Sparse, &run_decode_attention_fp8);
  register_decode_kind("decode_sparse_attention", "bf16", DecodeShapes::Sparse,
                       &run_decode_attention<Kokkos::Experimental::bhalf_t>);
#endif
}
#endif

}  // namespace Bench
}  // namespace KokkosMLA

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    std::ostringstream config;
    Kokkos::print_configuration(config, false);
    benchmark::AddCustomContext("kokkos_execution_space", Kokkos::DefaultExecutionSpace::name());
    benchmark::AddCustomContext("kokkos_version", std::to_string(KOKKOS_VERSION));
    benchmark::AddCustomContext("kokkosmla_version", std::to_string(KOKKOSMLA_VERSION));
    benchmark::AddCustomContext("git_hash", KOKKOSMLA_GIT_HASH);
    benchmark::AddCustomContext("kokkos_configuration", config.str());
    // Level-0 team scratch this Kokkos gives a team: about 40 KB before the
    // CUDA shared-memory opt-in, 224232 bytes with it on an H200.
    benchmark::AddCustomContext("team_scratch",
                                std::to_string(Kokkos::TeamPolicy<>(1, Kokkos::AUTO).scratch_size_max(0)));
    KokkosMLA::Bench::register_all<float>("float");
    // TF32 and 16-bit types where this Kokkos has them: Auto is the
    // tensor-core path on CUDA (the explicit algorithms would run in fp32).
    KokkosMLA::Options tf32, emulated;
    tf32.allow_tf32 = true;
    emulated.emulate_fp32 = true;
    KokkosMLA::Bench::register_all<float>("tf32", {KokkosMLA::Algorithm::Auto}, tf32);
    KokkosMLA::Bench::register_all<float>("fp32emu", {KokkosMLA::Algorithm::Auto}, emulated);
#if KOKKOSMLA_HAS_BHALF
    KokkosMLA::Bench::register_all<Kokkos::Experimental::bhalf_t>("bf16", {KokkosMLA::Algorithm::Auto});
#endif
#if KOKKOSMLA_HAS_HALF
    KokkosMLA::Bench::register_all<Kokkos::Experimental::half_t>("fp16", {KokkosMLA::Algorithm::Auto});
#endif
#if KOKKOSMLA_ENABLE_SM90A
    // The mma.sync prefill beside the Hopper one that Auto takes.
#if KOKKOSMLA_HAS_BHALF
    KokkosMLA::Bench::register_prefill_on<Kokkos::Experimental::bhalf_t>("bf16",
                                                                         KokkosMLA::Path::FlashTensorSm80);
#endif
#if KOKKOSMLA_HAS_HALF
    KokkosMLA::Bench::register_prefill_on<Kokkos::Experimental::half_t>("fp16",
                                                                        KokkosMLA::Path::FlashTensorSm80);
#endif
#endif
    KokkosMLA::Bench::register_decode<float>("float");
    KokkosMLA::Bench::register_decode_kind("decode", "tf32", KokkosMLA::Bench::DecodeShapes::FlashMLA,
                                           &KokkosMLA::Bench::run_decode_tensor_float<false>);
    KokkosMLA::Bench::register_decode_kind("decode", "fp32emu", KokkosMLA::Bench::DecodeShapes::FlashMLA,
                                           &KokkosMLA::Bench::run_decode_tensor_float<true>);
#ifdef KOKKOS_ENABLE_CUDA
    // The float decode on each GPU path, beside the one Auto takes.
    KokkosMLA::Bench::register_decode_kind(
        "decode_registers", "float", KokkosMLA::Bench::DecodeShapes::All,
        &KokkosMLA::Bench::run_decode_on<float, KokkosMLA::Path::CacheRegisters>);
    KokkosMLA::Bench::register_decode_kind(
        "decode_blocked", "float", KokkosMLA::Bench::DecodeShapes::All,
        &KokkosMLA::Bench::run_decode_on<float, KokkosMLA::Path::CacheBlocked>);
    KokkosMLA::Bench::register_decode_kind(
        "decode_gemm", "float", KokkosMLA::Bench::DecodeShapes::All,
        &KokkosMLA::Bench::run_decode_on<float, KokkosMLA::Path::CacheGemm>);
    KokkosMLA::Bench::register_decode_kind("decode_gemm", "tf32", KokkosMLA::Bench::DecodeShapes::FlashMLA,
                                           &KokkosMLA::Bench::run_decode_gemm_tf32);
    KokkosMLA::Bench::register_decode_graph<float>("float");
    // The flash kernel that attention by GEMMs (DecompressedGemm, Auto's
    // path for these shapes) replaced, beside it; and double.
    KokkosMLA::Bench::register_prefill_on<float>("float", KokkosMLA::Path::DecompressedBlocked);
    // Attention by GEMMs where Auto takes the blocked kernel (D = 64).
    KokkosMLA::Bench::register_prefill_on<float>("float", KokkosMLA::Path::DecompressedGemm);
    KokkosMLA::Bench::register_all<double>("double", {KokkosMLA::Algorithm::Auto});
    // The Decompressed prefill's GEMMs on a latent slice (BLAS's leading dimension).
    KokkosMLA::Bench::register_strided_q<float>("float");
#if KOKKOSMLA_HAS_BHALF
    KokkosMLA::Bench::register_decode_graph<Kokkos::Experimental::bhalf_t>("bf16");
#endif
#else
    // Hosts: the flash kernel on the vector unit and attention by GEMMs, side by side.
    KokkosMLA::Bench::register_prefill_on<float>("float", KokkosMLA::Path::DecompressedHost);
    KokkosMLA::Bench::register_prefill_on<float>("float", KokkosMLA::Path::DecompressedGemm);
#endif
#if KOKKOSMLA_HAS_BHALF
    KokkosMLA::Bench::register_decode_16bit<Kokkos::Experimental::bhalf_t>("bf16");
    KokkosMLA::Bench::register_decode_fp8();
    KokkosMLA::Bench::register_strided_q<Kokkos::Experimental::bhalf_t>("bf16");
    KokkosMLA::Bench::register_decode_kind(
        "decode_strided_q", "bf16", KokkosMLA::Bench::DecodeShapes::FlashMLA,
        &KokkosMLA::Bench::run_decode_strided_q<Kokkos::Experimental::bhalf_t>);
#endif
#if KOKKOSMLA_HAS_HALF
    KokkosMLA::Bench::register_decode_16bit<Kokkos::Experimental::half_t>("fp16");
#endif
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  return 0;
}
