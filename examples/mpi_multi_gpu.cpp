// Context parallelism across GPUs with MPI, one rank per GPU (each rank takes
// the GPU of its rank on the node), in two patterns:
//
//   decode:  B sequences of S cached tokens each, one new query per sequence.
//            Rank r holds a contiguous share of every sequence's tokens in its
//            own paged cache, runs a CachePlan over it (out and lse), and the
//            ranks all-gather the partial results and merge them with
//            merge_states in rank order, so every rank ends with the same
//            attention over the whole cache.
//   prefill: one sequence of S tokens, causal. The sequence is cut into 2P
//            chunks for P ranks and rank r takes chunks r and 2P - 1 - r (the
//            zig-zag split: a short and a long causal chunk, the same work on
//            every rank). The ranks all-gather the latent (each brings its
//            chunks' rows), and each runs one Plan per chunk: the chunk's
//            queries over the latent up to the chunk's end. The outputs are
//            gathered on rank 0.
//
//   mpiexec -n 2 kokkosmla_mpi_multi_gpu decode B=32 H=128 S=65536 dtype=float
//   mpiexec -n 2 kokkosmla_mpi_multi_gpu prefill S=65536 H=16 D=128 R=512 dtype=bf16
//
// Arguments (key=value): B (decode's sequences; prefill takes one), S, H, D,
// R, Dr (decode's RoPE width), page (decode's page size), dtype (double, float, bf16 where Kokkos has it),
// iters (timed repetitions, medians reported), check (1: rank 0 also runs the
// whole problem on its own GPU, reports that time as the one-GPU baseline and
// the largest difference; exits with 1 beyond the dtype's tolerance).
// Every rank makes the values it holds from their global indices (a hash), so
// no rank ever holds the whole input but rank 0 when checking.
//
// Partial results travel by MPI on device buffers where the MPI reports CUDA
// support (Open MPI's MPIX_Query_cuda_support); else, with every rank on one
// node of a CUDA build, by CUDA IPC (each rank maps the others' exported
// buffers and copies device to device, MPI only synchronising); else through
// pinned host buffers. The program says which ran ("exchange"). Times:
// "attention" is the kernels of one step (the slowest rank), "exchange" the
// collective and merge (decode) or the latent all-gather (prefill), each timed
// with fences around it.

#include <KokkosMLA.hpp>

#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

struct Config {
  std::string mode, dtype = "double";
  std::int64_t B = 2, S = 97, H = 4, D = 16, R = 24, Dr = 8, page = 16;
  int iters = 3;
  bool check = true;
};

bool cuda_aware_mpi() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

/// Whether every rank runs on this node.
bool one_node() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int here = 0, all = 0;
  MPI_Comm_size(node, &here);
  MPI_Comm_size(MPI_COMM_WORLD, &all);
  MPI_Comm_free(&node);
  return here == all;
}

/// How partial results travel between ranks: MPI on the arrays themselves
/// (host memory, or device memory with a CUDA-aware MPI); CUDA IPC (ranks on
/// one node map each other's device buffers and copy over NVLink or PCIe, MPI
/// only synchronising); or through pinned host buffers and MPI.
enum class Route { Mpi, CudaIpc, HostStaged };

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kCudaIpc = true;
#else
constexpr bool kCudaIpc = false;
#endif

/// The route of this run: chosen once, by every rank together (one_node is
/// a collective), before anything travels.
Route choose_route() {
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible || cuda_aware_mpi()) return Route::Mpi;
  if (kCudaIpc && one_node()) return Route::CudaIpc;
  return Route::HostStaged;
}

Route the_route = Route::HostStaged;  ///< set by main from choose_route()

Route route() { return the_route; }

const char* name(Route r) {
  return r == Route::Mpi ? "mpi" : r == Route::CudaIpc ? "cuda-ipc" : "host-staged";
}

