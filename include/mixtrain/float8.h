// mixtrain/float8.h: the 8-bit floating-point storage types float8_e4m3fn and float8_e5m2.
//
// Like float16 and bfloat16 (mixtrain/half.h) they are storage, not arithmetic types: kernels widen
// to fp32 (exact for every pattern), compute and accumulate in fp32, and round once on store.
// Narrowing from fp32 is round-to-nearest-even on the fp32 bit pattern, directly (never through
// fp16: rounding twice gives a different result whenever the fp16 rounding lands exactly on an fp8
// midpoint). Subnormals are kept and the sign of zero is kept. Conversions are explicit.
//
//   format         sign/exp/mant    max finite  min normal  min subnormal  epsilon  inf         NaN
//   float8_e4m3fn  1/4/3 (bias 7)   448         2^-6        2^-9           2^-3     none        S.1111.111
//   float8_e5m2    1/5/2 (bias 15)  57344       2^-14       2^-16          2^-2     S.11111.00  S.11111.{01,10,11}
//
// e4m3fn ("finite") is not IEEE-like: it has no infinities, and of the top exponent only the
// all-ones mantissa is NaN, so the other seven patterns of that binade are ordinary numbers (up to
// 448 instead of 240). e5m2 keeps the IEEE layout (it is the top byte of an fp16), with 2^-16..57344
// of range for gradients; e4m3fn trades range for one more mantissa bit, for weights and activations.
//
// Values past the largest finite number have two treatments:
//  - non-saturating, the constructors (the OCP FP8 non-saturating mode, as ml_dtypes casts): e4m3fn
//    gives NaN for anything that rounds above 448 (|x| > 464; 464 is the midpoint to the next step,
//    480, and ties to the even 448) and for +-inf; e5m2 gives +-inf for |x| >= 61440 (the midpoint
//    between 57344 and 2^16 ties to the even 2^16, i.e. inf). PyTorch's e5m2 cast does the same;
//    its e4m3fn cast saturates (see docs/notes/conversions.md).
//  - saturating (`saturate(f)`, CUDA's __NV_SATFINITE): finite values past the max and +-inf become
//    +-max finite. This is the one FP8 training wants: a tensor is scaled so that its recent amax
//    lands near the max, and a value that outgrows a stale scale should clip, not become a NaN (or an
//    inf that turns into NaN at the next 0 * inf) and throw away the whole step.
// In both, NaN stays NaN with its sign: e4m3fn 0x7f|sign, e5m2 the quiet 0x7e|sign (no payload is
// kept; eight bits leave no room for one worth keeping).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "mixtrain/error.h"

