// Times every algorithm on the shapes of the design brief (and the original
// example) and reports milliseconds per call, useful GFLOP/s (the Decompressed
// FLOP count, the same for every algorithm) and GB/s of compulsory traffic
// (q, latent, weights, out). Each iteration runs `batch` calls back to back and
// one fence, so per-call launch latency is included but fence latency is
// amortised. The reported time is per call, so a run lasts about min_time x
// batch of wall time: ~15 s for the original example on a GPU (batch ~70),
// 0.2 s for large shapes (batch 1). relerr is measured against the double-precision Decompressed path.
//
//   kokkosmla_perf_tests --benchmark_filter='float/.*B4_T1024'   # one shape
//   kokkosmla_perf_tests --benchmark_format=json                # machine-readable

#include <KokkosMLA.hpp>

#include "HashFill.hpp"

#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
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

/// ||out - ref|| / ||ref|| with ref from the double Decompressed path on the same inputs.
template <class T>
double relative_error(const Shape& s, const Inputs<T>& in) {
  Inputs<double> ref(s);  // same hash values in double, then overwrite with the exact T values
  auto widen = [](const View1<T>& from, const View1<double>& to) {
    Kokkos::parallel_for(
        "KokkosMLA::bench::widen", Kokkos::RangePolicy<Space>(0, from.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) { to(i) = double(from(i)); });
  };
  widen(in.q, ref.q);
  widen(in.latent, ref.latent);
  widen(in.w_uk, ref.w_uk);
  widen(in.w_uv, ref.w_uv);
  Options opt;
  opt.algorithm = Algorithm::Decompressed;
  Bound<double> r(ref, s);
  Plan<double, Space>(Space(), s, opt).execute(Space(), r.q, r.latent, r.w_uk, r.w_uv, r.out);
  double num = 0, den = 0;
  const View1<T> out = in.out;
  const View1<double> want = ref.out;
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

template <class T>
void run(benchmark::State& state, Shape s, Algorithm algorithm) {
  Options opt;
  opt.algorithm = algorithm;
  Inputs<T> in(s);
  Bound<T> v(in, s);
  Plan<T, Space> plan(Space(), s, opt);
  Space exec;
  plan.execute(exec, v.q, v.latent, v.w_uk, v.w_uv, v.out);  // warm-up
  exec.fence();
  // Enough calls per timed batch that a fence (~10 us on a GPU) is noise.
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
  const std::string key = to_string(s) + to_string(algorithm);
  if (!errors.count(key)) errors[key] = s.queries <= 8192 ? relative_error(s, in) : std::nan("");
  state.counters["relerr"] = errors[key];
  state.SetLabel(to_string(plan.algorithm()) + (algorithm == Algorithm::Auto ? " (auto)" : ""));
}

std::string shape_name(const Shape& s) {
  std::ostringstream o;
  o << "B" << s.batch << "_T" << s.queries << "_H" << s.heads << "_D" << s.head_dim << "_R" << s.latent_dim;
  return o.str();
}

template <class T>
void register_all(const char* type) {
  for (const Shape& s : shapes())
    for (Algorithm a : {Algorithm::Auto, Algorithm::Fused, Algorithm::Decompressed, Algorithm::Absorbed}) {
      const std::string name = std::string(type) + "/" + shape_name(s) + "/" + to_string(a);
      benchmark::RegisterBenchmark(name.c_str(), [s, a](benchmark::State& st) { run<T>(st, s, a); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
    }
}

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
    KokkosMLA::Bench::register_all<float>("float");
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  return 0;
}
