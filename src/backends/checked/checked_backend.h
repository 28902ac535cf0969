// The checked device's backend (mixtrain/device.h, kChecked): built into every build, available
// only with MIXTRAIN_CHECKED_DEVICE=1 in the environment. Its kernels (src/kernels/checked) are the
// CPU's behind a device guard; docs/notes/backends.md says what it proves.
#pragma once

#include "core/backend_descriptor.h"

namespace mixtrain::checked {

// The backend object, installed for DeviceType::kChecked on first need (builtin_backend).
Backend& backend();
const BackendDescriptor& descriptor();

}  // namespace mixtrain::checked
