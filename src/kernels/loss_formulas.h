// The pointwise losses' formulas, one definition for every device: mse_loss, binary_cross_entropy
// (on probabilities) and binary_cross_entropy_with_logits, each as value(x, t) and its derivatives
// dx(x, t) and dt(x, t), and the dispatch from the run-time kind (kernels/loss.h) to the formula.
// The CPU kernels (backends/cpu/kernels/loss_pointwise.cpp) and the CUDA kernels
// (backends/cuda/kernels/loss.cu) both include this file, so a change to a formula reaches both.
//
// C is the opmath type (float, or double for fp64 input). The elementary functions come from M, the
// device's math (a struct with static log, log1p, exp and abs for C): std:: on the CPU, CUDA's on the
// GPU. They are the one part allowed to differ between devices (by an ulp or two); the operations
// around them are the same IEEE operations in the same order.
#pragma once

#include "mixtrain/error.h"
#include "kernels/host_device.h"
#include "kernels/loss.h"

namespace mixtrain::kernels::loss_formulas {

// std::max(a, b) as both devices spell it: a NaN `a` is returned (PyTorch's clamp keeps NaN too).
template <typename C>
MT_HOST_DEVICE inline C max_keep_nan(C a, C b) {
  return a < b ? b : a;
}

struct Mse {
  static constexpr bool kProbabilities = false;  // any input is valid
  template <typename M, typename C>
  MT_HOST_DEVICE static C value(C x, C t) {
    return (x - t) * (x - t);
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C dx(C x, C t) {
    return C(2) * (x - t);
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C dt(C x, C t) {
    return C(2) * (t - x);
  }
};

struct Bce {
  static constexpr bool kProbabilities = true;  // the input must lie in [0, 1] (checked by the kernels)
  // PyTorch clamps both logs at -100 so that p = 0 or 1 gives a finite loss.
  template <typename M, typename C>
  MT_HOST_DEVICE static C log_p(C p) {
    return max_keep_nan(M::log(p), C(-100));
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C log_1mp(C p) {
    return max_keep_nan(M::log1p(-p), C(-100));
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C value(C p, C t) {
    return -(t * log_p<M>(p) + (C(1) - t) * log_1mp<M>(p));
  }
  // PyTorch's gradient: (p - t) / max(p (1 - p), 1e-12).
  template <typename M, typename C>
  MT_HOST_DEVICE static C dx(C p, C t) {
    return (p - t) / max_keep_nan((C(1) - p) * p, C(1e-12));
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C dt(C p, C t) {
    return log_1mp<M>(p) - log_p<M>(p);
  }
};

struct BceWithLogits {
  static constexpr bool kProbabilities = false;
  // (1 - t) x + log(1 + exp(-x)), with log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|)): no overflow.
  template <typename M, typename C>
  MT_HOST_DEVICE static C value(C x, C t) {
    return (C(1) - t) * x + max_keep_nan(-x, C(0)) + M::log1p(M::exp(-M::abs(x)));
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C dx(C x, C t) {
    const C e = M::exp(-M::abs(x));  // sigmoid without overflow on either side
    const C sig = x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
    return sig - t;
  }
  template <typename M, typename C>
  MT_HOST_DEVICE static C dt(C x, C t) {
    return -x;
  }
};

// Calls f.template operator()<Loss>() with the formula of `loss` (host code: picks the kernel).
template <typename F>
decltype(auto) dispatch(PointwiseLoss loss, F&& f) {
  switch (loss) {
    case PointwiseLoss::kMse: return f.template operator()<Mse>();
    case PointwiseLoss::kBce: return f.template operator()<Bce>();
    case PointwiseLoss::kBceWithLogits: return f.template operator()<BceWithLogits>();
  }
  MT_INTERNAL_ASSERT(false, "unknown pointwise loss");
}

}  // namespace mixtrain::kernels::loss_formulas
