// layer_norm front-end: autocast (fp32 policy), checks, and the fused forward/backward kernels of
// src/backends/cpu/kernels/nn_norm.cpp. The forward saves x, the weight, and the per-row mean and rstd (fp32;
// fp64 for fp64 input), so backward never recomputes statistics. Weight and bias may have another
// floating dtype than x (an fp32 parameter with a 16-bit activation); their gradients come back in
// their own dtypes.
//
// A 16-bit input that autocast widened to fp32 is saved as the caller's 16-bit tensor and widened
// again in backward: the widening is exact, so backward reads the same values, and the activation
// kept for backward costs 2 bytes per element instead of 4.
#include "kernels/nn.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {

using autograd::TensorList;

Tensor layer_norm(const Tensor& x_, const Shape& normalized_shape, const Tensor& weight_, const Tensor& bias_,
                  double eps) {
  Tensor x = x_, weight = weight_, bias = bias_;
  auto region = ops::autocast(OpId::kLayerNorm, {&x, &weight, &bias});
  MT_CHECK(x.is_floating_point(), "layer_norm: expected a floating-point input, got ", describe(x));
  const int k = normalized_shape.size();
  MT_CHECK(k >= 1 && x.dim() >= k, "layer_norm: normalized_shape ", normalized_shape,
           " must be non-empty and match the trailing dims of the input ", describe(x));
  for (int i = 0; i < k; ++i) {
    MT_CHECK(x.size(x.dim() - k + i) == normalized_shape[i], "layer_norm: normalized_shape ", normalized_shape,
             " does not match the trailing dims of the input ", describe(x));
  }
  for (const Tensor* param : {&weight, &bias}) {
    if (!param->defined()) continue;
    MT_CHECK(param->shape() == normalized_shape && param->is_floating_point(), "layer_norm: ",
             param == &weight ? "weight " : "bias ", describe(*param),
             " must be a floating-point tensor of shape normalized_shape ", normalized_shape);
    MT_CHECK(param->device() == x.device(), "layer_norm: ", param == &weight ? "weight" : "bias", " is on ",
             param->device(), " but the input is on ", x.device());
  }
  MT_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got ", eps);

  const int64_t cols = normalized_shape.numel();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const DType stat_dtype = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor xc = x.contiguous();
  const Tensor wc = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, stat_dtype, x.device());
  Tensor rstd = Tensor::empty({rows}, stat_dtype, x.device());
  kernels::layer_norm_fwd(x.device(), x.dtype())(xc, wc, bc, y, mean, rstd, eps);

  if (autograd::needs_grad({&xc, &wc, &bc})) {
    const bool need_x = xc.requires_grad();
    const bool need_w = wc.defined() && wc.requires_grad();
    const bool need_b = bc.defined() && bc.requires_grad();
    const DType b_dtype = bc.defined() ? bc.dtype() : x.dtype();
    const bool widened = x.dtype() == kFloat32 && (x_.dtype() == kBFloat16 || x_.dtype() == kFloat16);
    autograd::record(
        "layer_norm", {xc, wc, bc}, y,
        [sx = autograd::SavedTensor(widened ? x_ : xc), sw = autograd::SavedTensor(wc), sm = autograd::SavedTensor(mean),
         sr = autograd::SavedTensor(rstd), widened, need_x, need_w, need_b, b_dtype, normalized_shape](const TensorList& g) {
          const Tensor saved_x = sx.unpack("layer_norm");
          const Tensor xv = widened ? saved_x.to(kFloat32).contiguous() : saved_x;
          const Tensor wv = sw.unpack("layer_norm");
          const Tensor gy = g[0].to(xv.dtype()).contiguous();
          Tensor gx = need_x ? Tensor::empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
          Tensor gw = need_w ? Tensor::empty(normalized_shape, wv.dtype(), xv.device()) : Tensor();
          Tensor gb = need_b ? Tensor::empty(normalized_shape, b_dtype, xv.device()) : Tensor();
          kernels::layer_norm_bwd(xv.device(), xv.dtype())(gy, xv, wv, sm.unpack("layer_norm"), sr.unpack("layer_norm"),
                                                           gx, gw, gb);
          return TensorList{gx, gw, gb};
        });
  }
  return y;
}

}  // namespace mixtrain::nn::functional
