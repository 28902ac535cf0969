// gelu_linear (src/ops/nn_gelu_linear.cpp): bit-identical to linear(gelu(x), w, b) in value and in
// every gradient, for the exact and the tanh GELU, in fp32 and under bf16/fp16 autocast (where it
// also keeps one activation instead of two); fp64 finite differences; errors.
#include <gtest/gtest.h>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/linalg.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

// Value and gradients (x, w, b) of f(x, w, b) for a seeded output gradient, on fresh fp32 leaves.
std::vector<std::vector<float>> run(bool fused, std::optional<DType> autocast_dtype, bool with_bias,
                                    GeluApproximation approx = GeluApproximation::kNone) {
  Tensor x = randn32({3, 5, 24}, 1).requires_grad_();
  Tensor w = randn32({10, 24}, 2, 0.2).requires_grad_();
  Tensor b = with_bias ? randn32({10}, 3).requires_grad_() : Tensor();
  Tensor y;
  {
    std::optional<amp::Autocast> ac;
    if (autocast_dtype) ac.emplace(mixtrain::testing::test_device().type, *autocast_dtype);
    y = fused ? F::gelu_linear(x, w, b, approx) : linear(gelu(x, approx), w, b);
  }
  y.backward(randn32(y.shape(), 4).to(y.dtype()));
  std::vector<std::vector<float>> r{y.to(kFloat32).to_vector<float>(), x.grad().to_vector<float>(),
                                    w.grad().to_vector<float>()};
  if (with_bias) r.push_back(b.grad().to_vector<float>());
  return r;
}

TEST(GeluLinear, BitIdenticalToTheComposition) {
  for (std::optional<DType> dt :
       {std::optional<DType>(), std::optional<DType>(kBFloat16), std::optional<DType>(kFloat16)}) {
    for (bool bias : {true, false}) {
      for (GeluApproximation approx : {GeluApproximation::kNone, GeluApproximation::kTanh}) {
        SCOPED_TRACE(std::string(dt ? to_string(*dt) : "fp32") + (bias ? " bias" : " no bias") +
                     (approx == GeluApproximation::kTanh ? " tanh" : " erf"));
        EXPECT_EQ(run(true, dt, bias, approx), run(false, dt, bias, approx));
      }
    }
  }
}

TEST(GeluLinear, AutocastOutputDtypeAndSavesOneActivation) {
  Tensor x = randn32({64, 256}, 5).to(kBFloat16).requires_grad_();
  Tensor w = randn32({8, 256}, 6).requires_grad_();
  const int64_t before = memory::stats(mixtrain::testing::test_device()).current_bytes;
  Tensor y_fused, y_plain;
  {
    amp::Autocast ac(mixtrain::testing::test_device().type, kBFloat16);
    y_fused = F::gelu_linear(x, w);
  }
  const int64_t fused_bytes = memory::stats(mixtrain::testing::test_device()).current_bytes - before;
  {
    amp::Autocast ac(mixtrain::testing::test_device().type, kBFloat16);
    y_plain = linear(gelu(x), w);
  }
  const int64_t plain_bytes = memory::stats(mixtrain::testing::test_device()).current_bytes - before - fused_bytes;
  EXPECT_EQ(y_fused.dtype(), kBFloat16);
  // The composition also keeps gelu(x) ([64, 256] bf16) for the weight gradient.
  EXPECT_GE(plain_bytes - fused_bytes, 64 * 256 * 2);
}

TEST(GeluLinear, Gradcheck) {
  for (GeluApproximation approx : {GeluApproximation::kNone, GeluApproximation::kTanh}) {
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::gelu_linear(in[0], in[1], in[2], approx); },
                        {rand_input({2, 3, 4}, -2, 2, 7), rand_input({5, 4}, -1, 1, 8), rand_input({5}, -1, 1, 9)}),
              "");
  }
}

TEST(GeluLinear, Errors) {
  expect_error([] { F::gelu_linear(zeros({2, 4}), zeros({3, 5})); }, {"gelu_linear", "[3, 5]", "[2, 4]"});
  expect_error([] { F::gelu_linear(zeros({2, 4}, {.dtype = kInt64}), zeros({3, 4})); }, {"gelu_linear", "floating"});
  expect_error([] { F::gelu_linear(zeros({2, 4}), zeros({3, 4}), zeros({4})); }, {"linear", "bias"});
}

}  // namespace
}  // namespace mixtrain::testing
