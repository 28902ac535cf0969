// The ops side of the autocast hook (autocast_hook.h): the suspension depth, and forwarding to the
// handlers the amp layer installed (inactive until it has).
#include "ops/autocast_hook.h"

#include <atomic>

#include "mixtrain/autograd.h"

namespace mixtrain::ops {
namespace {
std::atomic<const AutocastHandlers*> installed{nullptr};
const AutocastHandlers& handlers() { return *installed.load(std::memory_order_acquire); }
thread_local int suspension_depth = 0;
}  // namespace

int& autocast_suspension_depth() { return suspension_depth; }

void install_autocast_handlers(const AutocastHandlers* h) { installed.store(h, std::memory_order_release); }

bool autocast_active() {
  if (suspension_depth != 0) return false;
  const AutocastHandlers* h = installed.load(std::memory_order_acquire);
  return h != nullptr && h->active();
}

AutocastRegionGuard::AutocastRegionGuard(bool suspended) : suspended_(suspended) {
  if (suspended_) ++suspension_depth;
}

AutocastRegionGuard::AutocastRegionGuard(OpId op) : op_scope_(to_string(op), &autograd::current_scope()) {}

void AutocastRegionGuard::suspend() {
  if (!suspended_) ++suspension_depth;
  suspended_ = true;
}

AutocastRegionGuard::~AutocastRegionGuard() {
  if (suspended_) --suspension_depth;
}

// The op's memory scope opens before the casts: the 16-bit copies are the op's until it returns.
AutocastRegionGuard autocast_slow(OpId op, std::span<Tensor* const> inputs) {
  AutocastRegionGuard guard(op);
  handlers().cast_inputs(op, inputs);
  guard.suspend();
  return guard;
}

AutocastRegionGuard autocast_linear_slow(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded) {
  AutocastRegionGuard guard(op);
  handlers().cast_linear(op, x, w, b, params_rounded);
  guard.suspend();
  return guard;
}

}  // namespace mixtrain::ops
