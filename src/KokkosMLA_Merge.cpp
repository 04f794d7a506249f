// Launches merge_states' kernel; instances as for Plan.

#include <KokkosMLA_Merge.hpp>

#include "impl/KokkosMLA_MergeKernel.hpp"

namespace KokkosMLA {
namespace Impl {

template <class Scalar, class ExecSpace>
void merge_rows(const ExecSpace& exec, StridedRows<const Scalar> out_a, StridedRows<const Scalar> lse_a,
                StridedRows<const Scalar> out_b, StridedRows<const Scalar> lse_b, StridedRows<Scalar> out,
                StridedRows<Scalar> lse, std::int64_t dim) {
  const MergeKernel<ExecSpace, Scalar> k{out_a, lse_a, out_b, lse_b, out, lse, dim};
  const std::int64_t rows = out.batch * out.queries * out.heads;
  Kokkos::parallel_for("KokkosMLA::merge_states",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, rows), k);
}

}  // namespace Impl

KOKKOSMLA_MERGE_INSTANCE(float, Kokkos::DefaultExecutionSpace);
KOKKOSMLA_MERGE_INSTANCE(double, Kokkos::DefaultExecutionSpace);
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_MERGE_INSTANCE(float, Kokkos::DefaultHostExecutionSpace);
KOKKOSMLA_MERGE_INSTANCE(double, Kokkos::DefaultHostExecutionSpace);
#endif

}  // namespace KokkosMLA
