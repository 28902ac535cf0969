// softmax and log_softmax (src/ops/nn_softmax.cpp, src/backends/cpu/kernels/nn_softmax.cpp): values against an
// fp64 reference, gradients by finite differences, 16-bit runs against fp32, the output-dtype option
// and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

// log_softmax over `dim` of a contiguous tensor, computed in double with std::exp/std::log.
std::vector<double> reference_log_softmax(const Tensor& x, int dim) {
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= x.size(i);
  for (int i = dim + 1; i < x.dim(); ++i) inner *= x.size(i);
  const int64_t n = x.size(dim);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t j) -> size_t { return static_cast<size_t>((o * n + j) * inner + c); };
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, v[at(j)]);
      for (int64_t j = 0; j < n; ++j) s += std::exp(v[at(j)] - m);
      for (int64_t j = 0; j < n; ++j) out[at(j)] = v[at(j)] - m - std::log(s);
    }
  }
  return out;
}

Tensor from_doubles(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape); }

TEST(Softmax, MatchesFp64ReferenceOverEveryDim) {
  // Wide rows and large logits exercise the vectorised exp over its whole range.
  const Tensor x = randn32({3, 130, 5}, 1, 8.0);
  for (int dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const std::vector<double> ref = reference_log_softmax(x, dim);
    std::vector<double> ref_exp(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ref_exp[i] = std::exp(ref[i]);
    EXPECT_CLOSE(F::log_softmax(x, dim), from_doubles(ref, x.shape()), testing::kFp32VsReference);
    EXPECT_CLOSE(F::softmax(x, dim), from_doubles(ref_exp, x.shape()), testing::kFp32VsReference);
    EXPECT_CLOSE(F::softmax(x, dim - 3), from_doubles(ref_exp, x.shape()), testing::kFp32VsReference);
  }
}

TEST(Softmax, RowsSumToOne) {
  const Tensor x = randn32({6, 1000}, 2, 5.0);
  const std::vector<float> y = F::softmax(x, 1).to_vector<float>();
  for (int r = 0; r < 6; ++r) {
    double s = 0;
    for (int c = 0; c < 1000; ++c) s += y[r * 1000 + c];
    EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Softmax, StableForLargeAndInfiniteLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = from_vector<float>({1000.f, 1000.f, -inf, 0.f}, {1, 4});
  const std::vector<float> y = F::softmax(x, -1).to_vector<float>();
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  const std::vector<float> ly = F::log_softmax(x, -1).to_vector<float>();
  EXPECT_NEAR(ly[0], -std::log(2.0), 1e-6);
  EXPECT_EQ(ly[2], -inf);
  // A NaN poisons its own row only.
  const Tensor xn = from_vector<float>({1.f, NAN, 2.f, 3.f}, {2, 2});
  const std::vector<float> yn = F::softmax(xn, 1).to_vector<float>();
  EXPECT_TRUE(std::isnan(yn[0]) && std::isnan(yn[1]));
  EXPECT_NEAR(yn[2] + yn[3], 1.0, 1e-6);
}

TEST(Softmax, GradcheckEveryDim) {
  for (int dim : {0, 1, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Tensor x = rand_input({3, 4, 5}, -2.0, 2.0, 3);
    EXPECT_EQ(gradcheck([dim](const std::vector<Tensor>& in) { return F::softmax(in[0], dim); }, {x}), "");
    EXPECT_EQ(gradcheck([dim](const std::vector<Tensor>& in) { return F::log_softmax(in[0], dim); }, {x}), "");
  }
}

TEST(Softmax, GradcheckNonContiguousInput) {
  Tensor x = rand_input({5, 4}, -2.0, 2.0, 4);
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::softmax(in[0].t(), -1); }, {x}), "");
}

TEST(Softmax, HalfMatchesFp32) {
  for (DType dt : testing::kHalfDTypes) {
    for (int dim : {-1, 1}) {
      SCOPED_TRACE("dim " + std::to_string(dim));
      const Tensor x = randn32({4, 33, 6}, 5, 3.0);
      const testing::Tolerance grad_tol = dt == kBFloat16 ? testing::kSoftmaxBwdBf16 : testing::kSoftmaxBwdFp16;
      testing::expect_half_matches_fp32([dim](const std::vector<Tensor>& in) { return F::softmax(in[0], dim); }, {x},
                                        dt, testing::vs_fp32(dt), grad_tol);
      testing::expect_half_matches_fp32([dim](const std::vector<Tensor>& in) { return F::log_softmax(in[0], dim); },
                                        {x}, dt, testing::vs_fp32(dt), grad_tol);
    }
  }
}

TEST(Softmax, OutputDtypeReadsHalfWritesFp32) {
  const Tensor x32 = testing::rounded(randn32({8, 50}, 6, 4.0), kBFloat16);
  for (bool log : {false, true}) {
    Tensor xb = x32.to(kBFloat16).requires_grad_();
    Tensor xf = x32.clone().requires_grad_();
    Tensor yb = log ? F::log_softmax(xb, -1, kFloat32) : F::softmax(xb, -1, kFloat32);
    Tensor yf = log ? F::log_softmax(xf, -1) : F::softmax(xf, -1);
    ASSERT_EQ(yb.dtype(), kFloat32);
    // Same fp32 arithmetic on the same (exactly widened) values: bit-identical.
    EXPECT_TRUE(testing::bitwise_equal(yb, yf));
    const Tensor gy = randn32(yf.shape(), 7);
    yb.backward(gy);
    yf.backward(gy);
    ASSERT_EQ(xb.grad().dtype(), kBFloat16);
    EXPECT_CLOSE(xb.grad().to(kFloat32), xf.grad(), testing::kBf16VsFp32);
  }
}

TEST(Softmax, ScalarAndEmptyInputs) {
  EXPECT_EQ(F::softmax(scalar_tensor(3.0), 0).item<float>(), 1.0f);
  EXPECT_EQ(F::log_softmax(scalar_tensor(3.0), -1).item<float>(), 0.0f);
  EXPECT_EQ(F::softmax(zeros({0, 4}), 1).numel(), 0);
}

TEST(Softmax, Errors) {
  expect_error([] { F::softmax(zeros({2, 3}), 2); }, {"softmax", "2"});
  expect_error([] { F::log_softmax(zeros({2, 3}, {.dtype = kInt64}), 1); }, {"log_softmax", "int64"});
  expect_error([] { F::softmax(zeros({2, 3}), 1, kInt32); }, {"softmax", "int32"});
}

}  // namespace
}  // namespace mixtrain::testing
