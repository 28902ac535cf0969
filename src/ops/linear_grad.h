// src/ops/linear_grad.h (internal): what the linear layers (linear, gelu_linear) share: the forward
// after autocast, and the output gradient as their backward uses it, in two products (input and
// weight gradients) and a bias sum.
//
// On the fp32 route of 16-bit matmuls (kernels::uses_fp32_route) the gradient is widened to fp32
// once here instead of once per product inside the matmul kernel; the products still round once
// into the layer's dtype, and the bias sum of the exact fp32 copy is the same sum
// (kernels::sum_rows), so the numerics are those of the plain products.
#pragma once

#include <optional>

#include "mixtrain/tensor.h"

namespace mixtrain::ops {

// linear(x, w, b) once autocast has run (ops::autocast_linear): argument checks (named "linear"),
// the product with the bias fused, and the autograd record. x [..., in], w [out, in], b [out] or
// undefined; the output [..., out] has x's dtype, accumulated in fp32 (fp64 for fp64).
// params_rounded: w (and b, if fp32) are fp32 holding values of x's 16-bit dtype (the fp32 route),
// read by the route's kernel as they are; their gradients are then fp32, unrounded (the rounding
// belongs to ops::round_through's backward).
Tensor linear_after_autocast(const Tensor& x, const Tensor& w, const Tensor& b, bool params_rounded);

class LinearOutputGrad {
 public:
  // gy: [rows, out_features] in the layer's dtype.
  explicit LinearOutputGrad(const Tensor& gy);

  // What the products and the bias sum read: gy, or its fp32 copy on the route.
  const Tensor& g() const { return g_; }
  // a @ b (2-D, one of them built from g()) in the layer's dtype (or out_dtype: fp32 for a rounded
  // parameter's gradient), accumulated in fp32 and rounded once.
  Tensor product(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype = std::nullopt) const;
  // The bias gradient [out_features] in the layer's dtype (or out_dtype): g() summed over its rows.
  Tensor bias_grad(std::optional<DType> out_dtype = std::nullopt) const;

 private:
  // On the route g_ is the fp32 copy of a 16-bit gradient, so its dtype differs from the layer's.
  bool route() const { return g_.dtype() != dtype_; }

  Tensor g_;
  DType dtype_;
};

}  // namespace mixtrain::ops
