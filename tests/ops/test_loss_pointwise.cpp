// mse_loss, binary_cross_entropy and binary_cross_entropy_with_logits (src/ops/loss_pointwise.cpp,
// src/backends/cpu/kernels/loss_pointwise.cpp): known values, PyTorch's -100 log clamp, stability of the
// logits form, gradients to input and target by finite differences, 16-bit runs against fp32, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;
using F::Reduction;

TEST(MseLoss, KnownValues) {
  const Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2}), t = from_vector<float>({1, 0, 5, 4}, {2, 2});
  EXPECT_EQ(F::mse_loss(x, t).item<float>(), 2.0f);
  EXPECT_EQ(F::mse_loss(x, t, Reduction::kSum).item<float>(), 8.0f);
  EXPECT_EQ(F::mse_loss(x, t, Reduction::kNone).to_vector<float>(), (std::vector<float>{0, 4, 4, 0}));
}

TEST(BinaryCrossEntropy, KnownValuesAndLogClamp) {
  const Tensor p = from_vector<float>({0.5f, 0.9f, 0.0f, 1.0f}), t = from_vector<float>({1, 0, 1, 1});
  const std::vector<float> l = F::binary_cross_entropy(p, t, Reduction::kNone).to_vector<float>();
  EXPECT_NEAR(l[0], std::log(2.0), 1e-6);
  EXPECT_NEAR(l[1], -std::log(0.1), 1e-5);
  EXPECT_EQ(l[2], 100.0f);  // log(0) clamped at -100, as PyTorch
  EXPECT_EQ(l[3], 0.0f);
}

TEST(BinaryCrossEntropyWithLogits, StableAndMatchesSigmoidForm) {
  const Tensor x = from_vector<float>({100.f, -100.f, 0.f, 2.5f, -1.5f}), t = from_vector<float>({0, 0, 1, 1, 0.3f});
  const std::vector<float> l = F::binary_cross_entropy_with_logits(x, t, Reduction::kNone).to_vector<float>();
  EXPECT_EQ(l[0], 100.0f);
  EXPECT_NEAR(l[1], 0.0, 1e-30);
  const std::vector<float> xv = x.to_vector<float>(), tv = t.to_vector<float>();
  for (int i = 2; i < 5; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(xv[i])));
    EXPECT_NEAR(l[i], -(tv[i] * std::log(s) + (1 - tv[i]) * std::log(1 - s)), 1e-6) << i;
  }
}

TEST(PointwiseLosses, GradcheckInputAndTarget) {
  for (Reduction red : kAllReductions) {
    SCOPED_TRACE("reduction " + std::to_string(static_cast<int>(red)));
    Tensor x = rand_input({3, 4}, -2.0, 2.0, 1), t = rand_input({3, 4}, -2.0, 2.0, 2);
    Tensor p = rand_input({3, 4}, 0.05, 0.95, 3), pt = rand_input({3, 4}, 0.0, 1.0, 4);
    EXPECT_EQ(gradcheck([red](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1], red); }, {x, t}), "");
    EXPECT_EQ(gradcheck([red](const std::vector<Tensor>& in) { return F::binary_cross_entropy(in[0], in[1], red); },
                        {p, pt}),
              "");
    EXPECT_EQ(gradcheck([red](const std::vector<Tensor>& in) {
                return F::binary_cross_entropy_with_logits(in[0], in[1], red);
              },
                        {x, pt}),
              "");
  }
}

TEST(PointwiseLosses, HalfMatchesFp32) {
  const Tensor x = randn32({5, 7}, 5), t = randn32({5, 7}, 6);
  Tensor p = F::softmax(randn32({5, 7}, 7), 1);  // probabilities in (0, 1)
  Tensor pt = F::softmax(randn32({5, 7}, 8), 1);
  for (DType dt : testing::kHalfDTypes) {
    for (Reduction red : kAllReductions) {
      testing::expect_half_matches_fp32([red](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1], red); },
                                        {x, t}, dt, testing::vs_fp32(dt));
      testing::expect_half_matches_fp32(
          [red](const std::vector<Tensor>& in) { return F::binary_cross_entropy_with_logits(in[0], in[1], red); },
          {x, pt}, dt, testing::vs_fp32(dt));
      testing::expect_half_matches_fp32(
          [red](const std::vector<Tensor>& in) { return F::binary_cross_entropy(in[0], in[1], red); }, {p, pt}, dt,
          testing::vs_fp32(dt));
    }
  }
}

TEST(PointwiseLosses, MixedDtypesPromote) {
  Tensor x = randn32({4}, 9).to(kBFloat16).requires_grad_();
  Tensor t = randn32({4}, 10).requires_grad_();
  Tensor l = F::mse_loss(x, t);
  EXPECT_EQ(l.dtype(), kFloat32);
  l.backward();
  EXPECT_EQ(x.grad().dtype(), kBFloat16);
  EXPECT_EQ(t.grad().dtype(), kFloat32);
}

TEST(PointwiseLosses, Errors) {
  expect_error([] { F::mse_loss(zeros({2, 3}), zeros({3, 2})); }, {"mse_loss", "[2, 3]", "[3, 2]"});
  expect_error([] { F::binary_cross_entropy(from_vector<float>({0.5f, 1.5f}), zeros({2})); },
               {"binary_cross_entropy", "[0, 1]", "1.5"});
  expect_error([] { F::binary_cross_entropy_with_logits(zeros({2}), zeros({2}, {.dtype = kInt64})); },
               {"binary_cross_entropy_with_logits", "int64"});
}

}  // namespace
}  // namespace mixtrain::testing
