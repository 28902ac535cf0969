// mixtrain/device.h: where a tensor lives. CPU today; CUDA slots in as another DeviceType, and
// nothing outside src/kernels may assume a device is the CPU.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace mixtrain {

enum class DeviceType : uint8_t { kCPU, kCUDA };
inline constexpr int kNumDeviceTypes = 2;

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

std::ostream& operator<<(std::ostream& os, DeviceType t);
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace mixtrain
