// mixtrain/ops/reduce.h: reductions over dimensions.
//
// dtypes: float32, float64, float16, bfloat16. Sums accumulate in fp32 (fp64 for fp64 input) and
// round once on store; 16-bit results keep the input dtype unless `dtype` is given. An empty `dims`
// reduces over every dimension. keepdim keeps reduced dims with size 1.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
// Maximum over dims; the gradient goes to the positions holding the maximum, split evenly on ties
// (PyTorch's amax rule). max and amax are the same op here; max returns only values.
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index of the maximum along one dim (int64, no gradient).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// Sums a (broadcast) gradient back down to `shape`: the backward of broadcasting.
Tensor sum_to(const Tensor& x, const Shape& shape);

// The index (in `tensors`) of the first tensor holding inf or NaN, or -1 (also for an empty list).
// One read-only pass over every element: nothing is written and no version counter moves, so the
// tensors may be saved for backward or watched by hooks. Undefined and empty tensors are skipped.
// Floating dtypes, any strides, all on one device (an mt::Error otherwise). The answer reaches the
// host: on a GPU one read back.
int64_t first_non_finite(const std::vector<Tensor>& tensors);

}  // namespace mixtrain
