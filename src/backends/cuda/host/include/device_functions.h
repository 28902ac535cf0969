// Device built-ins beyond those of cuda_on_host.h, as the host runs them. Fibers of a block run one
// at a time, so a plain read-modify-write is atomic with respect to every other thread.
#pragma once

#include <bit>
#include <cmath>
#include <type_traits>
#include <cstdint>

#include "backends/cuda/host/cuda_on_host.h"
#include "mixtrain/error.h"

#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// __syncwarp(mask): the lanes of `mask` meet (checked like every warp op).
inline void __syncwarp(unsigned mask = 0xffffffffu,
                       ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  (void)::mixtrain::cuda_host::ballot(mask, true, site);
}

[[noreturn]] inline void __trap() { MT_FAIL("CUDA on the host: a kernel executed __trap()"); }

template <typename T>
T atomicMin(T* address, T value) {
  const T old = *address;
  if (value < old) *address = value;
  return old;
}
template <typename T>
T atomicMax(T* address, T value) {
  const T old = *address;
  if (value > old) *address = value;
  return old;
}
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// IEEE round-to-nearest operations without contraction (the host build compiles with
// -ffp-contract=off, as the backend's optim.cu is built with --fmad=false).
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __uint_as_float(unsigned v) { return std::bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return std::bit_cast<unsigned>(v); }
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float v) { return std::bit_cast<int>(v); }

// CUDA's global min/max overloads and math classification, as device code calls them unqualified.
using std::isfinite;
using std::isinf;
using std::isnan;
// CUDA's math library overloads the float versions in the global namespace (log(float) is float).
using std::ceil;
using std::cos;
using std::erf;
using std::erfc;
using std::exp;
using std::exp2;
using std::expm1;
using std::fabs;
using std::floor;
using std::fmax;
using std::fmin;
using std::fmod;
using std::log;
using std::log1p;
using std::log2;
using std::pow;
using std::round;
using std::sin;
using std::sqrt;
using std::tanh;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
template <typename A, typename B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  return b < a ? static_cast<std::common_type_t<A, B>>(b) : static_cast<std::common_type_t<A, B>>(a);
}
template <typename A, typename B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  return a < b ? static_cast<std::common_type_t<A, B>>(b) : static_cast<std::common_type_t<A, B>>(a);
}

template <typename T>
T __ldg(const T* p) {
  return *p;
}
