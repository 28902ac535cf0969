// mixtrain/nn/init.h: parameter initialisers (mt::nn::init), PyTorch's torch.nn.init.
//
// Each fills a floating tensor in place, without recording autograd (they run under NoGradGuard,
// so they work on parameters that require grad) and returns the same handle. Random ones take an
// optional Generator (nullptr: the process-wide one), so a model built from a seeded Generator is
// reproducible: the values depend only on the seed and the order of the draws (random.h).
// Formulas are PyTorch's; fan_in/fan_out of a [out, in, k...] weight are in*prod(k) / out*prod(k).
#pragma once

#include <cstdint>
#include <utility>

#include "mixtrain/random.h"
#include "mixtrain/tensor.h"

namespace mixtrain::nn::init {

enum class FanMode { kFanIn, kFanOut };
enum class Nonlinearity { kLinear, kConv2d, kSigmoid, kTanh, kReLU, kLeakyReLU, kSELU };

// The recommended gain for a nonlinearity: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2) (relu),
// sqrt(2 / (1 + param^2)) (leaky_relu with negative slope `param`), 3/4 (selu).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// {fan_in, fan_out} of a weight with at least 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);

// U(-bound, bound) with bound = gain * sqrt(3 / fan). With the defaults of Linear and Conv2d
// (a = sqrt(5), fan_in, leaky_relu) the bound is exactly 1 / sqrt(fan_in).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                        Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU, Generator* gen = nullptr);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                       Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU, Generator* gen = nullptr);
// U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace mixtrain::nn::init
