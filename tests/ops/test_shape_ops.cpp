// cat, stack and index_select (src/ops/shape_ops.cpp): values, dtype promotion with gradients in each
// input's dtype, finite-difference gradients, repeated indices, and the error messages.
#include <gtest/gtest.h>

#include "mixtrain/ops/shape_ops.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

Tensor iota(const Shape& shape, double start = 0) {
  return arange(start, start + static_cast<double>(shape.numel()), 1.0, {.dtype = kFloat32}).reshape(shape);
}

TEST(Cat, ValuesAlongEachDim) {
  const Tensor a = iota({2, 2}), b = iota({2, 1}, 10);
  EXPECT_EQ(cat({a, b}, 1).to_vector<float>(), (std::vector<float>{0, 1, 10, 2, 3, 11}));
  EXPECT_EQ(cat({a, iota({1, 2}, 20)}, 0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 20, 21}));
  EXPECT_EQ(cat({a, b}, -1).shape(), Shape({2, 3}));
  EXPECT_EQ(cat({a, a.t()}, 0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 0, 2, 1, 3}));  // strided input
}

TEST(Cat, PromotesAndReturnsGradientsInInputDtypes) {
  Tensor a = iota({2, 2}).to(kBFloat16).requires_grad_();
  Tensor b = iota({1, 2}).requires_grad_();
  const Tensor i = from_vector<int32_t>({7, 8}, {1, 2});
  Tensor y = cat({a, b, i}, 0);
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 0, 1, 7, 8}));
  y.backward(iota({4, 2}));
  EXPECT_EQ(a.grad().dtype(), kBFloat16);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{4, 5}));
  EXPECT_EQ(cat({iota({1}).to(kFloat16), iota({1}).to(kBFloat16)}).dtype(), kFloat32);
}

TEST(Stack, ValuesAndNewDim) {
  const Tensor a = iota({2, 3}), b = iota({2, 3}, 10);
  EXPECT_EQ(stack({a, b}).shape(), Shape({2, 2, 3}));
  const Tensor s = stack({a, b}, -1);
  EXPECT_EQ(s.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
}

TEST(ShapeOps, Gradcheck) {
  Tensor a = rand_input({2, 3}, -1, 1, 1), b = rand_input({2, 4}, -1, 1, 2), c = rand_input({2, 3}, -1, 1, 3);
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[1]}, 1); }, {a, b}), "");
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, 1); }, {a, c}), "");
  Tensor x = rand_input({3, 4, 2}, -1, 1, 4);
  const Tensor idx = from_vector<int64_t>({3, 0, 3, 3, 1});
  for (int dim : {0, 1, 2}) {
    const Tensor index = dim == 1 ? idx : from_vector<int64_t>({1, 0, 1});
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], dim, index); }, {x}), "")
        << "dim " << dim;
  }
}

TEST(IndexSelect, ValuesAndRepeatedIndexGradient) {
  Tensor x = iota({3, 4}).requires_grad_();
  const Tensor idx = from_vector<int32_t>({2, 0, 2});
  const Tensor y = index_select(x, 1, idx);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 0, 2, 6, 4, 6, 10, 8, 10}));
  y.backward(ones({3, 3}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 0}));
}

TEST(ShapeOps, HalfMatchesFp32) {
  const Tensor idx = from_vector<int64_t>({1, 1, 0});
  for (DType dt : testing::kHalfDTypes) {
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return index_select(in[0], 0, idx); },
                                      {testing::randn32({2, 5}, 1)}, dt, testing::vs_fp32(dt));
    testing::expect_half_matches_fp32([](const std::vector<Tensor>& in) { return cat({in[0], in[1]}, 0); },
                                      {testing::randn32({2, 5}, 2), testing::randn32({1, 5}, 3)}, dt,
                                      testing::vs_fp32(dt));
  }
}

TEST(ShapeOps, SameTensorTwiceAccumulates) {
  // The engine sums the two gradients arriving at x (needs Tensor::add_).
  Tensor x = iota({2}).requires_grad_();
  cat({x, x}).backward(from_vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 6}));
}

TEST(ShapeOps, Errors) {
  expect_error([] { cat({zeros({2, 3}), zeros({2})}, 0); }, {"cat", "[2, 3]", "[2]"});
  expect_error([] { cat({zeros({2, 3}), zeros({3, 3})}, 1); }, {"cat", "[2, 3]", "[3, 3]", "dimension 1"});
  expect_error([] { cat({}, 0); }, {"cat", "non-empty"});
  expect_error([] { stack({zeros({2, 3}), zeros({3, 2})}); }, {"stack", "[2, 3]", "[3, 2]"});
  expect_error([] { index_select(zeros({2, 3}), 1, from_vector<int64_t>({3})); }, {"index_select", "3", "size 3"});
  expect_error([] { index_select(zeros({2, 3}), 0, zeros({1})); }, {"index_select", "int64"});
}

}  // namespace
}  // namespace mixtrain::testing
