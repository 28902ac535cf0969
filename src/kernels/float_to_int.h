// Float -> integer conversion with one meaning on every device (copy, to(), item(), fill):
// truncation toward zero, saturating at the integer type's range, NaN -> 0.
//
// Why not static_cast: C++ leaves an out-of-range or NaN conversion undefined; x86's cvttss2si gives
// the "integer indefinite" INT_MIN for both (3.4e38 -> int32 is INT_MIN on the CPU), while CUDA's
// cvt.rzi.sat saturates and maps NaN to 0. Saturation is the one both devices can give cheaply and
// the least surprising: -523.7 -> uint8 is 0, 300.5 -> uint8 is 255, 3.4e38 -> int32 is INT32_MAX.
// Other conversions need no rule: integer -> narrower integer wraps modulo 2^bits (C++20 and CUDA
// agree), anything -> bool is "!= 0" (NaN -> true), integer -> float rounds to nearest.
//
// Included by the CPU kernels (backends/cpu/kernels/loops.h) and the CUDA kernels (backends/cuda/kernels/common.cuh).
#pragma once

#include <limits>
#include <type_traits>

#include "kernels/host_device.h"

namespace mixtrain::kernels {

// I: an integer type other than bool; F: float or double (16-bit values are widened to float first).
template <typename I, typename F>
MT_HOST_DEVICE constexpr I saturating_float_to_int(F v) {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool> && std::is_floating_point_v<F>);
  // Both bounds are exact doubles: the minimum is 0 or -2^digits, and max + 1 rounds to 2^digits.
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max()) + 1.0;
  const double d = static_cast<double>(v);
  if (d != d) return I(0);
  if (d >= hi) return std::numeric_limits<I>::max();
  if (d <= lo) return std::numeric_limits<I>::min();
  return static_cast<I>(d);  // in (lo, hi): truncation is defined and in range
}

}  // namespace mixtrain::kernels
