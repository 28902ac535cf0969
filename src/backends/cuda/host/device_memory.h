// Device memory of CUDA on the host (docs/cuda.md, "CUDA on the host"): what cudaMalloc returns, kept
// apart from host memory so that the two mistakes a GPU punishes are caught on the host too.
//   * Host code touching device memory: the memory lies in one reserved region that is inaccessible
//     (PROT_NONE) except while device work runs -- a kernel launch, a copy or memset, a vendor library
//     call (each holds a DeviceAccess). A host read or write of it at any other time stops the
//     process with a message naming the address and the allocation, then the usual crash report
//     (AddressSanitizer's stack, or a backtrace).
//   * Out of bounds and after free: under AddressSanitizer every byte of the region outside a live
//     allocation is poisoned, so a kernel's access past the end of an allocation (up to the next one's
//     start, 256-byte aligned as cudaMalloc's) or into a freed one is reported at the kernel's line.
//     Freed blocks wait in a quarantine before they are reused, so a stale pointer finds them freed.
#pragma once

#include <cstddef>

namespace mixtrain::cuda_host {

// nullptr and false for 0 bytes; nullptr when the region is exhausted (cudaErrorMemoryAllocation).
void* device_malloc(size_t bytes);
// False for a pointer that device_malloc did not return (or returned and was freed): cudaErrorInvalidValue.
bool device_free(void* p);
// Whether p lies in the device region (allocated or not).
bool is_device_address(const void* p);

// Device memory is accessible while at least one DeviceAccess lives (on any thread).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

}  // namespace mixtrain::cuda_host
