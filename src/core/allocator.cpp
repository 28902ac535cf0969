// The CPU backend (a size-bucketed caching allocator with exact byte accounting, and memcpy for
// transfers) and the registry of backends.
//
// Freed blocks go back to a per-size free list so that a steady-state training step, which frees
// and allocates the same sizes every iteration, does not reach the system allocator. Sizes are
// rounded up to a 64-byte multiple (small) or to a multiple of 1/8 of the next power of two (large),
// so the cache can serve nearby sizes without wasting more than 25%. Accounting always uses the bytes
// the caller asked for, so "a bf16 tensor of N elements costs 2N bytes" holds exactly.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "mixtrain/error.h"
#include "mixtrain/memory.h"

namespace mixtrain {
using memory::kAlignment;
using memory::Stats;
namespace {

size_t round_size(size_t n) {
  if (n <= 4096) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = 1;
  while (p < n) p <<= 1;
  size_t step = p / 8;  // four size classes between p/2 and p: at most 25% over the request
  return (n + step - 1) / step * step;
}

class CpuAllocator {
 public:
  void* allocate(size_t nbytes) {
    std::lock_guard lock(mu_);
    size_t rounded = round_size(nbytes == 0 ? 1 : nbytes);
    void* p = nullptr;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(rounded);
    } else {
      p = std::aligned_alloc(kAlignment, rounded);
      if (p == nullptr) {
        release_cache_locked();
        p = std::aligned_alloc(kAlignment, rounded);
      }
      MT_CHECK(p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on cpu (", stats_.current_bytes,
               " bytes in use)");
      ++stats_.system_allocations;
    }
    ++stats_.allocations;
    stats_.current_bytes += static_cast<int64_t>(nbytes);
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (p == nullptr) return;
    std::lock_guard lock(mu_);
    size_t rounded = round_size(nbytes == 0 ? 1 : nbytes);
    free_[rounded].push_back(p);
    stats_.cached_bytes += static_cast<int64_t>(rounded);
    stats_.current_bytes -= static_cast<int64_t>(nbytes);
    ++stats_.frees;
  }

  Stats stats() {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() {
    std::lock_guard lock(mu_);
    release_cache_locked();
  }

 private:
  void release_cache_locked() {
    for (auto& [size, blocks] : free_)
      for (void* b : blocks) std::free(b);
    free_.clear();
    stats_.cached_bytes = 0;
  }

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  Stats stats_;
};

CpuAllocator& cpu_allocator() {
  // Leaked on purpose: tensors with static storage duration may be freed after main returns.
  static auto* a = new CpuAllocator();
  return *a;
}

class CpuBackend final : public Backend {
 public:
  constexpr CpuBackend() = default;
  const char* name() const override { return "cpu"; }
  void* allocate(size_t nbytes, Stream) override { return cpu_allocator().allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes, Stream) override { cpu_allocator().deallocate(ptr, nbytes); }
  Stats stats(Device) override { return cpu_allocator().stats(); }
  void reset_peak(Device) override { cpu_allocator().reset_peak(); }
  void empty_cache(Device) override { cpu_allocator().empty_cache(); }
  void copy_to_host(void* dst, const void* src, size_t nbytes, Device) override { copy_bytes(dst, src, nbytes); }
  void copy_from_host(void* dst, const void* src, size_t nbytes, Device) override { copy_bytes(dst, src, nbytes); }
  void synchronize(Device) override {}
  void* host_address(void* ptr, Device) const override { return ptr; }

