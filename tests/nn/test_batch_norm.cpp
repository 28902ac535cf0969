// batch_norm (functional) and BatchNorm2d: fp64 finite-difference gradients in training and eval
// mode, hand-computed outputs and running-stat updates, 16-bit kernels against fp32, mixed 16-bit
// input with fp32 statistics (the state after Module::to(kBFloat16)), and error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace F = mixtrain::nn::functional;
using mt::testing::error_message;
using mt::testing::gradcheck;
using mt::testing::kFp32VsReference;
using mt::testing::rand_input;

namespace {

// N = 2, C = 2, H = 1, W = 2. Channel 0 holds {1, 2, 3, 4}: mean 2.5, biased var 1.25, unbiased 5/3.
// Channel 1 holds {0, 2, 0, 2}: mean 1, biased var 1, unbiased 4/3.
mt::Tensor fixed_input() { return mt::from_vector<float>({1, 2, 0, 2, 3, 4, 0, 2}, {2, 2, 1, 2}); }

}  // namespace

TEST(BatchNormTest, GradcheckTrainingAndEval) {
  mt::Tensor x = rand_input({3, 2, 2, 3}, -1, 1, 1);
  mt::Tensor w = rand_input({2}, 0.5, 1.5, 2), b = rand_input({2}, -1, 1, 3);
  // Training with batch statistics (no running stats), with and without the affine parameters.
  EXPECT_EQ(
      gradcheck([](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], {}, {}, in[1], in[2], true); },
                {x, w, b}),
      "");
  EXPECT_EQ(
      gradcheck([](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], {}, {}, {}, {}, true); }, {x}), "");
  // Training that also updates running statistics (the update must not disturb the gradient).
  mt::Tensor rm = mt::zeros({2}, {.dtype = mt::kFloat64}), rv = mt::ones({2}, {.dtype = mt::kFloat64});
  EXPECT_EQ(
      gradcheck([&](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], rm, rv, in[1], in[2], true); },
                {x, w, b}),
      "");
  // Eval with fixed statistics: an affine map per channel. 3-D input [N, C, L] too.
  mt::Tensor em = mt::from_vector<double>({0.3, -0.2}), ev = mt::from_vector<double>({0.5, 2.0});
  EXPECT_EQ(
      gradcheck([&](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], em, ev, in[1], in[2], false); },
                {x, w, b}),
      "");
  mt::Tensor x3 = rand_input({4, 2, 5}, -2, 2, 4);
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], {}, {}, in[1], {}, true, 0.1, 1e-3); },
          {x3, w}),
      "");
}

TEST(BatchNormTest, Module2dTrainThenEvalByHand) {
  nn::BatchNorm2d bn(2);
  EXPECT_EQ(bn.state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  mt::Tensor x = fixed_input();
  const double eps = 1e-5;
  const double s0 = 1 / std::sqrt(1.25 + eps), s1 = 1 / std::sqrt(1.0 + eps);
  // Training: batch statistics with the biased variance. Layout [n][c][w].
  std::vector<double> train_ref = {(1 - 2.5) * s0, (2 - 2.5) * s0, (0 - 1) * s1, (2 - 1) * s1,
                                   (3 - 2.5) * s0, (4 - 2.5) * s0, (0 - 1) * s1, (2 - 1) * s1};
  EXPECT_CLOSE(bn(x), mt::from_vector(train_ref, x.shape()), kFp32VsReference);
  // Running stats: 0.9 * init + 0.1 * batch (unbiased variance for running_var).
  EXPECT_CLOSE(bn.running_mean(), mt::from_vector<double>({0.25, 0.1}), kFp32VsReference);
  EXPECT_CLOSE(bn.running_var(), mt::from_vector<double>({0.9 + 0.1 * 5.0 / 3.0, 0.9 + 0.1 * 4.0 / 3.0}),
               kFp32VsReference);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 2);
  // After two identical batches: m = 0.19 * batch_mean, v = 0.81 + 0.19 * unbiased.
  const double rm0 = 0.19 * 2.5, rm1 = 0.19, rv0 = 0.81 + 0.19 * 5.0 / 3.0, rv1 = 0.81 + 0.19 * 4.0 / 3.0;
  EXPECT_CLOSE(bn.running_mean(), mt::from_vector<double>({rm0, rm1}), kFp32VsReference);

  // Eval: the running statistics, no update.
  bn.eval();
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<double> eval_ref;
  for (int i = 0; i < 8; ++i) {
    int c = (i / 2) % 2;
    eval_ref.push_back((xs[i] - (c ? rm1 : rm0)) / std::sqrt((c ? rv1 : rv0) + eps));
  }
  EXPECT_CLOSE(bn(x), mt::from_vector(eval_ref, x.shape()), kFp32VsReference);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 2);
  EXPECT_CLOSE(bn.running_mean(), mt::from_vector<double>({rm0, rm1}), kFp32VsReference);

  // Affine parameters apply per channel.
  {
    mt::NoGradGuard no_grad;
    mt::Tensor w = bn.weight(), b = bn.bias();
    w.copy_(mt::from_vector<float>({2, -1}));
    b.copy_(mt::from_vector<float>({0.5, 3}));
  }
  std::vector<double> affine_ref = eval_ref;
  for (int i = 0; i < 8; ++i) affine_ref[i] = ((i / 2) % 2) ? -affine_ref[i] + 3 : 2 * affine_ref[i] + 0.5;
  EXPECT_CLOSE(bn(x), mt::from_vector(affine_ref, x.shape()), kFp32VsReference);
}

TEST(BatchNormTest, CumulativeMomentumAndNoRunningStats) {
  // momentum = nullopt: running stats are the plain average of all batches so far.
  nn::BatchNorm2d cma(2, {.momentum = std::nullopt});
  mt::Tensor x = fixed_input();
  cma(x);
  EXPECT_CLOSE(cma.running_mean(), mt::from_vector<double>({2.5, 1.0}), kFp32VsReference);
  EXPECT_CLOSE(cma.running_var(), mt::from_vector<double>({5.0 / 3.0, 4.0 / 3.0}), kFp32VsReference);
  cma(mt::mul(x, 3.0));  // batch mean {7.5, 3}: average {5, 2}
  EXPECT_CLOSE(cma.running_mean(), mt::from_vector<double>({5.0, 2.0}), kFp32VsReference);

  // Without running stats, eval also normalises with batch statistics.
  nn::BatchNorm2d nostats(2, {.affine = false, .track_running_stats = false});
  EXPECT_EQ(nostats.state_dict().size(), 0u);
  nostats.eval();
  std::vector<float> y = nostats(x).to_vector<float>();
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-6);
}

TEST(BatchNormTest, SixteenBitKernelsMatchFp32) {
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16}) {
    mt::Generator g(6);
    // Inputs rounded to 16 bits first, so the only difference is the rounding of the results.
    mt::Tensor x16 = mt::add(mt::mul(mt::randn({4, 3, 5, 5}, {}, &g), 2.0), 1.0).to(dt);
    mt::Tensor x32 = x16.to(mt::kFloat32);
    mt::Tensor w = mt::from_vector<float>({1.5, -0.5, 1}), b = mt::from_vector<float>({0, 1, -1});
    mt::Tensor w16 = w.to(dt).requires_grad_(), b16 = b.to(dt).requires_grad_();
    mt::Tensor w32 = w16.to(mt::kFloat32).detach().requires_grad_(),
               b32 = b16.to(mt::kFloat32).detach().requires_grad_();
    x16.requires_grad_();
    x32.requires_grad_();
    mt::Tensor y16 = F::batch_norm(x16, {}, {}, w16, b16, true);
    mt::Tensor y32 = F::batch_norm(x32, {}, {}, w32, b32, true);
    ASSERT_EQ(y16.dtype(), dt);
    EXPECT_CLOSE(y16, y32, mt::testing::vs_fp32(dt));
    mt::Tensor gy = mt::randn(y32.shape(), {}, &g).to(dt);
    y16.backward(gy);
    y32.backward(gy.to(mt::kFloat32));
    EXPECT_EQ(x16.grad().dtype(), dt);
    EXPECT_EQ(w16.grad().dtype(), dt);
    EXPECT_CLOSE(x16.grad(), x32.grad(), mt::testing::vs_fp32(dt));
    // Weight/bias gradients are sums over 100 values: relative rounding of the result only.
    EXPECT_CLOSE(w16.grad(), w32.grad(), mt::testing::vs_fp32(dt));
    EXPECT_CLOSE(b16.grad(), b32.grad(), mt::testing::vs_fp32(dt));
  }
}

