// softmax and log_softmax front-ends: autocast, argument checks, the fused kernels of
// src/backends/cpu/kernels/nn_softmax.cpp, and a backward that reuses the saved output only:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
// An explicit output dtype (softmax(x_bf16, dim, kFloat32)) is produced by the kernel directly,
// without an fp32 copy of the input; the gradient comes back in the input's dtype.
#include "kernels/nn.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;

Tensor softmax_impl(Tensor x, int64_t dim, std::optional<DType> dtype, bool log, const char* name) {
  MT_CHECK(x.is_floating_point(), name, ": expected a floating-point input (float32, float64, float16, bfloat16), got ",
           describe(x));
  const DType out_dtype = dtype.value_or(x.dtype());
  MT_CHECK(is_floating(out_dtype), name, ": the output dtype must be floating-point, got ", out_dtype, " for input ",
           describe(x));
  kernels::SoftmaxParams p;
  p.log = log;
  if (x.dim() == 0) {  // a scalar is one row of one element, as in PyTorch
    MT_CHECK(dim == 0 || dim == -1, name, ": dim ", dim, " is out of range for a 0-dimensional input (valid: 0, -1)");
  } else {
    const int d = wrap_dim(dim, x.dim(), name);
    p.n = x.size(d);
    for (int i = 0; i < d; ++i) p.outer *= x.size(i);
    for (int i = d + 1; i < x.dim(); ++i) p.inner *= x.size(i);
  }
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), out_dtype, x.device());
  if (y.numel() > 0) kernels::softmax_fwd(x.device(), x.dtype())(xc, y, p);
  if (autograd::needs_grad({&xc})) {
    const DType in_dtype = x.dtype();
    autograd::record(name, {xc}, y, [saved = autograd::SavedTensor(y), p, in_dtype, name](const TensorList& g) {
      const Tensor yv = saved.unpack(name);
      const Tensor gy = g[0].to(yv.dtype()).contiguous();
      Tensor gx = Tensor::empty(yv.shape(), in_dtype, yv.device());
      if (gx.numel() > 0) kernels::softmax_bwd(yv.device(), in_dtype)(gy, yv, gx, p);
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x_, int64_t dim, std::optional<DType> dtype) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kSoftmax, {&x});
  return softmax_impl(x, dim, dtype, /*log=*/false, "softmax");
}

Tensor log_softmax(const Tensor& x_, int64_t dim, std::optional<DType> dtype) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kLogSoftmax, {&x});
  return softmax_impl(x, dim, dtype, /*log=*/true, "log_softmax");
}

}  // namespace mixtrain::nn::functional
