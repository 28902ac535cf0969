// Bit-pattern helpers for the conversion tests (16-bit and FP8 formats).
#pragma once

#include <bit>
#include <cstdint>
#include <sstream>
#include <string>

namespace mixtrain::testing {

inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// "0x7fc00000": for failure messages.
inline std::string hex(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

}  // namespace mixtrain::testing
