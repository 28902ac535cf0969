// src/ops/linear_grad.h (internal): the output gradient of a linear layer (linear, gelu_linear) as
// its backward uses it, in two products (input and weight gradients) and a bias sum.
//
// On the fp32 route of 16-bit matmuls (kernels::uses_fp32_route) the gradient is widened to fp32
// once here instead of once per product inside the matmul kernel; the products still round once
// into the layer's dtype, and the bias sum of the exact fp32 copy is the same sum
// (kernels::sum_rows), so the numerics are those of the plain products.
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain::ops {

class LinearOutputGrad {
 public:
  // gy: [rows, out_features] in the layer's dtype.
  explicit LinearOutputGrad(const Tensor& gy);

  // What the products and the bias sum read: gy, or its fp32 copy on the route.
  const Tensor& g() const { return g_; }
  // a @ b (2-D, one of them built from g()) in the layer's dtype, accumulated in fp32.
  Tensor product(const Tensor& a, const Tensor& b) const;
  // The bias gradient [out_features] in the layer's dtype: g() summed over its rows.
  Tensor bias_grad() const;

 private:
  // On the route g_ is the fp32 copy of a 16-bit gradient, so its dtype differs from the layer's.
  bool route() const { return g_.dtype() != dtype_; }

  Tensor g_;
  DType dtype_;
};

}  // namespace mixtrain::ops
