// Philox-4x32-10 and the bit-to-uniform conversions on the device: the same functions as
// random::philox (core/philox.h) and mixtrain/random.h, so that a seed draws the same values
// on the GPU as on the CPU. tests/cuda compares them block by block.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace mixtrain::kernels::cuda {

// random::philox's bits (core/philox.h, the one block function).
__device__ __forceinline__ void philox(uint64_t block, uint64_t key, uint32_t stream, uint32_t out[4]) {
  random::detail::philox_block(block, key, stream, out);
}

__device__ __forceinline__ float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
// Uniform in [0, 1) with 53 random bits, from two outputs.
__device__ __forceinline__ double uints_to_unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace mixtrain::kernels::cuda
