// Elementwise ops (include/mixtrain/ops/elementwise.h): fp64 finite-difference gradients of every
// differentiable op, exact known values, dtype promotion, in-place add_/mul_ and the version
// counter, and error messages. 16-bit accuracy, ISA variants and thread counts are in
// test_elementwise_precision.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "ops/test_nn_helpers.h"
#include "support/gradcheck.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
using mt::testing::expect_error;
using mt::testing::gradcheck;
using mt::testing::rand_input;

namespace {

using V = std::vector<double>;
using Inputs = std::vector<mt::Tensor>;

mt::Tensor f64(const V& v, const mt::Shape& shape) { return mt::from_vector(v, shape, {.dtype = mt::kFloat64}); }
mt::Tensor f32(const V& v, const mt::Shape& shape) { return mt::from_vector(v, shape, {.dtype = mt::kFloat32}); }

// ---- Gradients (fp64 central differences) ----

TEST(ElementwiseGrad, UnaryOps) {
  struct Case {
    const char* name;
    std::function<mt::Tensor(const mt::Tensor&)> f;
    double lo, hi;
  };
  const std::vector<Case> cases = {
      {"neg", [](const mt::Tensor& x) { return mt::neg(x); }, -2, 2},
      {"exp", [](const mt::Tensor& x) { return mt::exp(x); }, -2, 2},
      {"log", [](const mt::Tensor& x) { return mt::log(x); }, 0.2, 3},
      {"sqrt", [](const mt::Tensor& x) { return mt::sqrt(x); }, 0.2, 3},
      {"rsqrt", [](const mt::Tensor& x) { return mt::rsqrt(x); }, 0.2, 3},
      {"tanh", [](const mt::Tensor& x) { return mt::tanh(x); }, -2, 2},
      {"sigmoid", [](const mt::Tensor& x) { return mt::sigmoid(x); }, -4, 4},
      {"relu", [](const mt::Tensor& x) { return mt::relu(x); }, -2, 2},
      {"gelu", [](const mt::Tensor& x) { return mt::gelu(x); }, -3, 3},
      {"gelu_tanh", [](const mt::Tensor& x) { return mt::gelu(x, mt::GeluApproximation::kTanh); }, -3, 3},
      {"silu", [](const mt::Tensor& x) { return mt::silu(x); }, -4, 4},
      {"clamp", [](const mt::Tensor& x) { return mt::clamp(x, -0.55, 0.45); }, -1, 1},
      {"pow2", [](const mt::Tensor& x) { return mt::pow(x, 2.0); }, -2, 2},
      {"pow3", [](const mt::Tensor& x) { return mt::pow(x, 3.0); }, -2, 2},
      {"pow_half", [](const mt::Tensor& x) { return mt::pow(x, 0.5); }, 0.2, 3},
      {"pow_neg", [](const mt::Tensor& x) { return mt::pow(x, -1.5); }, 0.2, 3},
      {"add_scalar", [](const mt::Tensor& x) { return mt::add(x, 2.5); }, -2, 2},
      {"mul_scalar", [](const mt::Tensor& x) { return mt::mul(x, -1.5); }, -2, 2},
      {"operators", [](const mt::Tensor& x) { return (2.0 * x - 1.0) / 4.0 + x * 3.0; }, -2, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(gradcheck([&](const Inputs& in) { return c.f(in[0]); }, {rand_input({3, 5}, c.lo, c.hi, 7)}), "");
  }
}

TEST(ElementwiseGrad, BinaryOpsWithBroadcasting) {
  const std::vector<std::pair<mt::Shape, mt::Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {{3, 1}, {1, 4}}, {{2, 3}, {}}};
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(sa.str() + " with " + sb.str());
    Inputs in = {rand_input(sa, -2, 2, 1), rand_input(sb, 0.5, 2, 2)};
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::add(x[0], x[1]); }, in), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::add(x[0], x[1], 0.75); }, in), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::sub(x[0], x[1], 1.5); }, in), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::mul(x[0], x[1]); }, in), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::div(x[0], x[1]); }, in), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return x[1] / x[0] - x[0]; }, {rand_input(sa, 0.5, 2, 3), in[1]}), "");
    EXPECT_EQ(gradcheck([](const Inputs& x) { return mt::pow(x[0], x[1]); }, {rand_input(sa, 0.3, 2, 4), in[1]}), "");
  }
}

