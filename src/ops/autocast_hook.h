// The one call every op front-end makes before choosing a kernel:
//
//   auto region = ops::autocast(OpId::kLinear, {&x, &w, &b});
//
// The returned guard is also the op's memory scope (memory::OpScope, named by the OpId, in the
// module that runs it): what the op allocates while it runs, the casts included, counts as its
// temporaries in the memory breakdown until it returns.
//
// Inside an enabled autocast region it casts the eligible inputs (floating, not fp64, defined) in
// place of the caller's local handles as the op's policy says (lower precision / fp32 / promote /
// run in input dtypes), records the decision for explain mode, and suspends autocast until the
// returned guard dies, so ops that an op calls internally are not cast again (PyTorch excludes its
// autocast key the same way). Outside a region it costs one atomic load and, once the amp layer has
// installed its handlers, one thread-local read.
//
// The ops layer defines this hook and the amp layer, above it, fills it: amp installs its handlers
// (AutocastHandlers) when a region is first entered, so no op refers to a symbol of the amp layer
// (the link-level layer check, docs/notes/layers.md). Without an installed handler nothing is active.
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "mixtrain/memory.h"
#include "mixtrain/op_id.h"
#include "mixtrain/tensor.h"

namespace mixtrain::ops {

// What the amp layer does for the hook. All are called on the op's thread.
struct AutocastHandlers {
  // Whether the calling thread is in an enabled autocast region (and not in backward).
  bool (*active)();
  // Casts the op's eligible inputs in place of the caller's handles as the op's rule says.
  void (*cast_inputs)(OpId op, std::span<Tensor* const> inputs);
  // The same for linear-like ops whose fp32 parameters may be rounded once per region (amp/autocast.h).
  void (*cast_linear)(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded);
};
// Installs the handlers (the amp layer's, a static object); the same pointer again is a no-op.
void install_autocast_handlers(const AutocastHandlers* handlers);

// The calling thread's suspension depth: > 0 while an op (or an FP8 linear) runs its internals under
// an AutocastRegionGuard(true); autocast is inactive then. A region restored on another thread's
// behalf (amp::RestoredAutocast) starts it at 0 and puts it back.
int& autocast_suspension_depth();

class AutocastRegionGuard {
 public:
  AutocastRegionGuard() = default;
  explicit AutocastRegionGuard(bool suspended);
  // Opens `op`'s memory scope, not suspended yet (suspend() after the casts).
  explicit AutocastRegionGuard(OpId op);
  ~AutocastRegionGuard();
  AutocastRegionGuard(AutocastRegionGuard&& o) noexcept : op_scope_(std::move(o.op_scope_)), suspended_(o.suspended_) {
    o.suspended_ = false;
  }
  AutocastRegionGuard(const AutocastRegionGuard&) = delete;
  AutocastRegionGuard& operator=(const AutocastRegionGuard&) = delete;
  AutocastRegionGuard& operator=(AutocastRegionGuard&&) = delete;
  void suspend();

 private:
  memory::OpScope op_scope_;
  bool suspended_ = false;
};

// True while an enabled autocast region is active on this thread (and not suspended).
bool autocast_active();

// Applies `op`'s policy to `inputs` (pointers to the front-end's local copies; nulls and undefined
// tensors are skipped).
AutocastRegionGuard autocast_slow(OpId op, std::span<Tensor* const> inputs);

inline AutocastRegionGuard autocast(OpId op, std::initializer_list<Tensor*> inputs) {
  if (!autocast_active()) return AutocastRegionGuard(op);
  return autocast_slow(op, std::span<Tensor* const>(inputs.begin(), inputs.size()));
}

// For linear and gelu_linear: autocast(op, {&x, &w, &b}), except that where the region's 16-bit
// matmuls take the fp32 route on the parameters' device (kernels::uses_fp32_route), an fp32 w and b
// are not cast to 16 bits but rounded to them in fp32 (ops::round_through; cached like a cast) and
// `params_rounded` is set: x is then 16-bit while w (and b, if it was fp32) stay fp32 holding 16-bit
// values, which the route's products read without a conversion. The values, and so every result,
// are those of the casts. Note [Parameters on the fp32 route] in docs/notes/conversions.md.
AutocastRegionGuard autocast_linear_slow(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded);

inline AutocastRegionGuard autocast_linear(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded) {
  params_rounded = false;
  if (!autocast_active()) return AutocastRegionGuard(op);
  return autocast_linear_slow(op, x, w, b, params_rounded);
}

// For ops taking a runtime-length list (cat, stack): casts the elements of `inputs` in place.
inline AutocastRegionGuard autocast(OpId op, std::vector<Tensor>& inputs) {
  if (!autocast_active()) return AutocastRegionGuard(op);
  std::vector<Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (Tensor& t : inputs) ptrs.push_back(&t);
  return autocast_slow(op, ptrs);
}

}  // namespace mixtrain::ops
