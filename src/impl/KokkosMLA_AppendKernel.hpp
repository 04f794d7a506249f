#ifndef KOKKOSMLA_APPENDKERNEL_HPP
#define KOKKOSMLA_APPENDKERNEL_HPP
// append_to_cache: one thread per element of the new tokens, written to the
// cache row their sequence's length and block table give.

#include "KokkosMLA_HeadRows.hpp"
#include "KokkosMLA_LatentKernels.hpp"

namespace KokkosMLA {
namespace Impl {

template <class T>
struct AppendKernel {
  LatentKeys<T> at;              // addressing of the cache (its pointers unused)
  T* latent;                     // the cache's latent rows, at.latent_ld apart
  T* rope;                       // its RoPE rows (may point into latent when packed), or null
  HeadRows<const T> new_latent;  // (B, tokens, R), by token row
  HeadRows<const T> new_rope;    // (B, tokens, Dr), or null
  std::int64_t tokens, rank, rope_dim;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t e) const {
    const std::int64_t width = rank + rope_dim;
    const std::int64_t c = e % width, token = e / width, b = token / tokens, i = token % tokens;
    const std::int64_t row = at.row(b, at.length(b) - tokens + i);
    if (c < rank)
      latent[row * at.latent_ld + c] = new_latent.at(token, 0)[c];
    else
      rope[row * at.rope_ld + c - rank] = new_rope.at(token, 0)[c - rank];
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
