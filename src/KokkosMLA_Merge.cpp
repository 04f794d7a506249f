// Launches merge_states' kernel; instances as for Plan.

#include <KokkosMLA_Merge.hpp>

#include "impl/KokkosMLA_MergeKernel.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
void merge_rows(const ExecSpace& exec, const Scalar* out_a, const Scalar* lse_a, const Scalar* out_b,
                const Scalar* lse_b, Scalar* out, Scalar* lse, std::int64_t rows, std::int64_t dim) {
  const MergeKernel<ExecSpace, Scalar> k{out_a, lse_a, out_b, lse_b, out, lse, dim};
  Kokkos::parallel_for("KokkosMLA::merge_states",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows), k);
}

}  // namespace Impl

#define KOKKOSMLA_INSTANTIATE_MERGE(SPACE)                                                                 \
  template void Impl::merge_rows<float, SPACE>(const SPACE&, const float*, const float*, const float*,     \
                                               const float*, float*, float*, std::int64_t, std::int64_t);  \
  template void Impl::merge_rows<double, SPACE>(const SPACE&, const double*, const double*, const double*, \
                                                const double*, double*, double*, std::int64_t,             \
                                                std::int64_t);
KOKKOSMLA_INSTANTIATE_MERGE(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_INSTANTIATE_MERGE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA
