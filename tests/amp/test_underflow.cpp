// The seed claim, as a test: with the loss multiplied by 2^-20, fp16 gradients flush to zero and the
// model does not learn; a GradScaler restores learning; bf16 learns with no scaler; fp32 is the
// reference. The experiment itself lives in examples/fp16_underflow.h (also run as an example).
#include <gtest/gtest.h>

#include "fp16_underflow.h"

using namespace underflow_demo;

namespace {
constexpr int kSteps = 300;
// "Learns": the MSE falls below a quarter of its starting value (the fp32 run reaches far less;
// see docs/amp.md for the printed table). "Does not learn": it stays above 95% of it.
constexpr double kLearned = 0.25;
constexpr double kStuck = 0.95;
}  // namespace

TEST(Underflow, Fp32Reference) {
  Result r = run(Mode::kFp32, kSteps);
  EXPECT_LT(r.final_loss, kLearned * r.initial_loss);
  EXPECT_LT(r.zero_grad_fraction, 0.5) << "only ReLU-dead units give exact zeros in fp32";
}

TEST(Underflow, Fp16WithoutScalerDoesNotLearn) {
  Result fp32 = run(Mode::kFp32, kSteps);
  Result r = run(Mode::kFp16NoScaler, kSteps);
  EXPECT_GT(r.zero_grad_fraction, 0.99) << "fp16 gradients below 6e-8 flush to zero";
  EXPECT_GT(r.final_loss, kStuck * r.initial_loss);
  EXPECT_GT(r.zero_grad_fraction, fp32.zero_grad_fraction + 0.4);
}

TEST(Underflow, Fp16WithGradScalerLearns) {
  Result fp32 = run(Mode::kFp32, kSteps);
  Result r = run(Mode::kFp16Scaler, kSteps);
  EXPECT_LT(r.final_loss, kLearned * r.initial_loss);
  EXPECT_LT(r.zero_grad_fraction, 0.5);
  // Same accuracy as fp32, up to fp16 rounding of activations and gradients.
  EXPECT_LT(r.final_loss, 2.0 * fp32.final_loss + 1e-3);
}

TEST(Underflow, Bf16LearnsWithoutScaler) {
  Result fp32 = run(Mode::kFp32, kSteps);
  Result r = run(Mode::kBf16, kSteps);
  EXPECT_LT(r.final_loss, kLearned * r.initial_loss);
  EXPECT_LT(r.zero_grad_fraction, 0.5) << "bf16 has fp32's exponent range: no underflow";
  EXPECT_LT(r.final_loss, 2.0 * fp32.final_loss + 1e-3);
}
