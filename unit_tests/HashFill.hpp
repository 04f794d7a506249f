#ifndef KOKKOSMLA_TEST_HASHFILL_HPP
#define KOKKOSMLA_TEST_HASHFILL_HPP
// Deterministic pseudo-random values in [-scale, scale) filled on the device:
// cheap for views of billions of elements, where host draws and copies are not.
// Shared by the unit tests and the benchmark.

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace KokkosMLA {
namespace Test {

template <class T, class... P>
void fill_hash(const Kokkos::View<T*, P...>& v, std::uint64_t seed, double scale) {
  using Space = typename Kokkos::View<T*, P...>::execution_space;
  Kokkos::parallel_for(
      "KokkosMLA::test::fill_hash", Kokkos::RangePolicy<Space>(0, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::uint64_t x = (std::uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull ^ (seed << 32);
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        v(i) = T(scale * (double(x >> 11) * (2.0 / 9007199254740992.0) - 1.0));
      });
}

}  // namespace Test
}  // namespace KokkosMLA

#endif
