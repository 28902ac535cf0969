// The device seam of the core: one Backend per device type owns that type's memory and the byte
// transfers between it and the host. Kernels (src/backends/<name>/kernels/) are registered
// separately in the kernel registry (src/kernels/dispatch.h); together with a descriptor
// (core/backend_descriptor.h) they make a backend folder, src/backends/<name>/.
//
// The built-in backends are installed on first need. A backend defined outside the library
// registers itself once with register_backend(), before the first tensor on its device is made;
// docs/notes/backends.md walks through adding one.
//
// Nothing above a backend reads or writes device memory: Tensor::item, to_vector, printing and
// saving copy to the host through copy_to_host, and factories that know their values on the host
// (from_vector, arange) copy them in through copy_from_host.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "mixtrain/device.h"
#include "mixtrain/memory.h"

namespace mixtrain {

// An ordered queue of device work. The CPU runs everything at once and ignores it; a GPU backend
// keys its stream-ordered cache and its copies by it. id 0 is the device's default stream.
struct Stream {
  Device device;
  int64_t id = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory. Accounting counts the bytes asked for (memory.h); `nbytes` may be 0; blocks are
  // kAlignment-aligned. A block may be reused by work queued on `stream` at once, and by other
  // streams only after the backend has ordered them.
  virtual void* allocate(size_t nbytes, Stream stream) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Stream stream) = 0;
  virtual memory::Stats stats(Device device) = 0;
  virtual void reset_peak(Device device) = 0;
  virtual void empty_cache(Device device) = 0;

  // Byte transfers between host memory and this device's memory; they return when the bytes have
  // arrived (the host buffer may be reused at once).
  virtual void copy_to_host(void* host_dst, const void* src, size_t nbytes, Device device) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t nbytes, Device device) = 0;
  // Waits until every queued operation on the device has finished.
  virtual void synchronize(Device device) = 0;

  // The host address of device memory for backends whose memory the host can address (the CPU and
  // host-memory test devices); the kernels of src/backends/cpu/kernels run on any device that has one. Others
  // throw (the default).
  virtual void* host_address(void* device_ptr, Device device) const;

  // How many devices of this type the process can use (1 for the CPU), and why none when 0.
  virtual int device_count() const { return 1; }
  virtual std::string unavailable_reason() const { return {}; }

  // The host's waits on this backend's devices (mixtrain/device.h, SyncCounts). A backend counts
  // its transfers and synchronisations itself; its kernels that return a value to the host call
  // count_kernel_result() once per call.
  SyncCounts sync_counts() const {
    return {to_host_.load(std::memory_order_relaxed), from_host_.load(std::memory_order_relaxed),
            synchronize_.load(std::memory_order_relaxed), kernel_results_.load(std::memory_order_relaxed)};
  }
  void count_kernel_result() { kernel_results_.fetch_add(1, std::memory_order_relaxed); }

 protected:
  void count_to_host() { to_host_.fetch_add(1, std::memory_order_relaxed); }
  void count_from_host() { from_host_.fetch_add(1, std::memory_order_relaxed); }
  void count_synchronize() { synchronize_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> to_host_{0}, from_host_{0}, synchronize_{0}, kernel_results_{0};
};

// The backend of `type` built into this library (a folder of src/backends/ whose backend this build
// includes: the CPU's and the checked device's always, CUDA's in a MIXTRAIN_CUDA build), or nullptr. has_backend and backend_for install it on first need unless another backend
// was registered for the type first.
Backend* builtin_backend(DeviceType type);

// Installs the backend of `type` (not kCPU, which is built in). The backend must outlive every
// tensor on its devices; registering a type twice is an error.
void register_backend(DeviceType type, Backend* backend);
bool has_backend(DeviceType type);
// The backend of `device`'s type; throws mt::Error naming the device when none is registered.
Backend& backend_for(Device device);

}  // namespace mixtrain
