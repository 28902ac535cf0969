// tests/core/test_float8.cpp: float8_e4m3fn / float8_e5m2 conversions.
//
// The converters of mixtrain/float8.h are checked against an independent reference that works on
// values rather than bit tricks: decoding is ldexp of the fields, and encoding is a search for the
// nearest value in the table of all finite patterns (ties to the even code), followed by the
// overflow rule of each flavour. Every fp8 value, every midpoint between neighbours, every bf16
// value and about 10^6 seeded random fp32 values go through both.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/float8.h"
#include "mixtrain/half.h"

#include "support/bits.h"

namespace mt = mixtrain;
using mt::float8_e4m3fn;
using mt::float8_e5m2;

namespace {

using mixtrain::testing::bits_of;
using mixtrain::testing::float_of;
using mixtrain::testing::hex;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Independent reference.

struct Format {
  const char* name;
  int mant_bits;
  int exp_bits;
  bool finite_only;   // e4m3fn: no inf, NaN only at S.1111.111
  uint8_t nan_code;   // the NaN that encoding produces (without sign)
  uint8_t over_code;  // the first magnitude code past the largest finite value

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint8_t max_code() const { return static_cast<uint8_t>(over_code - 1); }
};
constexpr Format kE4M3FN{"e4m3fn", 3, 4, true, 0x7f, 0x7f};
constexpr Format kE5M2{"e5m2", 2, 5, false, 0x7e, 0x7c};

enum class Overflow { kNonSaturating, kSaturating };
const char* to_string(Overflow o) { return o == Overflow::kSaturating ? "saturating" : "non-saturating"; }

// The value of a pattern's fields as if every pattern were an ordinary number (so the NaN / inf codes
// give the values the binade would continue with: 480 for e4m3fn 0x7f, 2^16 for e5m2 0x7c).
double ref_value_as_finite(uint8_t b, const Format& f) {
  const int e = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.mant_bits) - 1);
  const double v =
      e == 0 ? std::ldexp(m, f.emin() - f.mant_bits) : std::ldexp(m + (1 << f.mant_bits), e - f.bias() - f.mant_bits);
  return (b & 0x80) != 0 ? -v : v;
}

bool ref_is_nan(uint8_t b, const Format& f) {
  const int e = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.mant_bits) - 1);
  const int top = (1 << f.exp_bits) - 1, all_m = (1 << f.mant_bits) - 1;
  return f.finite_only ? (e == top && m == all_m) : (e == top && m != 0);
}

bool ref_is_inf(uint8_t b, const Format& f) {
  const int e = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  return !f.finite_only && e == (1 << f.exp_bits) - 1 && (b & ((1 << f.mant_bits) - 1)) == 0;
}

// The value of a pattern: NaN, +-inf, or the field value.
double ref_decode(uint8_t b, const Format& f) {
  if (ref_is_nan(b, f)) return std::numeric_limits<double>::quiet_NaN();
  if (ref_is_inf(b, f)) return (b & 0x80) != 0 ? -HUGE_VAL : HUGE_VAL;
  return ref_value_as_finite(b, f);
}

// Non-negative values of magnitude codes 0 .. over_code, ascending (codes are monotone in value).
const std::vector<double>& magnitude_table(const Format& f) {
  static const auto build = [](const Format& g) {
    std::vector<double> t;
    for (int c = 0; c <= g.over_code; ++c) t.push_back(ref_value_as_finite(static_cast<uint8_t>(c), g));
    return t;
  };
  static const std::vector<double> e4m3 = build(kE4M3FN), e5m2 = build(kE5M2);
  return &f == &kE4M3FN ? e4m3 : e5m2;
}

uint8_t ref_overflow(const Format& f, Overflow o, uint8_t sign) {
  if (o == Overflow::kSaturating) return static_cast<uint8_t>(sign | f.max_code());
  return static_cast<uint8_t>(sign | (f.finite_only ? 0x7f : 0x7c));
}

