// batch_norm front-end: autocast (input dtype: unlisted op), checks, running-stat update and the
// kernels of src/backends/cpu/kernels/nn_batch_norm.cpp. The forward saves x, the weight and the per-channel
// mean and variance it normalised with (opmath dtype), so the backward never recomputes them.
// Parameters and running statistics may be float32 with a 16-bit x (PyTorch's mixed batch norm);
// kernels see them converted to the opmath dtype, and gradients come back in each input's dtype.
#include "kernels/nn_batch_norm.h"

#include "kernels/copy.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/batch_norm.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {

using autograd::TensorList;

namespace {

// A fresh contiguous [C] copy of `t` in `dtype` (never aliasing t: a running statistic may be
// updated in place after it was used for an eval forward whose backward is still pending).
Tensor opmath_copy(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  kernels::copy(out, t.detach());
  return out;
}

void check_channel_tensor(const Tensor& t, const char* what, const Tensor& x, int64_t C) {
  if (!t.defined()) return;
  MT_CHECK(t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " must have shape [", C,
           "] (one value per channel of the input ", describe(x), "), got ", describe(t));
  MT_CHECK(t.dtype() == x.dtype() || t.dtype() == kFloat32, "batch_norm: ", what, " ", describe(t),
           " must have the input's dtype (", x.dtype(), ") or float32");
  MT_CHECK(t.device() == x.device(), "batch_norm: ", what, " is on ", t.device(), " but the input is on ", x.device());
}

}  // namespace

Tensor batch_norm(const Tensor& x_, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_,
                  const Tensor& bias_, bool training, double momentum, double eps) {
  Tensor x = x_, weight = weight_, bias = bias_;
  auto region = ops::autocast(OpId::kBatchNorm, {&x, &weight, &bias});
  MT_CHECK(x.defined() && x.is_floating_point() && x.dim() >= 2,
           "batch_norm: expected a floating-point input [N, C, *], got ", x.defined() ? describe(x) : "undefined");
  const int64_t C = x.size(1);
  check_channel_tensor(weight, "weight", x, C);
  check_channel_tensor(bias, "bias", x, C);
  check_channel_tensor(running_mean, "running_mean", x, C);
  check_channel_tensor(running_var, "running_var", x, C);
  MT_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must be given together");
  MT_CHECK(!running_mean.defined() || running_mean.dtype() == running_var.dtype(), "batch_norm: running_mean ",
           describe(running_mean), " and running_var ", describe(running_var), " must have the same dtype");
  MT_CHECK(training || running_mean.defined(),
           "batch_norm: running_mean and running_var must be given in evaluation mode (training = false)");
  MT_CHECK(eps >= 0, "batch_norm: eps must be non-negative, got ", eps);
  const int64_t count = C == 0 ? 0 : x.numel() / C;  // values per channel
  MT_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
           describe(x));

  const DType opmath = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor xc = x.detach().contiguous();
  Tensor mean, var;
  if (training) {
    mean = Tensor::empty({C}, opmath, x.device());
    var = Tensor::empty({C}, opmath, x.device());
    kernels::batch_norm_stats(x.device(), x.dtype())(xc, mean, var);
    if (running_mean.defined()) {
      kernels::batch_norm_update_stats(x.device(), running_mean.dtype())(running_mean, running_var, mean, var, momentum,
                                                                         count);
      running_mean.bump_version();
      running_var.bump_version();
    }
  } else {
    mean = opmath_copy(running_mean, opmath);
    var = opmath_copy(running_var, opmath);
  }
  const Tensor wc = weight.defined() ? opmath_copy(weight, opmath) : Tensor();
  const Tensor bc = bias.defined() ? opmath_copy(bias, opmath) : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::batch_norm_forward(x.device(), x.dtype())(xc, mean, var, eps, wc, bc, y);

  if (autograd::needs_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad();
    const bool need_w = weight.defined() && weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    const DType w_dtype = weight.defined() ? weight.dtype() : opmath;
    const DType b_dtype = bias.defined() ? bias.dtype() : opmath;
    autograd::record("batch_norm", {x, weight, bias}, y,
                     [sx = autograd::SavedTensor(x), sw = autograd::SavedTensor(weight), mean, var, eps, training,
                      opmath, need_x, need_w, need_b, w_dtype, b_dtype](const TensorList& g) {
                       const Tensor xv = sx.unpack("batch_norm").contiguous();
                       const Tensor wv = sw.unpack("batch_norm");
                       const Tensor wc = wv.defined() ? opmath_copy(wv, opmath) : Tensor();
                       const Tensor gy = g[0].to(xv.dtype()).contiguous();
                       const int64_t C = mean.numel();
                       Tensor gx = need_x ? Tensor::empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
                       Tensor gw = Tensor::empty({C}, opmath, xv.device());
                       Tensor gb = Tensor::empty({C}, opmath, xv.device());
                       kernels::batch_norm_backward(xv.device(), xv.dtype())(gy, xv, mean, var, eps, wc, training, gx,
                                                                             gw, gb);
                       return TensorList{gx, need_w ? gw.to(w_dtype) : Tensor(), need_b ? gb.to(b_dtype) : Tensor()};
                     });
  }
  return y;
}

}  // namespace mixtrain::nn::functional
