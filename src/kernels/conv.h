// Kernel tables of conv2d (front-end in src/ops/conv.cpp; kernels in src/kernels/onednn/conv.cpp
// and src/kernels/cpu/ref/conv_ref.cpp).
//
// Accumulation dtype: fp32 for fp32, bf16 and fp16; fp64 for fp64 (reference loops).
//   fp32  oneDNN convolution primitives
//   bf16  oneDNN bf16 primitives, or the fp32 route (see Bf16Path in kernels/linalg.h)
//   fp16  operands converted exactly to fp32, the fp32 primitive, one rounding (oneDNN 2.6 has no
//         f16 convolution on CPUs)
//   fp64  reference loops
// Every tensor is contiguous: x and gx [N, C, H, W], w and gw [O, C/groups, kh, kw], y and gy
// [N, O, Ho, Wo], bias and gb [O]; all share one floating dtype.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
};

// y = conv(x, w) + bias (bias optional).
using Conv2dForwardFn = void(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                             const Conv2dGeometry& g);
// gx = the gradient with respect to x, given gy.
using Conv2dBackwardDataFn = void(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dGeometry& g);
// gw (and gb when defined) = the gradients with respect to w and bias, given gy and x.
using Conv2dBackwardWeightsFn = void(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                                     const Conv2dGeometry& g);

const DispatchTable<Conv2dForwardFn>& conv2d_forward_kernel();
const DispatchTable<Conv2dBackwardDataFn>& conv2d_backward_data_kernel();
const DispatchTable<Conv2dBackwardWeightsFn>& conv2d_backward_weights_kernel();

// The oneDNN implementations (forward, backward data, backward weights) a conv2d of these shapes
// runs in `dtype` (float32 or bfloat16, native), creating and caching the primitives. For tests.
std::string conv2d_impl_info(const Shape& x, const Shape& w, bool bias, const Conv2dGeometry& g, DType dtype);

}  // namespace mixtrain::kernels