// fp32 -> fp8 by search: the nearest entry of the table (ties to the even code); landing on the code
// past the max, or beyond it, is an overflow.
uint8_t ref_encode(float x, const Format& f, Overflow o) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | f.nan_code);
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return ref_overflow(f, o, sign);
  const auto& t = magnitude_table(f);
  const auto i = static_cast<size_t>(std::lower_bound(t.begin(), t.end(), a) - t.begin());
  if (i == t.size()) return ref_overflow(f, o, sign);
  size_t code = i;
  if (t[i] != a) {
    // Between t[i-1] and t[i] (i > 0 since t[0] == 0 <= a).
    const double mid = (t[i - 1] + t[i]) / 2;  // exact: a few significant bits
    if (a < mid) {
      code = i - 1;
    } else if (a == mid) {
      code = (i - 1) % 2 == 0 ? i - 1 : i;
    }
  }
  if (code == f.over_code) return ref_overflow(f, o, sign);
  return static_cast<uint8_t>(sign | code);
}

// The implementation, through the public types.
uint8_t encode(float x, const Format& f, Overflow o) {
  const bool sat = o == Overflow::kSaturating;
  if (&f == &kE4M3FN) return sat ? float8_e4m3fn::saturate(x).bits() : float8_e4m3fn(x).bits();
  return sat ? float8_e5m2::saturate(x).bits() : float8_e5m2(x).bits();
}

float decode(uint8_t b, const Format& f) {
  return &f == &kE4M3FN ? static_cast<float>(float8_e4m3fn::from_bits(b))
                        : static_cast<float>(float8_e5m2::from_bits(b));
}

constexpr const Format* kFormats[] = {&kE4M3FN, &kE5M2};
constexpr Overflow kFlavours[] = {Overflow::kNonSaturating, Overflow::kSaturating};

