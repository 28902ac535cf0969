// The CPU backend's memory side and descriptor (core/backend_descriptor.h).
#pragma once

#include "core/backend_descriptor.h"

namespace mixtrain::cpu {

Backend& backend();
const BackendDescriptor& descriptor();

}  // namespace mixtrain::cpu
