// kernels/convert.h (internal): one element conversion rule for every device's kernels and for the
// host-side code that stages values (factories, element access).
#pragma once

#include <type_traits>

#include "kernels/float_to_int.h"
#include "mixtrain/half.h"

namespace mixtrain::kernels {

// Value conversion between any two element types, through fp32/fp64 for the 16-bit ones; float ->
// integer saturates (kernels/float_to_int.h), the same on every device.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, float16> || std::is_same_v<From, bfloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, float16> || std::is_same_v<To, bfloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_float_to_int<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace mixtrain::kernels
