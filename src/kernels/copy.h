// Strided copy with dtype conversion: the primitive behind to(), contiguous(), clone(), copy_().
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// dst and src have the same shape; any strides, any dtypes (16-bit targets round to nearest even).
// dst must not partially overlap src.
void copy(const Tensor& dst, const Tensor& src);

// Fills every element of dst (any strides) with `value` converted to dst's dtype.
void fill(const Tensor& dst, double value);

}  // namespace mixtrain::kernels
