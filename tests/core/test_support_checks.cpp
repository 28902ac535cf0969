// The test helpers themselves (tests/support): a check must fail on NaN, on infinities, on a wrong
// result. These cases passed silently before.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"
#include "support/gradcheck.h"

namespace mixtrain::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(MaxScaledError, InfinityAgainstAFiniteValueIsAMismatch) {
  const Tolerance tol = kFp32VsReference;
  auto err = [&](double a, double e) {
    return max_scaled_error(from_vector<double>({a}, {1}), from_vector<double>({e}, {1}), tol);
  };
  EXPECT_EQ(err(1.0, kInf), kInf);
  EXPECT_EQ(err(kInf, 1.0), kInf);
  EXPECT_EQ(err(-kInf, kInf), kInf);
  EXPECT_EQ(err(kNaN, 1.0), kInf);
  EXPECT_EQ(err(1.0, kNaN), kInf);
  // Equal values, infinities and NaNs included, are no error.
  EXPECT_EQ(err(kInf, kInf), 0.0);
  EXPECT_EQ(err(kNaN, kNaN), 0.0);
  EXPECT_EQ(err(2.0, 2.0), 0.0);
  EXPECT_GT(err(2.0, 3.0), 1.0);
}

TEST(Gradcheck, FailsOnANaNGradient) {
  // y = x * w where w is NaN: the analytic gradient of x is NaN, and so is the numeric one; the
  // check must not count that as a match.
  Tensor x = rand_input({3}, -1, 1, 1);
  Tensor w = from_vector<double>({kNaN, 1.0, 2.0}, {3});
  EXPECT_NE(gradcheck([&](const std::vector<Tensor>& t) { return mul(t[0], w); }, {x}), "");
  // The same function with a finite w passes (so the failure above is about the NaN).
  Tensor w2 = from_vector<double>({3.0, 1.0, 2.0}, {3});
  EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& t) { return mul(t[0], w2); }, {x}), "");
}

}  // namespace
}  // namespace mixtrain::testing