namespace mixtrain {

namespace detail {

// fp32 magnitude bits (sign cleared, not NaN; inf allowed) -> fp8 magnitude code with `kMant`
// mantissa bits and exponent bias `kBias`, rounded to nearest even on the bit pattern (no FPU state
// involved, so FTZ/DAZ or a directed rounding mode set elsewhere change nothing). The code is not
// clamped: one past the largest finite code (or far beyond, for huge inputs and inf) means the value
// rounded past the max, and the caller applies its overflow rule.
template <int kMant, int kBias>
constexpr uint32_t fp8_round_magnitude(uint32_t abs) {
  constexpr int kEmin = 1 - kBias;  // exponent of the smallest normal
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(kEmin + 127) << 23;
  constexpr uint32_t kHalfMinSubnormal = static_cast<uint32_t>(kEmin - kMant - 1 + 127) << 23;
  if (abs < kMinNormal) {
    // Subnormal range: a fixed quantum of 2^(emin - mant). Half the smallest subnormal (and every fp32
    // denormal, far below it) ties to, or rounds to, zero.
    if (abs <= kHalfMinSubnormal) return 0;
    const uint32_t exp = abs >> 23;  // >= 1 here, so the implicit bit is set
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp - 150); in quanta: mant * 2^(exp - 150 - emin + kMant).
    const uint32_t shift = static_cast<uint32_t>(kEmin - kMant + 150) - exp;  // 24 - kMant .. 24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return q;  // the largest subnormal may round up to 1 << kMant, which is exactly the smallest normal
  }
  // Normal: rebias the exponent (127 -> kBias) and round the dropped mantissa bits. A carry out of the
  // mantissa moves into the exponent, which is the correctly rounded next binade.
  constexpr int kDrop = 23 - kMant;
  uint32_t r = abs - (static_cast<uint32_t>(127 - kBias) << 23);
  r += (1u << (kDrop - 1)) - 1u + ((r >> kDrop) & 1u);
  return r >> kDrop;
}

// A finite fp8 pattern's fields -> fp32 bits, exact (every fp8 value, subnormals included, is an fp32
// normal or zero).
template <int kMant, int kBias>
constexpr uint32_t fp8_finite_to_fp32_bits(uint32_t sign32, uint32_t exp, uint32_t mant) {
  if (exp == 0) {
    if (mant == 0) return sign32;
    // Subnormal mant * 2^(1 - bias - kMant): normalise on the leading mantissa bit.
    const int lead = static_cast<int>(std::bit_width(mant)) - 1;  // 0 .. kMant - 1
    const auto fp32_exp = static_cast<uint32_t>(lead + 1 - kBias - kMant + 127);
    const uint32_t frac = (mant - (1u << lead)) << (23 - lead);
    return sign32 | (fp32_exp << 23) | frac;
  }
  return sign32 | ((exp + static_cast<uint32_t>(127 - kBias)) << 23) | (mant << (23 - kMant));
}

// fp32 -> fp8 bits, round to nearest even: the magnitude rounded to kMant mantissa bits (bias
// kBias); a code above kMaxCode (the largest finite magnitude) becomes kOverflowCode, a NaN input
// kNanCode, each with the input's sign.
template <int kMant, int kBias, uint32_t kMaxCode, uint32_t kOverflowCode, uint32_t kNanCode>
constexpr uint8_t fp32_to_fp8_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | kNanCode);
  const uint32_t q = fp8_round_magnitude<kMant, kBias>(abs);
  return static_cast<uint8_t>(sign | (q > kMaxCode ? kOverflowCode : q));
}

// fp32 -> e4m3fn, non-saturating: past 448 (after rounding) and +-inf give NaN with the input's
// sign, since the format has no inf to give.
constexpr uint8_t fp32_to_e4m3fn_bits(float f) { return fp32_to_fp8_bits<3, 7, 0x7eu, 0x7fu, 0x7fu>(f); }

// fp32 -> e4m3fn, saturating: past 448 and +-inf give +-448; NaN stays NaN.
constexpr uint8_t fp32_to_e4m3fn_bits_saturating(float f) { return fp32_to_fp8_bits<3, 7, 0x7eu, 0x7eu, 0x7fu>(f); }

// fp32 -> e5m2, non-saturating: |x| >= 61440 and +-inf give +-inf, NaN gives the quiet NaN 0x7e
// with the input's sign.
constexpr uint8_t fp32_to_e5m2_bits(float f) { return fp32_to_fp8_bits<2, 15, 0x7bu, 0x7cu, 0x7eu>(f); }

// fp32 -> e5m2, saturating: past 57344 and +-inf give +-57344; NaN stays NaN.
constexpr uint8_t fp32_to_e5m2_bits_saturating(float f) { return fp32_to_fp8_bits<2, 15, 0x7bu, 0x7bu, 0x7eu>(f); }

// e4m3fn -> fp32, exact. The NaN (S.1111.111) comes out as a quiet fp32 NaN with its sign and its
// mantissa moved to the top of the fp32 mantissa: 0x7ff00000 / 0xfff00000.
constexpr float e4m3fn_bits_to_fp32(uint8_t b) {
  const uint32_t sign32 = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return std::bit_cast<float>(sign32 | 0x7fc00000u | (mant << 20));
  return std::bit_cast<float>(fp8_finite_to_fp32_bits<3, 7>(sign32, exp, mant));
}

