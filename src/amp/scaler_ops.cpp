// The grad scaler's kernels: argument checks here, the work in the device's kernels (kernels/optim.h).
#include "amp/scaler_ops.h"

#include "kernels/optim.h"

namespace mixtrain::amp::detail {
namespace {

void check_scalar(const Tensor& t, DType dtype, const char* what) {
  MT_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype, "grad scaler: ", what, " must be a one-element ", dtype,
           " tensor, got ", t.defined() ? describe(t) : std::string("an undefined tensor"));
}

}  // namespace

int64_t non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                      const Tensor& inv_scale, bool check_only) {
  check_scalar(found_inf, kFloat32, "found_inf");
  check_scalar(inv_scale, kFloat32, "inv_scale");
  if (grads.empty()) return -1;
  for (const Tensor& g : grads)
    MT_CHECK(g.device() == found_inf.device(), "unscale_: gradient ", describe(g), " is on ", g.device(),
             " but the scale is on ", found_inf.device(), "; all gradients must be on the scale's device");
  MT_CHECK(inv_scale.device() == found_inf.device(), "unscale_: inv_scale is on ", inv_scale.device(),
           " but found_inf is on ", found_inf.device());
  const int64_t first_bad = kernels::amp_unscale_table(found_inf.device(), kFloat32)(grads, found_inf, inv_scale);
  if (!check_only)
    for (const Tensor& g : grads) g.bump_version();
  if (first_bad >= 0) found_inf.bump_version();
  return first_bad;
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                   double backoff_factor, int64_t growth_interval) {
  check_scalar(scale, kFloat32, "scale");
  check_scalar(growth_tracker, kInt32, "growth_tracker");
  check_scalar(found_inf, kFloat32, "found_inf");
  MT_CHECK(growth_tracker.device() == scale.device() && found_inf.device() == scale.device(),
           "update_scale_: scale, growth_tracker and found_inf must share a device, got ", scale.device(), ", ",
           growth_tracker.device(), ", ", found_inf.device());
  kernels::amp_update_scale_table(scale.device(), kFloat32)(scale, growth_tracker, found_inf, growth_factor,
                                                            backoff_factor, growth_interval);
  scale.bump_version();
  growth_tracker.bump_version();
}

}  // namespace mixtrain::amp::detail
