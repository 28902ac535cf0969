// CRC-32C, one table lookup per byte (src/io/crc32c.h).
#include "io/crc32c.h"

#include <array>

namespace mixtrain::io {

namespace {

// table[b]: the CRC register after shifting in byte b from a zero register.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1u) ? 0x82F63B78u : 0u);
    t[b] = r;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t r = ~crc;
  for (size_t i = 0; i < n; ++i) r = (r >> 8) ^ kTable[(r ^ p[i]) & 0xffu];
  return ~r;
}

}  // namespace mixtrain::io
