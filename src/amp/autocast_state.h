// Internal: the per-thread autocast state shared by the op hook and the public Autocast guard.
#pragma once

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"

namespace mixtrain::amp::detail {

struct AutocastState {
  bool enabled = false;
  DeviceType device_type = DeviceType::kCPU;
  DType dtype = kBFloat16;
  bool cache_enabled = true;
  int nesting = 0;    // depth of enabled-or-not Autocast guards; the cache clears when it returns to 0
  int suspended = 0;  // > 0 while an autocast op runs its internals
};

AutocastState& state();

}  // namespace mixtrain::amp::detail