// Compares the implementation with the reference on `inputs`, for both types and flavours.
void check_against_reference(const std::vector<float>& inputs) {
  for (const Format* f : kFormats) {
    for (Overflow o : kFlavours) {
      int failures = 0;
      for (float x : inputs) {
        const uint8_t got = encode(x, *f, o);
        const uint8_t want = ref_encode(x, *f, o);
        if (got != want && failures++ < 10) {
          ADD_FAILURE() << f->name << " " << to_string(o) << ": " << hex(bits_of(x)) << " (" << x << ") -> " << hex(got)
                        << ", reference " << hex(want);
        }
      }
      EXPECT_EQ(failures, 0) << f->name << " " << to_string(o);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Numeric limits, against the table in the comment of float8.h.

template <typename T>
float value(T v) {
  return static_cast<float>(v);
}

template <typename T>
void check_limit_consistency(const Format& f) {
  using L = std::numeric_limits<T>;
  EXPECT_TRUE(L::is_specialized);
  EXPECT_TRUE(L::is_signed);
  EXPECT_FALSE(L::is_integer);
  EXPECT_FALSE(L::is_iec559);
  EXPECT_EQ(L::radix, 2);
  EXPECT_EQ(L::has_denorm, std::denorm_present);
  EXPECT_EQ(L::round_style, std::round_to_nearest);
  EXPECT_EQ(L::digits, f.mant_bits + 1);
  EXPECT_EQ(L::min_exponent, f.emin() + 1);
  EXPECT_EQ(L::digits10, static_cast<int>(std::floor((L::digits - 1) * std::log10(2.0))));
  EXPECT_EQ(L::max_digits10, static_cast<int>(std::ceil(1 + L::digits * std::log10(2.0))));
  EXPECT_EQ(L::min_exponent10, static_cast<int>(std::ceil(std::log10(value(L::min())))));
  EXPECT_EQ(L::max_exponent10, static_cast<int>(std::floor(std::log10(value(L::max())))));
  // 2^(max_exponent - 1) is the top binade: representable, and twice it is not.
  EXPECT_EQ(std::ilogb(value(L::max())), L::max_exponent - 1);
  EXPECT_EQ(std::ilogb(value(L::min())), L::min_exponent - 1);
  EXPECT_EQ(value(L::round_error()), 0.5f);
  EXPECT_EQ(value(L::min()), std::ldexp(1.0f, f.emin()));
  EXPECT_EQ(value(L::denorm_min()), std::ldexp(1.0f, f.emin() - f.mant_bits));
  EXPECT_EQ(value(L::epsilon()), std::ldexp(1.0f, -f.mant_bits));
  // max is the last finite pattern; the next one is NaN (e4m3fn) or inf (e5m2).
  EXPECT_EQ(L::max().bits(), f.max_code());
  const float next = value(T::from_bits(static_cast<uint8_t>(f.max_code() + 1)));
  EXPECT_TRUE(f.finite_only ? std::isnan(next) : std::isinf(next));
  EXPECT_EQ(value(L::lowest()), -value(L::max()));
  EXPECT_EQ(L::lowest().bits(), 0x80 | f.max_code());
  const uint8_t one = T(1.0f).bits();
  EXPECT_EQ(value(T::from_bits(static_cast<uint8_t>(one + 1))) - 1.0f, value(L::epsilon()));
  EXPECT_TRUE(std::isnan(value(L::quiet_NaN())));
}

TEST(Float8Limits, E4M3FNMatchesTable) {
  using L = std::numeric_limits<float8_e4m3fn>;
  EXPECT_EQ(value(L::max()), 448.0f);
  EXPECT_EQ(value(L::lowest()), -448.0f);
  EXPECT_EQ(value(L::min()), 0.015625f);            // 2^-6
  EXPECT_EQ(value(L::denorm_min()), 0.001953125f);  // 2^-9
  EXPECT_EQ(value(L::epsilon()), 0.125f);           // 2^-3
  EXPECT_EQ(L::digits, 4);
  EXPECT_EQ(L::min_exponent, -5);
  EXPECT_EQ(L::max_exponent, 9);
  EXPECT_FALSE(L::has_infinity);
  EXPECT_TRUE(L::has_quiet_NaN);
  EXPECT_FALSE(L::has_signaling_NaN);
  // Without an inf or a signalling NaN, these give the NaN rather than a plausible number.
  EXPECT_TRUE(std::isnan(value(L::infinity())));
  EXPECT_TRUE(std::isnan(value(L::signaling_NaN())));
  EXPECT_EQ(L::quiet_NaN().bits(), 0x7f);
  check_limit_consistency<float8_e4m3fn>(kE4M3FN);
}

TEST(Float8Limits, E5M2MatchesTable) {
  using L = std::numeric_limits<float8_e5m2>;
  EXPECT_EQ(value(L::max()), 57344.0f);
  EXPECT_EQ(value(L::lowest()), -57344.0f);
  EXPECT_EQ(value(L::min()), 6.103515625e-05f);           // 2^-14
  EXPECT_EQ(value(L::denorm_min()), 1.52587890625e-05f);  // 2^-16
  EXPECT_EQ(value(L::epsilon()), 0.25f);                  // 2^-2
  EXPECT_EQ(L::digits, 3);
  EXPECT_EQ(L::min_exponent, -13);
  EXPECT_EQ(L::max_exponent, 16);
  EXPECT_TRUE(L::has_infinity);
  EXPECT_TRUE(L::has_quiet_NaN);
  EXPECT_TRUE(L::has_signaling_NaN);
  EXPECT_EQ(value(L::infinity()), kInf);
  // IEEE-like NaNs: the quiet one has the top mantissa bit, the signalling one has not.
  EXPECT_TRUE(std::isnan(value(L::quiet_NaN())));
  EXPECT_TRUE(std::isnan(value(L::signaling_NaN())));
  EXPECT_NE(L::quiet_NaN().bits() & 0x02, 0);
  EXPECT_EQ(L::signaling_NaN().bits() & 0x02, 0);
  check_limit_consistency<float8_e5m2>(kE5M2);
}

// ---------------------------------------------------------------------------------------------
// Scalar conversions.

TEST(Float8Scalar, UsableInConstantExpressions) {
  static_assert(float8_e4m3fn(1.0f).bits() == 0x38);
  static_assert(float8_e5m2(1.0f).bits() == 0x3c);
  static_assert(float8_e4m3fn(-448.0f).bits() == 0xfe);
  static_assert(float8_e4m3fn::saturate(1000.0f).bits() == 0x7e);
  static_assert(float8_e5m2::saturate(-1e9f).bits() == 0xfb);
  static_assert(static_cast<float>(float8_e4m3fn::from_bits(0x01)) == 0.001953125f);
  static_assert(static_cast<float>(float8_e5m2::from_bits(0xc0)) == -2.0f);
  static_assert(std::is_trivially_copyable_v<float8_e4m3fn> && std::is_trivially_copyable_v<float8_e5m2>);
  SUCCEED();
}

TEST(Float8Scalar, ReferenceSelfCheck) {
  EXPECT_EQ(ref_decode(0x38, kE4M3FN), 1.0);
  EXPECT_EQ(ref_decode(0x7e, kE4M3FN), 448.0);
  EXPECT_EQ(ref_decode(0x01, kE4M3FN), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(ref_decode(0xff, kE4M3FN)));
  EXPECT_EQ(ref_decode(0x7b, kE5M2), 57344.0);
  EXPECT_EQ(ref_decode(0x81, kE5M2), -std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isinf(ref_decode(0xfc, kE5M2)));
  EXPECT_EQ(ref_value_as_finite(0x7f, kE4M3FN), 480.0);
  EXPECT_EQ(ref_value_as_finite(0x7c, kE5M2), 65536.0);
  EXPECT_EQ(ref_encode(464.0f, kE4M3FN, Overflow::kNonSaturating), 0x7e);  // tie, even is 448
  EXPECT_EQ(ref_encode(465.0f, kE4M3FN, Overflow::kNonSaturating), 0x7f);
  EXPECT_EQ(ref_encode(61440.0f, kE5M2, Overflow::kNonSaturating), 0x7c);   // tie, even is inf
  EXPECT_EQ(ref_encode(1.0625f, kE4M3FN, Overflow::kNonSaturating), 0x38);  // tie, even is 1.0
  EXPECT_EQ(ref_encode(-1.0e9f, kE5M2, Overflow::kSaturating), 0xfb);
}

void check_decode_every_pattern(const Format& f) {
  int nans = 0, infs = 0, failures = 0;
  for (int i = 0; i < 256; ++i) {
    const auto b = static_cast<uint8_t>(i);
    const float got = decode(b, f);
    const double want = ref_decode(b, f);
    uint32_t want_bits = 0;
    if (std::isnan(want)) {
      ++nans;
      // Quiet, with the sign and the mantissa moved to the top of the fp32 mantissa.
      const uint32_t mant = b & ((1u << f.mant_bits) - 1u);
      want_bits = (static_cast<uint32_t>(b >> 7) << 31) | 0x7fc00000u | (mant << (23 - f.mant_bits));
    } else {
      if (std::isinf(want)) ++infs;
      want_bits = bits_of(static_cast<float>(want));  // exact: at most 4 significant bits
    }
    if (bits_of(got) != want_bits && failures++ < 10) {
      ADD_FAILURE() << f.name << " " << hex(b) << " decoded to " << hex(bits_of(got)) << " (" << got << "), want "
                    << hex(want_bits) << " (" << want << ")";
    }
    EXPECT_EQ(std::isnan(got), std::isnan(want)) << f.name << " " << hex(b);
    EXPECT_EQ(std::isinf(got), std::isinf(want)) << f.name << " " << hex(b);
  }
  EXPECT_EQ(nans, f.finite_only ? 2 : 6) << f.name;
  EXPECT_EQ(infs, f.finite_only ? 0 : 2) << f.name;
}

TEST(Float8Decode, E4M3FNEveryPattern) {
  check_decode_every_pattern(kE4M3FN);
  EXPECT_TRUE(std::isnan(decode(0x7f, kE4M3FN)));
  EXPECT_TRUE(std::isnan(decode(0xff, kE4M3FN)));
  EXPECT_EQ(decode(0x7e, kE4M3FN), 448.0f);
  EXPECT_EQ(decode(0x78, kE4M3FN), 256.0f);  // S.1111.000 is a number in e4m3fn
  EXPECT_EQ(decode(0x07, kE4M3FN), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(bits_of(decode(0x80, kE4M3FN)), 0x80000000u);
}

TEST(Float8Decode, E5M2EveryPattern) {
  check_decode_every_pattern(kE5M2);
  EXPECT_EQ(decode(0x7c, kE5M2), kInf);
  EXPECT_EQ(decode(0xfc, kE5M2), -kInf);
  for (uint8_t b : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(decode(b, kE5M2))) << hex(b);
  // e5m2 is the top byte of an fp16: decoding agrees with fp16 widening for every pattern.
  for (int i = 0; i < 256; ++i) {
    const auto b = static_cast<uint8_t>(i);
    EXPECT_EQ(bits_of(decode(b, kE5M2)), bits_of(mt::detail::fp16_bits_to_fp32(static_cast<uint16_t>(i << 8))))
        << hex(b);
  }
}

// Every fp8 value comes back from its fp32 value unchanged, in both flavours; NaN comes back as the
// canonical NaN of its sign, and e5m2 inf as inf (non-saturating) or max (saturating).
TEST(Float8Encode, EveryValueRoundTrips) {
  for (const Format* f : kFormats) {
    for (Overflow o : kFlavours) {
      for (int i = 0; i < 256; ++i) {
        const auto b = static_cast<uint8_t>(i);
        const uint8_t sign = b & 0x80;
        uint8_t want = b;
        if (ref_is_nan(b, *f)) want = static_cast<uint8_t>(sign | f->nan_code);
        if (ref_is_inf(b, *f) && o == Overflow::kSaturating) want = static_cast<uint8_t>(sign | f->max_code());
        EXPECT_EQ(encode(decode(b, *f), *f, o), want) << f->name << " " << to_string(o) << " " << hex(b);
      }
    }
  }
}

// Every midpoint between neighbouring fp8 values goes to the even code and the fp32 values just
// either side of it go to the nearer one: across zero, through the subnormals, into the normals and
// at the top of the range, for both signs.
TEST(Float8Encode, EveryMidpointTiesToEven) {
  for (const Format* f : kFormats) {
    for (Overflow o : kFlavours) {
      int failures = 0;
      auto check = [&](float x, uint8_t want) {
        for (float s : {1.0f, -1.0f}) {
          const auto w = static_cast<uint8_t>(s > 0 ? want : want | 0x80u);
          const uint8_t got = encode(s * x, *f, o);
          if (got != w && failures++ < 10) {
            ADD_FAILURE() << f->name << " " << to_string(o) << ": " << hex(bits_of(s * x)) << " (" << s * x << ") -> "
                          << hex(got) << ", want " << hex(w);
          }
        }
      };
      for (int c = 0; c < f->max_code(); ++c) {
        const auto lo = static_cast<uint8_t>(c), hi = static_cast<uint8_t>(c + 1);
        const double mid_d = (ref_decode(lo, *f) + ref_decode(hi, *f)) / 2;
        const auto mid = static_cast<float>(mid_d);
        ASSERT_EQ(static_cast<double>(mid), mid_d) << "midpoint not exact in fp32";
        check(static_cast<float>(ref_decode(lo, *f)), lo);
        check(mid, c % 2 == 0 ? lo : hi);
        check(std::nextafter(mid, 0.0f), lo);
        check(std::nextafter(mid, kInf), hi);
      }
      // The top: the midpoint between max and the next binade step (480 / 2^16).
      const uint8_t over = ref_overflow(*f, o, 0);
      const auto top =
          static_cast<float>((ref_value_as_finite(f->max_code(), *f) + ref_value_as_finite(f->over_code, *f)) / 2);
      EXPECT_EQ(top, f->finite_only ? 464.0f : 61440.0f);
      check(top, f->max_code() % 2 == 0 ? f->max_code() : over);
      check(std::nextafter(top, 0.0f), f->max_code());
      check(std::nextafter(top, kInf), over);
      EXPECT_EQ(failures, 0) << f->name << " " << to_string(o);
    }
  }
}

// Every fp32 whose low 16 bits are zero: every bf16 value, NaNs, infs and fp32 denormals included.
TEST(Float8Encode, EveryBf16ValueMatchesReference) {
  std::vector<float> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = float_of(i << 16);
  check_against_reference(in);
}

// ~10^6 seeded fp32 values: raw bit patterns, values across both formats' ranges, and values at and
// a few ulps around midpoints of neighbouring fp8 values.
std::vector<float> random_inputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t specials[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x7f800000u, 0xff800000u,
                               0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu};
  std::uniform_int_distribution<int> exp(-20, 17);
  std::uniform_int_distribution<int> nudge(-2, 2);
  std::vector<float> v(n);
  for (auto& x : v) {
    uint32_t u = rng();
    switch (rng() % 8) {
      case 0:
      case 1: break;  // any pattern
      case 2:
      case 3:
      case 4: u = (u & 0x807fffffu) | static_cast<uint32_t>(exp(rng) + 127) << 23; break;
      case 5:
      case 6: {
        const Format& f = (u & 1) != 0 ? kE4M3FN : kE5M2;
        const auto c = static_cast<uint8_t>(rng() % f.over_code);
        float m =
            static_cast<float>((ref_value_as_finite(c, f) + ref_value_as_finite(static_cast<uint8_t>(c + 1), f)) / 2);
        for (int k = nudge(rng); k != 0; k += k > 0 ? -1 : 1) m = std::nextafter(m, k > 0 ? kInf : -kInf);
        u = bits_of(m) | (u & 0x80000000u);
        break;
      }
      default: u = (rng() % 2 != 0) ? specials[rng() % std::size(specials)] : (u & 0x807fffffu); break;
    }
    x = float_of(u);
  }
  return v;
}

TEST(Float8Encode, RandomValuesMatchReference) { check_against_reference(random_inputs(1 << 20, 20240611)); }

TEST(Float8Encode, OverflowAndSaturation) {
  const float big[] = {448.0f,   449.0f,   463.99f,  464.0f,   464.01f, 479.0f, 480.0f, 512.0f,
                       57344.0f, 61439.0f, 61440.0f, 65536.0f, 1e9f,    3e38f,  kInf};
  for (float x : big) {
    for (float s : {1.0f, -1.0f}) {
      const float v = s * x;
      const uint8_t sign = s < 0 ? 0x80 : 0;
      // Saturating: never NaN or inf, clamps to +-max.
      const uint8_t e4s = float8_e4m3fn::saturate(v).bits();
      const uint8_t e5s = float8_e5m2::saturate(v).bits();
      EXPECT_EQ(e4s, sign | (std::fabs(v) <= 448.0f ? float8_e4m3fn(v).bits() & 0x7f : 0x7e)) << v;
      EXPECT_FALSE(std::isnan(static_cast<float>(float8_e4m3fn::from_bits(e4s)))) << v;
      EXPECT_TRUE(std::isfinite(static_cast<float>(float8_e5m2::from_bits(e5s)))) << v;
      EXPECT_EQ(static_cast<float>(float8_e5m2::from_bits(e5s)),
                s * std::min(static_cast<float>(float8_e5m2(x)), 57344.0f))
          << v;
    }
  }
  // e4m3fn, non-saturating: rounds to 448 up to and including the tie at 464, NaN beyond (the sign
  // is kept on the NaN), NaN for inf.
  EXPECT_EQ(float8_e4m3fn(449.0f).bits(), 0x7e);
  EXPECT_EQ(float8_e4m3fn(464.0f).bits(), 0x7e);
  EXPECT_EQ(float8_e4m3fn(-464.0f).bits(), 0xfe);
  EXPECT_EQ(float8_e4m3fn(std::nextafter(464.0f, kInf)).bits(), 0x7f);
  EXPECT_EQ(float8_e4m3fn(-std::nextafter(464.0f, kInf)).bits(), 0xff);
  EXPECT_EQ(float8_e4m3fn(1e9f).bits(), 0x7f);
  EXPECT_EQ(float8_e4m3fn(kInf).bits(), 0x7f);
  EXPECT_EQ(float8_e4m3fn(-kInf).bits(), 0xff);
  EXPECT_EQ(float8_e4m3fn::saturate(kInf).bits(), 0x7e);
  EXPECT_EQ(float8_e4m3fn::saturate(-kInf).bits(), 0xfe);
  EXPECT_EQ(float8_e4m3fn::saturate(-1e9f).bits(), 0xfe);
  // e5m2, non-saturating: 61440 ties to the even code, which is inf; just below it stays at max.
  EXPECT_EQ(float8_e5m2(std::nextafter(61440.0f, 0.0f)).bits(), 0x7b);
  EXPECT_EQ(float8_e5m2(61440.0f).bits(), 0x7c);
  EXPECT_EQ(float8_e5m2(-61440.0f).bits(), 0xfc);
  EXPECT_EQ(float8_e5m2(1e9f).bits(), 0x7c);
  EXPECT_EQ(float8_e5m2(kInf).bits(), 0x7c);
  EXPECT_EQ(float8_e5m2(-kInf).bits(), 0xfc);
  EXPECT_EQ(float8_e5m2::saturate(61440.0f).bits(), 0x7b);
  EXPECT_EQ(float8_e5m2::saturate(kInf).bits(), 0x7b);
  EXPECT_EQ(float8_e5m2::saturate(-kInf).bits(), 0xfb);
}

TEST(Float8Encode, NaNStaysNaNWithItsSign) {
  // Quiet and signalling, payload high or only in the low bits (must not turn into inf or a number).
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu, 0x7f802000u};
  for (uint32_t n : nans) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = float_of(n | sign);
      const uint8_t s = sign != 0 ? 0x80 : 0;
      EXPECT_EQ(float8_e4m3fn(x).bits(), s | 0x7f) << hex(n | sign);
      EXPECT_EQ(float8_e4m3fn::saturate(x).bits(), s | 0x7f) << hex(n | sign);
      EXPECT_EQ(float8_e5m2(x).bits(), s | 0x7e) << hex(n | sign);
      EXPECT_EQ(float8_e5m2::saturate(x).bits(), s | 0x7e) << hex(n | sign);
    }
  }
  EXPECT_EQ(bits_of(static_cast<float>(float8_e4m3fn::from_bits(0x7f))), 0x7ff00000u);
  EXPECT_EQ(bits_of(static_cast<float>(float8_e4m3fn::from_bits(0xff))), 0xfff00000u);
  EXPECT_EQ(bits_of(static_cast<float>(float8_e5m2::from_bits(0x7d))), 0x7fe00000u);  // signalling comes out quiet
  EXPECT_EQ(bits_of(static_cast<float>(float8_e5m2::from_bits(0x7e))), 0x7fc00000u);
  EXPECT_EQ(bits_of(static_cast<float>(float8_e5m2::from_bits(0xff))), 0xffe00000u);
}

