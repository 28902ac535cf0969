#include "ops/round_through.h"

#include "kernels/copy.h"
#include "mixtrain/autograd.h"

namespace mixtrain::ops {

Tensor round_through(const Tensor& x, DType precision) {
  MT_CHECK(x.dtype() == kFloat32, "round_through: expected a float32 tensor, got ", describe(x));
  MT_CHECK(precision == kBFloat16 || precision == kFloat16,
           "round_through: the precision must be bfloat16 or float16, got ", precision);
  const Tensor src = x.detach().contiguous();
  Tensor out = Tensor::empty(x.shape(), kFloat32, x.device());
  if (out.numel() > 0) kernels::round_through_table(x.device(), precision)(out, src);
  if (autograd::needs_grad({&x})) {
    autograd::record("round_through", {x}, out, [precision](const autograd::TensorList& g) {
      // An fp32 output's gradient is fp32; widening a 16-bit one first changes no value.
      return autograd::TensorList{round_through(g[0].to(kFloat32), precision)};
    });
  }
  return out;
}

}  // namespace mixtrain::ops
