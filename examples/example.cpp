// First program for new users: runs each algorithm on one problem, checks that
// they agree, and prints a few outputs and the time per call.
//
//   kokkosmla_example                      # B=2 T=32 H=4 D=16 R=24
//   kokkosmla_example B T H D R            # any other shape

#include <KokkosMLA.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using Space = Kokkos::DefaultExecutionSpace;
using Tensor4 = Kokkos::View<float****, Kokkos::LayoutRight, Space>;
using Tensor3 = Kokkos::View<float***, Kokkos::LayoutRight, Space>;

template <class V>
void fill_random(const V& v, unsigned seed, float scale) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = u(rng);
  Kokkos::deep_copy(v, h);
}

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  long e[5] = {2, 32, 4, 16, 24};
  for (int i = 1; i < argc && i <= 5; ++i) e[i - 1] = std::atol(argv[i]);
  const KokkosMLA::Shape shape{e[0], e[1], e[1], e[2], e[3], e[4]};

  Tensor4 q("q", e[0], e[1], e[2], e[3]), out("out", e[0], e[1], e[2], e[3]);
  Tensor3 latent("latent", e[0], e[1], e[4]);
  Tensor3 w_uk("w_uk", e[4], e[2], e[3]), w_uv("w_uv", e[4], e[2], e[3]);
  fill_random(q, 1, 1.0f);
  fill_random(latent, 2, 1.0f);
  fill_random(w_uk, 3, 1.0f / std::sqrt(float(e[4])));
  fill_random(w_uv, 4, 1.0f / std::sqrt(float(e[4])));

  std::printf("KokkosMLA %d on %s, shape %s\n", KOKKOSMLA_VERSION, Space::name(), to_string(shape).c_str());
  std::printf("Auto picks %s\n\n", to_string(KokkosMLA::choose_algorithm<float>(Space(), shape)).c_str());
  std::printf("%-13s %12s %12s   out[0,0,0,0:3]\n", "algorithm", "ms/call", "max|diff|");
  std::vector<float> first;
  for (auto a : {KokkosMLA::Algorithm::Fused, KokkosMLA::Algorithm::Decompressed,
                 KokkosMLA::Algorithm::Absorbed, KokkosMLA::Algorithm::Auto}) {
    KokkosMLA::Options opt;
    opt.algorithm = a;
    KokkosMLA::Plan<float> plan(Space(), shape, opt);  // owns its workspace: calls allocate nothing
    plan.execute(Space(), q, latent, w_uk, w_uv, out);
    Space().fence();
    const int calls = 20;
    Kokkos::Timer timer;
    for (int i = 0; i < calls; ++i) plan.execute(Space(), q, latent, w_uk, w_uv, out);
    Space().fence();
    const double ms = timer.seconds() * 1e3 / calls;
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    std::vector<float> got(h.data(), h.data() + h.span());
    if (first.empty()) first = got;
    double diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, double(std::abs(got[i] - first[i])));
    std::printf("%-13s %12.4f %12.2e   %.5f %.5f %.5f\n", to_string(a).c_str(), ms, diff, got[0],
                got.size() > 1 ? got[1] : 0.f, got.size() > 2 ? got[2] : 0.f);
    if (diff > 1e-4) {
      std::printf("algorithms disagree\n");
      return 1;
    }
  }
  return 0;
}