/// A uniform value in [-scale, scale) from a global index: any rank makes
/// any element without the others.
KOKKOS_INLINE_FUNCTION double hashed(std::uint64_t seed, std::uint64_t i, double scale) {
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed << 32);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return scale * (double(x >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/// v's element e = hashed(seed, first + e): rows [first / row, ...) of a larger array.
template <class V>
void fill(const V& v, std::uint64_t seed, double scale, std::int64_t first = 0) {
  using T = typename V::non_const_value_type;
  T* data = v.data();
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(0, std::int64_t(v.span())),
      KOKKOS_LAMBDA(const std::int64_t e) { data[e] = T(hashed(seed, std::uint64_t(first + e), scale)); });
}

/// v's elements as doubles on the host.
template <class V>
std::vector<double> host_values(const V& v) {
  using C = KokkosMLA::compute_type<typename V::non_const_value_type>;
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(h.span());
  for (std::size_t i = 0; i < h.span(); ++i) out[i] = double(C(h.data()[i]));
  return out;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    if (!(e <= worst)) worst = e;  // NaN wins
  }
  return worst;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The largest of every rank's value, on every rank.
double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

template <class T>
MPI_Datatype mpi_type() {
  return sizeof(T) == 8 ? MPI_DOUBLE : sizeof(T) == 4 ? MPI_FLOAT : MPI_UINT16_T;
}

/// Error a check allows: rounding of the parts and their merge in the dtype.
template <class T>
double tolerance() {
  return sizeof(T) == 8 ? 1e-10 : sizeof(T) == 4 ? 1e-4 : 3e-2;
}

/// Elapsed seconds of f, fenced on both sides.
template <class F>
double timed(F&& f) {
  Kokkos::fence();
  Kokkos::Timer timer;
  f();
  Kokkos::fence();
  return timer.seconds();
}

/// Host memory the GPU copies to and from at full speed (pinned).
#if defined(KOKKOS_ENABLE_CUDA)
using Staging = Kokkos::CudaHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_HIP)
using Staging = Kokkos::HIPHostPinnedSpace;
#else
using Staging = Kokkos::HostSpace;
#endif

/// All ranks' n elements each of a device array, in rank order, into another
/// (ranks * n), by route(). Buffers are made once, when constructed.
template <class T>
class AllGather {
 public:
  AllGather(std::size_t n, int ranks)
      : n_(n),
        ranks_(std::size_t(ranks)),
        route_(route()),
        mine_("staged", n),
        all_("staged_all", n * std::size_t(ranks)) {
    if (route_ == Route::CudaIpc) open_peers();
  }
  AllGather(const AllGather&) = delete;
  AllGather& operator=(const AllGather&) = delete;
  ~AllGather() { close_peers(); }

  void operator()(const T* from, T* to) const {
    Kokkos::fence();
    if (route_ == Route::Mpi) {
      MPI_Allgather(from, int(n_), mpi_type<T>(), to, int(n_), mpi_type<T>(), MPI_COMM_WORLD);
    } else if (route_ == Route::CudaIpc) {
      gather_from_peers(from, to);
    } else {
      Kokkos::deep_copy(mine_, Kokkos::View<const T*, Mem, Unmanaged>(from, n_));
      MPI_Allgather(mine_.data(), int(n_), mpi_type<T>(), all_.data(), int(n_), mpi_type<T>(),
                    MPI_COMM_WORLD);
      Kokkos::deep_copy(Kokkos::View<T*, Mem, Unmanaged>(to, n_ * ranks_), all_);
    }
  }

