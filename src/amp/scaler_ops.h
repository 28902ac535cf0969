// src/amp/scaler_ops.h (internal): the grad scaler's two ops, front ends of kernels/optim.h's tables:
// PyTorch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, on tensors so that a device
// backend can run them without a host round trip.
//
// Tensor roles: `scale` is a 0-dim float32, `growth_tracker` a 0-dim int32, `found_inf` and
// `inv_scale` 0-dim float32, all on the device of the gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::amp::detail {

// grads *= inv_scale in place (fp32 math, 16-bit grads widened and rounded back; nothing is written
// when inv_scale == 1, which makes it a pure check) and found_inf = 1 when any element was inf or NaN.
// Every element is multiplied even when an inf is found; found_inf is only ever set, never cleared.
// Grads may be strided views (g.t(), g[:, :5]); dtypes float32, float16, bfloat16, float64.
// Returns the index (in `grads`) of the first gradient holding a non-finite value, or -1: the
// collapse diagnostic uses it to name the parameter, at no extra pass.
// check_only: the caller's inv_scale holds 1, so nothing is written to the gradients and their
// version counters are left alone (they may be saved for backward or watched by hooks).
int64_t non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                      const Tensor& inv_scale, bool check_only = false);

// The growth-tracker rule, in place:
//   found_inf != 0: scale *= backoff_factor, tracker = 0
//   else: tracker + 1 == growth_interval (exact equality) ? (scale *= growth_factor when the fp32
//         result is finite; tracker = 0) : tracker += 1
// The products are formed in fp64 and rounded to fp32, as in PyTorch's CPU kernel.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                   double backoff_factor, int64_t growth_interval);

}  // namespace mixtrain::amp::detail
