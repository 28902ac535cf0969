// clip_grad_norm_: per-tensor norms from the multi-tensor kernel, PyTorch's norm-of-norms, and the
// multi-tensor scaling kernel.
#include "mixtrain/optim/clip_grad.h"

#include <cmath>

#include "kernels/optim.h"

namespace mixtrain::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  MT_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  const bool inf_norm = std::isinf(norm_type);
  std::vector<float> partial = kernels::multi_tensor_norm_partials(grads, norm_type);
  // total = norm of the per-tensor norms (fp32, like PyTorch's vector_norm of the stacked norms).
  const float p = static_cast<float>(norm_type);
  auto power = [&](float x) { return norm_type == 2.0 ? x * x : norm_type == 1.0 ? x : std::pow(x, p); };
  auto root = [&](float x) { return norm_type == 2.0 ? std::sqrt(x) : norm_type == 1.0 ? x : std::pow(x, 1.0f / p); };
  float total = 0.0f;
  bool nan = false;
  for (float s : partial) {
    nan |= std::isnan(s);
    total = inf_norm ? std::max(total, s) : total + power(root(s));
  }
  if (!inf_norm) total = root(total);
  if (nan) total = std::nanf("");
  MT_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
           " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and scale "
           "the gradients by the non-finite norm anyway, set `error_if_nonfinite=false`");
  // clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN stays NaN), in fp32.
  float coef = static_cast<float>(max_norm) / (total + 1e-6f);
  if (coef > 1.0f) coef = 1.0f;
  if (coef != 1.0f) {  // multiplying by exactly 1 changes nothing
    kernels::multi_tensor_scale_and_check(grads, coef);
    for (const Tensor& g : grads) g.bump_version();
  }
  return static_cast<double>(total);
}

}  // namespace mixtrain::optim
