// embedding (src/ops/nn_embedding.cpp, src/backends/cpu/kernels/shape_ops.cpp): row lookup with int64/int32
// indices of any shape, the backward summing repeated rows (finite differences, exact values, thread
// count independence), 16-bit runs, and the out-of-range error.
#include <gtest/gtest.h>

#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

TEST(Embedding, LooksUpRowsForAnyIndexShape) {
  const Tensor w = arange(0.0, 12.0, 1.0, {.dtype = kFloat32}).reshape({4, 3});
  for (DType idt : {kInt64, kInt32}) {
    const Tensor idx = from_vector<int64_t>({3, 0, 3, 1}, {2, 2}).to(idt);
    const Tensor y = F::embedding(idx, w);
    EXPECT_EQ(y.shape(), Shape({2, 2, 3}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5}));
  }
}

TEST(Embedding, BackwardSumsRepeatedRows) {
  Tensor w = zeros({5, 2}).requires_grad_();
  const Tensor idx = from_vector<int64_t>({1, 3, 1, 1});
  const Tensor gy = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  F::embedding(idx, w).backward(gy);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 13, 16, 0, 0, 3, 4, 0, 0}));
}

TEST(Embedding, GradcheckWithRepeatedIndices) {
  Tensor w = testing::rand_input({6, 3}, -1.0, 1.0, 1);
  const Tensor idx = from_vector<int64_t>({0, 5, 2, 5, 5, 0}, {2, 3});
  EXPECT_EQ(testing::gradcheck([&](const std::vector<Tensor>& in) { return F::embedding(idx, in[0]); }, {w}), "");
}

TEST(Embedding, BackwardIndependentOfThreadCount) {
  // bf16 gradients summed over many repeats: the fp32 sum must take one order whatever the threads.
  Generator g(3);
  const Tensor idx = randint(0, 50, {20000}, {.dtype = kInt64}, &g);
  const Tensor gy = randn32({20000, 16}, 4).to(kBFloat16);
  auto grad = [&] {
    Tensor w = zeros({50, 16}, {.dtype = kBFloat16}).requires_grad_();
    F::embedding(idx, w).backward(gy);
    return w.grad();
  };
  EXPECT_TRUE(testing::bitwise_equal(testing::with_threads(1, grad), testing::with_threads(2, grad)));
}

TEST(Embedding, HalfMatchesFp32) {
  const Tensor idx = from_vector<int64_t>({2, 2, 0, 7, 2});
  for (DType dt : testing::kHalfDTypes) {
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return F::embedding(idx, in[0]); },
                                      {randn32({8, 5}, 5)}, dt, testing::vs_fp32(dt));
  }
}

TEST(Embedding, Errors) {
  expect_error([] { F::embedding(from_vector<int64_t>({1, 10}), zeros({10, 3})); },
               {"embedding", "index 10", "V = 10"});
  expect_error([] { F::embedding(from_vector<int32_t>({-1}), zeros({10, 3})); }, {"embedding", "-1"});
  expect_error([] { F::embedding(zeros({2}), zeros({10, 3})); }, {"embedding", "int64"});
  expect_error([] { F::embedding(from_vector<int64_t>({1}), zeros({10})); }, {"embedding", "[10]"});
}

}  // namespace
}  // namespace mixtrain::testing
