// Branch-free fp32 math shared by the CPU kernels (internal to src/backends/cpu/kernels/*.cpp).
//
// Header-only and force-inlined on purpose: the files that use it compile their loops once per ISA
// (elementwise_loops.h's per-ISA compute loop, nn_vec.cpp's per-ISA builds), and each of those
// copies must inline this code to vectorise it for its own instruction set. An out-of-line copy
// would be a scalar call compiled for the baseline ISA.
#pragma once

#include <bit>
#include <cstdint>

namespace mixtrain::kernels::fastmath {

// x = n ln2 + r, |r| <= ln2/2: n (an integral float) and e^r.
struct ExpParts {
  float n;
  float exp_r;
};

// The core of Cephes expf: n = round(x log2 e) through the 1.5 * 2^23 trick (exact for
// |x log2 e| < 2^22, and it vectorises on SSE2), r = x - n ln2 with ln2 split in two so that r is
// exact, and e^r by Cephes' polynomial (relative error below 2 ulp on [-ln2/2, ln2/2]). The caller
// clamps x to its range first and builds 2^n (how it treats the subnormal range and overflow is
// its own). A NaN x gives a NaN n.
[[gnu::always_inline]] inline ExpParts exp_parts(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return {n, p};
}

// 2^e for an integer e in the fp32 normal exponent range [-126, 127], built in the exponent field.
[[gnu::always_inline]] inline float pow2i(int32_t e) { return std::bit_cast<float>((e + 127) << 23); }

}  // namespace mixtrain::kernels::fastmath
