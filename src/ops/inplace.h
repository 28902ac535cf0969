// Internal: the rule every in-place write checks first (tensor.cpp, and the in-place arithmetic in
// src/ops/elementwise.cpp).
#pragma once

#include "mixtrain/autograd.h"
#include "mixtrain/tensor.h"

namespace mixtrain::detail {

// PyTorch's rule: an in-place write to a leaf that requires grad would silently corrupt the graph,
// so it is refused while grad mode is on. Writes to non-leaf tensors that are part of a graph are
// refused too (mixtrain does not rebase history); the saved-version check catches the rest.
inline void check_inplace(const Tensor& t, const char* op) {
  if (!GradMode::is_enabled() || !t.requires_grad()) return;
  MT_CHECK(!t.is_leaf(), op,
           ": a leaf tensor that requires grad is used in an in-place operation; wrap the update in "
           "mt::NoGradGuard");
  MT_FAIL(op,
          ": in-place operations on tensors that are part of an autograd graph are not supported; use the "
          "out-of-place op");
}

}  // namespace mixtrain::detail
