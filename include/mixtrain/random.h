// mixtrain/random.h: seeded, counter-based random numbers.
//
// A Generator is (seed, offset). Element i of a tensor drawn from it uses the Philox-4x32-10 block
// for counter (offset + i / 4), so the values depend only on the seed, the offset and the element's
// index, never on the thread count or the order threads run in. Drawing n values advances the offset
// by ceil(n / 4) blocks. Normal values use Box-Muller on pairs of uniforms.
#pragma once

#include <array>
#include <cstdint>

namespace mixtrain {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) { offset_ = offset; }

  // Reserves `blocks` Philox blocks and returns the first block index to use.
  uint64_t advance(uint64_t blocks) {
    uint64_t first = offset_;
    offset_ += blocks;
    return first;
  }

  // Serialisable state: {seed, offset}.
  std::array<uint64_t, 2> state() const { return {seed_, offset_}; }
  void set_state(const std::array<uint64_t, 2>& s) {
    seed_ = s[0];
    offset_ = s[1];
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

namespace random {

// Philox-4x32-10: four 32-bit outputs for a 128-bit counter (block index, stream) and a 64-bit key.
std::array<uint32_t, 4> philox(uint64_t block, uint64_t key, uint32_t stream = 0);

// Uniform in [0, 1) with 24 random bits (every value exactly representable in fp32).
inline float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
// Uniform in [0, 1) with 53 random bits, from two outputs.
inline double uints_to_unit_double(uint32_t hi, uint32_t lo) {
  uint64_t v = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace random
}  // namespace mixtrain