 private:
  static void copy_bytes(void* dst, const void* src, size_t nbytes) {
    if (nbytes != 0) std::memcpy(dst, src, nbytes);
  }
};

constinit CpuBackend cpu_backend;
// Constant-initialised: the CPU is present before any static initialiser runs, and a backend
// registered by another translation unit's initialiser cannot be wiped by this one's.
constinit std::array<std::atomic<Backend*>, kNumDeviceTypes> backends{&cpu_backend, nullptr, nullptr, nullptr};

}  // namespace

void* Backend::host_address(void*, Device device) const {
  MT_FAIL("device ", device, " (", name(), ") memory is not addressable from the host; copy the tensor to the cpu first");
}

void register_backend(DeviceType type, Backend* backend) {
  MT_CHECK(type != kCPU, "register_backend: the cpu backend is built in");
  MT_CHECK(backend != nullptr, "register_backend: null backend for ", type);
  Backend* expected = nullptr;
  MT_CHECK(backends[static_cast<int>(type)].compare_exchange_strong(expected, backend),
           "register_backend: a backend for ", type, " is already registered (", expected->name(), ")");
}

namespace {
Backend* find_backend(DeviceType type) {
  Backend* b = backends[static_cast<int>(type)].load(std::memory_order_acquire);
  if (b == nullptr) [[unlikely]] {
    Backend* builtin = builtin_backend(type);
    if (builtin != nullptr && backends[static_cast<int>(type)].compare_exchange_strong(b, builtin)) b = builtin;
  }
  return b;
}
}  // namespace

bool has_backend(DeviceType type) { return find_backend(type) != nullptr; }

Backend& backend_for(Device device) {
  Backend* b = find_backend(device.type);
  MT_CHECK(b != nullptr, "device ", device, " is not available: ", device.type == kCUDA
               ? "this build of mixtrain has no CUDA backend (configure with -DMIXTRAIN_CUDA=ON, docs/cuda.md)"
               : "no backend for it is registered");
  return *b;
}

int device_count(DeviceType type) {
  Backend* b = find_backend(type);
  return b == nullptr ? 0 : b->device_count();
}

std::string device_unavailable_reason(DeviceType type) {
  Backend* b = find_backend(type);
  if (b == nullptr)
    return type == kCUDA ? "this build of mixtrain has no CUDA backend (MIXTRAIN_CUDA was OFF or no toolkit was found)"
                         : std::string("no backend for ") + device_type_name(type) + " is registered";
  return b->device_count() > 0 ? std::string() : b->unavailable_reason();
}

const char* device_type_name(DeviceType t) {
  switch (t) {
    case kCPU: return "cpu";
    case kCUDA: return "cuda";
    case kChecked: return "checked";
    case kPrivateUse1: {
      Backend* b = backends[static_cast<int>(t)].load(std::memory_order_acquire);
      return b ? b->name() : "privateuse1";
    }
  }
  return "unknown";
}

SyncCounts sync_counts(Device device) {
  Backend* b = find_backend(device.type);
  return b == nullptr ? SyncCounts{} : b->sync_counts();
}

Device parse_device(std::string_view text) {
  const std::string shown = detail::escape_untrusted(text.substr(0, 32));
  auto fail = [&]() -> Device {
    MT_FAIL("device \"", shown, "\" is not one of cpu, cuda, cuda:N, checked");
  };
  const size_t colon = text.find(':');
  const std::string_view type_name = text.substr(0, colon);
  DeviceType type = kCPU;
  if (type_name == "cpu") type = kCPU;
  else if (type_name == "cuda") type = kCUDA;
  else if (type_name == "checked") type = kChecked;
  else return fail();
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    if (type == kCPU || digits.empty() || digits.size() > 4) return fail();
    for (char c : digits) {
      if (c < '0' || c > '9') return fail();
      index = index * 10 + (c - '0');
    }
  }
  const Device device(type, static_cast<int16_t>(index));
  const int count = device_count(type);
  MT_CHECK(count > 0, "device \"", shown, "\" is not available: ", device_unavailable_reason(type));
  MT_CHECK(index < count, "device \"", shown, "\" is not available: this machine has ", count, " ", type_name,
           " device", count == 1 ? "" : "s", " (", type_name, ":0 to ", type_name, ":", count - 1, ")");
  return device;
}

namespace {
// Packed as (type << 16) | index: a plain integer is lock-free everywhere (an atomic Device, with
// its padding byte, needs libatomic under Clang).
constinit std::atomic<uint32_t> the_default_device{0};
}  // namespace
Device default_device() {
  const uint32_t packed = the_default_device.load(std::memory_order_relaxed);
  return Device(static_cast<DeviceType>(packed >> 16), static_cast<int16_t>(packed & 0xffffu));
}
void set_default_device(Device device) {
  // Refuse a device that cannot be used now rather than at the first factory call.
  const Backend& b = backend_for(device);
  MT_CHECK(device.index >= 0 && device.index < b.device_count(), "set_default_device: device ", device,
           " is not available: ", b.device_count() == 0 ? b.unavailable_reason()
                                                         : "this machine has " + std::to_string(b.device_count()));
  the_default_device.store((static_cast<uint32_t>(device.type) << 16) | static_cast<uint16_t>(device.index),
                           std::memory_order_relaxed);
}

namespace memory {
namespace {
Backend& memory_of(Device d) {
  MT_CHECK(has_backend(d.type), "memory: device ", d, " is not available in this build");
  Backend& b = backend_for(d);
  MT_CHECK(d.index >= 0 && d.index < b.device_count(), "memory: device ", d, " is not available: ",
           b.device_count() == 0 ? b.unavailable_reason() : "this machine has " + std::to_string(b.device_count()));
  return b;
}
}  // namespace
void* allocate(size_t nbytes, Device device) { return memory_of(device).allocate(nbytes, Stream{device}); }
void deallocate(void* ptr, size_t nbytes, Device device) { backend_for(device).deallocate(ptr, nbytes, Stream{device}); }
Stats stats(Device device) { return memory_of(device).stats(device); }
void reset_peak(Device device) { memory_of(device).reset_peak(device); }
void empty_cache(Device device) { memory_of(device).empty_cache(device); }
}  // namespace memory

}  // namespace mixtrain
