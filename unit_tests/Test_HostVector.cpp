// The host kernels' vector primitives: the exponential every host softmax
// step runs, against std::exp2 in double; and the row stride the host
// prefill kernel reads K and V at.

#include "impl/KokkosMLA_FlashHostKernel.hpp"
#include "impl/KokkosMLA_HostVector.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace KokkosMLA {
namespace Test {
namespace {

using Impl::HostVector;

template <class T>
typename HostVector<T>::V lanes_of(const T* x) {
  return Impl::load_vector(x);
}

// Within 2 units in the last place of float over the whole range the softmax
// uses (x <= 0 after the running max is subtracted) and above it; exactly 0
// below -126 and for -inf; NaN for NaN; exact at integers.
TEST(HostVector, Exp2IsAccurateOverTheSoftmaxRange) {
  constexpr int L = Impl::host_lanes<float>();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-126.0, 127.0);
  double worst = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    float x[L], y[L];
    for (int l = 0; l < L; ++l) x[l] = float(trial < 10 ? -l - 10 * trial : uniform(rng));
    Impl::store_vector(y, Impl::exp2_vector(lanes_of(x)));
    for (int l = 0; l < L; ++l) {
      const double exact = std::exp2(double(x[l]));
      if (exact < double(std::numeric_limits<float>::min())) continue;  // subnormal results may flush
      const double ulp = double(std::nextafter(float(exact), INFINITY)) - double(float(exact));
      worst = std::max(worst, std::abs(double(y[l]) - exact) / ulp);
      if (x[l] == std::floor(x[l])) {
        ASSERT_EQ(double(y[l]), exact) << "x = " << x[l];
      }
    }
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_GT(worst, 0.0);  // the draws reach values the polynomial rounds
  float special[L], out[L];
  for (int l = 0; l < L; ++l)
    special[l] = l % 4 == 0 ? -INFINITY : l % 4 == 1 ? -127.5f : l % 4 == 2 ? NAN : -1e30f;
  Impl::store_vector(out, Impl::exp2_vector(lanes_of(special)));
  for (int l = 0; l < L; ++l) {
    if (l % 4 == 2)
      EXPECT_TRUE(std::isnan(out[l])) << l;
    else
      EXPECT_EQ(out[l], 0.0f) << special[l];
  }
}

TEST(HostVector, Exp2InDoubleIsStdExp2) {
  constexpr int L = Impl::host_lanes<double>();
  double x[L], y[L];
  for (int l = 0; l < L; ++l) x[l] = -0.37 * l - 1.25;
  Impl::store_vector(y, Impl::exp2_vector(lanes_of(x)));
  for (int l = 0; l < L; ++l) EXPECT_EQ(y[l], std::exp2(x[l]));
}

// K and V rows a multiple of 4 KiB apart (H D = 1024 or 2048 floats) would
// all share one L1 set: the host prefill kernel's rows lie an odd number of
// 64-byte lines apart, at least H D and under two lines more.
template <class T>
void expect_odd_lines_apart() {
  using Kernel = Impl::FlashHostKernel<Kokkos::DefaultHostExecutionSpace, T>;
  const std::int64_t line = 64 / std::int64_t(sizeof(T));
  for (std::int64_t heads : {1, 3, 16, 128})
    for (std::int64_t dim : {1, 7, 16, 64, 128}) {
      const std::int64_t width = heads * dim, stride = Kernel::key_row_stride(heads, dim);
      EXPECT_GE(stride, width) << heads << " x " << dim;
      EXPECT_LT(stride, width + 2 * line) << heads << " x " << dim;
      EXPECT_EQ(stride % line, 0) << heads << " x " << dim;
      EXPECT_EQ(stride / line % 2, 1) << heads << " x " << dim;
    }
}

TEST(HostFlashKernel, KeyRowsLieAnOddNumberOfLinesApart) {
  expect_odd_lines_apart<float>();
  expect_odd_lines_apart<double>();
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
