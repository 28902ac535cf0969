// The checked device's descriptor (core/backend_descriptor.h). Autocast treats it as the CPU it
// stands in for: the same dtype and op list, so that a run on it reaches the CPU's bits.
#include "backends/checked/checked_backend.h"

namespace mixtrain::checked {

const BackendDescriptor& descriptor() {
  static constexpr BackendDescriptor d{
      .type = DeviceType::kChecked,
      .name = "checked",
      .indexed = false,
      .summary = "the debugging device of docs/notes/backends.md, with MIXTRAIN_CHECKED_DEVICE=1 in the environment",
      .autocast_dtype = kBFloat16,
      .autocast_ops = AutocastOpList::kCpu,
      .absent_reason = "",
  };
  return d;
}

}  // namespace mixtrain::checked
