// The CUDA backend's memory side (built only with MIXTRAIN_CUDA): device discovery, one stream per
// GPU on which all of mixtrain's work for that GPU is queued, the stream-ordered caching allocator
// (core/caching_allocator.h) and pinned-buffer transfers. The kernels (src/kernels/cuda) include
// this header for check(), stream() and DeviceGuard; nothing above the kernels does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "core/backend.h"

namespace mixtrain::cuda {

// Throws mt::Error "cuda: <what>: <CUDA's error name and text>" unless `status` is cudaSuccess.
void check(cudaError_t status, const char* what);

// The number of GPUs the CUDA runtime reports; 0 when there are none or the driver cannot be used
// (the reason is then driver_unavailable_reason()). Asked once per process. (mixtrain/cuda.h's
// device_count() asks the registered backend, which answers with these.)
int driver_device_count();
const std::string& driver_unavailable_reason();

// Throws a clear mt::Error when `device` is not a usable GPU of this process.
void require_device(Device device);

// The stream of `device` (created on first use, non-blocking with respect to the legacy stream).
// Kernels, cuBLASLt calls and transfers of that device all run on it, in program order, so freed
// blocks can be reused without synchronisation.
cudaStream_t stream(Device device);

// Makes `device` current for the calling thread and restores the previous device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The CUDA backend object, registered for DeviceType::kCUDA by register_builtin_backends().
Backend& backend();

}  // namespace mixtrain::cuda
