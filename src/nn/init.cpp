// Parameter initialisers: PyTorch's torch.nn.init formulas on top of the seeded factories.
#include "mixtrain/nn/init.h"

#include <cmath>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"

namespace mixtrain::nn::init {

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::kLinear:
    case Nonlinearity::kConv2d:
    case Nonlinearity::kSigmoid: return 1.0;
    case Nonlinearity::kTanh: return 5.0 / 3.0;
    case Nonlinearity::kReLU: return std::sqrt(2.0);
    case Nonlinearity::kLeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::kSELU: return 3.0 / 4.0;
  }
  MT_INTERNAL_ASSERT(false, "unknown nonlinearity");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MT_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dimensions, got ", describe(t));
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

namespace {
int64_t fan(const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  int64_t f = mode == FanMode::kFanIn ? in : out;
  MT_CHECK(f > 0, "init: cannot initialise a tensor with zero elements ", describe(t));
  return f;
}
}  // namespace

Tensor uniform_(const Tensor& t, double a, double b, Generator* gen) {
  NoGradGuard no_grad;
  Tensor h = t;
  mixtrain::uniform_(h, a, b, gen);
  return t;
}

Tensor normal_(const Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  Tensor h = t;
  mixtrain::normal_(h, mean, std, gen);
  return t;
}

Tensor constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  Tensor h = t;
  h.fill_(value);
  return t;
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  double bound = std::sqrt(3.0) * std;  // U(-b, b) has std b / sqrt(3)
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  return normal_(t, 0.0, std, gen);
}

Tensor xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

}  // namespace mixtrain::nn::init
