// The seed claim of mixed precision, as a runnable experiment: a model whose gradients are too
// small for fp16 stops learning under fp16 autocast (its gradients flush to zero), learns again
// with a GradScaler, and learns in bf16 with no scaler at all (bf16 has fp32's exponent range).
//
// The model is a two-layer MLP fitting a fixed random teacher on synthetic data. Its loss is
// multiplied by kLossFactor = 2^-20, which pushes every gradient below fp16's smallest subnormal
// (6e-8) while leaving the fp32 optimum unchanged; the SGD learning rate is divided by the same
// factor, so an fp32 run makes exactly the updates it would make on the unmultiplied loss.
// Shared by examples/fp16_underflow.cpp (prints the table) and tests/amp/test_underflow.cpp.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/numerics_monitor.h"

namespace underflow_demo {

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

inline constexpr double kLossFactor = 1.0 / (1 << 20);

enum class Mode { kFp32, kBf16, kFp16NoScaler, kFp16Scaler };

inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kFp32: return "fp32";
    case Mode::kBf16: return "bf16 autocast, no scaler";
    case Mode::kFp16NoScaler: return "fp16 autocast, no scaler";
    case Mode::kFp16Scaler: return "fp16 autocast + GradScaler";
  }
  return "?";
}

struct Result {
  double initial_loss = 0;     // unmultiplied MSE before training
  double final_loss = 0;       // unmultiplied MSE after training
  double zero_grad_fraction = 0;  // weight-gradient elements that are exactly 0 after the first backward
  int64_t skipped_steps = 0;
  double final_scale = 1;
};

// With `monitor`, every step is offered to it (it samples its own steps): ops, parameters, gradients.
inline Result run(Mode mode, int steps = 300, uint64_t seed = 0, mt::nn::NumericsMonitor* monitor = nullptr) {
  mt::Generator gen(seed);
  const int64_t n = 512, d_in = 32, hidden = 64;
  mt::Tensor x = mt::randn({n, d_in}, {}, &gen);
  mt::Tensor teacher = mt::randn({1, d_in}, {}, &gen);
  mt::Tensor y = mt::tanh(mt::linear(x, mt::mul(teacher, 0.3)));  // targets in (-1, 1)

  auto init = [&](mt::Shape s, double fan_in) {
    mt::Tensor t = mt::rand(s, {}, &gen);
    t = mt::mul(mt::add(t, -0.5), 2.0 / std::sqrt(fan_in));  // U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    return t.requires_grad_();
  };
  std::vector<mt::optim::NamedParameter> params = {{"fc1.weight", init({hidden, d_in}, d_in)},
                                                   {"fc1.bias", init({hidden}, d_in)},
                                                   {"fc2.weight", init({1, hidden}, hidden)},
                                                   {"fc2.bias", init({1}, hidden)}};
  auto forward = [&] {
    mt::Tensor h = mt::relu(mt::linear(x, params[0].param, params[1].param));
    return F::mse_loss(mt::linear(h, params[2].param, params[3].param), y);
  };
  auto plain_loss = [&] {
    mt::NoGradGuard no_grad;
    return forward().item<double>();
  };

  mt::optim::SGD opt(params, {.lr = 0.1 / kLossFactor});
  mt::amp::GradScaler scaler({.enabled = mode == Mode::kFp16Scaler});
  const bool autocast = mode != Mode::kFp32;
  const mt::DType dtype = mode == Mode::kBf16 ? mt::kBFloat16 : mt::kFloat16;

  Result r;
  r.initial_loss = plain_loss();
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    if (monitor != nullptr) monitor->begin_step(step + 1, scaler.is_enabled() ? scaler.get_scale() : 1.0);
    mt::Tensor loss;
    {
      mt::amp::Autocast ac(x.device().type, dtype, autocast);
      loss = mt::mul(forward(), kLossFactor);
    }
    scaler.scale(loss).backward();
    if (monitor != nullptr) {
      for (const auto& [name, p] : params) monitor->record_parameter(name, p);
      monitor->end_step();
    }
    if (step == 0) {
      int64_t zeros = 0, total = 0;
      for (int i : {0, 2}) {  // the two weight matrices
        mt::Tensor g = params[i].param.grad();
        std::vector<float> v = g.to_vector<float>();
        for (float e : v) zeros += (e == 0.0f);
        total += static_cast<int64_t>(v.size());
      }
      r.zero_grad_fraction = static_cast<double>(zeros) / static_cast<double>(total);
    }
    scaler.step(opt);
    scaler.update();
  }
  r.final_loss = plain_loss();
  r.skipped_steps = scaler.total_skipped_steps();
  r.final_scale = scaler.get_scale();
  return r;
}

}  // namespace underflow_demo
