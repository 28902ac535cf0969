// dropout (src/ops/nn_embedding.cpp, src/backends/cpu/kernels/nn_dropout.cpp): seeded masks independent of the
// thread count, keep-rate within a statistical bound, scaling, the p = 0 / p = 1 / eval cases,
// gradients (with the mask drawn again in backward), 16-bit runs against fp32, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

Tensor dropout_with_seed(const Tensor& x, double p, uint64_t seed) {
  Generator g(seed);
  return F::dropout(x, p, true, &g);
}

TEST(Dropout, SameSeedSameMaskAndThreadCountIndependent) {
  const Tensor x = ones({100003});  // larger than one parallel task, odd tail
  const Tensor a = dropout_with_seed(x, 0.3, 42);
  EXPECT_TRUE(testing::bitwise_equal(a, dropout_with_seed(x, 0.3, 42)));
  EXPECT_FALSE(testing::bitwise_equal(a, dropout_with_seed(x, 0.3, 43)));
  const Tensor one = testing::with_threads(1, [&] { return dropout_with_seed(x, 0.3, 42); });
  const Tensor two = testing::with_threads(2, [&] { return dropout_with_seed(x, 0.3, 42); });
  EXPECT_TRUE(testing::bitwise_equal(one, two));
  EXPECT_TRUE(testing::bitwise_equal(one, a));
}

TEST(Dropout, KeepRateAndScale) {
  const int64_t n = 200000;
  const double p = 0.3;
  const std::vector<float> y = dropout_with_seed(ones({n}), p, 7).to_vector<float>();
  int64_t kept = 0;
  const float scaled = static_cast<float>(1.0 / (1.0 - p));
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == scaled) << v;
    kept += v != 0.0f;
  }
  // Kept count ~ Binomial(n, 1 - p): 6 standard deviations (sqrt(n p (1-p)) ~ 205) is a bound that a
  // correct mask exceeds with probability ~1e-9.
  EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 6 * std::sqrt(n * p * (1 - p)));
}

TEST(Dropout, AdvancesTheGenerator) {
  Generator g(5);
  F::dropout(ones({10}), 0.5, true, &g);
  EXPECT_EQ(g.offset(), 3u);  // ceil(10 / 4) Philox blocks
  const Tensor second = F::dropout(ones({10}), 0.5, true, &g);
  Generator h(5);
  EXPECT_FALSE(testing::bitwise_equal(second, F::dropout(ones({10}), 0.5, true, &h)));
}

TEST(Dropout, IdentityZerosAndEval) {
  Tensor x = randn32({3, 4}, 1).requires_grad_();
  EXPECT_TRUE(F::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(F::dropout(x, 0.0, true).is_same(x));
  Tensor z = F::dropout(x, 1.0, true);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  z.backward(ones({3, 4}));
  ASSERT_TRUE(x.grad().defined());
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Dropout, GradcheckWithFixedGenerator) {
  Tensor x = testing::rand_input({6, 7}, -1.0, 1.0, 2);
  EXPECT_EQ(testing::gradcheck([](const std::vector<Tensor>& in) { return dropout_with_seed(in[0], 0.4, 11); }, {x}), "");
}

TEST(Dropout, BackwardIsMaskTimesScale) {
  Tensor x = (ones({1000})).requires_grad_();
  Tensor y = dropout_with_seed(x, 0.25, 3);
  y.backward(ones({1000}));
  EXPECT_TRUE(testing::bitwise_equal(x.grad(), y.detach()));  // ones in, so y is the mask times the scale
}

// Backward draws the mask again: the forward keeps no byte per element for it, and a generator
// drawn from between forward and backward changes nothing (the draw is fixed at forward).
TEST(Dropout, KeepsNoMaskForBackward) {
  const Device dev = mixtrain::testing::test_device();
  Tensor x = randn32({4096}, 11).requires_grad_();
  const int64_t before = memory::stats(dev).current_bytes;
  Tensor y = dropout_with_seed(x, 0.3, 5);
  EXPECT_EQ(memory::stats(dev).current_bytes - before, 4096 * 4);  // the output alone
  randn32({64}, 12);  // other draws in between
  const Tensor gy = randn32({4096}, 13);
  y.backward(gy);
  // gx = gy * mask / (1 - p), the mask being where y is non-zero (x has no zeros).
  const std::vector<float> g = x.grad().to_vector<float>(), yv = y.detach().to_vector<float>(),
                           gyv = gy.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    const float want = yv[i] != 0.0f ? gyv[i] * static_cast<float>(1.0 / 0.7) : 0.0f;
    ASSERT_EQ(g[i], want) << "element " << i;
  }
}

TEST(Dropout, HalfMatchesFp32WithTheSameMask) {
  for (DType dt : testing::kHalfDTypes) {
    testing::expect_half_matches_fp32([](const std::vector<Tensor>& in) { return dropout_with_seed(in[0], 0.2, 9); },
                                      {randn32({50, 9}, 3)}, dt, testing::vs_fp32(dt));
  }
}

TEST(Dropout, Errors) {
  expect_error([] { F::dropout(ones({2}), 1.5); }, {"dropout", "1.5"});
  expect_error([] { F::dropout(ones({2}, {.dtype = kInt64}), 0.5); }, {"dropout", "int64"});
}

}  // namespace
}  // namespace mixtrain::testing
