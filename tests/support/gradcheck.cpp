#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"

namespace mixtrain::testing {

namespace {

double project(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

}  // namespace

Tensor rand_input(const Shape& shape, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  Tensor t = add(mul(rand(shape, {.dtype = kFloat64}, &g), hi - lo), lo);
  t.requires_grad_();
  return t;
}

std::string gradcheck(const TensorFn& f, std::vector<Tensor> inputs, const GradcheckOptions& opts) {
  auto skipped = [&](int i) {
    for (int s : opts.skip)
      if (s == i) return true;
    return !inputs[i].defined() || !inputs[i].requires_grad();
  };
  Tensor y = f(inputs);
  if (!y.requires_grad()) return "output does not require grad";
  Generator g(1234);
  Tensor r = randn(y.shape(), {.dtype = y.dtype()}, &g);
  std::vector<double> rv = r.to_vector<double>();

  std::vector<Tensor> diff_inputs;
  std::vector<int> diff_index;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    if (skipped(i)) continue;
    diff_inputs.push_back(inputs[i]);
    diff_index.push_back(i);
  }
  autograd::TensorList analytic = autograd::grad({y}, diff_inputs, {r});

  std::ostringstream report;
  double worst = 0;
  for (size_t k = 0; k < diff_inputs.size(); ++k) {
    Tensor x = diff_inputs[k];
    if (x.dtype() != kFloat64) return "gradcheck inputs must be float64";
    if (!x.is_contiguous()) return "gradcheck inputs must be contiguous";
    std::vector<double> a = analytic[k].defined() ? analytic[k].to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    // Element i is written through a one-element view (fill_ is a kernel: any device).
    const Tensor elements = x.detach().reshape({-1});
    const std::vector<double> values = x.to_vector<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = values[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        Tensor element = elements.select(0, i);
        element.fill_(orig + opts.eps);
        plus = project(f(inputs), rv);
        element.fill_(orig - opts.eps);
        minus = project(f(inputs), rv);
        element.fill_(orig);
      }
      double numeric = (plus - minus) / (2 * opts.eps);
      double err = std::abs(a[i] - numeric) / (opts.tol.atol + opts.tol.rtol * std::abs(numeric));
      // A NaN or infinite gradient on either side is a failure, never a skipped comparison (NaN
      // compares false with everything, so `err > worst` alone would pass it).
      if (!std::isfinite(a[i]) || !std::isfinite(numeric) || std::isnan(err)) err = INFINITY;
      if (err > worst || (err == INFINITY && worst != INFINITY)) {
        worst = err;
        report.str("");
        report << "input " << diff_index[k] << " element " << i << ": analytic " << a[i] << ", numeric " << numeric;
      }
    }
  }
  return worst <= 1.0 ? std::string() : report.str();
}

double max_scaled_error(const Tensor& actual, const Tensor& expected, const Tolerance& tol) {
  if (!(actual.shape() == expected.shape())) return INFINITY;
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(e[i])) {
      if (std::isnan(a[i]) != std::isnan(e[i])) return INFINITY;
      continue;
    }
    if (a[i] == e[i]) continue;  // also covers equal infinities
    // Unequal with an infinity on either side: |a - e| / (atol + rtol |e|) would be inf / inf = NaN,
    // which std::max drops.
    if (std::isinf(a[i]) || std::isinf(e[i])) return INFINITY;
    worst = std::max(worst, std::abs(a[i] - e[i]) / (tol.atol + tol.rtol * std::abs(e[i])));
  }
  return worst;
}

}  // namespace mixtrain::testing
