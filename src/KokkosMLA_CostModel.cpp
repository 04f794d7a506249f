#include "impl/KokkosMLA_CostModel.hpp"

#include <stdexcept>

namespace KokkosMLA {
namespace Impl {

namespace {

struct Rates {
  double kernel_flops;  ///< our team kernels
  double gemm_flops;    ///< vendor BLAS through Kokkos Kernels
  double bytes;         ///< device memory bandwidth
  double launch;        ///< seconds per kernel launch
};

Rates rates_of(const Backend& be, std::size_t scalar_bytes) {
  const double wide = scalar_bytes > 4 ? 0.5 : 1.0;  // double halves arithmetic rates
  if (be.host) {
    const double cores = be.concurrency;
    return {2e9 * cores * wide, 2e10 * cores * wide, 1e10, 2e-6};
  }
  return {1e13 * wide, 4.5e13 * wide, 3e12, 5e-6};
}

double causal_pairs(const Shape& s, bool causal) {
  // Query t sees keys up to (S - T) + t under causality.
  const double T = double(s.queries), S = double(s.keys);
  return causal ? T * (S - T) + T * (T + 1) / 2 : T * S;
}

double ceil_div(double a, double b) { return double(std::int64_t((a + b - 1) / b)); }

}  // namespace

double modeled_seconds(Algorithm a, const CostInputs& in) {
  const Shape& s = in.shape;
  const Rates r = rates_of(in.backend, in.scalar_bytes);
  const double B = double(s.batch), T = double(s.queries), S = double(s.keys), H = double(s.heads),
               D = double(s.head_dim), R = double(s.latent_dim), w = double(in.scalar_bytes);
  const double pairs = causal_pairs(s, in.causal);
  const double avg_keys = pairs / T;                          // keys a query row sees on average
  const double io = w * (2 * B * T * H * D + 2 * R * H * D);  // q, out, weights
  switch (a) {
    case Algorithm::Decompressed: {
      const double gemm = 4 * B * S * R * H * D;
      const double attn = 4 * B * H * D * pairs;
      const double kv_reads = B * H * ceil_div(T, in.flash.query_tile) * avg_keys;  // rows of K and V
      const double bytes = io + w * (B * S * R + 2 * B * S * H * D + 2 * D * kv_reads);
      return gemm / r.gemm_flops + attn / r.kernel_flops + bytes / r.bytes + 3 * r.launch;
    }
    case Algorithm::Fused:
    case Algorithm::Absorbed: {
      const LatentTiles& t = a == Algorithm::Fused ? in.fused : in.attend;
      const double flops = 4 * B * T * H * D * R + 4 * B * H * R * pairs;
      const double blocks = B * ceil_div(T, t.tokens) * ceil_div(H, t.heads);
      const double latent_reads = blocks * avg_keys * R;
      const double workspace = a == Algorithm::Absorbed ? 4 * B * T * H * R : 0;
      const double bytes = io + w * (latent_reads + workspace);
      const int launches = a == Algorithm::Fused ? 1 : 3;
      return flops / r.kernel_flops + bytes / r.bytes + launches * r.launch;
    }
    case Algorithm::Auto:
      break;
  }
  throw std::invalid_argument("KokkosMLA: modeled_seconds takes Fused, Absorbed or Decompressed, not Auto");
}

Algorithm cheapest(const CostInputs& in) {
  Algorithm best = Algorithm::Fused;
  for (Algorithm a : {Algorithm::Decompressed, Algorithm::Absorbed}) {
    if (modeled_seconds(a, in) < modeled_seconds(best, in)) best = a;
  }
  return best;
}

}  // namespace Impl
}  // namespace KokkosMLA
