// The autograd engine with arithmetic ops (mul, add, sum, sum_to): gradients that must be summed
// (a tensor used twice, repeated backward calls, broadcasting), mixed dtypes in one graph, and the
// saved-tensor version check of a real op (Note [Saved tensor versions], docs/notes/autograd.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mt = mixtrain;

namespace {

using V = std::vector<double>;
using mt::autograd::TensorList;
using mt::testing::error_message;

V values(const mt::Tensor& t) { return t.to_vector<double>(); }

mt::Tensor leaf(const std::vector<float>& v, const mt::Shape& shape, mt::DType dtype = mt::kFloat32) {
  return mt::from_vector(v, shape, {.dtype = dtype}).requires_grad_();
}

TEST(AutogradOps, ExpandBackwardSumsOverBroadcastDims) {
  mt::Tensor x = leaf({1, 2, 3}, {3, 1});
  mt::Tensor y = x.expand({2, 3, 4});
  // Upstream gradient g[n][i][j] = 12n + 4i + j: x.grad[i] sums it over n and j.
  y.backward(mt::arange(0.0, 24.0, 1.0, {.dtype = mt::kFloat32}).reshape({2, 3, 4}));
  V expected(3, 0.0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) expected[i] += 12 * n + 4 * i + j;
  EXPECT_EQ(x.grad().shape(), (mt::Shape{3, 1}));
  EXPECT_EQ(values(x.grad()), expected);
}

TEST(AutogradOps, GradientsAccumulateAcrossBackwardCalls) {
  mt::Tensor x = leaf({1, 2, 3}, {3});
  mt::mul(x, 2.0).backward(mt::ones({3}));
  EXPECT_EQ(values(x.grad()), (V{2, 2, 2}));
  mt::mul(x, 3.0).backward(mt::ones({3}));  // a new graph: its gradient is added to .grad
  EXPECT_EQ(values(x.grad()), (V{5, 5, 5}));
  x.set_grad(mt::Tensor());  // what zero_grad does
  mt::mul(x, 3.0).backward(mt::ones({3}));
  EXPECT_EQ(values(x.grad()), (V{3, 3, 3}));
}

TEST(AutogradOps, RetainGraphLetsGradientsAccumulate) {
  mt::Tensor x = leaf({1, 2, 3}, {3});
  mt::Tensor y = mt::sum(mt::mul(x, x));  // dy/dx = 2x
  y.backward(mt::Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(values(x.grad()), (V{2, 4, 6}));
  y.backward();
  EXPECT_EQ(values(x.grad()), (V{4, 8, 12}));
  const std::string m = error_message([&] { y.backward(); });
  EXPECT_NE(m.find("retain_graph"), std::string::npos) << m;
}

TEST(AutogradOps, ATensorUsedTwiceGetsTheSumOfItsGradients) {
  mt::Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  // Two paths from x through views that share a node (h), joined by add.
  mt::Tensor h = x.reshape({3, 2});
  mt::Tensor y = mt::add(h.t().t(), mt::mul(h, 10.0));
  y.backward(mt::ones({3, 2}));
  EXPECT_EQ(values(x.grad()), V(6, 11.0));

  mt::Tensor a = leaf({1, 2, 3}, {3});
  mt::sum(mt::mul(a, a)).backward();
  EXPECT_EQ(values(a.grad()), (V{2, 4, 6}));
}

TEST(AutogradOps, MixedPrecisionGraphGivesFp32Gradients) {
  // The manual autocast pattern: fp32 leaves, a bf16 product, an fp32 loss.
  mt::Tensor w = leaf({0.5f, -1.25f, 2.0f}, {3});
  mt::Tensor x = mt::from_vector(std::vector<float>{3.0f, 0.75f, -0.5f});  // exact in bf16
  mt::Tensor loss = mt::sum(mt::mul(x.to(mt::kBFloat16), w.to(mt::kBFloat16)).to(mt::kFloat32));
  EXPECT_EQ(loss.dtype(), mt::kFloat32);
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(values(w.grad()), values(x));

  // fp16 through an fp64 leaf, and a promotion (bf16 * fp16 -> fp32) inside the graph.
  mt::Tensor d = leaf({1.5f, 2.0f}, {2}, mt::kFloat64);
  mt::Tensor e = leaf({4.0f, -1.0f}, {2}, mt::kBFloat16);
  mt::Tensor p = mt::mul(d.to(mt::kFloat16), e);
  EXPECT_EQ(p.dtype(), mt::kFloat32);
  mt::sum(p).backward();
  EXPECT_EQ(d.grad().dtype(), mt::kFloat64);
  EXPECT_EQ(e.grad().dtype(), mt::kBFloat16);
  EXPECT_EQ(values(d.grad()), (V{4.0, -1.0}));
  EXPECT_EQ(values(e.grad()), (V{1.5, 2.0}));
}

TEST(AutogradOps, GradDoesNotTouchDotGrad) {
  mt::Tensor a = leaf({1, 2}, {2});
  mt::Tensor b = leaf({3, 4}, {2});
  TensorList g = mt::autograd::grad({mt::sum(mt::mul(a, b))}, {a, b});
  EXPECT_EQ(values(g[0]), (V{3, 4}));
  EXPECT_EQ(values(g[1]), (V{1, 2}));
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(AutogradOps, NoGradGuardAppliesToOps) {
  mt::Tensor a = leaf({1, 2}, {2});
  mt::NoGradGuard no_grad;
  mt::Tensor y = mt::add(mt::mul(a, a), 1.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(AutogradOps, InPlaceArithmeticOnALeafNeedsNoGradGuard) {
  mt::Tensor w = leaf({1, 2}, {2});
  const std::string m = error_message([&] { w.add_(mt::ones({2})); });
  EXPECT_NE(m.find("add_"), std::string::npos) << m;
  EXPECT_NE(m.find("NoGradGuard"), std::string::npos) << m;
  EXPECT_NE(error_message([&] { w.mul_(2.0); }).find("mul_"), std::string::npos);
  mt::NoGradGuard no_grad;
  w.add_(mt::ones({2}), -0.5);
  w.mul_(2.0);
  EXPECT_EQ(values(w), (V{1, 3}));
}

TEST(AutogradOps, SavedInputModifiedInPlaceMakesBackwardThrowNamingTheOp) {
  // mul saves each input for the other's gradient.
  mt::Tensor a = leaf({1, 2}, {2});
  mt::Tensor b = leaf({3, 4}, {2});
  mt::Tensor y = mt::mul(a, b);
  {
    mt::NoGradGuard no_grad;
    a.add_(mt::ones({2}));  // an optimizer step between forward and backward, say
  }
  const std::string m = error_message([&] { y.backward(mt::ones({2})); });
  EXPECT_NE(m.find("mul"), std::string::npos) << m;
  EXPECT_NE(m.find("in-place"), std::string::npos) << m;
  EXPECT_NE(m.find("[2] float32"), std::string::npos) << m;

  // An input that does not require grad is checked too; in-place writes to it need no guard.
  mt::Tensor c = mt::from_vector(std::vector<float>{3, 4});
  mt::Tensor z = mt::mul(b, c);
  c.mul_(2.0);
  EXPECT_NE(error_message([&] { z.backward(mt::ones({2})); }).find("mul"), std::string::npos);

  // clone() before modifying keeps backward valid.
  mt::Tensor d = mt::from_vector(std::vector<float>{3, 4});
  mt::Tensor e = leaf({1, 1}, {2});
  mt::Tensor u = mt::mul(e, d.clone());
  d.mul_(2.0);
  u.backward(mt::ones({2}));
  EXPECT_EQ(values(e.grad()), (V{3, 4}));
}

TEST(AutogradOps, FiniteDifferencesThroughViewsAndOps) {
  using mt::testing::gradcheck;
  using mt::testing::rand_input;
  auto f = [](const std::vector<mt::Tensor>& in) {
    const mt::Tensor& x = in[0];  // [2, 3]
    const mt::Tensor& w = in[1];  // [3, 1]
    mt::Tensor t = x.t();         // [3, 2]
    mt::Tensor y = mt::mul(t, w.expand({3, 2}));
    return mt::add(y.slice(0, 0, 3, 2), mt::mul(y.select(0, 1).unsqueeze(0), y.slice(0, 2, 3)));
  };
  EXPECT_EQ(gradcheck(f, {rand_input({2, 3}), rand_input({3, 1}, -1, 1, 2)}), "");
}

}  // namespace
