// gelu_linear(x, w, b) = linear(gelu(x), w, b), the second half of a Transformer MLP, saving x
// instead of gelu(x): backward recomputes gelu(x) (bit-identical: same arithmetic, same input), so
// the [rows, hidden] activation is kept once instead of twice. For the exact GELU the recompute
// shares its pass and its erf with gelu's own backward (kernels::gelu_forward_backward_kernel), so
// it costs little more than the backward alone; the tanh form (GPT-2's) recomputes in a pass of its
// own.
//
// Numerics and autocast follow the unfused composition exactly: gelu runs in x's dtype (its own
// input-dtype policy), then the gelu_linear policy (lower precision, like linear) casts gelu(x), w
// and b; the products run through the same matmul kernels as linear's forward and backward, and the
// output gradient is prepared as linear's is (ops::LinearOutputGrad: on the fp32 route, widened
// once for both products and the bias sum). Accumulation: fp32 (fp64 for fp64), 16-bit results
// rounded once.
#include "kernels/elementwise.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/linalg.h"
#include "ops/autocast_hook.h"
#include "ops/linear_grad.h"

namespace mixtrain::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

Tensor gelu_linear(const Tensor& x_, const Tensor& w_, const Tensor& b_, GeluApproximation approximate) {
  MT_CHECK(x_.defined() && x_.is_floating_point() && x_.dim() >= 1,
           "gelu_linear: expected a floating-point input [..., in], got ",
           x_.defined() ? describe(x_) : std::string("an undefined tensor"));
  MT_CHECK(w_.defined() && w_.dim() == 2 && w_.size(1) == x_.size(-1), "gelu_linear: expected a weight [out, ",
           x_.size(-1), "] for the input ", describe(x_), ", got ", w_.defined() ? describe(w_) : std::string("none"));
  Tensor h;
  {
    NoGradGuard no_grad;
    h = gelu(x_.detach(), approximate);
  }
  Tensor w = w_, b = b_;
  bool params_rounded = false;
  auto region = ops::autocast_linear(OpId::kGeluLinear, h, w, b, params_rounded);
  Tensor y;
  {
    NoGradGuard no_grad;  // linear checks w and b and names itself in errors
    y = ops::linear_after_autocast(h, w.detach(), b.defined() ? b.detach() : b, params_rounded);
  }
  const Tensor& x = x_;
  if (!autograd::needs_grad({&x, &w, &b})) return y;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  const int64_t in = w.size(1), out = w.size(0);
  int64_t rows = 1;
  for (int d = 0; d < x.dim() - 1; ++d) rows *= x.size(d);
  autograd::record("gelu_linear", {x, w, b}, y,
                   [sx = SavedTensor(x.detach()), sw = need_x ? SavedTensor(w.detach()) : SavedTensor(), hd = h.dtype(),
                    w_dt = w.dtype(), b_dt = b.defined() ? b.dtype() : h.dtype(), need_x, need_w, need_b, in, out,
                    rows, x_shape = x.shape(), approximate](const TensorList& grads) {
                     const Tensor xv = sx.unpack("gelu_linear");
                     const ops::LinearOutputGrad gy(grads[0].to(hd).reshape({rows, out}));
                     TensorList result(3);
                     Tensor hv;  // the forward's gelu(x), cast as the forward cast it (for the weight gradient)
                     if (need_x) {
                       const Tensor gh =
                           gy.product(gy.g(), sw.unpack("gelu_linear")).to(xv.dtype()).reshape(x_shape).contiguous();
                       const Tensor xc = xv.contiguous();
                       const auto& both = kernels::gelu_forward_backward_kernel();
                       if (need_w && approximate == GeluApproximation::kNone &&
                           both.has(xc.device().type, xc.dtype())) {
                         // gelu(x) and the input gradient from one erf per element; the gradient
                         // overwrites gh, a temporary of this function.
                         Tensor h = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
                         both(xc.device(), xc.dtype())(h, gh, gh, xc);
                         hv = h.to(hd);
                         result[0] = gh;
                       } else {
                         Tensor gx = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
                         const kernels::UnaryOp op = approximate == GeluApproximation::kTanh
                                                         ? kernels::UnaryOp::kGeluTanh
                                                         : kernels::UnaryOp::kGelu;
                         kernels::unary_backward_kernel(op)(xc.device(), xc.dtype())(gx, gh, xc, {});
                         result[0] = gx;
                       }
                     }
                     if (need_w) {
                       if (!hv.defined()) hv = gelu(xv, approximate).to(hd);
                       result[1] = gy.product(gy.g().t(), hv.reshape({rows, in}), w_dt);
                     }
                     if (need_b) result[2] = gy.bias_grad(b_dt);
                     return result;
                   });
  return y;
}

}  // namespace mixtrain::nn::functional
