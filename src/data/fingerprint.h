// src/data/fingerprint.h (internal): the hash that Dataset::fingerprint() values are made of, shared
// by the datasets of every file of src/data so that they chain the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mixtrain::data::hashing {

inline constexpr uint64_t kFingerprintSeed = 0x6d69787472616e31ull;  // "mixtran1"

// 64-bit hash of bytes, 8 at a time (FNV-style multiply-xor with a final avalanche): fast enough to
// hash a 47 MB dataset in tens of milliseconds; `h` chains calls.
inline uint64_t hash_bytes(const void* data, size_t n, uint64_t h) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  const auto* p = static_cast<const unsigned char*>(data);
  h ^= n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  h = (h ^ tail) * kPrime;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}

}  // namespace mixtrain::data::hashing