TEST(Float8Encode, SubnormalsAndSignedZero) {
  const float q4 = std::ldexp(1.0f, -9), q5 = std::ldexp(1.0f, -16);  // the subnormal quanta
  for (Overflow o : kFlavours) {
    // Half the smallest subnormal ties to zero, with the sign kept; anything above rounds up.
    EXPECT_EQ(encode(q4 / 2, kE4M3FN, o), 0x00);
    EXPECT_EQ(encode(-q4 / 2, kE4M3FN, o), 0x80);
    EXPECT_EQ(encode(std::nextafter(q4 / 2, 1.0f), kE4M3FN, o), 0x01);
    EXPECT_EQ(encode(q5 / 2, kE5M2, o), 0x00);
    EXPECT_EQ(encode(-q5 / 2, kE5M2, o), 0x80);
    EXPECT_EQ(encode(-std::nextafter(q5 / 2, 1.0f), kE5M2, o), 0x81);
    EXPECT_EQ(encode(1.5f * q4, kE4M3FN, o), 0x02);  // tie between 1 and 2 quanta -> 2
    EXPECT_EQ(encode(2.5f * q4, kE4M3FN, o), 0x02);  // tie between 2 and 3 quanta -> 2
    EXPECT_EQ(encode(2.5f * q5, kE5M2, o), 0x02);
    // The largest subnormal, and rounding up out of it into the smallest normal.
    EXPECT_EQ(encode(7 * q4, kE4M3FN, o), 0x07);
    EXPECT_EQ(encode(7.5f * q4, kE4M3FN, o), 0x08);
    EXPECT_EQ(encode(std::nextafter(std::ldexp(1.0f, -6), 0.0f), kE4M3FN, o), 0x08);
    EXPECT_EQ(encode(3 * q5, kE5M2, o), 0x03);
    EXPECT_EQ(encode(3.5f * q5, kE5M2, o), 0x04);
    EXPECT_EQ(encode(-std::nextafter(std::ldexp(1.0f, -14), 0.0f), kE5M2, o), 0x84);
    // Signed zero, and fp32 denormals (far below half a quantum) become a zero of their sign.
    for (const Format* f : kFormats) {
      EXPECT_EQ(encode(0.0f, *f, o), 0x00);
      EXPECT_EQ(encode(-0.0f, *f, o), 0x80);
      EXPECT_EQ(encode(float_of(0x00000001u), *f, o), 0x00);
      EXPECT_EQ(encode(float_of(0x807fffffu), *f, o), 0x80);
    }
  }
}

