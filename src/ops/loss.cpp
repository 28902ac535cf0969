// cross_entropy and nll_loss front-ends: autocast (fp32 policy), checks, the fused kernels of
// src/backends/cpu/kernels/loss.cpp, and backward.
//
// Input [N, C] with target [N], or [N, C, d1, ...] with target [N, d1, ...] (the class dim is moved
// last and the rest flattened into rows, so the kernels see [M, C] and [M]), or [C] with a 0-d target.
// Targets are int64 or int32 class indices; a value outside [0, C) that is not ignore_index is an
// error naming the op, the value and C. The loss has the input's dtype (fp32 under autocast) and
// accumulates in fp32. cross_entropy saves the logits and each row's max and log-sum-exp (fp32), so its
// backward is one pass: (softmax - target distribution) * scale.
#include "kernels/loss.h"
#include "ops/loss_reduction.h"
#include "kernels/shape_ops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;

Tensor class_loss(const char* op, const Tensor& input, const Tensor& target, const kernels::ClassLossParams& p) {
  MT_CHECK(input.is_floating_point() && input.dim() >= 1, op, ": expected floating-point ",
           p.log_probs ? "log-probabilities" : "logits", " [N, C] or [N, C, d1, ...], got ", describe(input));
  MT_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op,
           ": target must hold int64 or int32 class indices, got ", describe(target));
  MT_CHECK(target.device() == input.device(), op, ": target is on ", target.device(), " but the input is on ",
           input.device());
  // Expected target shape: the input's without the class dim (dim 1, or dim 0 for a 1-D input).
  const int class_dim = input.dim() == 1 ? 0 : 1;
  Shape expected = input.shape();
  expected.erase(class_dim);
  MT_CHECK(target.shape() == expected, op, ": target ", describe(target), " does not match input ", describe(input),
           "; expected a target of shape ", expected, " (the input's shape without the class dim ", class_dim, ")");
  MT_CHECK(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           p.label_smoothing);

  const int64_t C = input.size(class_dim);
  const int64_t M = target.numel();
  // Rows of C classes: move the class dim last when there are spatial dims.
  Tensor rows = input;
  if (input.dim() > 2) {
    Shape perm;
    for (int d = 0; d < input.dim(); ++d)
      if (d != 1) perm.push_back(d);
    perm.push_back(1);
    rows = input.permute(perm);
  }
  rows = rows.contiguous().reshape({M, C});
  // (unsqueeze for a 0-d target: reshape of a 0-d tensor to [1] is refused by view_strides today)
  const Tensor t = target.dim() == 0 ? target.unsqueeze(0) : target.contiguous().reshape({M});
  const kernels::IndexCheck checked = kernels::check_index(t, C, p.ignore_index);
  if (const auto& bad = checked.bad) {
    MT_FAIL(op, ": target value ", bad->value, " (at position ", bad->position, " of target ", describe(target),
            ") is out of range for ", C, " classes; valid targets are 0 to ", C - 1, " or ignore_index (",
            p.ignore_index, ")");
  }

  const DType stat_dtype = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor lse = p.log_probs ? Tensor() : Tensor::empty({M, 2}, stat_dtype, input.device());
  Tensor out = Tensor::empty(p.reduction == kernels::Reduction::kNone ? Shape{M} : Shape{}, input.dtype(), input.device());
  const int64_t valid_rows = M - checked.ignored;  // the mean's denominator
  kernels::class_loss_fwd(input.device(), input.dtype())(rows, t, out, lse, p, valid_rows);

  if (autograd::needs_grad({&rows})) {
    autograd::record(op, {rows}, out,
                     [op, p, valid_rows, sx = autograd::SavedTensor(rows), st = autograd::SavedTensor(t),
                      sl = autograd::SavedTensor(lse)](const TensorList& g) {
                       const Tensor xv = sx.unpack(op);
                       const Tensor gy = g[0].to(xv.dtype()).contiguous();
                       Tensor gx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
                       kernels::class_loss_bwd(xv.device(), xv.dtype())(xv, st.unpack(op), sl.unpack(op), gy, gx, p,
                                                                       valid_rows);
                       return TensorList{gx};
                     });
  }
  return p.reduction == kernels::Reduction::kNone ? out.reshape(target.shape()) : out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_, const Tensor& target_, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  Tensor logits = logits_, target = target_;
  auto region = ops::autocast(OpId::kCrossEntropy, {&logits});
  return class_loss("cross_entropy", logits, target,
                    {.log_probs = false,
                     .ignore_index = ignore_index,
                     .label_smoothing = label_smoothing,
                     .reduction = ops::kernel_reduction(reduction)});
}

Tensor nll_loss(const Tensor& log_probs_, const Tensor& target_, Reduction reduction, int64_t ignore_index) {
  Tensor log_probs = log_probs_, target = target_;
  auto region = ops::autocast(OpId::kNllLoss, {&log_probs});
  return class_loss("nll_loss", log_probs, target,
                    {.log_probs = true, .ignore_index = ignore_index, .label_smoothing = 0.0, .reduction = ops::kernel_reduction(reduction)});
}

}  // namespace mixtrain::nn::functional
