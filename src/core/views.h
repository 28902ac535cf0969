// src/core/views.h (internal): views without autograd. Each returns a tensor over the same storage
// with new shape, strides and offset, checking its arguments as the op of the same name does (the
// messages name that op); none records autograd or copies. The view ops of the ops layer
// (src/ops/views.cpp) are these plus their autograd records; kernels that rearrange their operands
// (oneDNN and cuBLASLt layouts, conv's per-group slices) use them directly.
#pragma once

#include <cstdint>

#include "mixtrain/tensor.h"

namespace mixtrain::views {

Tensor as_strided(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

// `t` viewed as `requested` (one -1 is inferred) when its strides allow it without a copy: false
// when they do not; a shape of another element count throws (`op` names the caller).
bool try_view(const Tensor& t, const Shape& requested, const char* op, Tensor& out);
// As try_view, but a shape the strides do not allow throws too.
Tensor view(const Tensor& t, const Shape& requested, const char* op = "view");

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
// `inverse_out`, when given, receives the inverse permutation.
Tensor permute(const Tensor& t, const Shape& dims, Shape* inverse_out = nullptr);
// Negative start/end count from the end; both are clamped to the dim. slice_bounds checks the
// arguments, clamps start/end in place as slice uses them and returns the wrapped dim.
int slice_bounds(const Tensor& t, int64_t dim, int64_t step, int64_t& start, int64_t& end);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
// The index of select() within dim d, checked and made non-negative.
int64_t select_index(const Tensor& t, int d, int64_t index);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
// Size-1 dims broadcast to `target` with stride 0 (-1 keeps a dim); `t` itself when nothing changes.
Tensor expand(const Tensor& t, const Shape& target);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t);
Tensor unsqueeze(const Tensor& t, int64_t dim);

}  // namespace mixtrain::views
