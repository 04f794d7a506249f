// Team building blocks on the host's teams: the batched copy of the
// projection kernel's tiles, for batches of one (hosts) and more (GPUs).

#include "impl/KokkosMLA_TeamOps.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace KokkosMLA {
namespace Test {
namespace {

using Host = Kokkos::DefaultHostExecutionSpace;

template <int Batch>
struct CopyInBatches {
  Impl::Mat<const double> from;
  Impl::Mat<double> to;
  int rows, cols;
  void operator()(const Kokkos::TeamPolicy<Host>::member_type& team) const {
    Impl::team_copy_in_batches<Batch>(team, rows, cols, from, to);
  }
};

// Every element of the block lands at its place, between rows of other
// widths, and nothing past the block's columns is written.
template <int Batch>
void check_copy(int rows, int cols, int team_size) {
  const int from_ld = cols + 3, to_ld = cols + 5;
  std::vector<double> from(std::size_t(rows) * from_ld), to(std::size_t(rows) * to_ld, -1.0);
  for (std::size_t e = 0; e < from.size(); ++e) from[e] = double(e) + 0.5;
  Kokkos::TeamPolicy<Host> policy(1, team_size);
  Kokkos::parallel_for(policy, CopyInBatches<Batch>{{from.data(), from_ld}, {to.data(), to_ld}, rows, cols});
  Kokkos::fence();
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < to_ld; ++j)
      ASSERT_EQ(to[std::size_t(i) * to_ld + j], j < cols ? from[std::size_t(i) * from_ld + j] : -1.0)
          << "batch " << Batch << ", " << rows << " x " << cols << ", element (" << i << ", " << j << ")";
}

TEST(TeamOps, CopyInBatchesCopiesEveryElementOnce) {
  const int most = Kokkos::TeamPolicy<Host>(1, 1).team_size_max(CopyInBatches<1>{}, Kokkos::ParallelForTag());
  const int blocks[][2] = {{1, 1}, {1, 7}, {3, 5}, {13, 17}, {32, 24}, {16, 576}};
  for (int team_size : {1, 2, 4})
    for (const auto& b : blocks) {
      if (team_size > most) continue;
      check_copy<1>(b[0], b[1], team_size);
      check_copy<3>(b[0], b[1], team_size);
      check_copy<8>(b[0], b[1], team_size);
    }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
