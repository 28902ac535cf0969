// round_through(x, precision): x rounded to a 16-bit precision and kept in fp32. What autocast hands
// the linear layers for their fp32 parameters where 16-bit matmuls take the fp32 route
// (kernels::uses_fp32_route): the route's products read fp32 operands as they are, so a weight rounded
// here once is neither cast to 16 bits nor widened again in every product. Note [Parameters on the
// fp32 route] in docs/notes/conversions.md.
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain::ops {

// x: fp32, any shape and strides. precision: kBFloat16 or kFloat16. Returns a contiguous fp32 tensor
// with the values of x.to(precision).to(kFloat32), in one pass. Differentiable like that pair of
// casts: the gradient is rounded through the same precision, g.to(precision).to(kFloat32).
Tensor round_through(const Tensor& x, DType precision);

}  // namespace mixtrain::ops
