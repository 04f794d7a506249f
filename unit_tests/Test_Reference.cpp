// The comparison helpers of Reference.hpp: a NaN or an infinity on either
// side, or vectors of different sizes, fail; equal finite vectors pass, and
// the tolerance is what it says.

#include "Reference.hpp"

#include <gtest/gtest-spi.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace KokkosMLA {
namespace Test {
namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

/// Four elements, read by close() as out(0, 0, 0, 0 .. 3).
const Shape four{1, 1, 1, 1, 4, 1};

/// close() fails, and its message names element [index].
void expect_not_close(const std::vector<double>& got, const std::vector<double>& want, std::size_t index) {
  const ::testing::AssertionResult r = close(got, want, 1e-3, four);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("[" + std::to_string(index) + "]"), std::string::npos)
      << r.message();
}

/// max_error() records one failure naming element [index], and returns infinity.
void expect_max_error_fails(const std::vector<double>& got, const std::vector<double>& want,
                            std::size_t index) {
  double e = 0;
  EXPECT_NONFATAL_FAILURE(e = max_error(got, want), "element [" + std::to_string(index) + "]");
  EXPECT_EQ(e, kInf);
}

const std::vector<double> finite{0.5, -1.25, 2.0, 3.0};

TEST(Reference, EqualFiniteVectorsPass) {
  EXPECT_TRUE(close(finite, finite, 0, four));
  EXPECT_EQ(max_error(finite, finite), 0);
  EXPECT_TRUE(close({}, {}, 0, four));
  EXPECT_EQ(max_error({}, {}), 0);
}

// |got - want| <= tol * max(1, max |want|): here max |want| = 3.
TEST(Reference, ToleranceIsRelativeToThePeak) {
  std::vector<double> got = finite;
  got[1] += 4e-3;
  EXPECT_TRUE(close(got, finite, 1.5e-3, four));
  expect_not_close(got, finite, 1);  // 4e-3 > 1e-3 * 3
  EXPECT_NEAR(max_error(got, finite), 4e-3, 1e-15);
  EXPECT_NEAR(max_error(finite, got), 4e-3, 1e-15);
}

TEST(Reference, NanOnlyInGotFails) {
  std::vector<double> got = finite;
  got[2] = kNan;
  expect_not_close(got, finite, 2);
  expect_max_error_fails(got, finite, 2);
}

TEST(Reference, NanOnlyInWantFails) {
  std::vector<double> want = finite;
  want[2] = kNan;
  expect_not_close(finite, want, 2);
  expect_max_error_fails(finite, want, 2);
}

TEST(Reference, NanOnBothSidesFails) {
  std::vector<double> v = finite;
  v[3] = kNan;
  expect_not_close(v, v, 3);
  expect_max_error_fails(v, v, 3);
}

// The first non-finite element is the one reported.
TEST(Reference, FirstNonFiniteIsReported) {
  std::vector<double> got = finite, want = finite;
  got[3] = kNan;
  want[1] = kNan;
  expect_not_close(got, want, 1);
  expect_max_error_fails(got, want, 1);
}

TEST(Reference, InfinityAgainstFiniteFails) {
  for (double x : {kInf, -kInf}) {
    SCOPED_TRACE(x);
    std::vector<double> v = finite;
    v[0] = x;
    expect_not_close(v, finite, 0);
    expect_max_error_fails(v, finite, 0);
    // An infinite reference would make the tolerance tol * max |want| infinite too.
    expect_not_close(finite, v, 0);
    expect_max_error_fails(finite, v, 0);
  }
}

// No output or reference compared here should hold an infinity, even one equal on both sides.
TEST(Reference, EqualInfinitiesFail) {
  std::vector<double> v = finite;
  v[1] = -kInf;
  expect_not_close(v, v, 1);
  expect_max_error_fails(v, v, 1);
}

TEST(Reference, SizeMismatchFails) {
  const std::vector<double> shorter(finite.begin(), finite.end() - 1);
  for (const auto& pair : {std::make_pair(shorter, finite), std::make_pair(finite, shorter)}) {
    const ::testing::AssertionResult r = close(pair.first, pair.second, 1e-3, four);
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("size mismatch"), std::string::npos) << r.message();
    double e = 0;
    EXPECT_NONFATAL_FAILURE(e = max_error(pair.first, pair.second), "size mismatch");
    EXPECT_EQ(e, kInf);
  }
  double e = 0;
  EXPECT_NONFATAL_FAILURE(e = max_error({}, finite), "size mismatch");
  EXPECT_EQ(e, kInf);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
