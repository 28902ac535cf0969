// mixtrain/device.h: where a tensor lives.
//
// Every device type has a backend (src/core/backend.h: memory and transfers; src/kernels/<backend>/:
// the kernels). The CPU's is built in; CUDA's registers itself when it is built; kPrivateUse1 is the
// slot of a backend defined outside the library (the test suite's "checked" host device uses it, as
// PyTorch's PrivateUse1). Nothing above src/kernels may assume that a tensor's memory is host memory.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace mixtrain {

enum class DeviceType : uint8_t { kCPU, kCUDA, kPrivateUse1 };
inline constexpr int kNumDeviceTypes = 3;

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
inline constexpr DeviceType kPrivateUse1 = DeviceType::kPrivateUse1;

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

// "cpu", "cuda", or the registered name of the kPrivateUse1 backend ("privateuse1" when none is).
const char* device_type_name(DeviceType t);

std::ostream& operator<<(std::ostream& os, DeviceType t);
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace mixtrain
