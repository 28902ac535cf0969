// cross_entropy and nll_loss (src/ops/loss.cpp, src/backends/cpu/kernels/loss.cpp): known values, an fp64
// reference with ignore_index and label smoothing, gradients by finite differences for every
// reduction and option, 16-bit runs against fp32, and the error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;
using F::Reduction;

// PyTorch's cross_entropy in double: per-row (1-eps)(lse - x_t) + eps/C sum_c (lse - x_c), ignored
// rows 0; mean divides by the number of rows not ignored.
std::vector<double> reference_ce(const Tensor& logits, const std::vector<int64_t>& target, Reduction red,
                                 int64_t ignore, double eps) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const std::vector<double> x = logits.to_vector<double>();
  std::vector<double> rows(N, 0.0);
  double total = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (target[r] == ignore) continue;
    double m = -INFINITY, s = 0, sum_x = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m), sum_x += x[r * C + c];
    const double lse = m + std::log(s);
    rows[r] = (1 - eps) * (lse - x[r * C + target[r]]) + eps / C * (C * lse - sum_x);
    total += rows[r];
    ++valid;
  }
  if (red == Reduction::kNone) return rows;
  return {red == Reduction::kMean ? total / valid : total};
}

TEST(CrossEntropy, UniformLogitsGiveLogC) {
  const Tensor logits = zeros({5, 10});
  const Tensor target = from_vector<int64_t>({0, 3, 9, 2, 2});
  EXPECT_NEAR(F::cross_entropy(logits, target).item<double>(), std::log(10.0), 1e-6);
  EXPECT_NEAR(F::cross_entropy(logits, target, Reduction::kSum).item<double>(), 5 * std::log(10.0), 1e-5);
  for (float v : F::cross_entropy(logits, target, Reduction::kNone).to_vector<float>()) EXPECT_NEAR(v, std::log(10.0), 1e-6);
}

TEST(CrossEntropy, MatchesFp64ReferenceWithIgnoreIndexAndSmoothing) {
  const Tensor logits = randn32({9, 37}, 1, 4.0);
  const std::vector<int64_t> tv = {3, -100, 0, 36, 5, 5, -100, 12, 20};
  const Tensor target = from_vector(tv);
  for (double eps : {0.0, 0.1}) {
    for (Reduction red : kAllReductions) {
      SCOPED_TRACE("eps " + std::to_string(eps) + " reduction " + std::to_string(static_cast<int>(red)));
      const std::vector<double> ref = reference_ce(logits, tv, red, -100, eps);
      const Tensor got = F::cross_entropy(logits, target, red, -100, eps);
      EXPECT_CLOSE(testing::flat(got), from_vector(ref), testing::kFp32VsReference);
    }
  }
}

TEST(CrossEntropy, AllRowsIgnoredMeanIsNaN) {
  const Tensor target = from_vector<int64_t>({-100, -100});
  EXPECT_TRUE(std::isnan(F::cross_entropy(zeros({2, 3}), target).item<double>()));
  EXPECT_EQ(F::cross_entropy(zeros({2, 3}), target, Reduction::kSum).item<double>(), 0.0);
}

TEST(CrossEntropy, GradcheckReductionsIgnoreIndexSmoothing) {
  const Tensor target = from_vector<int64_t>({1, 4, -1, 0, 4, 2});
  for (Reduction red : kAllReductions) {
    for (double eps : {0.0, 0.2}) {
      for (int64_t ignore : {-100, -1}) {
        SCOPED_TRACE("reduction " + std::to_string(static_cast<int>(red)) + " eps " + std::to_string(eps) +
                     " ignore " + std::to_string(ignore));
        if (ignore == -100 && red == Reduction::kMean && eps == 0.0) continue;  // -1 would be out of range
        const Tensor t = ignore == -100 ? from_vector<int64_t>({1, 4, 3, 0, 4, 2}) : target;
        Tensor x = rand_input({6, 5}, -2.0, 2.0, 2);
        EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t, red, ignore, eps); },
                            {x}),
                  "");
      }
    }
  }
}

