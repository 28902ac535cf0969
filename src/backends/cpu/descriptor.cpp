// The CPU's descriptor (core/backend_descriptor.h).
#include "backends/cpu/cpu_backend.h"

namespace mixtrain::cpu {

const BackendDescriptor& descriptor() {
  static constexpr BackendDescriptor d{
      .type = DeviceType::kCPU,
      .name = "cpu",
      .indexed = false,
      .summary = "the host's processors",
      .autocast_dtype = kBFloat16,
      .autocast_ops = AutocastOpList::kCpu,
      .absent_reason = "",
  };
  return d;
}

}  // namespace mixtrain::cpu
