// Kernel tables of the losses: the fused (log-)softmax + NLL of cross_entropy and nll_loss, and the
// pointwise losses mse_loss, binary_cross_entropy and binary_cross_entropy_with_logits. Tables are
// keyed by the dtype of the floating input; tensors are contiguous.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// How a loss reduces its per-element values (the kernels' copy of nn::functional::Reduction, whose
// values it shares: the front-ends cast between them).
enum class Reduction : uint8_t { kNone, kMean, kSum };

// ---- cross_entropy / nll_loss (src/backends/cpu/kernels/loss.cpp). input [M, C] (logits, or log-probs when
// `log_probs`), target [M] int32/int64 (validated: in [0, C) or ignore_index).
struct ClassLossParams {
  bool log_probs = false;  // nll_loss: the input already holds log-probabilities
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
};
// out: [M] (kNone) or a scalar, in the input's dtype. lse: [M, 2] in the opmath dtype, each row's
// max and log(sum(exp(x - max))), saved for backward (undefined for nll_loss); kept apart rather than
// added so that large logits keep the precision of x - max. valid_rows: the number of rows whose
// target is not ignore_index (the mean's denominator; the front-end's index check counts them, so
// the kernel returns nothing to the host).
using ClassLossFwdFn = void(const Tensor& input, const Tensor& target, const Tensor& out, const Tensor& lse,
                            const ClassLossParams& p, int64_t valid_rows);
// gx [M, C] = (softmax - target distribution) * scale per row in one pass (cross_entropy), or
// -scale at the target (nll_loss); zero rows for ignored targets. gy: [M] or a scalar, input dtype.
using ClassLossBwdFn = void(const Tensor& input, const Tensor& target, const Tensor& lse, const Tensor& gy,
                            const Tensor& gx, const ClassLossParams& p, int64_t valid_rows);
MT_KERNEL_TABLE(DispatchTable<ClassLossFwdFn>, class_loss_fwd, "cross_entropy");
MT_KERNEL_TABLE(DispatchTable<ClassLossBwdFn>, class_loss_bwd, "cross_entropy_backward");

// ---- pointwise losses (src/backends/cpu/kernels/loss_pointwise.cpp). input and target: same shape, same dtype.
enum class PointwiseLoss : uint8_t { kMse, kBce, kBceWithLogits };
// out: same shape (kNone) or a scalar. Returns the first position whose probability is outside
// [0, 1] for kBce (nothing is written then), or -1.
using PointwiseLossFwdFn = int64_t(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& out,
                                   Reduction reduction);
// gx / gt (either may be undefined): gradients w.r.t. input and target; gy: same shape or a scalar.
using PointwiseLossBwdFn = void(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& gy,
                                const Tensor& gx, const Tensor& gt, Reduction reduction);
MT_KERNEL_TABLE(DispatchTable<PointwiseLossFwdFn>, pointwise_loss_fwd, "pointwise_loss");
MT_KERNEL_TABLE(DispatchTable<PointwiseLossBwdFn>, pointwise_loss_bwd, "pointwise_loss_backward");

}  // namespace mixtrain::kernels
