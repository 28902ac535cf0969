// mixtrain/optim/clip_grad.h: gradient clipping by total norm (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <limits>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Computes the norm of order `norm_type` (> 0, or kInfNorm for the max-abs norm) of all the
// gradients of `params` together, as if concatenated into one vector (parameters without a gradient
// are skipped), and scales every gradient in place by min(1, max_norm / (total_norm + 1e-6)):
// PyTorch's rule, so nothing changes when the norm is at most max_norm, and a NaN or inf norm turns
// the gradients into NaN/0 unless error_if_nonfinite is set, in which case mt::Error is thrown and
// nothing is changed.
//
// Precision: gradients of any float dtype and any strides; |g|^p is accumulated in fp32 per tensor
// (16-bit grads widened), the per-tensor norms are combined as PyTorch does (the norm of the
// per-tensor norms, in fp32), and the scaling is fp32 math rounded back to the gradient's dtype.
// The result does not depend on the thread count. Returns the total norm (0 when no gradients).
// The parameters' gradients must not overlap (list each parameter once).
//
// With a GradScaler, clip unscaled gradients: scaler.unscale_(opt) first, or clip the scaled
// gradients at max_norm * scaler.get_scale().
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace mixtrain::optim
