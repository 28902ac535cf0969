// layer_norm (src/ops/nn_norm.cpp, src/backends/cpu/kernels/nn_norm.cpp): values against an fp64 reference,
// gradients by finite differences with and without the affine parameters, 16-bit runs against fp32,
// mixed parameter dtypes, the 16-bit input kept for backward under autocast, thread-count independence
// of the parameter gradients, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

TEST(LayerNorm, MatchesFp64Reference) {
  const int64_t rows = 7, cols = 300;
  const Tensor x = randn32({rows, cols}, 1, 3.0);
  const Tensor w = randn32({cols}, 2), b = randn32({cols}, 3);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> ref(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xv[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xv[r * cols + c] - mean) * (xv[r * cols + c] - mean);
    var /= cols;  // biased, as PyTorch
    for (int64_t c = 0; c < cols; ++c)
      ref[r * cols + c] = (xv[r * cols + c] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
  }
  EXPECT_CLOSE(F::layer_norm(x, {cols}, w, b), from_vector(ref, {rows, cols}), testing::kFp32VsReference);
}

TEST(LayerNorm, Fp32GradientsMatchFp64) {
  // The fp32 backward is the vectorised row kernel (gradcheck runs in fp64, the portable loop):
  // 70 rows make 9 row blocks of parameter partials, 300 columns leave a tail at every vector width.
  const int64_t rows = 70, cols = 300;
  const Tensor x = randn32({rows, cols}, 21, 3.0), gy = randn32({rows, cols}, 22);
  const Tensor w = randn32({cols}, 23), b = randn32({cols}, 24);
  // Every combination of what needs a gradient: input, weight, bias.
  for (int mask = 1; mask < 8; ++mask) {
    const bool want_x = mask & 1, want_w = mask & 2, want_b = mask & 4;
    auto grads = [&](DType dt) {
      Tensor xi = x.detach().to(dt).requires_grad_(want_x);
      Tensor wi = w.detach().to(dt).requires_grad_(want_w), bi = b.detach().to(dt).requires_grad_(want_b);
      F::layer_norm(xi, {cols}, wi, bi).backward(gy.to(dt));
      return std::vector<Tensor>{want_x ? xi.grad() : Tensor(), want_w ? wi.grad() : Tensor(),
                                 want_b ? bi.grad() : Tensor()};
    };
    const auto g32 = grads(kFloat32), g64 = grads(kFloat64);
    for (size_t i = 0; i < g32.size(); ++i) {
      ASSERT_EQ(g32[i].defined(), g64[i].defined());
      if (!g32[i].defined()) continue;
      SCOPED_TRACE("mask " + std::to_string(mask) + ", gradient " + std::to_string(i));
      // The input gradient is per row; the weight and bias gradients are sums over the 70 rows.
      EXPECT_CLOSE(g32[i].to(kFloat64), g64[i], i == 0 ? testing::kFp32VsReference : testing::kFp32SumVsReference);
    }
  }
}

TEST(LayerNorm, NormalisesOverTrailingDims) {
  const Tensor x = randn32({2, 3, 4, 5}, 4, 2.0);
  const std::vector<float> y = F::layer_norm(x, {4, 5}).to_vector<float>();
  for (int r = 0; r < 6; ++r) {
    double mean = 0, sq = 0;
    for (int c = 0; c < 20; ++c) mean += y[r * 20 + c];
    for (int c = 0; c < 20; ++c) sq += y[r * 20 + c] * y[r * 20 + c];
    EXPECT_NEAR(mean / 20, 0.0, 1e-6);
    EXPECT_NEAR(sq / 20, 1.0, 1e-3);  // var / (var + eps)
  }
}

TEST(LayerNorm, GradcheckWithAndWithoutAffine) {
  Tensor x = rand_input({4, 3, 5}, -2.0, 2.0, 5);
  Tensor w = rand_input({3, 5}, 0.5, 1.5, 6), b = rand_input({3, 5}, -1.0, 1.0, 7);
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {5}); }, {x}), "");
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {3, 5}, in[1], in[2]); },
                      {x, w, b}),
            "");
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {3, 5}, in[1]); }, {x, w}), "");
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {3, 5}, Tensor(), in[1]); },
                      {x, b}),
            "");
}

TEST(LayerNorm, GradcheckManyRowsUsesSeveralBlocks) {
  // 70 rows: more than one row block in the weight/bias gradient reduction.
  Tensor x = rand_input({70, 3}, -2.0, 2.0, 8);
  Tensor w = rand_input({3}, 0.5, 1.5, 9), b = rand_input({3}, -1.0, 1.0, 10);
  EXPECT_EQ(gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {3}, in[1], in[2]); },
                      {x, w, b}),
            "");
}

