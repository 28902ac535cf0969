// Finite-difference gradient checks in fp64.
//
// gradcheck(f, inputs) evaluates y = f(inputs) (fp64 inputs that require grad), picks a fixed
// random projection r of the output, and compares the autograd gradient of <r, y> with respect to
// every input element against the central difference (<r, f(x + eps e_i)> - <r, f(x - eps e_i)>) / 2 eps.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mixtrain/tensor.h"
#include "support/tolerances.h"

namespace mixtrain::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = kGradcheckEps;
  Tolerance tol = kGradcheck;
  // Inputs (by position) that are not differentiated (integer indices, masks, targets).
  std::vector<int> skip = {};
};

// Returns an empty string on success, else a description of the worst mismatch. Use as
// EXPECT_EQ(gradcheck(...), "").
std::string gradcheck(const TensorFn& f, std::vector<Tensor> inputs, const GradcheckOptions& opts = {});

// fp64 tensor of `shape` with values uniform in [lo, hi), requiring grad.
Tensor rand_input(const Shape& shape, double lo = -1.0, double hi = 1.0, uint64_t seed = 1);

// Max of |a - b| / (atol + rtol |b|) over all elements (<= 1 means within tolerance); shapes must match.
double max_scaled_error(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

}  // namespace mixtrain::testing

// EXPECT_CLOSE(actual, expected, tol): every element within atol + rtol * |expected|.
#define EXPECT_CLOSE(actual, expected, tol) \
  EXPECT_LE(::mixtrain::testing::max_scaled_error((actual), (expected), (tol)), 1.0)