TEST(ElementwiseGrad, OneInputNeedsNoGradient) {
  mt::Tensor a = rand_input({3, 4}, -1, 1, 5), b = rand_input({4}, -1, 1, 6).detach();
  EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::mul(x[0], b); }, {a}), "");
  EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::div(b, x[0]); }, {rand_input({3, 4}, 0.5, 2, 5)}), "");
}

TEST(ElementwiseGrad, PowTensorAtZeroBase) {
  // d/de a^e = a^e log a, defined as 0 where a == 0 and e >= 0 (PyTorch), not NaN.
  mt::Tensor a = f64({0.0, 0.0, 2.0}, {3}).requires_grad_();
  mt::Tensor e = f64({2.0, 0.0, 3.0}, {3}).requires_grad_();
  mt::sum(mt::pow(a, e)).backward();
  EXPECT_EQ(e.grad().to_vector<double>(), (V{0.0, 0.0, 8.0 * std::log(2.0)}));
  EXPECT_EQ(a.grad().to_vector<double>(), (V{0.0, 0.0, 12.0}));
}

TEST(ElementwiseGrad, WhereAndMaskedFill) {
  mt::Tensor cond = mt::from_vector(std::vector<uint8_t>{1, 0, 0, 1, 1, 0}, {2, 3}, {.dtype = mt::kBool});
  mt::Tensor row_mask = mt::from_vector(std::vector<uint8_t>{0, 1, 0}, {3}, {.dtype = mt::kBool});
  // where: gradients w.r.t. a and b, with b broadcast over rows and a over the whole condition.
  EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::where(cond, x[0], x[1]); },
                      {rand_input({2, 3}, -1, 1, 1), rand_input({3}, -1, 1, 2)}),
            "");
  EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::where(cond, x[0], x[1]); },
                      {rand_input({1}, -1, 1, 3), rand_input({2, 1}, -1, 1, 4)}),
            "");
  EXPECT_EQ(
      gradcheck([&](const Inputs& x) { return mt::masked_fill(x[0], row_mask, -7.0); }, {rand_input({2, 3}, -1, 1, 5)}),
      "");
  // The exact gradients: ones where the value was taken, zeros elsewhere.
  mt::Tensor a = mt::ones({2, 3}, {.dtype = mt::kFloat32, .requires_grad = true});
  mt::Tensor b = mt::ones({3}, {.dtype = mt::kFloat32, .requires_grad = true});
  mt::sum(mt::where(cond, a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0, 1, 2}));
}

TEST(ElementwiseGrad, CastCarriesGradientInSourceDtype) {
  mt::Tensor x = f32({1, 2, 3}, {3}).requires_grad_();
  mt::Tensor y = mt::cast(x, mt::kBFloat16);
  EXPECT_EQ(y.dtype(), mt::kBFloat16);
  mt::sum(mt::mul(y, 2.0)).backward();
  EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TEST(ElementwiseGrad, ClampPassesGradientOnTheBoundary) {
  mt::Tensor x = f64({-1.0, -0.5, 0.0, 0.5, 1.0}, {5}).requires_grad_();
  mt::sum(mt::clamp(x, -0.5, 0.5)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (V{0, 1, 1, 1, 0}));
}

TEST(ElementwiseGrad, ReluHasNoGradientAtZero) {
  mt::Tensor x = f32({-1.0, 0.0, 2.0}, {3}).requires_grad_();
  mt::sum(mt::relu(x)).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 1}));
}

// ---- Known values ----

