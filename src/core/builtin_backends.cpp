// The backends compiled into this library besides the CPU's: the checked debugging device always,
// CUDA's in CUDA builds. They are registered on first need
// (the first tensor or question about their device type, allocator.cpp) rather than by a static
// initialiser, which a static library's linker would drop.
#include "core/backend.h"
#include "core/checked/checked_backend.h"
#if MIXTRAIN_WITH_CUDA
#include "core/cuda/cuda_backend.h"
#endif

namespace mixtrain {

Backend* builtin_backend(DeviceType type) {
  if (type == kChecked) return &checked::backend();
#if MIXTRAIN_WITH_CUDA
  if (type == kCUDA) return &cuda::backend();
#endif
  return nullptr;
}

}  // namespace mixtrain
