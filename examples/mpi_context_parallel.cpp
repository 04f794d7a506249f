// Context parallelism over MPI: one sequence's latent cache is split by key
// position among the ranks; each rank attends the same queries to its own
// keys, and merge_states combines the partial results, weighted by their
// log-sum-exp, into attention over the whole cache.
//
//   mpiexec -n 3 kokkosmla_mpi_context_parallel
//
// Every rank builds the same q, w_uk, w_uv and cache from one seed and keeps
// its contiguous slice of the cache: S keys as evenly as possible, the first
// S % ranks ranks one more. The T queries are the last T positions of the
// sequence, so they lie in the last rank's slice: that rank attends causally
// (its slice has at least T keys, as attention needs keys >= queries), every
// other rank's keys precede all queries and are attended without a mask.
// The partial (out, lse) pairs meet at rank 0 in a binary tree: a rank
// receives its partner's host copies, copies them to the default memory space
// and merges them there, in place. Rank 0 then checks the result against
// attention over the whole cache on one process and exits with 1 if they
// differ by more than 1e-10.
//
// With one rank per GPU (each rank selecting its device, e.g. by its rank on
// the node), the same pattern serves the other ways of splitting the work.
// Heads and batch elements are independent: a rank that holds the q, w_uk and
// w_uv columns of a disjoint set of heads (or the q and cache of a disjoint
// set of batch elements) computes its part of out completely, with no lse and
// no merge, and the parts are simply gathered. Splitting keys, as here, is what
// a cache too long for one GPU needs; it is the one split whose partial
// results must be combined, and merge_states does that.

#include <KokkosMLA.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Tensor4 = Kokkos::View<double****, Kokkos::LayoutRight, Space>;
using Tensor3 = Kokkos::View<double***, Kokkos::LayoutRight, Space>;

/// The same values on every rank: uniform in [-scale, scale) from seed.
std::vector<double> random_values(std::size_t n, unsigned seed, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

template <class V>
void upload(const V& v, const double* from) {
  auto h = Kokkos::create_mirror_view(v);
  std::copy(from, from + h.span(), h.data());
  Kokkos::deep_copy(v, h);
}

/// Keys [first, first + count) of every batch element of a (B, S, R) cache.
Tensor3 cache_slice(const std::vector<double>& cache, std::int64_t B, std::int64_t S, std::int64_t R,
                    std::int64_t first, std::int64_t count) {
  std::vector<double> part;
  part.reserve(std::size_t(B * count * R));
  for (std::int64_t b = 0; b < B; ++b) {
    const double* from = cache.data() + (b * S + first) * R;
    part.insert(part.end(), from, from + count * R);
  }
  Tensor3 latent("latent", B, count, R);
  upload(latent, part.data());
  return latent;
}

template <class V>
double max_difference(const V& a, const V& b) {
  const auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double worst = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) worst = std::max(worst, std::abs(ha.data()[i] - hb.data()[i]));
  return worst;
}

int run(int rank, int ranks) {
  const std::int64_t B = 2, T = 4, S = 97, H = 4, D = 16, R = 24;
  // Contiguous slices, the first S % ranks one key longer.
  const std::int64_t base = S / ranks, extra = S % ranks;
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  const std::int64_t first = rank * base + std::min<std::int64_t>(rank, extra);
  if (base < T) {
    if (rank == 0)
      std::fprintf(stderr, "%d ranks leave the last one %lld keys, fewer than the %lld queries\n", ranks,
                   static_cast<long long>(base), static_cast<long long>(T));
    return 1;
  }

  const std::vector<double> q_values = random_values(std::size_t(B * T * H * D), 1, 1.0);
  const std::vector<double> cache = random_values(std::size_t(B * S * R), 2, 1.0);
  const std::vector<double> wk_values = random_values(std::size_t(R * H * D), 3, 1.0 / std::sqrt(double(R)));
  const std::vector<double> wv_values = random_values(std::size_t(R * H * D), 4, 1.0 / std::sqrt(double(R)));
  Tensor4 q("q", B, T, H, D), out("out", B, T, H, D);
  Tensor3 w_uk("w_uk", R, H, D), w_uv("w_uv", R, H, D), lse("lse", B, T, H);
  upload(q, q_values.data());
  upload(w_uk, wk_values.data());
  upload(w_uv, wv_values.data());

  // This rank's part: only the last slice holds the queries' own positions.
  const bool last = rank == ranks - 1;
  KokkosMLA::Options opt;
  opt.causal = last;
  KokkosMLA::attention(Space(), q, cache_slice(cache, B, S, R, first, count), w_uk, w_uv, out, lse, opt);

  // Binary tree towards rank 0: at distance `step`, the left rank of each pair
  // merges what the right one sends, then the right one is done.
  Tensor4 other_out("other_out", B, T, H, D);
  Tensor3 other_lse("other_lse", B, T, H);
  // Separate host buffers even where the default space is the host's, so
  // that a receive cannot land on this rank's own partial result.
  auto host_out = Kokkos::create_mirror(other_out);
  auto host_lse = Kokkos::create_mirror(other_lse);
  for (int step = 1; step < ranks; step *= 2) {
    if (rank % (2 * step) == step) {
      Kokkos::deep_copy(host_out, out);
      Kokkos::deep_copy(host_lse, lse);
      MPI_Send(host_out.data(), int(host_out.span()), MPI_DOUBLE, rank - step, 0, MPI_COMM_WORLD);
      MPI_Send(host_lse.data(), int(host_lse.span()), MPI_DOUBLE, rank - step, 1, MPI_COMM_WORLD);
      break;
    }
    if (rank % (2 * step) == 0 && rank + step < ranks) {
      MPI_Recv(host_out.data(), int(host_out.span()), MPI_DOUBLE, rank + step, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Recv(host_lse.data(), int(host_lse.span()), MPI_DOUBLE, rank + step, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      Kokkos::deep_copy(other_out, host_out);
      Kokkos::deep_copy(other_lse, host_lse);
      KokkosMLA::merge_states(Space(), out, lse, other_out, other_lse, out, lse);
    }
  }

  int status = 0;
  if (rank == 0) {
    Tensor4 want("want", B, T, H, D);
    Tensor3 want_lse("want_lse", B, T, H);
    KokkosMLA::attention(Space(), q, cache_slice(cache, B, S, R, 0, S), w_uk, w_uv, want, want_lse);
    const double diff = std::max(max_difference(out, want), max_difference(lse, want_lse));
    std::printf("%d ranks, B=%lld T=%lld S=%lld H=%lld D=%lld R=%lld: max difference to one process %.3g\n",
                ranks, static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(S),
                static_cast<long long>(H), static_cast<long long>(D), static_cast<long long>(R), diff);
    status = diff <= 1e-10 ? 0 : 1;
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Kokkos lives inside MPI's lifetime: initialised after MPI_Init, finalised before MPI_Finalize.
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Kokkos::initialize(argc, argv);
  const int status = run(rank, ranks);
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