 private:
  std::size_t n_, ranks_;
  Route route_;
  Kokkos::View<T*, Staging> mine_, all_;
  std::vector<T*> peers_;  // every rank's exported buffer, mapped here (this rank's own: its allocation)

#if defined(KOKKOS_ENABLE_CUDA)
  static void require(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  /// An exported buffer of its own allocation (so the mapped pointer is its
  /// start), and every other rank's mapped in.
  void open_peers() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    void* own = nullptr;
    require(cudaMalloc(&own, n_ * sizeof(T)), "cudaMalloc");
    cudaIpcMemHandle_t handle;
    require(cudaIpcGetMemHandle(&handle, own), "cudaIpcGetMemHandle");
    std::vector<cudaIpcMemHandle_t> handles(ranks_);
    MPI_Allgather(&handle, int(sizeof handle), MPI_BYTE, handles.data(), int(sizeof handle), MPI_BYTE,
                  MPI_COMM_WORLD);
    peers_.assign(ranks_, nullptr);
    for (std::size_t k = 0; k < ranks_; ++k) {
      void* p = own;
      if (int(k) != rank)
        require(cudaIpcOpenMemHandle(&p, handles[k], cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      peers_[k] = static_cast<T*>(p);
    }
  }

  /// Each rank exports its part, waits for all, copies every part device to
  /// device, and waits again before its buffer may be overwritten.
  void gather_from_peers(const T* from, T* to) const {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::size_t bytes = n_ * sizeof(T);
    require(cudaMemcpy(peers_[std::size_t(rank)], from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    MPI_Barrier(MPI_COMM_WORLD);
    for (std::size_t k = 0; k < ranks_; ++k)
      require(cudaMemcpyAsync(to + k * n_, peers_[k], bytes, cudaMemcpyDefault), "cudaMemcpyAsync");
    require(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    MPI_Barrier(MPI_COMM_WORLD);
  }

  void close_peers() {
    if (peers_.empty()) return;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (std::size_t k = 0; k < ranks_; ++k)
      if (int(k) != rank) cudaIpcCloseMemHandle(peers_[k]);
    MPI_Barrier(MPI_COMM_WORLD);  // no rank maps this buffer any more
    cudaFree(peers_[std::size_t(rank)]);
  }
#else
  void open_peers() {}
  void gather_from_peers(const T*, T*) const {}
  void close_peers() {}
#endif
};

/// One JSON line per measurement, for perf_tests/results.
void report(const Config& c, int ranks, double attention, double exchange, double one_gpu, double diff) {
  std::printf(
      "RESULT {\"mode\": \"%s\", \"dtype\": \"%s\", \"gpus\": %d, \"B\": %lld, \"S\": %lld, \"H\": %lld, "
      "\"D\": %lld, \"R\": %lld, \"attention_ms\": %.4f, \"exchange_ms\": %.4f, \"step_ms\": %.4f, "
      "\"one_gpu_ms\": %.4f, \"speedup\": %.3f, \"max_diff\": %.3g, \"exchange\": \"%s\"}\n",
      c.mode.c_str(), c.dtype.c_str(), ranks, (long long)(c.mode == "prefill" ? 1 : c.B), (long long)c.S,
      (long long)c.H, (long long)c.D, (long long)c.R, attention * 1e3, exchange * 1e3,
      (attention + exchange) * 1e3, one_gpu * 1e3, one_gpu > 0 ? one_gpu / (attention + exchange) : 0.0, diff,
      name(route()));
}

// ---------------------------------------------------------------- decode

/// Page i of a rank's pool is page i % per_sequence of sequence i / per_sequence.
template <class Table>
void number_pages(const Table& table) {
  const std::int64_t per_sequence = std::int64_t(table.extent(1));
  Kokkos::parallel_for(
      "pages", Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(0, std::int64_t(table.span())),
      KOKKOS_LAMBDA(const std::int64_t i) { table(i / per_sequence, i % per_sequence) = int(i); });
}

/// A rank's paged cache (pages numbered as above) of tokens [first, first +
/// count) of every sequence: token s of sequence b is global token first + s,
/// element (b, first + s, w) of a (B, S, W) cache.
template <class Latent>
void fill_share(const Latent& latent, std::int64_t S, std::int64_t first, std::int64_t count) {
  using T = typename Latent::non_const_value_type;
  const std::int64_t W = std::int64_t(latent.extent(2)), page = std::int64_t(latent.extent(1));
  const std::int64_t per_sequence = (count + page - 1) / page;
  Kokkos::parallel_for(
      "cache", Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(0, std::int64_t(latent.span())),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t w = e % W, row = e / W, pg = row / page;
        const std::int64_t b = pg / per_sequence, s = (pg % per_sequence) * page + row % page;
        latent.data()[e] = s < count ? T(hashed(2, std::uint64_t((b * S + first + s) * W + w), 1.0)) : T(0);
      });
}

template <class T>
struct DecodeRank {
  using Args = KokkosMLA::CacheArguments<T, Mem>;
  Args args;
  Kokkos::View<int**, Kokkos::LayoutRight, Mem> table;
  Kokkos::View<int*, Kokkos::LayoutRight, Mem> lengths;

  /// Tokens [first, first + count) of every sequence in a paged cache of
  /// this rank, packed latent + RoPE rows (FlashMLA's layout), pages in order.
  DecodeRank(const Config& c, std::int64_t first, std::int64_t count) {
    const std::int64_t W = c.R + c.Dr, per_sequence = (count + c.page - 1) / c.page;
    args.cache.latent = typename Args::ConstRank3::non_const_type("latent", c.B * per_sequence, c.page, W);
    table = decltype(table)("block_table", c.B, per_sequence);
    lengths = decltype(lengths)("seqlens", c.B);
    Kokkos::deep_copy(lengths, int(count));
    number_pages(table);
    fill_share(args.cache.latent, c.S, first, count);
    args.cache.block_table = table;
    args.cache.seqlens = lengths;
    typename Args::Rank4 q("q", c.B, 1, c.H, c.D), q_rope("q_rope", c.B, 1, c.H, c.Dr);
    Kokkos::View<T***, Kokkos::LayoutRight, Mem> w_uk("w_uk", c.R, c.H, c.D), w_uv("w_uv", c.R, c.H, c.D);
    fill(q, 1, 1.0);
    fill(q_rope, 5, 1.0);
    fill(w_uk, 3, 1.0 / std::sqrt(double(c.R)));
    fill(w_uv, 4, 1.0 / std::sqrt(double(c.R)));
    args.q = q;
    if (c.Dr > 0) args.q_rope = q_rope;
    args.w_uk = w_uk;
    args.w_uv = w_uv;
    args.out = typename Args::Rank4("out", c.B, 1, c.H, c.D);
    args.lse = typename Args::Lse("lse", c.B, 1, c.H);
  }
};

template <class T>
using Float = KokkosMLA::compute_type<T>;

/// out (T) widened into to (its compute type) for the merge.
template <class V, class W>
void widen(const V& from, const W& to) {
  using C = typename W::non_const_value_type;
  const auto* f = from.data();
  C* t = to.data();
  Kokkos::parallel_for(
      "widen", Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(0, std::int64_t(to.span())),
      KOKKOS_LAMBDA(const std::int64_t e) { t[e] = C(f[e]); });
}

template <class T>
int run_decode(const Config& c, int rank, int ranks) {
  using C = Float<T>;
  const std::int64_t base = c.S / ranks, extra = c.S % ranks;
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  const std::int64_t first = rank * base + std::min<std::int64_t>(rank, extra);
  DecodeRank<T> mine(c, first, count);
  const KokkosMLA::CachePlan<T> plan(Space(), KokkosMLA::cache_shape(mine.args));
  if (rank == 0) std::printf("rank 0: %s\n", plan.describe().c_str());

  // Parts of every rank (gathered in T, widened for the merge), merged in
  // rank order into (out, lse).
  Kokkos::View<T*****, Kokkos::LayoutRight, Mem> gathered_out("gathered_out", ranks, c.B, 1, c.H, c.D);
  Kokkos::View<C*****, Kokkos::LayoutRight, Mem> parts_out("parts_out", ranks, c.B, 1, c.H, c.D);
  Kokkos::View<C****, Kokkos::LayoutRight, Mem> parts_lse("parts_lse", ranks, c.B, 1, c.H);
  Kokkos::View<C****, Kokkos::LayoutRight, Mem> out("out", c.B, 1, c.H, c.D);
  Kokkos::View<C***, Kokkos::LayoutRight, Mem> out_lse("out_lse", c.B, 1, c.H);
  const AllGather<T> gather_out(mine.args.out.span(), ranks);
  const AllGather<C> gather_lse(mine.args.lse.span(), ranks);
  auto exchange = [&] {
    gather_out(mine.args.out.data(), gathered_out.data());
    gather_lse(mine.args.lse.data(), parts_lse.data());
    widen(gathered_out, parts_out);
    auto part = [&](int k) {
      return std::make_pair(Kokkos::subview(parts_out, k, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL),
                            Kokkos::subview(parts_lse, k, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL));
    };
    Kokkos::deep_copy(out, part(0).first);
    Kokkos::deep_copy(out_lse, part(0).second);
    for (int k = 1; k < ranks; ++k)
      KokkosMLA::merge_states(Space(), out, out_lse, part(k).first, part(k).second, out, out_lse);
  };

  plan.execute(Space(), mine.args);  // warm-up
  exchange();
  std::vector<double> attention, exchanged;
  for (int i = 0; i < c.iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    attention.push_back(timed([&] { plan.execute(Space(), mine.args); }));
    exchanged.push_back(timed(exchange));
  }
  const double t_attention = max_over_ranks(median(attention)),
               t_exchange = max_over_ranks(median(exchanged));

  double one_gpu = 0, diff = 0;
  int status = 0;
  if (c.check && rank == 0) {
    DecodeRank<T> whole(c, 0, c.S);
    const KokkosMLA::CachePlan<T> one(Space(), KokkosMLA::cache_shape(whole.args));
    one.execute(Space(), whole.args);
    std::vector<double> times;
    for (int i = 0; i < c.iters; ++i) times.push_back(timed([&] { one.execute(Space(), whole.args); }));
    one_gpu = median(times);
    diff = std::max(max_difference(host_values(out), host_values(whole.args.out)),
                    max_difference(host_values(out_lse), host_values(whole.args.lse)));
    status = diff <= tolerance<T>() ? 0 : 1;
  }
  if (rank == 0) report(c, ranks, t_attention, t_exchange, one_gpu, diff);
  return status;
}

// ---------------------------------------------------------------- prefill

template <class T>
int run_prefill(const Config& c, int rank, int ranks) {
  using Rank3 = Kokkos::View<T***, Kokkos::LayoutRight, Mem>;
  using Rank4 = Kokkos::View<T****, Kokkos::LayoutRight, Mem>;
  const int chunks = 2 * ranks;
  auto start = [&](int k) { return c.S * k / chunks; };
  const int mine[2] = {rank, chunks - 1 - rank};
  if (start(1) < 1) {
    if (rank == 0) std::fprintf(stderr, "S = %lld is too short for %d chunks\n", (long long)c.S, chunks);
    return 1;
  }
  Rank3 w_uk("w_uk", c.R, c.H, c.D), w_uv("w_uv", c.R, c.H, c.D), latent("latent", 1, c.S, c.R);
  fill(w_uk, 3, 1.0 / std::sqrt(double(c.R)));
  fill(w_uv, 4, 1.0 / std::sqrt(double(c.R)));
  // This rank's chunks: their latent rows (all-gathered below), queries and outputs.
  std::vector<Rank3> chunk_latent;
  std::vector<Rank4> q, out;
  std::vector<KokkosMLA::Plan<T>> plans;
  for (int k : mine) {
    const std::int64_t s0 = start(k), s1 = start(k + 1), rows = s1 - s0;
    chunk_latent.emplace_back("chunk_latent", 1, rows, c.R);
    fill(chunk_latent.back(), 2, 1.0, s0 * c.R);
    q.emplace_back("q", 1, rows, c.H, c.D);
    fill(q.back(), 1, 1.0, s0 * c.H * c.D);
    out.emplace_back("out", 1, rows, c.H, c.D);
    plans.emplace_back(Space(), KokkosMLA::Shape{1, rows, s1, c.H, c.D, c.R});
  }
  if (rank == 0) std::printf("rank 0, chunk %d: %s\n", mine[1], plans[1].describe().c_str());

  // Every rank's two chunks of latent, in rank order, then put in place.
  std::int64_t most = 0;  // rows of the longest chunk
  for (int k = 0; k < chunks; ++k) most = std::max(most, start(k + 1) - start(k));
  Kokkos::View<T***, Kokkos::LayoutRight, Mem> sent("sent", 2, most, c.R),
      gathered("gathered", ranks, 2 * most, c.R);
  const AllGather<T> gather_latent_rows(sent.span(), ranks);
  auto gather_latent = [&] {
    for (int i = 0; i < 2; ++i) {
      auto rows = Kokkos::subview(
          sent, i, std::make_pair(std::int64_t(0), std::int64_t(chunk_latent[i].extent(1))), Kokkos::ALL);
      Kokkos::deep_copy(rows, Kokkos::subview(chunk_latent[i], 0, Kokkos::ALL, Kokkos::ALL));
    }
    gather_latent_rows(sent.data(), gathered.data());
    for (int r = 0; r < ranks; ++r)
      for (int i = 0; i < 2; ++i) {
        const int k = i == 0 ? r : chunks - 1 - r;
        const std::int64_t s0 = start(k), s1 = start(k + 1);
        Kokkos::deep_copy(
            Kokkos::subview(latent, 0, std::make_pair(s0, s1), Kokkos::ALL),
            Kokkos::subview(gathered, r, std::make_pair(i * most, i * most + s1 - s0), Kokkos::ALL));
      }
  };
  auto attend = [&] {
    for (int i = 0; i < 2; ++i) {
      const Kokkos::View<const T***, Kokkos::LayoutRight, Mem, Unmanaged> prefix(latent.data(), 1,
                                                                                 start(mine[i] + 1), c.R);
      plans[i].execute(Space(), q[i], prefix, w_uk, w_uv, out[i]);
    }
  };
  // For the check, rank 0 collects every chunk's output (in T, host-staged:
  // a gather of unequal parts). Not part of a step: the outputs of a layer
  // stay with their tokens' rank.
  std::vector<double> collected;
  auto gather_outputs = [&] {
    std::vector<T> part;
    for (const Rank4& o : out) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
      part.insert(part.end(), h.data(), h.data() + h.span());
    }
    int n = int(part.size());
    std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks), 0);
    MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int r = 1; r < ranks; ++r)
      offsets[std::size_t(r)] = offsets[std::size_t(r - 1)] + counts[std::size_t(r - 1)];
    std::vector<T> all(rank == 0 ? std::size_t(offsets.back() + counts.back()) : 0);
    MPI_Gatherv(part.data(), n, mpi_type<T>(), all.data(), counts.data(), offsets.data(), mpi_type<T>(), 0,
                MPI_COMM_WORLD);
    for (const T& x : all) collected.push_back(double(KokkosMLA::compute_type<T>(x)));
  };

