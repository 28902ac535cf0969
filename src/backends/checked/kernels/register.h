// The checked device's kernels (mixtrain/device.h, kChecked): every CPU kernel behind a guard.
#pragma once

#include "kernels/dispatch.h"

namespace mixtrain::kernels {

// Fills every kChecked slot whose CPU slot has a kernel (call after register_cpu).
void register_checked(Registry& registry);

}  // namespace mixtrain::kernels
