// Front-end of nn::functional::conv2d: autocast, argument checks (naming the shapes and what would
// be valid), contiguous NCHW operands for the kernels, and the autograd record whose backward runs
// oneDNN's backward-data and backward-weights primitives in one pass over the batch (the bias
// gradient comes out of the backward-weights primitive).
#include "kernels/conv.h"

#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;

void check_floating(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), "conv2d: ", what, " is an undefined tensor");
  MT_CHECK(t.is_floating_point(), "conv2d: expected a floating-point ", what,
           " (float32, bfloat16, float16, float64), got ", describe(t));
}

void check_same(const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  MT_CHECK(a.dtype() == b.dtype(), "conv2d: expected ", an, " and ", bn, " to have the same dtype, got ", an, " ",
           describe(a), " and ", bn, " ", describe(b), " (convert one with .to(dtype), or run under autocast)");
  MT_CHECK(a.device() == b.device(), "conv2d: expected ", an, " and ", bn, " on the same device, got ", a.device(),
           " and ", b.device());
}

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* dim, const Tensor& x,
                 const Tensor& w) {
  const int64_t span = dil * (k - 1) + 1;  // extent of the dilated kernel
  MT_CHECK(in + 2 * pad >= span, "conv2d: input ", describe(x), " padded to ", in + 2 * pad, " in ", dim,
           " is smaller than the dilated kernel (", span, ") of weight ", describe(w));
  return (in + 2 * pad - span) / stride + 1;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dOptions& o) {
  Tensor x = x_in, w = w_in, b = b_in;
  auto region = ops::autocast(OpId::kConv2d, {&x, &w, &b});
  check_floating(x, "input");
  check_floating(w, "weight");
  check_same(x, "input", w, "weight");
  MT_CHECK(x.dim() == 4 || x.dim() == 3, "conv2d: expected an input [N, C, H, W] (or unbatched [C, H, W]), got ",
           describe(x));
  MT_CHECK(w.dim() == 4, "conv2d: expected a weight [out_channels, in_channels / groups, kh, kw], got ", describe(w));
  MT_CHECK(o.groups >= 1, "conv2d: groups must be >= 1, got ", o.groups);
  MT_CHECK(o.stride_h >= 1 && o.stride_w >= 1, "conv2d: stride must be >= 1, got (", o.stride_h, ", ", o.stride_w, ")");
  MT_CHECK(o.dilation_h >= 1 && o.dilation_w >= 1, "conv2d: dilation must be >= 1, got (", o.dilation_h, ", ",
           o.dilation_w, ")");
  MT_CHECK(o.padding_h >= 0 && o.padding_w >= 0, "conv2d: padding must be >= 0, got (", o.padding_h, ", ", o.padding_w,
           ")");
  const bool unbatched = x.dim() == 3;
  Tensor x4 = unbatched ? x.detach().unsqueeze(0) : x.detach();
  const int64_t C = x4.size(1), O = w.size(0), G = o.groups;
  MT_CHECK(C % G == 0, "conv2d: groups = ", G, " must divide the input channels C = ", C, " of input ", describe(x));
  MT_CHECK(O % G == 0, "conv2d: groups = ", G, " must divide the output channels ", O, " of weight ", describe(w));
  MT_CHECK(w.size(1) * G == C, "conv2d: weight ", describe(w), " expects ", w.size(1) * G, " input channels (",
           w.size(1), " per group x ", G, " groups), but input ", describe(x), " has ", C);
  if (b.defined()) {
    check_floating(b, "bias");
    check_same(x, "input", b, "bias");
    MT_CHECK(b.dim() == 1 && b.size(0) == O, "conv2d: expected a bias of shape [", O, "] for weight ", describe(w),
             ", got ", describe(b));
  }
  const int64_t Ho = out_size(x4.size(2), w.size(2), o.stride_h, o.padding_h, o.dilation_h, "height", x, w);
  const int64_t Wo = out_size(x4.size(3), w.size(3), o.stride_w, o.padding_w, o.dilation_w, "width", x, w);
  const kernels::Conv2dGeometry geo{o.stride_h, o.stride_w, o.padding_h, o.padding_w, o.dilation_h, o.dilation_w, G};

  Tensor xc = x4.contiguous(), wc = w.detach().contiguous();
  Tensor bc = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty({x4.size(0), O, Ho, Wo}, x.dtype(), x.device());
  (*kernels::conv2d_forward_kernel()(x.device(), x.dtype()))(xc, wc, bc, y, geo);
  Tensor out = unbatched ? y.squeeze(0) : y;

  if (autograd::needs_grad({&x, &w, &b})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    const Shape x4_shape = x4.shape(), x_shape = x.shape(), w_shape = w.shape(), y_shape = y.shape();
    const DType dt = x.dtype();
    SavedTensor sx = (need_w || need_b) ? SavedTensor(xc) : SavedTensor();
    SavedTensor sw = need_x ? SavedTensor(wc) : SavedTensor();
    autograd::record("conv2d", {x, w, b}, out, [=](const TensorList& grads) {
      Tensor g = grads[0].dtype() == dt ? grads[0] : grads[0].to(dt);
      g = g.reshape(y_shape).contiguous();
      TensorList result(3);
      // One backward pass over the batch gives every wanted gradient; the weight gradient is
      // computed even when only the bias needs one (oneDNN has no bias-only primitive, and the
      // case is rare).
      Tensor gx = need_x ? Tensor::empty(x4_shape, dt, g.device()) : Tensor();
      Tensor gw = (need_w || need_b) ? Tensor::empty(w_shape, dt, g.device()) : Tensor();
      Tensor gb = need_b ? Tensor::empty({w_shape[0]}, dt, g.device()) : Tensor();
      const Tensor xs = gw.defined() ? sx.unpack("conv2d") : Tensor();
      const Tensor ws = gx.defined() ? sw.unpack("conv2d") : Tensor();
      (*kernels::conv2d_backward_kernel()(g.device(), dt))(g, xs, ws, gx, gw, gb, geo);
      if (need_x) result[0] = gx.reshape(x_shape);
      if (need_w) result[1] = gw;
      result[2] = gb;
      return result;
    });
  }
  return out;
}

}  // namespace mixtrain::nn::functional