TEST(CrossEntropy, SpatialDimsAndInt32Targets) {
  // [N, C, d] logits with [N, d] int32 targets equal the [N*d, C] problem with the class dim last.
  const Tensor x = randn32({2, 4, 3}, 3);
  const Tensor t = from_vector<int32_t>({0, 3, 1, 2, 2, -100}, {2, 3});
  const Tensor flat_x = x.permute({0, 2, 1}).contiguous().reshape({6, 4});
  const Tensor flat_t = from_vector<int64_t>({0, 3, 1, 2, 2, -100});
  for (Reduction red : kAllReductions) {
    Tensor a = F::cross_entropy(x, t, red);
    if (red == Reduction::kNone) EXPECT_EQ(a.shape(), Shape({2, 3}));
    EXPECT_CLOSE(testing::flat(a), testing::flat(F::cross_entropy(flat_x, flat_t, red)), testing::kFp32VsReference);
  }
  Tensor xd = rand_input({2, 4, 3}, -2.0, 2.0, 4);
  EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t, Reduction::kMean, -100, 0.1); },
                      {xd}),
            "");
  // A single sample: logits [C], target 0-d.
  EXPECT_NEAR(F::cross_entropy(zeros({4}), scalar_tensor(2, {.dtype = kInt64})).item<double>(), std::log(4.0), 1e-6);
}

TEST(CrossEntropy, HalfMatchesFp32AndKeepsLogitsDtype) {
  const Tensor target = from_vector<int64_t>({3, 0, 7, 7, -100, 1});
  for (DType dt : testing::kHalfDTypes) {
    for (Reduction red : kAllReductions) {
      testing::expect_half_matches_fp32(
          [&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], target, red, -100, 0.05); },
          {randn32({6, 8}, 5, 3.0)}, dt, testing::vs_fp32(dt));
    }
  }
}

TEST(NllLoss, MatchesPickedLogProbs) {
  const Tensor lp = F::log_softmax(randn32({4, 6}, 6), 1);
  const Tensor target = from_vector<int64_t>({5, 0, -100, 2});
  const std::vector<float> v = lp.to_vector<float>();
  const std::vector<float> none = F::nll_loss(lp, target, Reduction::kNone).to_vector<float>();
  EXPECT_EQ(none[0], -v[5]);
  EXPECT_EQ(none[2], 0.0f);
  EXPECT_NEAR(F::nll_loss(lp, target).item<double>(), -(v[5] + v[6] + v[20]) / 3.0, 1e-6);
  EXPECT_CLOSE(F::nll_loss(lp, target), F::cross_entropy(randn32({4, 6}, 6), target), testing::kFp32VsReference);
}

TEST(NllLoss, Gradcheck) {
  const Tensor target = from_vector<int64_t>({1, 4, -100, 0});
  for (Reduction red : kAllReductions) {
    Tensor x = rand_input({4, 5}, -3.0, 0.0, 7);
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], target, red); }, {x}), "");
  }
}

TEST(CrossEntropy, AutocastComputesInFp32) {
  // The fp32 policy casts bf16 logits up before the op: the loss and its math are fp32, and the
  // gradient flows back through the cast to the bf16 logits.
  Tensor logits = randn32({4, 6}, 8).to(kBFloat16).requires_grad_();
  const Tensor target = from_vector<int64_t>({0, 5, 2, 2});
  Tensor loss;
  {
    amp::Autocast autocast(mixtrain::testing::test_device().type, kBFloat16);
    loss = F::cross_entropy(logits, target);
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  EXPECT_EQ(loss.item<float>(), F::cross_entropy(logits.detach().to(kFloat32), target).item<float>());
  loss.backward();
  EXPECT_EQ(logits.grad().dtype(), kBFloat16);
}

TEST(CrossEntropy, Errors) {
  expect_error([] { F::cross_entropy(zeros({2, 5}), from_vector<int64_t>({1, 7})); },
               {"cross_entropy", "7", "5 classes"});
  expect_error([] { F::cross_entropy(zeros({2, 5}), from_vector<int32_t>({-3, 1})); }, {"cross_entropy", "-3"});
  expect_error([] { F::cross_entropy(zeros({2, 5}), zeros({2})); }, {"cross_entropy", "int64", "float32"});
  expect_error([] { F::cross_entropy(zeros({2, 5}), from_vector<int64_t>({1, 2, 3})); }, {"cross_entropy", "[3]", "[2]"});
  expect_error([] { F::cross_entropy(zeros({2, 5}), from_vector<int64_t>({1, 2}), Reduction::kMean, -100, 1.5); },
               {"cross_entropy", "label_smoothing"});
  expect_error([] { F::nll_loss(zeros({2, 5}), from_vector<int64_t>({5, 0})); }, {"nll_loss", "5 classes"});
}

}  // namespace
}  // namespace mixtrain::testing
