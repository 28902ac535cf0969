// The ops side of the autocast hook (autocast_hook.h): the suspension depth, and forwarding to the
// handlers the amp layer installed (inactive until it has).
#include "ops/autocast_hook.h"

#include <atomic>

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

AutocastRegionGuard::~AutocastRegionGuard() {
  if (suspended_) --suspension_depth;
}

AutocastRegionGuard autocast_slow(OpId op, std::span<Tensor* const> inputs) {
  handlers().cast_inputs(op, inputs);
  return AutocastRegionGuard(true);
}

AutocastRegionGuard autocast_linear_slow(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded) {
  handlers().cast_linear(op, x, w, b, params_rounded);
  return AutocastRegionGuard(true);
}

}  // namespace mixtrain::ops
