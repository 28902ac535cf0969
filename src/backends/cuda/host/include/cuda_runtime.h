// cuda_runtime.h on the host: the runtime API (cuda_runtime_api.h) and the kernel-side built-ins
// (backends/cuda/host/cuda_on_host.h, device_functions.h beside this file).
#pragma once

#include <cmath>

#include "cuda_runtime_api.h"
#include "backends/cuda/host/cuda_on_host.h"
#include "device_functions.h"
#include "vector_types.h"