TEST(LayerNorm, HalfMatchesFp32) {
  for (DType dt : testing::kHalfDTypes) {
    const Tensor x = randn32({9, 40}, 11, 2.0), w = randn32({40}, 12), b = randn32({40}, 13);
    // The weight/bias gradients sum 9 rows of 16-bit inputs in fp32 and round once; dx's extra
    // error is that of the fp32 statistics, so both stay within the 16-bit rounding budget.
    testing::expect_half_matches_fp32(
        [](const std::vector<Tensor>& in) { return F::layer_norm(in[0], {40}, in[1], in[2]); }, {x, w, b}, dt,
        testing::vs_fp32(dt));
  }
}

TEST(LayerNorm, Fp32ParametersWithHalfInput) {
  const Tensor x32 = testing::rounded(randn32({5, 16}, 14), kBFloat16);
  Tensor xb = x32.to(kBFloat16).requires_grad_();
  Tensor w = randn32({16}, 15).requires_grad_(), b = randn32({16}, 16).requires_grad_();
  Tensor y = F::layer_norm(xb, {16}, w, b);
  EXPECT_EQ(y.dtype(), kBFloat16);
  y.backward(ones(y.shape(), {.dtype = kBFloat16}));
  EXPECT_EQ(xb.grad().dtype(), kBFloat16);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  const std::vector<float> gb = b.grad().to_vector<float>();
  for (float v : gb) EXPECT_EQ(v, 5.0f);  // dbias = sum of the ones over 5 rows
}

// Under autocast a 16-bit input is widened to fp32 for the kernel; backward keeps the 16-bit input
// (half the bytes) and widens it again: every gradient is bit-identical to the explicit widening.
TEST(LayerNorm, AutocastKeepsTheSixteenBitInputForBackward) {
  const Device dev = mixtrain::testing::test_device();
  const int64_t rows = 256, cols = 64;
  const Tensor x32 = testing::rounded(randn32({rows, cols}, 17), kBFloat16);
  const Tensor w32 = randn32({cols}, 18), b32 = randn32({cols}, 19), gy = randn32({rows, cols}, 20);
  auto run = [&](bool under_autocast, int64_t* kept_bytes) {
    Tensor xb = x32.to(kBFloat16).requires_grad_(), w = w32.clone().requires_grad_(), b = b32.clone().requires_grad_();
    const int64_t before = memory::stats(dev).current_bytes;
    Tensor y;
    if (under_autocast) {
      amp::Autocast ac(dev.type, kBFloat16);
      y = F::layer_norm(xb, {cols}, w, b);
    } else {
      y = F::layer_norm(xb.to(kFloat32), {cols}, w, b);
    }
    if (kept_bytes) *kept_bytes = memory::stats(dev).current_bytes - before;
    EXPECT_EQ(y.dtype(), kFloat32);
    y.backward(gy);
    return std::vector<std::vector<float>>{y.detach().to_vector<float>(), xb.grad().to(kFloat32).to_vector<float>(),
                                           w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  int64_t kept = 0;
  EXPECT_EQ(run(true, &kept), run(false, nullptr));
  // The fp32 output and the row statistics, plus the input in bf16 (no fp32 copy of it).
  EXPECT_LE(kept, rows * cols * 4 + 2 * rows * 4 + rows * cols * 2 + 4096);
}

TEST(LayerNorm, ParameterGradientsIndependentOfThreadCount) {
  const Tensor x = randn32({4000, 24}, 17).to(kBFloat16), gy = randn32({4000, 24}, 18).to(kBFloat16);
  auto grads = [&] {
    Tensor xi = x.detach().requires_grad_();
    Tensor w = ones({24}).requires_grad_(), b = zeros({24}).requires_grad_();
    F::layer_norm(xi, {24}, w, b).backward(gy);
    return std::vector<Tensor>{xi.grad(), w.grad(), b.grad()};
  };
  const auto one = testing::with_threads(1, grads);
  const auto two = testing::with_threads(2, grads);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(one[i], two[i])) << "gradient " << i;
}

TEST(LayerNorm, Errors) {
  expect_error([] { F::layer_norm(zeros({2, 3}), {4}); }, {"layer_norm", "[4]", "[2, 3]"});
  expect_error([] { F::layer_norm(zeros({2, 3}), {3}, zeros({4})); }, {"layer_norm", "weight", "[4]"});
  expect_error([] { F::layer_norm(zeros({2, 3}, {.dtype = kInt32}), {3}); }, {"layer_norm", "int32"});
}

}  // namespace
}  // namespace mixtrain::testing
