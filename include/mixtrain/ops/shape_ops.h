// mixtrain/ops/shape_ops.h: ops that combine or gather tensors (the views are Tensor methods).
#pragma once

#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain {

// Concatenates along `dim`; inputs are promoted to a common dtype.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Stacks along a new dim `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Rows of `x` along `dim` picked by `index` (int32/int64, 1-D); gradient scatters back (summing repeats).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace mixtrain
