// mixtrain/device.h: where a tensor lives.
//
// Every device type has a backend (src/core/backend.h: memory and transfers; src/kernels/<backend>/:
// the kernels). The CPU's is built in; CUDA's registers itself when it is built; kChecked is the
// built-in debugging device (below); kPrivateUse1 is the slot of a backend defined outside the
// library (as PyTorch's PrivateUse1). Nothing above src/kernels may assume that a tensor's memory is
// host memory.
//
// The checked device ("checked", docs/notes/backends.md) is for people who write or debug a backend
// or a training loop without a GPU at hand: its memory is host memory behind addresses the host
// cannot dereference, its kernels are the CPU's behind a guard that refuses any tensor from another
// device, and it counts every host<->device transfer (sync_counts). A program that trains on it
// touches device memory only through kernels and copies and creates no tensor on the wrong device,
// and it reaches the CPU's bits. It is off unless the environment has MIXTRAIN_CHECKED_DEVICE=1.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace mixtrain {

enum class DeviceType : uint8_t { kCPU, kCUDA, kChecked, kPrivateUse1 };
inline constexpr int kNumDeviceTypes = 4;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int16_t index = 0;  // ordinal within the type (CUDA devices); always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int16_t i = 0) : type(t), index(i) {}  // NOLINT: implicit by design
  constexpr bool operator==(const Device&) const = default;
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
};

inline constexpr DeviceType kCPU = DeviceType::kCPU;
inline constexpr DeviceType kCUDA = DeviceType::kCUDA;
inline constexpr DeviceType kChecked = DeviceType::kChecked;
inline constexpr DeviceType kPrivateUse1 = DeviceType::kPrivateUse1;

// The environment variable that makes the checked device available ("1"); read at each question.
inline constexpr const char* kCheckedDeviceEnv = "MIXTRAIN_CHECKED_DEVICE";

// The device of tensors created by the factories (factory.h) when their options name none: the CPU
// unless set (PyTorch's torch.set_default_device). Process-wide. Ops always put their results on
// their inputs' device, whatever the default.
Device default_device();
void set_default_device(Device device);

// How many devices of `type` this process can use: 1 for the CPU; for CUDA the number of GPUs,
// 0 when this build has no CUDA backend or the driver reports none.
int device_count(DeviceType type);
// Why device_count(type) is 0, for messages and skipped tests; empty when it is not 0.
std::string device_unavailable_reason(DeviceType type);

// "cpu", "cuda", "checked", or the registered name of the kPrivateUse1 backend ("privateuse1" when
// none is).
std::string_view to_string(DeviceType t);

// The device types this library knows (one per folder of src/backends/), in the enum's order: the
// name parse_device accepts, whether "name:N" selects one of several devices, a line on what it
// is, and whether this build includes its backend. Not listed: kPrivateUse1.
struct DeviceTypeInfo {
  DeviceType type;
  const char* name;
  bool indexed;
  const char* summary;
  bool built;
};
std::vector<DeviceTypeInfo> device_types();

// A device from its name: "cpu", "cuda" (= "cuda:0"), "cuda:N", "checked" (= "checked:0"). Throws
// mt::Error for anything else, and for a device this process cannot use, with the reason (no CUDA
// backend in this build, no GPU N, the checked device without MIXTRAIN_CHECKED_DEVICE=1).
Device parse_device(std::string_view text);

// How often the host has waited on devices of `device`'s type since the process started (summed over
// the devices of the type): copies to the host (each waits for the work queued before it), copies
// from the host (they return when the bytes have arrived), explicit synchronisations, and kernels
// that return a value to the host (a count, an index, a norm: on a GPU each is a copy back). The CPU
// has no device to wait for: all zero there. The checked device and the CUDA backend count them; the
// difference across a training step is what the step costs in host waits (docs/notes/backends.md).
struct SyncCounts {
  int64_t to_host = 0;
  int64_t from_host = 0;
  int64_t synchronize = 0;
  int64_t kernel_results = 0;

  int64_t total() const { return to_host + from_host + synchronize + kernel_results; }
};
SyncCounts sync_counts(Device device);

std::ostream& operator<<(std::ostream& os, DeviceType t);
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace mixtrain
