// More than 2^31 elements in one view: a latent of (1, 2^21 + 64, 1024) floats.
// Needs ~20 GB (device and host); runs only with KOKKOSMLA_HUGE_TESTS=1.
// The last 64 latent rows (the ones past element 2^31) are planted to dominate
// the softmax of one query, so that a 32-bit index anywhere shows up as a wrong
// answer rather than a small perturbation.

#include "HashFill.hpp"
#include "Reference.hpp"

#include <cstdlib>

namespace KokkosMLA {
namespace Test {

namespace {

TEST(Huge, LatentBeyond32BitIndices) {
  if (!std::getenv("KOKKOSMLA_HUGE_TESTS")) GTEST_SKIP() << "set KOKKOSMLA_HUGE_TESTS=1 (needs ~20 GB)";
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  const std::int64_t S = (std::int64_t(1) << 21) + 64, R = 1024, H = 2, D = 8, T = 2, planted = 64;
  ASSERT_GT(S * R, std::int64_t(1) << 31);
  Kokkos::View<float*, Space> flat(Kokkos::view_alloc(Kokkos::WithoutInitializing, "latent"), S * R);
  fill_hash(flat, 1, 1.0);
  View3<float, Unmanaged> latent(flat.data(), 1, S, R);
  View4<float> q("q", 1, T, H, D), out("out", 1, T, H, D);
  View3<float> w_uk("w_uk", R, H, D), w_uv("w_uv", R, H, D);
  std::mt19937_64 rng(5);
  Problem<float>::fill(q, rng, 1.0);
  Problem<float>::fill(w_uk, rng, 1.0 / 32);
  Problem<float>::fill(w_uv, rng, 1.0 / 32);
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w_uk);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w_uv);
  // Absorbed query of (t = 1, h = 0); the planted rows point along it.
  std::vector<double> qa(R);
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t d = 0; d < D; ++d) qa[r] += double(hk(r, 0, d)) * hq(0, 1, 0, d);
  auto tail = Kokkos::subview(flat, std::make_pair(std::int64_t((S - planted) * R), S * R));
  auto htail = Kokkos::create_mirror_view(tail);
  for (std::int64_t j = 0; j < planted; ++j)
    for (std::int64_t r = 0; r < R; ++r) htail(j * R + r) = float((qa[r] > 0 ? 3.0 : -3.0) * (1 + 0.01 * j));
  Kokkos::deep_copy(tail, htail);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), flat);

  // Reference: absorbed form in double, one pass over the latent per (t, h).
  const double scale = 1 / std::sqrt(double(D));
  std::vector<double> want(T * H * D);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h) {
      std::vector<double> a(R, 0.0), o(R, 0.0);
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t d = 0; d < D; ++d) a[r] += double(hk(r, h, d)) * hq(0, t, h, d) * scale;
      const std::int64_t last = S - T + t;
      std::vector<double> logit(last + 1);
      double mx = -INFINITY;
      for (std::int64_t s = 0; s <= last; ++s) {
        const float* row = hl.data() + s * R;
        double x = 0;
        for (std::int64_t r = 0; r < R; ++r) x += row[r] * a[r];
        logit[s] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (std::int64_t s = 0; s <= last; ++s) {
        const double p = std::exp(logit[s] - mx);
        sum += p;
        const float* row = hl.data() + s * R;
        if (p > 1e-30)
          for (std::int64_t r = 0; r < R; ++r) o[r] += p * row[r];
      }
      for (std::int64_t d = 0; d < D; ++d) {
        double x = 0;
        for (std::int64_t r = 0; r < R; ++r) x += o[r] / sum * hv(r, h, d);
        want[(t * H + h) * D + d] = x;
      }
    }
  const Shape s{1, T, S, H, D, R};
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Problem<float>::poison(out);
    attention(Space(), q, latent, w_uk, w_uv, out, opt);
    // Sums over 2^21 keys in float: looser than the per-type tolerance.
    EXPECT_TRUE(close(Problem<float>::host_copy(out), want, 2e-3, s)) << to_string(a);
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
