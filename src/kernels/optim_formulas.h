// Adam's derived constants, one definition for every device: what the CPU kernels
// (backends/cpu/kernels/adam.cpp and its AVX2 / AVX-512 paths) and the CUDA kernel
// (backends/cuda/kernels/optim.cu) compute from the hyperparameters on the host before an update.
// Both must take the same fp32 values for a step to give the same bits on both devices, so both
// include this file. Computed in double and rounded once to float, in PyTorch's formulas
// (torch.optim.Adam's single-tensor path: step_size = lr / (1 - beta1^t), the second moment's bias
// correction as sqrt(1 - beta2^t), exp_avg.lerp_(grad, 1 - beta1)).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/optim.h"

namespace mixtrain::kernels {

// The same for every parameter of a step.
struct AdamConstants {
  float w, one_minus_w;        // exp_avg.lerp_(grad, w): w = 1 - beta1
  float b2, one_minus_b2;      // exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) g^2
  float eps, wd;               // eps; weight_decay (L2: g += wd * x)
  float decay;                 // AdamW's decoupled decay: x *= 1 - lr * weight_decay
  float inv;                   // 1 / loss scale (the GradScaler's unscale fused into the step)
  bool lerp_low;               // ATen's lerp picks its formula by |weight| < 0.5
  bool decoupled, amsgrad;
};

inline AdamConstants adam_constants(const AdamHyper& h) {
  AdamConstants c{};
  c.w = static_cast<float>(1.0 - h.beta1);
  c.one_minus_w = 1.0f - c.w;
  c.lerp_low = std::abs(c.w) < 0.5f;
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.wd = static_cast<float>(h.weight_decay);
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.inv = h.inv_scale;
  c.decoupled = h.decoupled_weight_decay;
  c.amsgrad = h.amsgrad;
  return c;
}

// Per parameter: its own step count t (a parameter may have been stepped fewer times).
struct AdamBiasCorrection {
  float neg_step_size;  // -lr / (1 - beta1^t)
  float bc2_sqrt;       // sqrt(1 - beta2^t)
};

inline AdamBiasCorrection adam_bias_correction(const AdamHyper& h, int64_t t) {
  const double step = static_cast<double>(t);
  return {static_cast<float>(-(h.lr / (1.0 - std::pow(h.beta1, step)))),
          static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, step)))};
}

}  // namespace mixtrain::kernels