// Rounding fp32 -> fp16 -> e5m2 is wrong whenever the fp16 rounding lands exactly on an e5m2
// midpoint; the conversion must round once, from fp32.
TEST(Float8Encode, E5M2RoundsDirectlyNotThroughFp16) {
  auto via_fp16 = [](float x) { return float8_e5m2(static_cast<float>(mt::float16(x))).bits(); };
  struct Case {
    float x;
    uint8_t direct, twice;
  };
  const Case cases[] = {
      // Just above the midpoint 1.125 of 1.0 and 1.25: fp16 rounds it onto the midpoint, which then
      // ties to the even 1.0.
      {1.125f + std::ldexp(1.0f, -13), 0x3d, 0x3c},
      {-(1.125f + std::ldexp(1.0f, -13)), 0xbd, 0xbc},
      // Just below the overflow tie: fp16 rounds 61432 up to 61440, which ties to inf.
      {61432.0f, 0x7b, 0x7c},
      // Subnormal: just above the midpoint of 2 and 3 quanta (2^-16).
      {2.5f * std::ldexp(1.0f, -16) + std::ldexp(1.0f, -26), 0x03, 0x02},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(via_fp16(c.x), c.twice) << c.x << ": the case does not separate the two roundings";
    EXPECT_EQ(float8_e5m2(c.x).bits(), c.direct) << c.x;
    EXPECT_EQ(ref_encode(c.x, kE5M2, Overflow::kNonSaturating), c.direct) << c.x;
  }
}

