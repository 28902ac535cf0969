// mse_loss, binary_cross_entropy and binary_cross_entropy_with_logits front-ends: autocast (fp32
// policy; binary_cross_entropy is refused in fp16 regions by the policy table), checks, the kernels
// of src/backends/cpu/kernels/loss_pointwise.cpp, and backward to both the input and the target.
//
// Input and target must have the same shape; a mixed-dtype pair is promoted to the common dtype
// (the cast is recorded, so gradients return in each argument's own dtype).
#include "kernels/loss.h"
#include "ops/loss_reduction.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;
using kernels::PointwiseLoss;

Tensor pointwise_loss(const char* op, PointwiseLoss kind, const Tensor& input, const Tensor& target,
                      Reduction reduction) {
  MT_CHECK(input.is_floating_point() && target.is_floating_point(), op,
           ": input and target must be floating-point, got input ", describe(input), " and target ", describe(target));
  MT_CHECK(input.shape() == target.shape(), op, ": input ", describe(input), " and target ", describe(target),
           " must have the same shape");
  MT_CHECK(input.device() == target.device(), op, ": input is on ", input.device(), " but the target is on ",
           target.device());
  const DType dtype = promote_types(input.dtype(), target.dtype());
  const Tensor x = input.to(dtype).contiguous();
  const Tensor t = target.to(dtype).contiguous();
  Tensor out = Tensor::empty(reduction == Reduction::kNone ? x.shape() : Shape{}, dtype, x.device());
  const int64_t bad = kernels::pointwise_loss_fwd(x.device(), dtype)(kind, x, t, out, ops::kernel_reduction(reduction));
  if (bad >= 0) {
    MT_FAIL(op, ": every input probability must be in [0, 1]; element ", bad, " of input ", describe(input), " is ",
            x.detach().to_vector<double>()[bad]);
  }
  if (autograd::needs_grad({&x, &t})) {
    const bool need_x = x.requires_grad(), need_t = t.requires_grad();
    autograd::record(op, {x, t}, out,
                     [op, kind, reduction, need_x, need_t, sx = autograd::SavedTensor(x),
                      st = autograd::SavedTensor(t)](const TensorList& g) {
                       const Tensor xv = sx.unpack(op), tv = st.unpack(op);
                       const Tensor gy = g[0].to(xv.dtype()).contiguous();
                       Tensor gx = need_x ? Tensor::empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
                       Tensor gt = need_t ? Tensor::empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
                       kernels::pointwise_loss_bwd(xv.device(), xv.dtype())(kind, xv, tv, gy, gx, gt, ops::kernel_reduction(reduction));
                       return TensorList{gx, gt};
                     });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input_, const Tensor& target_, Reduction reduction) {
  Tensor input = input_, target = target_;
  auto region = ops::autocast(OpId::kMseLoss, {&input, &target});
  return pointwise_loss("mse_loss", PointwiseLoss::kMse, input, target, reduction);
}

Tensor binary_cross_entropy(const Tensor& probs_, const Tensor& target_, Reduction reduction) {
  Tensor probs = probs_, target = target_;
  auto region = ops::autocast(OpId::kBinaryCrossEntropy, {&probs, &target});
  return pointwise_loss("binary_cross_entropy", PointwiseLoss::kBce, probs, target, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_, const Tensor& target_, Reduction reduction) {
  Tensor logits = logits_, target = target_;
  auto region = ops::autocast(OpId::kBinaryCrossEntropyWithLogits, {&logits, &target});
  return pointwise_loss("binary_cross_entropy_with_logits", PointwiseLoss::kBceWithLogits, logits, target, reduction);
}

}  // namespace mixtrain::nn::functional
