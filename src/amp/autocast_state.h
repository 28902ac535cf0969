// Internal: the per-thread autocast state shared by the op hook and the public Autocast guard.
#pragma once

#include <utility>
#include <vector>

#include "mixtrain/amp/policy.h"
#include "mixtrain/device.h"
#include "mixtrain/dtype.h"

namespace mixtrain::amp::detail {

struct AutocastState {
  bool enabled = false;
  DeviceType device_type = DeviceType::kCPU;
  DType dtype = kBFloat16;
  bool cache_enabled = true;
  int nesting = 0;    // depth of Autocast guards (enabled or not); the cache clears when it returns to 0
  // Region overrides in force (the innermost region's list appended to its parents').
  std::vector<std::pair<PolicyId, CastPolicy>> overrides;
  std::vector<ExplainRecord>* explain = nullptr;  // non-null while an ExplainGuard lives
};

AutocastState& state();

// Installs the amp layer's handlers of the ops' autocast hook (src/ops/autocast_hook.h); every way
// into a region calls it first.
void install_hook();

// The rule for `op` and where it came from ("default", "global override", "region override").
std::pair<Rule, const char*> resolve_rule(PolicyId op);

}  // namespace mixtrain::amp::detail
