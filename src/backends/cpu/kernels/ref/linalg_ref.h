// Scalar reference kernels of the linalg and convolution families: plain loops accumulating in
// fp64. They are the test oracle for the oneDNN kernels and the fp64 kernels themselves (gradient
// checks run in fp64). Inputs of any floating dtype and any strides are read exactly (widened to
// fp64); the output (contiguous, any floating dtype) is rounded once on store.
#pragma once

#include <cstdint>

#include "kernels/conv.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels::ref {

// t widened exactly to a new contiguous fp64 tensor (detached): how every reference kernel reads
// its inputs.
Tensor to_f64_contiguous(const Tensor& t);

// out[..., n, m] = a[..., n, k] @ b[..., k, m] (+ bias[m]); a, b, out of the same rank, batch dims of
// a and b equal to out's or 1 (broadcast).
void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

using Conv2dGeometry = kernels::Conv2dGeometry;

// y [N, O, Ho, Wo] = conv(x [N, C, H, W], w [O, C/groups, kh, kw]) + bias [O].
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g);
// gx [N, C, H, W] = the gradient of conv2d_forward with respect to x, given gy.
void conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dGeometry& g);
// gw [O, C/groups, kh, kw] (and gb [O] when defined) = the gradients with respect to w and bias.
void conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                             const Conv2dGeometry& g);

}  // namespace mixtrain::kernels::ref
