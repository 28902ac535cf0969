// The built-in backends by device type, from the list CMake generates out of src/backends/
// (builtin_backends(), core/backend_descriptor.h). A backend's memory side is installed on first
// need (the first tensor or question about its device type, allocator.cpp) rather than by a static
// initialiser, which a static library's linker would drop.
#include "core/backend_descriptor.h"

namespace mixtrain {

const BuiltinBackend* builtin_backend_of(DeviceType type) {
  for (const BuiltinBackend& b : builtin_backends())
    if (b.descriptor->type == type) return &b;
  return nullptr;
}

Backend* builtin_backend(DeviceType type) {
  const BuiltinBackend* b = builtin_backend_of(type);
  return b != nullptr && b->backend != nullptr ? b->backend() : nullptr;
}

}  // namespace mixtrain