// e5m2 -> fp32, exact. +-inf stays inf; a NaN keeps its sign and mantissa (moved to the top of the
// fp32 mantissa) and comes out quiet, as widening through fp16 with vcvtph2ps would give.
constexpr float e5m2_bits_to_fp32(uint8_t b) {
  const uint32_t sign32 = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu;
  const uint32_t mant = b & 0x3u;
  if (exp == 0x1fu) {
    return std::bit_cast<float>(sign32 | 0x7f800000u | (mant << 21) | (mant != 0 ? 0x00400000u : 0u));
  }
  return std::bit_cast<float>(fp8_finite_to_fp32_bits<2, 15>(sign32, exp, mant));
}

// The bulk converters take a signed length like the rest of the library; a negative one is the
// caller's mistake. Thrown directly (not through MT_CHECK) so that this header stays header-only.
inline void check_fp8_length(const char* what, int64_t n) {
  if (n < 0) [[unlikely]] {
    throw Error(std::string(what) + ": n must be >= 0, got " + std::to_string(n));
  }
}

}  // namespace detail

struct float8_e4m3fn {
  uint8_t x = 0;

  constexpr float8_e4m3fn() = default;
  // Non-saturating (the exact-cast semantics): out of range and +-inf give NaN.
  constexpr explicit float8_e4m3fn(float f) : x(detail::fp32_to_e4m3fn_bits(f)) {}
  constexpr explicit operator float() const { return detail::e4m3fn_bits_to_fp32(x); }
  // Saturating: out of range and +-inf give +-448.
  static constexpr float8_e4m3fn saturate(float f) { return from_bits(detail::fp32_to_e4m3fn_bits_saturating(f)); }
  static constexpr float8_e4m3fn from_bits(uint8_t bits) {
    float8_e4m3fn v;
    v.x = bits;
    return v;
  }
  constexpr uint8_t bits() const { return x; }
};

struct float8_e5m2 {
  uint8_t x = 0;

  constexpr float8_e5m2() = default;
  // Non-saturating (the exact-cast semantics): |x| >= 61440 and +-inf give +-inf.
  constexpr explicit float8_e5m2(float f) : x(detail::fp32_to_e5m2_bits(f)) {}
  constexpr explicit operator float() const { return detail::e5m2_bits_to_fp32(x); }
  // Saturating: out of range and +-inf give +-57344.
  static constexpr float8_e5m2 saturate(float f) { return from_bits(detail::fp32_to_e5m2_bits_saturating(f)); }
  static constexpr float8_e5m2 from_bits(uint8_t bits) {
    float8_e5m2 v;
    v.x = bits;
    return v;
  }
  constexpr uint8_t bits() const { return x; }
};

static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1);

// Bulk row converters: scalar loops over the functions above, bit-identical to them. `n` elements;
// src and dst must not overlap; n == 0 touches nothing, n < 0 throws mt::Error. `saturate` picks the
// overflow rule (see the top of this file); training code wants true.
inline void convert_fp32_to_fp8(const float* src, float8_e4m3fn* dst, int64_t n, bool saturate) {
  detail::check_fp8_length("convert_fp32_to_fp8 (e4m3fn)", n);
  if (saturate) {
    for (int64_t i = 0; i < n; ++i) dst[i].x = detail::fp32_to_e4m3fn_bits_saturating(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i].x = detail::fp32_to_e4m3fn_bits(src[i]);
  }
}

inline void convert_fp32_to_fp8(const float* src, float8_e5m2* dst, int64_t n, bool saturate) {
  detail::check_fp8_length("convert_fp32_to_fp8 (e5m2)", n);
  if (saturate) {
    for (int64_t i = 0; i < n; ++i) dst[i].x = detail::fp32_to_e5m2_bits_saturating(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i].x = detail::fp32_to_e5m2_bits(src[i]);
  }
}

