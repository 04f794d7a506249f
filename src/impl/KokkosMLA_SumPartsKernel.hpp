#ifndef KOKKOSMLA_SUMPARTSKERNEL_HPP
#define KOKKOSMLA_SUMPARTSKERNEL_HPP
// The last step of attention by GEMMs over a cache (CacheGemm): P latent is
// computed in parts of keys, one GEMM of the batch each (split-K, so that
// the few rows of a sequence still fill the GPU), and summed here.

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace KokkosMLA {
namespace Impl {

/// oa (b, r) of a chunk, rows of `to` = the sum over parts j of the partial
/// products P_bj latent_bj, (sequences, parts, rows, width) row-major.
template <class T>
struct SumPartsKernel {
  const T* parts_of;
  T* to;                   // row (b, r) at to + (b * rows + r) * to_ld
  std::int64_t rows, width, parts, to_ld;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const std::int64_t c = i % width, r = i / width % rows, b = i / (width * rows);
    const T* from = parts_of + (b * parts * rows + r) * width + c;
    T sum = 0;
    for (std::int64_t j = 0; j < parts; ++j) sum += from[j * rows * width];
    to[(b * rows + r) * to_ld + c] = sum;
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
