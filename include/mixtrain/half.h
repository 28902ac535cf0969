// mixtrain/half.h: the 16-bit floating-point storage types float16 (IEEE binary16) and bfloat16.
//
// They are storage, not arithmetic types: kernels widen to fp32 (exact), compute and accumulate in
// fp32, and round once on store. Narrowing from fp32 is round-to-nearest-even: ties go to the even
// significand, values past the largest finite number become +-inf, subnormals are kept, and NaN stays
// NaN with its quiet bit set. Conversions are explicit so that no accidental arithmetic happens in
// 16 bits.
//
//   format     sign/exp/mantissa  max finite      min normal      min subnormal   epsilon
//   float16    1/5/10 (bias 15)   65504           2^-14           2^-24           2^-10
//   bfloat16   1/8/7  (bias 127)  ~3.3895e38      2^-126          2^-133          2^-7
#pragma once

#include <bit>
#include <cstdint>
#include <iosfwd>
#include <limits>

namespace mixtrain {

namespace detail {

// fp32 -> bf16, round to nearest even. NaN becomes a quiet NaN with the same sign and the top
// payload bits (the quiet bit forced on, so a signalling NaN whose payload sits in the low bits
// cannot turn into inf).
constexpr uint16_t fp32_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// bf16 -> fp32, exact: the bf16 bits are the top half of the fp32 (a NaN keeps every bit, so a
// signalling one stays signalling until fp32 arithmetic quiets it).
constexpr float bf16_bits_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// fp32 -> fp16, round to nearest even, computed on the bit pattern (no FPU state involved, so the
// result is identical to F16C's vcvtps2ph with rounding mode 0).
constexpr uint16_t fp32_to_fp16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top 10 payload bits, force quiet.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {  // below 2^-14: fp16 subnormal (or zero)
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to 0 (2^-25 itself ties to even 0)
    uint32_t exp = abs >> 23;            // 102..112
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // value = mant * 2^(exp-150); fp16 unit = 2^-24
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t r = abs - 0x38000000u;  // exponent - 112
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (r >> 13));
}

// fp16 -> fp32, exact. A NaN keeps its sign and payload and comes out quiet (as F16C's vcvtph2ps
// does): a signalling fp16 NaN becomes a quiet fp32 NaN.
constexpr float fp16_bits_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) {  // inf, or NaN with the quiet bit forced on
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise into an fp32 normal (every fp16 subnormal is an fp32 normal).
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return std::bit_cast<float>(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace detail

struct float16 {
  uint16_t x = 0;

  constexpr float16() = default;
  constexpr explicit float16(float f) : x(detail::fp32_to_fp16_bits(f)) {}
  constexpr explicit operator float() const { return detail::fp16_bits_to_fp32(x); }
  static constexpr float16 from_bits(uint16_t bits) {
    float16 h;
    h.x = bits;
    return h;
  }
  constexpr uint16_t bits() const { return x; }
};

struct bfloat16 {
  uint16_t x = 0;

  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float f) : x(detail::fp32_to_bf16_bits(f)) {}
  constexpr explicit operator float() const { return detail::bf16_bits_to_fp32(x); }
  static constexpr bfloat16 from_bits(uint16_t bits) {
    bfloat16 h;
    h.x = bits;
    return h;
  }
  constexpr uint16_t bits() const { return x; }
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

std::ostream& operator<<(std::ostream& os, float16 h);
std::ostream& operator<<(std::ostream& os, bfloat16 h);

// Bulk row converters. They use F16C / AVX-512 BF16 (vcvtneps2bf16) when the CPU has them, chosen
// once at run time, and a scalar loop otherwise; every path gives bit-identical results.
// `n` elements; src and dst must not overlap.
void convert_fp32_to_fp16(const float* src, float16* dst, int64_t n);
void convert_fp16_to_fp32(const float16* src, float* dst, int64_t n);
void convert_fp32_to_bf16(const float* src, bfloat16* dst, int64_t n);
void convert_bf16_to_fp32(const bfloat16* src, float* dst, int64_t n);

// The same over `rows` rows of `n` elements: row r is read from src + r * src_stride and written to
// dst + r * dst_stride (strides in elements, >= 0; rows must not overlap). For strided views, such
// as one head's slice of each token's row: the implementation is chosen once per call rather than
// once per row, and rows ahead are prefetched, which the hardware does not do across pages.
void convert_fp32_to_fp16_rows(const float* src, int64_t src_stride, float16* dst, int64_t dst_stride, int64_t rows,
                               int64_t n);
void convert_fp16_to_fp32_rows(const float16* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                               int64_t n);
void convert_fp32_to_bf16_rows(const float* src, int64_t src_stride, bfloat16* dst, int64_t dst_stride, int64_t rows,
                               int64_t n);
void convert_bf16_to_fp32_rows(const bfloat16* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                               int64_t n);

}  // namespace mixtrain

namespace std {

template <>
class numeric_limits<mixtrain::float16> {
  using T = mixtrain::float16;

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
  static constexpr bool is_iec559 = true;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 11;
  static constexpr int digits10 = 3;
  static constexpr int max_digits10 = 5;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T::from_bits(0x0400); }
  static constexpr T lowest() noexcept { return T::from_bits(0xfbff); }
  static constexpr T max() noexcept { return T::from_bits(0x7bff); }
  static constexpr T epsilon() noexcept { return T::from_bits(0x1400); }
  static constexpr T round_error() noexcept { return T::from_bits(0x3800); }
  static constexpr T infinity() noexcept { return T::from_bits(0x7c00); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7e00); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7d00); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x0001); }
};

template <>
class numeric_limits<mixtrain::bfloat16> {
  using T = mixtrain::bfloat16;

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
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -125;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T::from_bits(0x0080); }
  static constexpr T lowest() noexcept { return T::from_bits(0xff7f); }
  static constexpr T max() noexcept { return T::from_bits(0x7f7f); }
  static constexpr T epsilon() noexcept { return T::from_bits(0x3c00); }
  static constexpr T round_error() noexcept { return T::from_bits(0x3f00); }
  static constexpr T infinity() noexcept { return T::from_bits(0x7f80); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7fc0); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7f80 | 0x0001); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x0001); }
};

}  // namespace std
