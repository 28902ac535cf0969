// max_pool2d and avg_pool2d front-ends over [N, C, H, W]: checks (PyTorch's rules: positive kernel
// and stride, padding at most half the kernel, a non-empty output), the kernels of
// src/backends/cpu/kernels/nn_pool.cpp, and backward. max_pool2d saves where each output's maximum lies in
// its window (a uint8 offset for windows of up to 256 elements: 1 byte per output, instead of the
// input or a plane index) and routes each gradient there; avg_pool2d saves nothing but the shapes.
#include "kernels/nn.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;

// Checks x and the options; returns the kernel parameters and sets the output shape.
kernels::Pool2dParams check_pool(const char* op, const Tensor& x, const Pool2dOptions& o, Shape& out_shape) {
  MT_CHECK(x.dim() == 4 && x.is_floating_point(), op, ": expected a floating-point [N, C, H, W] input, got ",
           describe(x));
  kernels::Pool2dParams p{
      o.kernel_h,  o.kernel_w, o.stride_h == 0 ? o.kernel_h : o.stride_h, o.stride_w == 0 ? o.kernel_w : o.stride_w,
      o.padding_h, o.padding_w};
  MT_CHECK(p.kh > 0 && p.kw > 0, op, ": kernel size must be positive, got ", p.kh, "x", p.kw);
  MT_CHECK(p.sh > 0 && p.sw > 0, op, ": stride must be positive (or 0 for the kernel size), got ", o.stride_h, "x",
           o.stride_w);
  MT_CHECK(p.ph >= 0 && p.pw >= 0 && 2 * p.ph <= p.kh && 2 * p.pw <= p.kw, op, ": padding ", p.ph, "x", p.pw,
           " must be non-negative and at most half the kernel size ", p.kh, "x", p.kw);
  const int64_t oh = (x.size(2) + 2 * p.ph - p.kh) / p.sh + 1;
  const int64_t ow = (x.size(3) + 2 * p.pw - p.kw) / p.sw + 1;
  MT_CHECK(x.size(2) + 2 * p.ph >= p.kh && x.size(3) + 2 * p.pw >= p.kw, op, ": kernel ", p.kh, "x", p.kw,
           " is larger than the padded input ", describe(x), " with padding ", p.ph, "x", p.pw);
  out_shape = {x.size(0), x.size(1), oh, ow};
  return p;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_, const Pool2dOptions& opts) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kMaxPool2d, {&x});
  Shape out_shape;
  const kernels::Pool2dParams p = check_pool("max_pool2d", x, opts, out_shape);
  MT_CHECK(x.size(2) * x.size(3) <= INT32_MAX, "max_pool2d: planes of more than 2^31 elements are not supported, got ",
           describe(x));
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor argmax = Tensor::empty(out_shape, kernels::max_pool2d_argmax_dtype(p), x.device());
  if (y.numel() > 0) kernels::max_pool2d_fwd(x.device(), x.dtype())(xc, y, argmax, p);
  if (autograd::needs_grad({&xc})) {
    const Shape in_shape = x.shape();
    autograd::record("max_pool2d", {xc}, y, [sa = autograd::SavedTensor(argmax), in_shape, p](const TensorList& g) {
      const Tensor am = sa.unpack("max_pool2d");
      const Tensor gy = g[0].contiguous();
      Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
      if (gx.numel() > 0) kernels::max_pool2d_bwd(gy.device(), gy.dtype())(gy, am, gx, p);
      return TensorList{gx};
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x_, const Pool2dOptions& opts) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kAvgPool2d, {&x});
  Shape out_shape;
  const kernels::Pool2dParams p = check_pool("avg_pool2d", x, opts, out_shape);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() > 0) kernels::avg_pool2d_fwd(x.device(), x.dtype())(xc, y, p);
  if (autograd::needs_grad({&xc})) {
    const Shape in_shape = x.shape();
    autograd::record("avg_pool2d", {xc}, y, [in_shape, p](const TensorList& g) {
      const Tensor gy = g[0].contiguous();
      Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
      if (gx.numel() > 0) kernels::avg_pool2d_bwd(gy.device(), gy.dtype())(gy, gx, p);
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace mixtrain::nn::functional