TEST(ElementwiseValues, ExactKnownResults) {
  EXPECT_EQ(mt::relu(f32({-1.5, 0.0, 2.5}, {3})).to_vector<float>(), (std::vector<float>{0, 0, 2.5}));
  EXPECT_NEAR(mt::gelu(f64({1.0}, {1})).item<double>(), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(mt::gelu(f32({1.0}, {1})).item<double>(), 0.8413447460685429, 1e-7);
  const double inner = std::sqrt(2.0 / M_PI) * (1.0 + 0.044715);
  EXPECT_NEAR(mt::gelu(f64({1.0}, {1}), mt::GeluApproximation::kTanh).item<double>(), 0.5 * (1 + std::tanh(inner)),
              1e-15);
  EXPECT_NEAR(mt::silu(f64({1.0}, {1})).item<double>(), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(mt::sigmoid(f32({0.0}, {1})).item<float>(), 0.5f, 0.0f);
  EXPECT_EQ(mt::clamp(f32({-3, 0.25, 3}, {3}), -1, 1).to_vector<float>(), (std::vector<float>{-1, 0.25, 1}));
  EXPECT_EQ(mt::add(f32({1, 2}, {2}), f32({10, 20}, {2}), 2.0).to_vector<float>(), (std::vector<float>{21, 42}));
  EXPECT_EQ(mt::sub(f32({1, 2}, {2}), f32({10, 20}, {2})).to_vector<float>(), (std::vector<float>{-9, -18}));
  EXPECT_EQ(mt::pow(f32({3, -2}, {2}), 2.0).to_vector<float>(), (std::vector<float>{9, 4}));
  EXPECT_EQ(mt::exp(f32({0}, {1})).item<float>(), 1.0f);
}

TEST(ElementwiseValues, SpecialValues) {
  const float inf = INFINITY;
  mt::Tensor x = f32({-inf, inf, NAN, -100, 100}, {5});
  std::vector<float> e = mt::exp(x).to_vector<float>();
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], inf);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[4], inf);
  std::vector<float> t = mt::tanh(x).to_vector<float>();
  EXPECT_EQ(t[0], -1.0f);
  EXPECT_EQ(t[1], 1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  std::vector<float> s = mt::sigmoid(x).to_vector<float>();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_TRUE(std::isnan(mt::relu(x).to_vector<float>()[2]));  // NaN propagates, as in PyTorch
  EXPECT_TRUE(std::isnan(mt::clamp(x, -1, 1).to_vector<float>()[2]));
  std::vector<float> g = mt::gelu(x).to_vector<float>();
  EXPECT_EQ(g[1], inf);
  EXPECT_EQ(g[3], -0.0f);
}

