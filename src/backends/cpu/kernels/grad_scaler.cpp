// The grad scaler's kernels on the CPU (kernels/optim.h). The unscale loop itself is the
// multi-tensor scale-and-check kernel shared with gradient clipping (optim_kernels.cpp).
#include <cmath>

#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"
#include "kernels/optim.h"

namespace mixtrain::kernels {
namespace {

int64_t unscale_cpu(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  const float inv = *host_ptr<float>(inv_scale);
  const int64_t first_bad = scale_and_check_table(found_inf.device(), kFloat32)(grads, inv);
  if (first_bad >= 0) *host_ptr<float>(found_inf) = 1.0f;
  return first_bad;
}

void update_scale_cpu(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                      double backoff_factor, int64_t growth_interval) {
  float* s = host_ptr<float>(scale);
  int32_t* tracker = host_ptr<int32_t>(growth_tracker);
  if (*host_ptr<float>(found_inf) != 0.0f) {
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
}

}  // namespace

void register_cpu_amp(const Registry& r) {
  r.set(amp_unscale_table, kFloat32, &unscale_cpu);
  r.set(amp_update_scale_table, kFloat32, &update_scale_cpu);
}

}  // namespace mixtrain::kernels
