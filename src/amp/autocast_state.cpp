// Thread-local autocast state and the front-end hook (see src/ops/autocast_hook.h). The policy
// table and the public Autocast guard build on this state.
#include "amp/autocast_state.h"

#include "ops/autocast_hook.h"

namespace mixtrain::amp::detail {

AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

}  // namespace mixtrain::amp::detail

namespace mixtrain::ops {

bool autocast_active() {
  const auto& s = amp::detail::state();
  return s.enabled && s.suspended == 0;
}

AutocastRegionGuard::AutocastRegionGuard(bool suspended) : suspended_(suspended) {
  if (suspended_) ++amp::detail::state().suspended;
}

AutocastRegionGuard::~AutocastRegionGuard() {
  if (suspended_) --amp::detail::state().suspended;
}

}  // namespace mixtrain::ops