TEST(ElementwiseValues, SelectionAndComparisons) {
  mt::Tensor a = f32({1, 2, 3, 4}, {2, 2});
  mt::Tensor b = f32({1, 5, 3, 0}, {2, 2});
  EXPECT_EQ(mt::eq(a, b).to_vector<bool>(), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(mt::gt(a, 2.0).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(mt::lt(a, 2.0).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(mt::eq(a, b).dtype(), mt::kBool);
  mt::Tensor leaf = f32({1, 2}, {2}).requires_grad_();
  EXPECT_FALSE(mt::gt(leaf, 0.0).requires_grad());  // comparisons carry no gradient
  EXPECT_FALSE(mt::eq(leaf, leaf).requires_grad());
  // Comparisons broadcast and work on integers (accuracy counting: argmax == labels).
  mt::Tensor labels = mt::from_vector(std::vector<int64_t>{1, 0, 2}, {3});
  mt::Tensor pred = mt::from_vector(std::vector<int64_t>{1, 1, 2}, {3});
  EXPECT_EQ(mt::sum(mt::eq(pred, labels)).item<int64_t>(), 2);
  EXPECT_EQ(mt::eq(a, f32({2}, {1})).to_vector<bool>(), (std::vector<bool>{false, true, false, false}));
  // A double scalar is compared in the tensor's compute type: 0.1 as 0.1f for float32, like PyTorch.
  EXPECT_FALSE(mt::gt(f32({0.1}, {1}), 0.1).item<bool>());
  mt::Tensor mask = mt::gt(a, 2.5);
  EXPECT_EQ(mt::where(mask, a, b).to_vector<float>(), (std::vector<float>{1, 5, 3, 4}));
  EXPECT_EQ(mt::masked_fill(a, mask, -1.0).to_vector<float>(), (std::vector<float>{1, 2, -1, -1}));
  // where works on any dtype; masked_fill broadcasts a row mask.
  mt::Tensor ia = mt::from_vector(std::vector<int32_t>{1, 2}, {2}),
             ib = mt::from_vector(std::vector<int32_t>{7, 8}, {2});
  EXPECT_EQ(mt::where(mt::gt(ia, 1.0), ia, ib).to_vector<int32_t>(), (std::vector<int32_t>{7, 2}));
  mt::Tensor row = mt::from_vector(std::vector<uint8_t>{1, 0}, {2}, {.dtype = mt::kBool});
  EXPECT_EQ(mt::masked_fill(a, row, 9.0).to_vector<float>(), (std::vector<float>{9, 2, 9, 4}));
}

// ---- dtype promotion ----

TEST(ElementwisePromotion, ResultDtypes) {
  mt::Tensor bf = mt::ones({2}, {.dtype = mt::kBFloat16}), hf = mt::ones({2}, {.dtype = mt::kFloat16});
  mt::Tensor f = mt::ones({2}, {.dtype = mt::kFloat32}), d = mt::ones({2}, {.dtype = mt::kFloat64});
  mt::Tensor i = mt::ones({2}, {.dtype = mt::kInt64});
  EXPECT_EQ(mt::add(bf, hf).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::add(f, bf).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::mul(hf, d).dtype(), mt::kFloat64);
  EXPECT_EQ(mt::div(i, bf).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::where(mt::gt(f, 0.0), bf, hf).dtype(), mt::kFloat32);
  // A double scalar never changes the tensor's dtype.
  EXPECT_EQ(mt::add(bf, 2.5).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::mul(hf, 1e-3).dtype(), mt::kFloat16);
  EXPECT_EQ((bf / 3.0).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::add(bf, hf).to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(ElementwisePromotion, GradientsComeBackInEachInputsDtype) {
  mt::Tensor a = mt::full({2, 3}, 2.0, {.dtype = mt::kBFloat16, .requires_grad = true});
  mt::Tensor b = mt::full({3}, 3.0, {.dtype = mt::kFloat32, .requires_grad = true});
  mt::Tensor y = mt::mul(a, b);
  EXPECT_EQ(y.dtype(), mt::kFloat32);
  mt::sum(y).backward();
  EXPECT_EQ(a.grad().dtype(), mt::kBFloat16);
  EXPECT_EQ(b.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(6, 3.0f));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(3, 4.0f));
}

TEST(ElementwisePromotion, ScalarOperandIsNotRoundedTo16Bits) {
  // s = 2^-8 + 2^-16 rounds to 2^-8 in bf16, and 1 + 2^-8 is a tie that rounds to even (1.0). Added
  // in fp32 and rounded once, 1 + s is above the tie and rounds up to 1 + 2^-7.
  const double s = 1.0 / 256 + 1.0 / 65536;
  mt::Tensor x = mt::ones({1}, {.dtype = mt::kBFloat16});
  EXPECT_EQ(mt::add(x, s).item<float>(), 1.0f + 1.0f / 128);
}

TEST(ElementwisePromotion, FrontEndsApplyTheAutocastPolicy) {
  // The autocast rules (src/amp/policy_table.cpp): exp, pow, sum, mean -> fp32; binary ops promote; unlisted ops keep their dtype.
  mt::Tensor h = mt::ones({2, 3}, {.dtype = mt::kBFloat16}), f = mt::ones({2, 3});
  mt::amp::Autocast autocast(mt::testing::test_device().type, mt::kBFloat16);
  EXPECT_EQ(mt::exp(h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::pow(h, 2.0).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::sum(h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::mean(h, {1}).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::sub(h, f).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::relu(h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::gelu(f).dtype(), mt::kFloat32);
}

// ---- In-place ops and versions ----

TEST(ElementwiseInplace, AddRefusedOnLeafRequiringGrad) {
  mt::Tensor w = mt::ones({3}, {.requires_grad = true});
  expect_error([&] { (void)(w.add_(mt::ones({3}))); }, {"add_"});
  expect_error([&] { (void)(w.mul_(2.0)); }, {"mul_"});
  const uint64_t v0 = w.version();
  {
    mt::NoGradGuard no_grad;
    w.add_(mt::full({3}, 2.0), 0.5);
    w.mul_(4.0);
  }
  EXPECT_EQ(w.version(), v0 + 2);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{8, 8, 8}));
}

TEST(ElementwiseInplace, AddConvertsAndBroadcasts) {
  mt::Tensor acc = mt::zeros({2, 3});
  acc.add_(f32({1, 2, 3}, {3}));                                   // broadcast over rows
  acc.add_(mt::full({2, 3}, 0.5, {.dtype = mt::kBFloat16}), 2.0);  // other dtype, alpha
  EXPECT_EQ(acc.to_vector<float>(), (std::vector<float>{2, 3, 4, 2, 3, 4}));
  // A wider `other` into a 16-bit tensor is added in the wider type and rounded once (see
  // ScalarOperandIsNotRoundedTo16Bits for the numbers).
  mt::Tensor h = mt::ones({1}, {.dtype = mt::kBFloat16});
  h.add_(mt::full({1}, 1.0 / 256 + 1.0 / 65536, {.dtype = mt::kFloat32}));
  EXPECT_EQ(h.item<float>(), 1.0f + 1.0f / 128);
  // A non-contiguous target.
  mt::Tensor base = mt::zeros({3, 2});
  mt::Tensor view = base.t();
  view.add_(f32({1, 2, 3}, {3}));
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  expect_error([&] { (void)(acc.add_(mt::ones({4}))); }, {"add_"});
  expect_error([&] { (void)(mt::ones({1}).expand({3}).add_(mt::ones({3}))); }, {"add_"});
}

TEST(ElementwiseInplace, ModifyingASavedInputFailsBackwardNamingTheOp) {
  mt::Tensor x = mt::ones({3});
  mt::Tensor w = mt::ones({3}, {.requires_grad = true});
  mt::Tensor y = mt::mul(x, w);  // saves x for w's gradient
  x.add_(mt::ones({3}));
  expect_error([&] { (void)(mt::sum(y).backward()); }, {"mul"});
}

// ---- Errors ----

TEST(ElementwiseErrors, MessagesNameTheOp) {
  mt::Tensor a = mt::ones({2, 3}), b = mt::ones({4});
  expect_error([&] { (void)(mt::add(a, b)); }, {"add", "[2, 3]", "[4]"});
  expect_error([&] { (void)(mt::mul(a, b)); }, {"mul"});
  expect_error([&] { (void)(mt::sub(a, b)); }, {"sub"});
  expect_error([&] { (void)(mt::div(a, b)); }, {"div"});
  mt::Tensor ints = mt::arange(4);
  expect_error([&] { (void)(mt::exp(ints)); }, {"exp", "int64"});
  expect_error([&] { (void)(mt::gelu(ints)); }, {"gelu"});
  expect_error([&] { (void)(mt::add(ints, ints)); }, {"add"});
  expect_error([&] { (void)(mt::where(a, a, a)); }, {"where"});
  expect_error([&] { (void)(mt::where(mt::gt(b, 0.0), a, a)); }, {"where"});
  expect_error([&] { (void)(mt::masked_fill(b, mt::gt(a, 0.0), 1.0)); }, {"masked_fill"});
  expect_error([&] { (void)(mt::masked_fill(a, a, 1.0)); }, {"masked_fill"});
  expect_error([&] { (void)(mt::eq(a, b)); }, {"eq"});
  expect_error([&] { (void)(mt::exp(mt::Tensor())); }, {"exp"});
}

}  // namespace
