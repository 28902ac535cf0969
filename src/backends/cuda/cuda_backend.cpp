// The CUDA backend: device discovery, a stream per GPU, the caching allocator on cudaMalloc, and
// transfers through pinned host buffers (cuda_backend.h says why each piece is as it is).
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/caching_allocator.h"
#include "mixtrain/error.h"

namespace mixtrain::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) [[likely]] return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  MT_FAIL("cuda: ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

namespace {

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    const cudaError_t status = cudaGetDeviceCount(&r.count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      r.count = 0;
      r.reason = std::string("no usable CUDA device: cudaGetDeviceCount says ") + cudaGetErrorName(status) + " (" +
                 cudaGetErrorString(status) + ")";
    } else if (r.count == 0) {
      r.reason = "no CUDA device: cudaGetDeviceCount found none";
    }
    return r;
  }();
  return d;
}

constexpr int kMaxDevices = 64;

// cudaMalloc/cudaFree for one GPU, as the caching allocator's source of segments.
class CudaMemory final : public RawDeviceMemory {
 public:
  explicit CudaMemory(int index) : index_(index) {}
  void* allocate(size_t nbytes) override {
    DeviceGuard guard(Device(kCUDA, static_cast<int16_t>(index_)));
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(status, "cudaMalloc");
    return p;
  }
  void release(void* ptr, size_t) override {
    DeviceGuard guard(Device(kCUDA, static_cast<int16_t>(index_)));
    check(cudaFree(ptr), "cudaFree");
  }
  // Cached blocks may still be read by queued kernels of the stream: wait for them before a
  // segment goes back to the driver.
  void synchronize() override { check(cudaStreamSynchronize(stream(Device(kCUDA, static_cast<int16_t>(index_)))), "synchronize"); }

 private:
  int index_;
};

// Everything one GPU needs, created on first use of that GPU.
struct PerDevice {
  explicit PerDevice(int index)
      : memory(index), allocator(memory, "cuda:" + std::to_string(index)) {
    DeviceGuard guard(Device(kCUDA, static_cast<int16_t>(index)));
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  CudaMemory memory;
  CachingAllocator allocator;
  cudaStream_t stream = nullptr;
  // The pinned staging buffer of host transfers: pageable copies are staged by the driver anyway,
  // and a buffer kept across calls avoids cudaHostAlloc in the steady state.
  std::mutex staging_mu;
  void* staging = nullptr;
  size_t staging_bytes = 0;
};

std::array<std::atomic<PerDevice*>, kMaxDevices> devices{};
std::mutex devices_mu;

PerDevice& per_device(Device device) {
  if (device.index < 0 || device.index >= kMaxDevices) require_device(device);  // throws
  PerDevice* d = devices[device.index].load(std::memory_order_acquire);
  if (d != nullptr) [[likely]] return *d;
  require_device(device);
  std::lock_guard lock(devices_mu);
  d = devices[device.index].load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new PerDevice(device.index);  // leaked on purpose: tensors with static storage may outlive main
    devices[device.index].store(d, std::memory_order_release);
  }
  return *d;
}

// Largest staging chunk: big transfers go through it in pieces.
constexpr size_t kStagingCap = size_t{32} << 20;

void* staging_buffer(PerDevice& d, size_t want) {
  const size_t bytes = std::min(want, kStagingCap);
  if (d.staging_bytes < bytes) {
    if (d.staging != nullptr) check(cudaFreeHost(d.staging), "cudaFreeHost");
    d.staging = nullptr;
    d.staging_bytes = 0;
    size_t grown = size_t{1} << 20;
    while (grown < bytes) grown <<= 1;
    check(cudaHostAlloc(&d.staging, grown, cudaHostAllocDefault), "cudaHostAlloc (pinned transfer buffer)");
    d.staging_bytes = grown;
  }
  return d.staging;
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void* allocate(size_t nbytes, Stream s) override { return per_device(s.device).allocator.allocate(nbytes, s.id); }
  void deallocate(void* ptr, size_t, Stream s) override {
    if (ptr != nullptr) per_device(s.device).allocator.deallocate(ptr);
  }
  memory::Stats stats(Device device) override {
    const CachingAllocatorStats c = per_device(device).allocator.stats();
    memory::Stats s;
    s.current_bytes = c.current_bytes;
    s.peak_bytes = c.peak_bytes;
    s.allocations = c.allocations;
    s.frees = c.frees;
    s.system_allocations = c.device_allocations;
    s.cached_bytes = c.cached_bytes;
    return s;
  }
  void reset_peak(Device device) override { per_device(device).allocator.reset_peak(); }
  void empty_cache(Device device) override { per_device(device).allocator.empty_cache(); }

  void copy_to_host(void* host_dst, const void* src, size_t nbytes, Device device) override {
    count_to_host();
    staged_copy(host_dst, src, nbytes, device, cudaMemcpyDeviceToHost);
  }
  void copy_from_host(void* dst, const void* host_src, size_t nbytes, Device device) override {
    count_from_host();
    staged_copy(dst, host_src, nbytes, device, cudaMemcpyHostToDevice);
  }
  void synchronize(Device device) override {
    count_synchronize();
    DeviceGuard guard(device);
    check(cudaStreamSynchronize(per_device(device).stream), "synchronize");
  }
  int device_count() const override { return driver_device_count(); }
  std::string unavailable_reason() const override { return driver_unavailable_reason(); }

 private:
  // Host <-> device through the pinned staging buffer, in pieces of its size; each piece has landed
  // (and the buffer is free again) before the next one starts.
  static void staged_copy(void* dst, const void* src, size_t nbytes, Device device, cudaMemcpyKind kind) {
    if (nbytes == 0) return;
    const bool to_host = kind == cudaMemcpyDeviceToHost;
    const char* what = to_host ? "copy to host" : "copy from host";
    PerDevice& d = per_device(device);
    DeviceGuard guard(device);
    std::lock_guard lock(d.staging_mu);
    char* buf = static_cast<char*>(staging_buffer(d, nbytes));
    for (size_t done = 0; done < nbytes;) {
      const size_t n = std::min(d.staging_bytes, nbytes - done);
      char* out = static_cast<char*>(dst) + done;
      const char* in = static_cast<const char*>(src) + done;
      if (!to_host) std::memcpy(buf, in, n);
      check(cudaMemcpyAsync(to_host ? buf : out, to_host ? in : buf, n, kind, d.stream), what);
      check(cudaStreamSynchronize(d.stream), what);
      if (to_host) std::memcpy(out, buf, n);
      done += n;
    }
  }
};

}  // namespace

int driver_device_count() { return discovery().count; }
const std::string& driver_unavailable_reason() { return discovery().reason; }

void require_device(Device device) {
  MT_CHECK(device.type == kCUDA, "cuda: ", device, " is not a CUDA device");
  const Discovery& d = discovery();
  MT_CHECK(d.count > 0, "device ", device, " is not available: ", d.reason);
  MT_CHECK(device.index >= 0 && device.index < d.count && device.index < kMaxDevices, "device ", device,
           " is not available: this machine has ", d.count, " CUDA device", d.count == 1 ? "" : "s",
           " (cuda:0 to cuda:", d.count - 1, ")");
}

cudaStream_t stream(Device device) { return per_device(device).stream; }

DeviceGuard::DeviceGuard(Device device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device.index) check(cudaSetDevice(device.index), "cudaSetDevice");
  else previous_ = -1;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Backend& backend() {
  static CudaBackend* b = new CudaBackend();  // leaked: must outlive every tensor
  return *b;
}

}  // namespace mixtrain::cuda
