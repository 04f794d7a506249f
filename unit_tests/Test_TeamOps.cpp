// Team building blocks on the host's teams: the batched copy of the
// projection kernel's tiles, for batches of one (hosts) and more (GPUs), and
// the softmax of attention by GEMMs over a row stored in segments.

#include "impl/KokkosMLA_RowSoftmaxKernel.hpp"
#include "impl/KokkosMLA_TeamOps.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

struct SoftmaxOfOneRow {
  Impl::SegmentedRow<double> row;
  std::int64_t seen;
  double scale;
  double* lse;
  void operator()(const Kokkos::TeamPolicy<Host>::member_type& team) const {
    const double l = Impl::softmax_in_place(team, row, seen, scale);
    Kokkos::single(Kokkos::PerTeam(team), [&]() { *lse = l; });
  }
};

/// Runs the softmax over `segments` segments of `length` columns, `gap`
/// elements between them, the first `seen` columns visible; checks every
/// column against the float64 softmax, the gaps untouched, and the lse.
/// `vectors`: whether the row is read by 16-byte vectors.
void check_softmax(std::int64_t length, std::int64_t segments, std::int64_t gap, std::int64_t seen,
                   int team_size, bool& vectors) {
  const std::int64_t stride = length + gap, columns = length * segments;
  const double scale = 0.7, untouched = -1.0;
  std::vector<double> data(std::size_t(stride * segments), untouched),
      logits(static_cast<std::size_t>(columns));
  for (std::int64_t j = 0; j < columns; ++j) {
    // Rising and falling, so that a thread's running max moves both ways.
    logits[std::size_t(j)] = 0.05 * double(j % 97) + 3.0 * std::sin(0.3 * double(j));
    data[std::size_t((j / length) * stride + j % length)] = logits[std::size_t(j)];
  }
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
  for (std::int64_t j = 0; j < seen; ++j) max = std::max(max, scale * logits[std::size_t(j)]);
  for (std::int64_t j = 0; j < seen; ++j) sum += std::exp(scale * logits[std::size_t(j)] - max);
  double lse = 0;
  vectors = Impl::in_vectors(Impl::SegmentedRow<double>{data.data(), length, stride, segments});
  Kokkos::parallel_for(Kokkos::TeamPolicy<Host>(1, team_size),
                       SoftmaxOfOneRow{{data.data(), length, stride, segments}, seen, scale, &lse});
  Kokkos::fence();
  const std::string where = std::to_string(segments) + " x " + std::to_string(length) + ", gap " +
                            std::to_string(gap) + ", seen " + std::to_string(seen) + ", team " +
                            std::to_string(team_size);
  for (std::int64_t i = 0; i < segments; ++i)
    for (std::int64_t e = 0; e < stride; ++e) {
      const std::int64_t j = i * length + e;
      const double got = data[std::size_t(i * stride + e)];
      if (e >= length)
        ASSERT_EQ(got, untouched) << where << ", gap after segment " << i;
      else if (j >= seen)
        ASSERT_EQ(got, 0.0) << where << ", column " << j;
      else
        ASSERT_NEAR(got, std::exp(scale * logits[std::size_t(j)] - max) / sum, 1e-14)
            << where << ", column " << j;
    }
  if (seen == 0)
    EXPECT_EQ(lse, -std::numeric_limits<double>::infinity()) << where;
  else
    EXPECT_NEAR(lse, max + std::log(sum), 1e-13) << where;
}

// Columns in one segment or several (CacheGemm's key parts), row lengths
// that are not multiples of a thread's group of loads, every column or few
// visible, none visible (an idle row: zeros and lse -inf); segments of odd
// and even strides, so that rows are read by single values and by vectors.
TEST(TeamOps, SoftmaxOfSegmentedRowMatchesFloat64) {
  const int most = Kokkos::TeamPolicy<Host>(1, 1).team_size_max(SoftmaxOfOneRow{}, Kokkos::ParallelForTag());
  const std::int64_t rows[][2] = {{1, 1}, {5, 1}, {97, 1}, {300, 1}, {7, 3}, {64, 4}, {33, 5}, {18, 3}};
  int by_vectors = 0, by_values = 0;
  for (int team_size : {1, 2, 4})
    for (const auto& r : rows)
      for (std::int64_t gap : {3, 2}) {
        if (team_size > most) continue;
        const std::int64_t columns = r[0] * r[1];
        for (std::int64_t seen :
             {columns, columns - 1, (columns + 1) / 2, std::int64_t(1), std::int64_t(0)}) {
          bool vectors = false;
          check_softmax(r[0], r[1], gap, seen, team_size, vectors);
          (vectors ? by_vectors : by_values)++;
        }
      }
  EXPECT_GT(by_vectors, 0);
  EXPECT_GT(by_values, 0);
}

// A NaN among the visible scores makes the row's lse NaN: it must not pass
// for a finite row, nor for one with no key.
TEST(TeamOps, SoftmaxOfRowWithNanIsNan) {
  std::vector<double> data(40, 1.0);
  data[17] = std::nan("");
  double lse = 0;
  Kokkos::parallel_for(Kokkos::TeamPolicy<Host>(1, 1),
                       SoftmaxOfOneRow{{data.data(), 40, 40, 1}, 40, 1.0, &lse});
  Kokkos::fence();
  EXPECT_TRUE(std::isnan(lse));
  EXPECT_TRUE(std::isnan(data[0]));
}

// Softmax teams: a warp for rows a warp covers in one group of loads a
// thread (8 values, or 4 vectors: 16 floats, 8 doubles), doubled up to the
// backend's team size; hosts' one-thread teams stay.
TEST(TeamOps, SoftmaxTeamsGrowWithTheirRows) {
  EXPECT_EQ(Impl::softmax_team_size<float>(1, false, 128), 32);
  EXPECT_EQ(Impl::softmax_team_size<float>(256, false, 128), 32);
  EXPECT_EQ(Impl::softmax_team_size<float>(257, false, 128), 64);
  EXPECT_EQ(Impl::softmax_team_size<float>(768, false, 128), 128);
  EXPECT_EQ(Impl::softmax_team_size<float>(4096, false, 128), 128);
  EXPECT_EQ(Impl::softmax_team_size<float>(4096, true, 1), 1);
  EXPECT_EQ(Impl::softmax_team_size<float>(512, true, 128), 32);
  EXPECT_EQ(Impl::softmax_team_size<float>(516, true, 128), 64);
  EXPECT_EQ(Impl::softmax_team_size<float>(1024, true, 128), 64);
  EXPECT_EQ(Impl::softmax_team_size<float>(2048, true, 128), 128);
  EXPECT_EQ(Impl::softmax_team_size<double>(512, true, 128), 64);
}

// A row whose every visible score is NaN has NaN probabilities and a NaN
// lse, not the -inf (reported +inf) of a row with no key.
TEST(TeamOps, SoftmaxOfAllNanRowHasNanLse) {
  const int most = Kokkos::TeamPolicy<Host>(1, 1).team_size_max(SoftmaxOfOneRow{}, Kokkos::ParallelForTag());
  for (int threads : {1, 2, 4}) {
    if (threads > most) continue;
    std::vector<double> data(40, std::nan(""));
    double lse = 0;
    Kokkos::parallel_for(Kokkos::TeamPolicy<Host>(1, threads),
                         SoftmaxOfOneRow{{data.data(), 40, 40, 1}, 40, 1.0, &lse});
    Kokkos::fence();
    EXPECT_TRUE(std::isnan(lse)) << threads << " threads: " << lse;
    EXPECT_TRUE(std::isnan(data[0]));
  }
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
