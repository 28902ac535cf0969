// kernels::gelu_forward_backward_kernel (gelu(x) and its input gradient in one pass, for
// gelu_linear's backward): bit for bit the separate gelu forward and backward kernels, in every
// floating dtype, at every ISA level, for any thread count, with the gradient written in place.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/elementwise.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"
#include "support/cpu_env.h"
#include "support/tolerances.h"

namespace mixtrain::testing {
namespace {

namespace kn = kernels;

// x over [-6, 6) (both tails of erf and the region where gelu' changes sign), with special values
// at the front: signed zeros, a subnormal, values past erf's clamp, infinities and NaN.
Tensor gelu_input(int64_t n, DType dt, uint64_t seed) {
  std::vector<double> v = (uniform_input({n}, kFloat64, seed) * 6.0).to_vector<double>();
  const double specials[] = {0.0, -0.0, 1e-40, -3.5, 4.5, -9.0, 40.0, -1e30,
                             std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
  return from_vector(v, {n}, {.dtype = kFloat64}).to(dt);
}

// Bit for bit, zeros with their sign, except that any NaN matches any NaN: which NaN an operation
// returns depends on the order of its operands, which the compiler may swap.
void expect_same_values(const Tensor& got, const Tensor& expected) {
  ASSERT_EQ(got.dtype(), expected.dtype());
  const std::vector<double> a = got.to(kFloat64).to_vector<double>(), b = expected.to(kFloat64).to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
    if (!same && bad++ < 3) ADD_FAILURE() << "element " << i << ": " << a[i] << " against " << b[i];
  }
  EXPECT_EQ(bad, 0);
}

struct Pair {
  Tensor y, grad_in;
};

Pair separate(const Tensor& g, const Tensor& x) {
  Pair r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(x.shape(), x.dtype())};
  kn::unary_kernel(kn::UnaryOp::kGelu)(x.device(), x.dtype())(r.y, x, {});
  kn::unary_backward_kernel(kn::UnaryOp::kGelu)(x.device(), x.dtype())(r.grad_in, g, x, {});
  return r;
}

Pair fused(const Tensor& g, const Tensor& x, bool in_place) {
  Pair r{Tensor::empty(x.shape(), x.dtype()), in_place ? g.clone() : Tensor::empty(x.shape(), x.dtype())};
  const Tensor grad_out = in_place ? r.grad_in : g;
  kn::gelu_forward_backward_kernel()(x.device(), x.dtype())(r.y, r.grad_in, grad_out, x);
  return r;
}

TEST(GeluForwardBackward, BitIdenticalToTheSeparateKernels) {
  // 1 element, less than one 256-element block, several blocks with a partial one, and enough
  // blocks for every thread to get some.
  for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (int64_t n : {int64_t{1}, int64_t{200}, int64_t{256 * 5 + 3}, int64_t{70001}}) {
      const Tensor x = gelu_input(n, dt, 11), g = gelu_input(n, dt, 12);
      for (cpu::Isa level : kernel_isa_levels()) {
        cpu::MaxIsaGuard cap(level);
        const Pair expected = separate(g, x);
        for (int threads : {1, 3}) {
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(::testing::Message() << to_string(dt) << " n " << n << " " << cpu::to_string(level) << " threads "
                                              << threads << (in_place ? " in place" : ""));
            const Pair got = with_threads(threads, [&] { return fused(g, x, in_place); });
            expect_same_values(got.y, expected.y);
            expect_same_values(got.grad_in, expected.grad_in);
          }
        }
      }
    }
  }
}

TEST(GeluForwardBackward, ValuesAreGeluAndItsDerivative) {
  // Guards the comparison above against both paths being wrong the same way: fp64 against the
  // closed forms (C library erf and exp), on ordinary values (the specials are cut off).
  const Tensor x = gelu_input(500, kFloat64, 13).narrow(0, 11, 489).contiguous();
  const Tensor g = gelu_input(500, kFloat64, 14).narrow(0, 11, 489).contiguous();
  const Pair r = fused(g, x, false);
  const std::vector<double> xv = x.to_vector<double>(), gv = g.to_vector<double>();
  const std::vector<double> y = r.y.to_vector<double>(), gi = r.grad_in.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double cdf = 0.5 * (1.0 + std::erf(xv[i] / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * xv[i] * xv[i]) / std::sqrt(2.0 * M_PI);
    const double y_ref = xv[i] * cdf, gi_ref = gv[i] * (cdf + xv[i] * pdf);
    EXPECT_NEAR(y[i], y_ref, kFp64VsReference.atol + kFp64VsReference.rtol * std::abs(y_ref)) << xv[i];
    EXPECT_NEAR(gi[i], gi_ref, kFp64VsReference.atol + kFp64VsReference.rtol * std::abs(gi_ref)) << xv[i];
  }
}

TEST(GeluForwardBackward, RefusesStridedOperands) {
  const Tensor x = gelu_input(64, kFloat32, 15).reshape({8, 8}).t(), g = gelu_input(64, kFloat32, 16).reshape({8, 8});
  Tensor y = Tensor::empty({8, 8}, kFloat32), gi = Tensor::empty({8, 8}, kFloat32);
  EXPECT_THROW(kn::gelu_forward_backward_kernel()(x.device(), x.dtype())(y, gi, g, x), Error);
}

}  // namespace
}  // namespace mixtrain::testing