inline void convert_fp8_to_fp32(const float8_e4m3fn* src, float* dst, int64_t n) {
  detail::check_fp8_length("convert_fp8_to_fp32 (e4m3fn)", n);
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::e4m3fn_bits_to_fp32(src[i].x);
}

inline void convert_fp8_to_fp32(const float8_e5m2* src, float* dst, int64_t n) {
  detail::check_fp8_length("convert_fp8_to_fp32 (e5m2)", n);
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::e5m2_bits_to_fp32(src[i].x);
}

// The two formats as a runtime value (FP8 training: E4M3 for weights and activations, E5M2 for
// gradients).
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

inline constexpr std::string_view to_string(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}
// The largest finite value: 448 (E4M3), 57344 (E5M2).
inline constexpr float fp8_max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

// The cast FP8 training uses (a scaled value -> fp8 bits): finite values round to nearest even and
// saturate at +-max (a value that outgrew a stale scale clips), while +-inf and NaN stay non-finite
// (E4M3 has no inf, so both become its NaN; E5M2 keeps inf) so that an overflow upstream still shows
// as a non-finite value. `source_finite` is the finiteness of the value before scaling: a finite
// value whose product with the scale overflows fp32 is clipped, not made non-finite.
inline constexpr uint8_t fp8_training_bits(float scaled, bool source_finite, Fp8Format format) {
  if (format == Fp8Format::kE4M3)
    return source_finite ? detail::fp32_to_e4m3fn_bits_saturating(scaled) : detail::fp32_to_e4m3fn_bits(scaled);
  return source_finite ? detail::fp32_to_e5m2_bits_saturating(scaled) : detail::fp32_to_e5m2_bits(scaled);
}

// fp8 bits -> fp32, exact.
inline constexpr float fp8_bits_to_float(uint8_t bits, Fp8Format format) {
  return format == Fp8Format::kE4M3 ? detail::e4m3fn_bits_to_fp32(bits) : detail::e5m2_bits_to_fp32(bits);
}

}  // namespace mixtrain

namespace std {

// min_exponent / max_exponent follow the C convention (one more than the unbiased exponent):
// 2^(min_exponent - 1) is the smallest normal, 2^(max_exponent - 1) the top binade.
template <>
class numeric_limits<mixtrain::float8_e4m3fn> {
  using T = mixtrain::float8_e4m3fn;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 4;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 3;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -5;
  static constexpr int min_exponent10 = -1;
  static constexpr int max_exponent = 9;
  static constexpr int max_exponent10 = 2;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T::from_bits(0x08); }
  static constexpr T lowest() noexcept { return T::from_bits(0xfe); }
  static constexpr T max() noexcept { return T::from_bits(0x7e); }
  static constexpr T epsilon() noexcept { return T::from_bits(0x20); }
  static constexpr T round_error() noexcept { return T::from_bits(0x30); }
  // The format has neither; these are only meaningful when has_infinity / has_signaling_NaN say so.
  // They return the NaN rather than a plausible number, so that code which uses them anyway (an
  // "-infinity" identity for a max, say) produces an obvious NaN instead of a silently wrong value.
  static constexpr T infinity() noexcept { return T::from_bits(0x7f); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7f); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7f); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x01); }
};

template <>
class numeric_limits<mixtrain::float8_e5m2> {
  using T = mixtrain::float8_e5m2;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;  // IEEE-like layout, but IEEE 754 defines no 8-bit format
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 3;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 2;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T::from_bits(0x04); }
  static constexpr T lowest() noexcept { return T::from_bits(0xfb); }
  static constexpr T max() noexcept { return T::from_bits(0x7b); }
  static constexpr T epsilon() noexcept { return T::from_bits(0x34); }
  static constexpr T round_error() noexcept { return T::from_bits(0x38); }
  static constexpr T infinity() noexcept { return T::from_bits(0x7c); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7e); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7d); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x01); }
};

}  // namespace std