TEST(BatchNormTest, ToBFloat16KeepsRunningStatsFp32) {
  nn::Sequential model(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU());
  model.to(mt::kBFloat16);
  auto bn = model.at<nn::BatchNorm2d>(1);
  EXPECT_EQ(model.at<nn::Conv2d>(0)->weight().dtype(), mt::kBFloat16);
  EXPECT_EQ(bn->weight().dtype(), mt::kBFloat16);
  EXPECT_EQ(bn->bias().dtype(), mt::kBFloat16);
  EXPECT_EQ(bn->running_mean().dtype(), mt::kFloat32);
  EXPECT_EQ(bn->running_var().dtype(), mt::kFloat32);
  EXPECT_EQ(bn->num_batches_tracked().dtype(), mt::kInt64);
  // The bf16 model trains with fp32 statistics: small momentum updates are kept exactly in fp32.
  mt::Generator g(1);
  mt::Tensor x = mt::randn({2, 4, 3, 3}, {}, &g).to(mt::kBFloat16);
  nn::BatchNorm2d& b = *bn;
  mt::Tensor y = b(x);
  EXPECT_EQ(y.dtype(), mt::kBFloat16);
  y.backward(mt::ones_like(y));
  EXPECT_EQ(bn->weight().grad().dtype(), mt::kBFloat16);
  // The fp32 running mean equals 0.1 * the batch mean computed in fp32 from the bf16 values.
  std::vector<float> xv = x.to_vector<float>(), rm = bn->running_mean().to_vector<float>();
  for (int c = 0; c < 4; ++c) {
    double m = 0;
    for (int n = 0; n < 2; ++n)
      for (int s = 0; s < 9; ++s) m += xv[(n * 4 + c) * 9 + s];
    EXPECT_NEAR(rm[c], 0.1 * m / 18, 1e-6);
  }
  // An fp32 checkpoint of the state loads back (dtypes converted per entry).
  nn::Sequential fresh(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU());
  fresh.load_state_dict(model.state_dict());
  EXPECT_EQ(fresh.at<nn::BatchNorm2d>(1)->running_mean().to_vector<float>(), rm);
  EXPECT_EQ(fresh.at<nn::BatchNorm2d>(1)->num_batches_tracked().item<int64_t>(), 1);
}

TEST(BatchNormTest, UnderAutocastRunsInTheInputDtype) {
  // fp32 model under bf16 autocast: the conv produces bf16, batch_norm keeps bf16 with its fp32
  // parameters and statistics, and the parameters' gradients come back fp32.
  mt::Generator g(3);
  nn::Sequential model(nn::Conv2d(1, 4, 3, {.padding = 1, .generator = &g}), nn::BatchNorm2d(4));
  mt::Tensor x = mt::randn({2, 1, 5, 5}, {}, &g);
  mt::Tensor y;
  {
    mt::amp::Autocast autocast(mt::testing::test_device().type, mt::kBFloat16);
    y = model(x);
  }
  EXPECT_EQ(y.dtype(), mt::kBFloat16);
  y.backward(mt::ones_like(y));
  auto bn = model.at<nn::BatchNorm2d>(1);
  EXPECT_EQ(bn->weight().grad().dtype(), mt::kFloat32);
  EXPECT_EQ(model.at<nn::Conv2d>(0)->weight().grad().dtype(), mt::kFloat32);
  EXPECT_EQ(bn->running_mean().dtype(), mt::kFloat32);
  // Each channel of a training-mode output has mean ~0: the bias gradient is the count, 2*5*5.
  EXPECT_EQ(bn->bias().grad().to_vector<float>(), std::vector<float>(4, 50.0f));
}

TEST(BatchNormTest, ErrorsNameTheOp) {
  mt::Tensor x = mt::ones({2, 3, 2, 2});
  EXPECT_NE(error_message([&] { F::batch_norm(x, {}, {}, mt::ones({4})); }).find("batch_norm: weight"),
            std::string::npos);
  EXPECT_NE(error_message([&] { F::batch_norm(x, {}, {}, {}, {}, false); }).find("evaluation mode"), std::string::npos);
  EXPECT_NE(error_message([&] {
              F::batch_norm(mt::ones({1, 3}), {}, {}, {}, {}, true);
            }).find("more than 1 value"),
            std::string::npos);
  EXPECT_THROW(F::batch_norm(x, mt::zeros({3}), {}), mt::Error);  // running stats come in pairs
  EXPECT_THROW(F::batch_norm(mt::ones({3}), {}, {}, {}, {}, true), mt::Error);
  EXPECT_THROW(F::batch_norm(x, {}, {}, mt::ones({3}, {.dtype = mt::kFloat64}), {}, true), mt::Error);
  nn::BatchNorm2d bn(3);
  EXPECT_NE(error_message([&] { bn(mt::ones({2, 4, 2, 2})); }).find("BatchNorm2d(3)"), std::string::npos);
}
