// cuda_bf16.h on the host: __nv_bfloat16 with the conversions the backend uses, bit-exact through
// mixtrain's own bfloat16 (round to nearest even; NaN stays NaN).
#pragma once

#include <cstdint>

#include "mixtrain/half.h"

struct __nv_bfloat16 {
  unsigned short __x = 0;
};

inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(::mixtrain::bfloat16::from_bits(h.__x)); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{::mixtrain::bfloat16(f).bits()}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