// The conversions work on bit patterns: the FPU rounding mode changes nothing.
TEST(Float8Encode, IgnoresFpuRoundingMode) {
  const auto in = random_inputs(1 << 14, 7);
  std::vector<uint8_t> want;
  for (float x : in) {
    for (const Format* f : kFormats) {
      for (Overflow o : kFlavours) want.push_back(encode(x, *f, o));
    }
  }
  for (int mode : {FE_TOWARDZERO, FE_UPWARD, FE_DOWNWARD}) {
    ASSERT_EQ(std::fesetround(mode), 0);
    std::vector<uint8_t> got;
    for (float x : in) {
      for (const Format* f : kFormats) {
        for (Overflow o : kFlavours) got.push_back(encode(x, *f, o));
      }
    }
    std::fesetround(FE_TONEAREST);
    EXPECT_TRUE(got == want) << "rounding mode " << mode;
  }
}

// ---------------------------------------------------------------------------------------------
// Bulk converters.

TEST(Float8Bulk, ConvertersMatchScalar) {
  const auto in = random_inputs(4099, 5);
  const auto n = static_cast<int64_t>(in.size());
  std::vector<float8_e4m3fn> a(in.size()), as(in.size());
  std::vector<float8_e5m2> b(in.size()), bs(in.size());
  mt::convert_fp32_to_fp8(in.data(), a.data(), n, false);
  mt::convert_fp32_to_fp8(in.data(), as.data(), n, true);
  mt::convert_fp32_to_fp8(in.data(), b.data(), n, false);
  mt::convert_fp32_to_fp8(in.data(), bs.data(), n, true);
  std::vector<float> wa(in.size()), wb(in.size());
  mt::convert_fp8_to_fp32(a.data(), wa.data(), n);
  mt::convert_fp8_to_fp32(b.data(), wb.data(), n);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(a[i].bits(), float8_e4m3fn(in[i]).bits()) << hex(bits_of(in[i]));
    ASSERT_EQ(as[i].bits(), float8_e4m3fn::saturate(in[i]).bits()) << hex(bits_of(in[i]));
    ASSERT_EQ(b[i].bits(), float8_e5m2(in[i]).bits()) << hex(bits_of(in[i]));
    ASSERT_EQ(bs[i].bits(), float8_e5m2::saturate(in[i]).bits()) << hex(bits_of(in[i]));
    ASSERT_EQ(bits_of(wa[i]), bits_of(static_cast<float>(a[i])));
    ASSERT_EQ(bits_of(wb[i]), bits_of(static_cast<float>(b[i])));
  }
  // Empty rows touch nothing; a negative length is a user error.
  mt::convert_fp32_to_fp8(nullptr, static_cast<float8_e4m3fn*>(nullptr), 0, true);
  mt::convert_fp8_to_fp32(static_cast<const float8_e5m2*>(nullptr), nullptr, 0);
  EXPECT_THROW(mt::convert_fp32_to_fp8(in.data(), a.data(), -1, false), mt::Error);
  EXPECT_THROW(mt::convert_fp32_to_fp8(in.data(), b.data(), -1, true), mt::Error);
  EXPECT_THROW(mt::convert_fp8_to_fp32(a.data(), wa.data(), -1), mt::Error);
  EXPECT_THROW(mt::convert_fp8_to_fp32(b.data(), wb.data(), -1), mt::Error);
}

}  // namespace
