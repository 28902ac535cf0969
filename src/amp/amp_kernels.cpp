// The grad scaler's kernels on the CPU (see amp_kernels.h). The unscale loop itself is the
// multi-tensor scale-and-check kernel shared with gradient clipping (kernels/cpu/optim_kernels.cpp).
#include "amp/amp_kernels.h"

#include <cmath>

#include "kernels/cpu/optim_kernels.h"

namespace mixtrain::amp::detail {
namespace {

void check_scalar(const Tensor& t, DType dtype, const char* what) {
  MT_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype, "grad scaler: ", what, " must be a one-element ", dtype,
           " tensor, got ", t.defined() ? describe(t) : std::string("an undefined tensor"));
}

}  // namespace

int64_t non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                      const Tensor& inv_scale) {
  check_scalar(found_inf, kFloat32, "found_inf");
  check_scalar(inv_scale, kFloat32, "inv_scale");
  if (grads.empty()) return -1;
  for (const Tensor& g : grads)
    MT_CHECK(g.device() == found_inf.device(), "unscale_: gradient ", describe(g), " is on ", g.device(),
             " but the scale is on ", found_inf.device(), "; all gradients must be on the scale's device");
  const float inv = inv_scale.item<float>();
  int64_t first_bad = kernels::multi_tensor_scale_and_check(grads, inv);
  if (inv != 1.0f)
    for (const Tensor& g : grads) g.bump_version();
  if (first_bad >= 0) {
    *found_inf.data_ptr<float>() = 1.0f;
    found_inf.bump_version();
  }
  return first_bad;
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                   double backoff_factor, int64_t growth_interval) {
  check_scalar(scale, kFloat32, "scale");
  check_scalar(growth_tracker, kInt32, "growth_tracker");
  check_scalar(found_inf, kFloat32, "found_inf");
  float* s = scale.data_ptr<float>();
  int32_t* tracker = growth_tracker.data_ptr<int32_t>();
  if (*found_inf.data_ptr<float>() != 0.0f) {
    *s = static_cast<float>(static_cast<double>(*s) * backoff_factor);
    *tracker = 0;
  } else {
    const int64_t successful = static_cast<int64_t>(*tracker) + 1;
    if (successful == growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(*s) * growth_factor);
      if (std::isfinite(grown)) *s = grown;  // never grow to inf (1e38 * 16 keeps 1e38)
      *tracker = 0;
    } else {
      *tracker = static_cast<int32_t>(successful);
    }
  }
  scale.bump_version();
  growth_tracker.bump_version();
}

}  // namespace mixtrain::amp::detail
