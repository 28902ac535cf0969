// max_pool2d and avg_pool2d (src/ops/nn_pool.cpp, src/kernels/cpu/nn_pool.cpp): known values with
// stride and padding, ties to the first maximum, gradients by finite differences, 16-bit runs
// against fp32, and the error paths.
#include <gtest/gtest.h>

#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

Tensor arange_image(int64_t h, int64_t w) { return arange(0.0, static_cast<double>(h * w), 1.0, {.dtype = kFloat32}).reshape({1, 1, h, w}); }

TEST(MaxPool2d, KnownValues) {
  const Tensor x = arange_image(4, 4);  // 0..15 row-major
  EXPECT_EQ(F::max_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  // Stride 1, padding 1: windows hang over the border; padding never wins.
  const Tensor neg = arange(0.0, -16.0, -1.0, {.dtype = kFloat32}).reshape({1, 1, 4, 4});
  const Tensor y =
      F::max_pool2d(neg, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1});
  EXPECT_EQ(y.shape(), Shape({1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, -1, -4, -5}));
}

TEST(MaxPool2d, GradientGoesToFirstMaximumOnTies) {
  Tensor x = ones({1, 1, 2, 4}).requires_grad_();
  F::max_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).backward(ones({1, 1, 1, 2}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0}));
  // Overlapping windows (stride 1) that share a maximum add their gradients there.
  Tensor z = from_vector<float>({0, 9, 0, 0}, {1, 1, 1, 4}).requires_grad_();
  F::max_pool2d(z, {.kernel_h = 1, .kernel_w = 2, .stride_h = 1, .stride_w = 1}).backward(ones({1, 1, 1, 3}));
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{0, 2, 1, 0}));
}

TEST(AvgPool2d, KnownValuesCountPadding) {
  const Tensor x = arange_image(4, 4);
  EXPECT_EQ(F::avg_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).to_vector<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  // Corner window with padding 1 covers x[0..1, 0..1] = {0, 1, 4, 5}; the divisor counts padding: 9.
  const Tensor y = F::avg_pool2d(x, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1});
  EXPECT_FLOAT_EQ(y.to_vector<float>()[0], 10.0f / 9.0f);
}

TEST(Pool2d, GradcheckStridePadding) {
  const F::Pool2dOptions options[] = {
      {.kernel_h = 2, .kernel_w = 2},
      {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding_h = 1, .padding_w = 1},
      {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .padding_h = 1, .padding_w = 0},
  };
  for (const auto& o : options) {
    SCOPED_TRACE("kernel " + std::to_string(o.kernel_h) + "x" + std::to_string(o.kernel_w));
    Tensor x = rand_input({2, 2, 5, 6}, -1.0, 1.0, 1);
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}), "");
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], o); }, {x}), "");
  }
}

TEST(Pool2d, HalfMatchesFp32) {
  const F::Pool2dOptions o{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1};
  for (DType dt : testing::kHalfDTypes) {
    const Tensor x = randn32({2, 3, 9, 8}, 2);
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}, dt,
                                      testing::vs_fp32(dt));
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], o); }, {x}, dt,
                                      testing::vs_fp32(dt));
  }
}

TEST(Pool2d, Errors) {
  expect_error([] { F::max_pool2d(zeros({1, 4, 4}), {.kernel_h = 2, .kernel_w = 2}); }, {"max_pool2d", "[1, 4, 4]"});
  expect_error([] { F::avg_pool2d(zeros({1, 1, 4, 4}), {.kernel_h = 2, .kernel_w = 2, .padding_h = 2}); },
               {"avg_pool2d", "padding"});
  expect_error([] { F::max_pool2d(zeros({1, 1, 2, 2}), {.kernel_h = 3, .kernel_w = 3}); }, {"max_pool2d", "larger"});
  expect_error([] { F::avg_pool2d(zeros({1, 1, 4, 4}), {.kernel_h = 0, .kernel_w = 2}); }, {"avg_pool2d", "kernel"});
}

}  // namespace
}  // namespace mixtrain::testing
