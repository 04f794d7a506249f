#ifndef KOKKOSMLA_GATHERKERNEL_HPP
#define KOKKOSMLA_GATHERKERNEL_HPP
// A latent cache's tokens (contiguous or paged, RoPE keys apart or packed)
// gathered into a contiguous (sequences, capacity, R + Dr) array of [latent,
// RoPE key] rows: for the Widened path, which runs a float plan on it, and
// for attention by GEMMs (CacheGemm), whose GEMMs read it by strides.

#include "KokkosMLA_LatentKernels.hpp"

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// Sequences first_sequence, first_sequence + 1, ... of `from` into `to`
/// (one index per value written), converted to C; zeros past each
/// sequence's length, so that no value the cache holds there (NaN in an idle
/// slot) reaches a product.
template <class T, class C>
struct GatherKernel {
  LatentKeys<T> from;
  C* to;
  std::int64_t capacity, rank, width;
  std::int64_t first_sequence = 0;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t b = first_sequence + i / (capacity * width), s = i / width % capacity, c = i % width;
    if (s >= from.length(b)) {
      to[i] = C(0);
      return;
    }
    const std::int64_t row = from.row(b, s);
    to[i] = C(c < rank ? from.latent[row * from.latent_ld + c] : from.rope[row * from.rope_ld + c - rank]);
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
