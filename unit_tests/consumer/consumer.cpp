// Links the installed library and checks one small problem: with a single key
// per query (T = S = 1) attention returns v = latent . w_uv exactly.
#include <KokkosMLA.hpp>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  static_assert(KOKKOSMLA_VERSION >= 100, "version macro");
  const int B = 2, H = 3, D = 4, R = 5;
  Kokkos::View<double****, Kokkos::LayoutRight> q("q", B, 1, H, D), out("out", B, 1, H, D);
  Kokkos::View<double***, Kokkos::LayoutRight> latent("latent", B, 1, R), w_uk("w_uk", R, H, D),
      w_uv("w_uv", R, H, D);
  auto hl = Kokkos::create_mirror_view(latent);
  auto hw = Kokkos::create_mirror_view(w_uv);
  for (int i = 0; i < B * R; ++i) hl.data()[i] = 0.5 + i;
  for (int i = 0; i < R * H * D; ++i) hw.data()[i] = 0.25 * i - 3;
  Kokkos::deep_copy(latent, hl);
  Kokkos::deep_copy(w_uv, hw);
  Kokkos::deep_copy(q, 1.5);
  Kokkos::deep_copy(w_uk, -0.75);
  KokkosMLA::attention(q, latent, w_uk, w_uv, out);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) {
        double v = 0;
        for (int r = 0; r < R; ++r) v += hl(b, 0, r) * hw(r, h, d);
        worst = std::fmax(worst, std::fabs(ho(b, 0, h, d) - v));
      }
  std::printf("consumer: KokkosMLA %d, max error %.3g\n", KOKKOSMLA_VERSION, worst);
  return worst < 1e-12 ? 0 : 1;
}
