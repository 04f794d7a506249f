// A serving loop over a paged latent cache: append each sequence's prompt,
// then decode token by token (append the new token's latent, attend with one
// query per sequence). Every step is checked against attention() over a
// contiguous copy of the tokens the sequence holds. Exits non-zero on a mismatch.
//
//   kokkosmla_serving_loop

#include <KokkosMLA.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using Space = Kokkos::DefaultExecutionSpace;
using Tensor4 = Kokkos::View<float****, Kokkos::LayoutRight, Space>;
using Tensor3 = Kokkos::View<float***, Kokkos::LayoutRight, Space>;

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  const int B = 3, H = 4, D = 16, R = 32, page = 4, pages_per_sequence = 8, prompt = 6, steps = 5;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](const auto& v, float scale) {
    auto h = Kokkos::create_mirror_view(v);
    for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = scale * u(rng);
    Kokkos::deep_copy(v, h);
  };

  // The engine's page pool and block table: sequence b owns pages b, b + B, b + 2B, ...
  KokkosMLA::LatentCache<float> cache;
  cache.latent = KokkosMLA::LatentCache<float>::Tokens("latent", B * pages_per_sequence, page, R);
  Kokkos::View<int**, Kokkos::LayoutRight, Space> block_table("block_table", B, pages_per_sequence);
  Kokkos::View<int*, Kokkos::LayoutRight, Space> seqlens("seqlens", B);
  auto table = Kokkos::create_mirror_view(block_table);
  for (int b = 0; b < B; ++b)
    for (int p = 0; p < pages_per_sequence; ++p) table(b, p) = b + p * B;
  Kokkos::deep_copy(block_table, table);
  cache.block_table = block_table;
  cache.seqlens = seqlens;

  Tensor3 w_uk("w_uk", R, H, D), w_uv("w_uv", R, H, D);
  fill(w_uk, 1.0f / std::sqrt(float(R)));
  fill(w_uv, 1.0f / std::sqrt(float(R)));
  // Every token's latent, kept contiguous for the check: (B, capacity, R).
  const int capacity = pages_per_sequence * page;
  Tensor3 history("history", B, capacity, R);
  auto lengths = Kokkos::create_mirror_view(seqlens);
  int length = 0;

  // Writes the latents of tokens [length, length + n) of every sequence.
  auto append = [&](int n) {
    Tensor3 fresh("new_latent", B, n, R);
    fill(fresh, 1.0f);
    length += n;
    for (int b = 0; b < B; ++b) lengths(b) = length;
    Kokkos::deep_copy(seqlens, lengths);  // seqlens count the new tokens
    KokkosMLA::append_to_cache(Space(), cache, fresh);
    Kokkos::deep_copy(Kokkos::subview(history, Kokkos::ALL, std::make_pair(length - n, length), Kokkos::ALL),
                      fresh);
  };

  append(prompt);
  KokkosMLA::Options opt;
  opt.check_cache_indices = false;  // the loop owns its block table
  KokkosMLA::CachePlan<float> decode(Space(), KokkosMLA::CacheShape{B, 1, H, D, R, 0, capacity}, opt);
  std::printf("%s\n", decode.describe().c_str());
  Tensor4 q("q", B, 1, H, D), out("out", B, 1, H, D), want("want", B, 1, H, D);
  KokkosMLA::CacheArguments<float> args;
  args.cache = cache;
  args.w_uk = w_uk;
  args.w_uv = w_uv;
  args.out = out;

  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    append(1);
    fill(q, 1.0f);
    args.q = q;
    decode.execute(Space(), args);

    // The same query against the contiguous tokens held so far.
    Tensor3 held("held", B, length, R);
    Kokkos::deep_copy(held, Kokkos::subview(history, Kokkos::ALL, std::make_pair(0, length), Kokkos::ALL));
    KokkosMLA::attention(Space(), q, held, w_uk, w_uv, want);
    auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    auto ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), want);
    double err = 0;
    for (std::size_t i = 0; i < got.span(); ++i)
      err = std::max(err, double(std::abs(got.data()[i] - ref.data()[i])));
    std::printf("step %d: %d tokens per sequence, max |cache - contiguous| = %.2e\n", step, length, err);
    worst = std::max(worst, err);
  }
  const bool ok = worst < 1e-5;
  std::printf("%s\n", ok ? "serving loop matches contiguous attention" : "MISMATCH");
  return ok ? 0 : 1;
}
