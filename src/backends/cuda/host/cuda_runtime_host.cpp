// The CUDA runtime API on the host (include/cuda_runtime_api.h): one sm_90 device, device memory in
// a region of its own that host code cannot touch (device_memory.h), pinned host memory from the
// heap, streams that have always finished. Only in a -DMIXTRAIN_CUDA=HOST build.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "backends/cuda/host/block_runner.h"
#include "backends/cuda/host/device_memory.h"

namespace {

// Streams are tokens: work runs at once, in program order.
struct Streams {
  std::mutex mutex;
  std::set<cudaStream_t> live;
  uintptr_t next = 0x1000;
};
Streams& streams() {
  static Streams s;
  return s;
}
thread_local int g_device = 0;

bool valid_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  std::lock_guard<std::mutex> guard(streams().mutex);
  return streams().live.count(s) != 0;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  // 256-byte aligned, as cudaMalloc's; AddressSanitizer sees every byte past `bytes` as poisoned.
  *ptr = mixtrain::cuda_host::device_malloc(bytes);
  return bytes != 0 && *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  return mixtrain::cuda_host::device_free(ptr) ? cudaSuccess : cudaErrorInvalidValue;
}
// Pinned host memory is host memory: host code may touch it, and a kernel may read it (as a GPU does
// through the mapping of page-locked memory).
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const size_t size = (bytes + 255) / 256 * 256;
  *ptr = size == 0 ? nullptr : std::aligned_alloc(256, size);
  return size != 0 && *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (mixtrain::cuda_host::is_device_address(ptr)) return cudaErrorInvalidValue;
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (!valid_stream(stream) || (bytes > 0 && (dst == nullptr || src == nullptr))) return cudaErrorInvalidValue;
  if (bytes > 0) {
    mixtrain::cuda_host::DeviceAccess access;
    std::memmove(dst, src, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (!valid_stream(stream) || (bytes > 0 && dst == nullptr)) return cudaErrorInvalidValue;
  if (bytes > 0) {
    mixtrain::cuda_host::DeviceAccess access;
    std::memset(dst, value, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> guard(streams().mutex);
  *stream = reinterpret_cast<cudaStream_t>(streams().next);
  streams().next += 0x10;
  streams().live.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> guard(streams().mutex);
  return streams().live.erase(stream) == 1 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return valid_stream(stream) ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
// Launch errors are thrown by the engine at the launch itself (mt::Error naming the kernel).
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
  }
  return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  }
  return "cudaErrorUnknown";
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  using L = mixtrain::cuda_host::Limits;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(L::kDefaultSharedBytes); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(L::kOptInSharedBytes); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
cudaError_t cuda_host_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > mixtrain::cuda_host::Limits::kOptInSharedBytes)
    return cudaErrorInvalidValue;
  mixtrain::cuda_host::set_max_dynamic_shared_bytes(kernel, static_cast<size_t>(value));
  return cudaSuccess;
}