  gather_latent();
  attend();  // warm-up
  std::vector<double> attention, exchanged;
  for (int i = 0; i < c.iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    exchanged.push_back(timed(gather_latent));
    attention.push_back(timed(attend));
  }
  const double t_attention = max_over_ranks(median(attention)),
               t_exchange = max_over_ranks(median(exchanged));

  double one_gpu = 0, diff = 0;
  int status = 0;
  if (c.check) gather_outputs();
  if (c.check && rank == 0) {
    Rank4 q_all("q_all", 1, c.S, c.H, c.D), want("want", 1, c.S, c.H, c.D);
    fill(q_all, 1, 1.0);
    const KokkosMLA::Plan<T> one(Space(), KokkosMLA::Shape{1, c.S, c.S, c.H, c.D, c.R});
    one.execute(Space(), q_all, latent, w_uk, w_uv, want);
    std::vector<double> times;
    for (int i = 0; i < c.iters; ++i)
      times.push_back(timed([&] { one.execute(Space(), q_all, latent, w_uk, w_uv, want); }));
    one_gpu = median(times);
    // collected: rank r's chunks r and 2P - 1 - r, in rank order.
    const std::vector<double> whole = host_values(want);
    const std::int64_t row = c.H * c.D;
    std::size_t at = 0;
    for (int r = 0; r < ranks; ++r)
      for (int k : {r, chunks - 1 - r})
        for (std::int64_t s = start(k); s < start(k + 1); ++s, at += std::size_t(row))
          for (std::int64_t e = 0; e < row; ++e)
            diff = std::max(diff, std::abs(collected[at + std::size_t(e)] - whole[std::size_t(s * row + e)]));
    status = diff <= tolerance<T>() ? 0 : 1;
  }
  if (rank == 0) report(c, ranks, t_attention, t_exchange, one_gpu, diff);
  return status;
}

