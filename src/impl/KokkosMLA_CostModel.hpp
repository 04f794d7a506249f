#ifndef KOKKOSMLA_COSTMODEL_HPP
#define KOKKOSMLA_COSTMODEL_HPP
// The model behind Algorithm::Auto: modeled time = FLOPs / rate + bytes / bandwidth
// + launches * launch latency, with the bytes counted from the fitted tiles
// (how often each team re-reads the latent or K and V). The rates are per
// backend class (GPU or host), calibrated by the benchmarks in perf_tests/.

#include "KokkosMLA_Tiling.hpp"

namespace KokkosMLA {
namespace Impl {

struct CostInputs {
  Shape shape;
  bool causal = true;
  Backend backend;
  std::size_t scalar_bytes = 4;
  LatentTiles fused;   ///< tiles of the Fused kernel
  LatentTiles attend;  ///< tiles of the Absorbed algorithm's attention kernel
  FlashTiles flash;    ///< tiles of the Decompressed algorithm's attention kernel
};

/// Modeled seconds of one algorithm; Auto is not one (std::invalid_argument).
double modeled_seconds(Algorithm a, const CostInputs& in);

/// The algorithm with the least modeled time.
Algorithm cheapest(const CostInputs& in);

}  // namespace Impl
}  // namespace KokkosMLA

#endif
