// cuda_fp16.h on the host: __half with the conversions the backend uses, bit-exact through
// mixtrain's own float16 (round to nearest even, the CPU's and the GPU's rule).
#pragma once

#include <cstdint>

#include "mixtrain/half.h"

struct __half {
  unsigned short __x = 0;
};

inline float __half2float(__half h) { return static_cast<float>(::mixtrain::float16::from_bits(h.__x)); }
inline __half __float2half_rn(float f) { return __half{::mixtrain::float16(f).bits()}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
