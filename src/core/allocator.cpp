// The device registry: the backend of each device type (the built-in ones from src/backends/, found
// through their descriptors on first need; another one registered), device names and availability,
// the default device, and the memory API of mixtrain/memory.h.
#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/backend_descriptor.h"
#include "core/memory_ledger.h"
#include "mixtrain/error.h"
#include "mixtrain/memory.h"

namespace mixtrain {
namespace {

// Constant-initialised: empty before any static initialiser runs, so a backend registered by another
// translation unit's initialiser cannot be wiped by this one's.
constinit std::array<std::atomic<Backend*>, kNumDeviceTypes> backends{};

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

namespace {
// Why no backend serves `type`: the descriptor's reason when a folder describes it, else none registered.
std::string missing_backend_reason(DeviceType type) {
  const BuiltinBackend* builtin = builtin_backend_of(type);
  if (builtin != nullptr && builtin->backend == nullptr) return builtin->descriptor->absent_reason;
  return detail::concat("no backend for ", to_string(type), " is registered");
}
}  // namespace

Backend& backend_for(Device device) {
  Backend* b = find_backend(device.type);
  if (b == nullptr) [[unlikely]]
    MT_FAIL("device ", device, " is not available: ", missing_backend_reason(device.type));
  return *b;
}

int device_count(DeviceType type) {
  Backend* b = find_backend(type);
  return b == nullptr ? 0 : b->device_count();
}

std::string device_unavailable_reason(DeviceType type) {
  Backend* b = find_backend(type);
  if (b == nullptr) return missing_backend_reason(type);
  return b->device_count() > 0 ? std::string() : b->unavailable_reason();
}

std::string_view to_string(DeviceType t) {
  if (const BuiltinBackend* builtin = builtin_backend_of(t); builtin != nullptr) return builtin->descriptor->name;
  if (t == kPrivateUse1) {
    Backend* b = backends[static_cast<int>(t)].load(std::memory_order_acquire);
    return b ? b->name() : "privateuse1";
  }
  return "unknown";
}

std::vector<DeviceTypeInfo> device_types() {
  std::vector<DeviceTypeInfo> out;
  for (int t = 0; t < kNumDeviceTypes; ++t) {  // in the enum's order
    const BuiltinBackend* b = builtin_backend_of(static_cast<DeviceType>(t));
    if (b == nullptr) continue;
    const BackendDescriptor& d = *b->descriptor;
    out.push_back({d.type, d.name, d.indexed, d.summary, b->backend != nullptr});
  }
  return out;
}

SyncCounts sync_counts(Device device) {
  Backend* b = find_backend(device.type);
  return b == nullptr ? SyncCounts{} : b->sync_counts();
}

Device parse_device(std::string_view text) {
  const std::string shown = detail::escape_untrusted(text.substr(0, 32));
  std::string names;
  for (const DeviceTypeInfo& d : device_types()) {
    names += names.empty() ? "" : ", ";
    names += d.name;
    if (d.indexed) names += std::string(", ") + d.name + ":N";
  }
  auto fail = [&]() -> Device { MT_FAIL("device \"", shown, "\" is not one of ", names); };
  const size_t colon = text.find(':');
  const std::string_view type_name = text.substr(0, colon);
  const BackendDescriptor* found = nullptr;
  for (const BuiltinBackend& b : builtin_backends())
    if (type_name == b.descriptor->name) found = b.descriptor;
  if (found == nullptr) return fail();
  const DeviceType type = found->type;
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    if (!found->indexed || digits.empty() || digits.size() > 4) return fail();
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
void* allocate(size_t nbytes, Device device, Tag& tag) {
  Backend& b = memory_of(device);
  void* p = b.allocate(nbytes, Stream{device});
  detail::count_allocation(nbytes, device, tag, b);
  return p;
}
void deallocate(void* ptr, size_t nbytes, Device device, const Tag& tag) {
  backend_for(device).deallocate(ptr, nbytes, Stream{device});
  detail::count_free(nbytes, device, tag);
}
Stats stats(Device device) { return memory_of(device).stats(device); }
void reset_peak(Device device) {
  Backend& b = memory_of(device);
  b.reset_peak(device);
  detail::reset_ledger_peak(device, b);
}
void empty_cache(Device device) { memory_of(device).empty_cache(device); }
}  // namespace memory

}  // namespace mixtrain
