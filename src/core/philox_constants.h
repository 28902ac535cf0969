// src/core/philox_constants.h (internal): the Philox-4x32-10 multipliers and key increments, shared by
// the scalar generator (random::philox, src/ops/factory.cpp) and the 8-lane AVX2 one of the optimizer's
// stochastic rounding (src/kernels/cpu/optim_kernels.cpp), which must give the same bits.
#pragma once

#include <cstdint>

namespace mixtrain::random::detail {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key increments (Weyl)
inline constexpr int kPhiloxRounds = 10;

}  // namespace mixtrain::random::detail