template <class T>
int run(const Config& c, int rank, int ranks) {
  return c.mode == "decode" ? run_decode<T>(c, rank, ranks) : run_prefill<T>(c, rank, ranks);
}

bool parse(int argc, char** argv, Config& c) {
  if (argc < 2) return false;
  c.mode = argv[1];
  if (c.mode != "decode" && c.mode != "prefill") return false;
  std::map<std::string, std::int64_t*> sizes = {{"B", &c.B}, {"S", &c.S},   {"H", &c.H},      {"D", &c.D},
                                                {"R", &c.R}, {"Dr", &c.Dr}, {"page", &c.page}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (sizes.count(key))
      *sizes[key] = std::atoll(value.c_str());
    else if (key == "dtype")
      c.dtype = value;
    else if (key == "iters")
      c.iters = std::max(1, std::atoi(value.c_str()));
    else if (key == "check")
      c.check = value != "0";
    else
      return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, local = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);

  Config c;
  if (!parse(argc, argv, c)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: %s decode|prefill [B=.. S=.. H=.. D=.. R=.. Dr=.. page=.. dtype=double|float|bf16 "
                   "iters=.. check=0|1]\n",
                   argv[0]);
    MPI_Finalize();
    return 2;
  }
  // One GPU per rank: the rank's place on its node picks the device.
  std::vector<std::string> kokkos_args = {argv[0]};
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  kokkos_args.push_back("--kokkos-device-id=" + std::to_string(local));
#endif
  std::vector<char*> kargv;
  for (std::string& a : kokkos_args) kargv.push_back(&a[0]);
  int kargc = int(kargv.size());
  Kokkos::initialize(kargc, kargv.data());
  the_route = choose_route();
  int status = 0;
  {
    if (c.dtype == "double") {
      status = run<double>(c, rank, ranks);
    } else if (c.dtype == "float") {
      status = run<float>(c, rank, ranks);
#if KOKKOSMLA_HAS_BHALF
    } else if (c.dtype == "bf16") {
      status = run<Kokkos::Experimental::bhalf_t>(c, rank, ranks);
#endif
    } else {
      if (rank == 0) std::fprintf(stderr, "dtype=%s is not built here\n", c.dtype.c_str());
      status = 2;
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
