// The checked device's memory side (mixtrain/device.h, kChecked): host memory behind addresses the
// host cannot dereference. Its kernels are src/backends/checked/kernels/.
//
// The allocator hands out addresses with bit 62 set: non-canonical on x86-64, so any load or store
// through one faults at once. Only this backend turns them back into host addresses: host_address
// (what the CPU kernels reach memory through, backends/cpu/kernels/host_ptr.h) and the host transfers. Every
// transfer and synchronisation is counted (SyncCounts), so that a test can bound what a training
// step costs a real device in host waits.
#include "backends/checked/checked_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "mixtrain/error.h"

namespace mixtrain::checked {
namespace {

constexpr uintptr_t kTag = uintptr_t{1} << 62;

void* untag(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  MT_CHECK(p == nullptr || (bits & kTag) != 0, "checked device: ", p,
           " is not a checked-device address (a host or other device's pointer reached it)");
  return reinterpret_cast<void*>(bits & ~kTag);
}

class CheckedBackend final : public Backend {
 public:
  const char* name() const override { return "checked"; }

  void* allocate(size_t nbytes, Stream) override {
    const size_t rounded =
        (std::max<size_t>(nbytes, 1) + memory::kAlignment - 1) / memory::kAlignment * memory::kAlignment;
    void* p = std::aligned_alloc(memory::kAlignment, rounded);
    MT_CHECK(p != nullptr, "checked device: out of memory allocating ", nbytes, " bytes");
    MT_CHECK((reinterpret_cast<uintptr_t>(p) & kTag) == 0, "checked device: host address ", p,
             " already has the tag bit");
    std::lock_guard lock(mu_);
    live_.insert(p);
    ++stats_.allocations;
    ++stats_.system_allocations;
    stats_.current_bytes += static_cast<int64_t>(nbytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kTag);
  }
  void deallocate(void* ptr, size_t nbytes, Stream) override {
    if (ptr == nullptr) return;
    void* host = untag(ptr);
    std::lock_guard lock(mu_);
    MT_CHECK(live_.erase(host) == 1, "checked device: freeing ", ptr, ", which is not a live block");
    std::free(host);
    ++stats_.frees;
    stats_.current_bytes -= static_cast<int64_t>(nbytes);
  }
  memory::Stats stats(Device) override {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void reset_peak(Device) override {
    std::lock_guard lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache(Device) override {}

  void copy_to_host(void* host_dst, const void* src, size_t nbytes, Device) override {
    count_to_host();
    if (nbytes != 0) std::memcpy(host_dst, untag(src), nbytes);
  }
  void copy_from_host(void* dst, const void* host_src, size_t nbytes, Device) override {
    count_from_host();
    if (nbytes != 0) std::memcpy(untag(dst), host_src, nbytes);
  }
  void synchronize(Device) override { count_synchronize(); }
  void* host_address(void* ptr, Device) const override { return untag(ptr); }

  int device_count() const override { return enabled() ? 1 : 0; }
  std::string unavailable_reason() const override {
    return enabled() ? std::string()
                     : std::string("the checked device is a debugging device; set ") + kCheckedDeviceEnv +
                           "=1 in the environment to use it (docs/notes/backends.md)";
  }

 private:
  // Read at every question, so that a process can turn it on before its first use; "1" only.
  static bool enabled() {
    const char* v = std::getenv(kCheckedDeviceEnv);
    return v != nullptr && std::string_view(v) == "1";
  }

  std::mutex mu_;
  memory::Stats stats_;
  // The host addresses of the live blocks: double frees are caught, and the blocks stay reachable
  // for LeakSanitizer, which does not recognise the tagged pointers the tensors hold.
  std::unordered_set<void*> live_;
};

}  // namespace

Backend& backend() {
  static auto* b = new CheckedBackend();  // leaked: storages may be freed during exit
  return *b;
}

}  // namespace mixtrain::checked
