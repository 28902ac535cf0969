// tests/core/test_half.cpp: float16 / bfloat16 conversions.
//
// The scalar converters of mixtrain/half.h are checked against an independent reference that works
// on values (double arithmetic, ldexp, nearbyint) rather than on bit tricks; every SIMD
// implementation this CPU supports is then checked bit for bit against the scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/half_convert.h"
#include "mixtrain/error.h"
#include "mixtrain/half.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "support/bits.h"

namespace mt = mixtrain;
using mt::bfloat16;
using mt::float16;
using mt::detail::HalfConversion;
using mt::detail::HalfImpl;

namespace {

using mixtrain::testing::bits_of;
using mixtrain::testing::float_of;
using mixtrain::testing::hex;

// ---------------------------------------------------------------------------------------------
// Independent reference.

struct Format {
  const char* name;
  int mant_bits;  // explicit significand bits
  int exp_bits;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  int emax() const { return bias(); }
  uint16_t exp_mask() const { return static_cast<uint16_t>(((1u << exp_bits) - 1u) << mant_bits); }
  uint16_t quiet_bit() const { return static_cast<uint16_t>(1u << (mant_bits - 1)); }
  uint16_t max_bits() const { return static_cast<uint16_t>(exp_mask() - 1u); }
  double max_finite() const { return std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), emax()); }
};
constexpr Format kFp16{"float16", 10, 5};
constexpr Format kBf16{"bfloat16", 7, 8};

// The value of a 16-bit pattern, decoded field by field (NaN for every NaN pattern).
double ref_decode(uint16_t h, const Format& f) {
  const bool negative = (h >> 15) != 0;
  const int e = (h >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.mant_bits) - 1);
  double v = 0;
  if (e == (1 << f.exp_bits) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(m, f.emin() - f.mant_bits);
  } else {
    v = std::ldexp(m + (1 << f.mant_bits), e - f.bias() - f.mant_bits);
  }
  return negative ? -v : v;
}

// The bit pattern of a value that the format holds exactly (or +-inf).
uint16_t ref_encode(double v, const Format& f) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | f.exp_mask());
  if (a == 0) return sign;
  const int e = std::ilogb(a);
  double m = 0;
  uint16_t field = 0;
  if (e < f.emin()) {
    m = std::ldexp(a, f.mant_bits - f.emin());
  } else {
    m = std::ldexp(a, f.mant_bits - e) - (1 << f.mant_bits);
    field = static_cast<uint16_t>((e + f.bias()) << f.mant_bits);
  }
  EXPECT_EQ(m, std::floor(m)) << v << " is not a " << f.name << " value";
  return static_cast<uint16_t>(sign | field | static_cast<uint16_t>(m));
}

// fp32 -> 16 bits, IEEE 754 round-to-nearest-even done on values: the significand is rounded at the
// format's precision (a fixed quantum 2^(emin - mant_bits) below the normal range), and a result
// past the largest finite number becomes inf. NaN: same sign, quiet bit set, top payload bits kept.
uint16_t ref_round(float x, const Format& f) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = (u >> 31) != 0 ? 0x8000 : 0;
  if (std::isnan(x)) {
    const auto payload = static_cast<uint16_t>((u & 0x7fffffu) >> (23 - f.mant_bits));
    return static_cast<uint16_t>(sign | f.exp_mask() | f.quiet_bit() | payload);
  }
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) || a == 0) return ref_encode(x, f);
  const int e = std::max(std::ilogb(a), f.emin());
  const double q = std::nearbyint(std::ldexp(a, f.mant_bits - e));  // FE_TONEAREST: ties to even
  double r = std::ldexp(q, e - f.mant_bits);
  if (r > f.max_finite()) r = std::numeric_limits<double>::infinity();
  return ref_encode(sign != 0 ? -r : r, f);
}

uint16_t scalar_narrow(float x, const Format& f) { return &f == &kFp16 ? float16(x).bits() : bfloat16(x).bits(); }
float scalar_widen(uint16_t h, const Format& f) {
  return &f == &kFp16 ? static_cast<float>(float16::from_bits(h)) : static_cast<float>(bfloat16::from_bits(h));
}

// ---------------------------------------------------------------------------------------------
// Numeric limits, against the table in the comment of half.h.

template <typename T>
float limit_value(T v) {
  return static_cast<float>(v);
}

template <typename T>
void check_limit_consistency(const Format& f) {
  using L = std::numeric_limits<T>;
  EXPECT_EQ(L::digits, f.mant_bits + 1);
  EXPECT_EQ(L::min_exponent, f.emin() + 1);
  EXPECT_EQ(L::max_exponent, f.emax() + 1);
  EXPECT_EQ(L::digits10, static_cast<int>(std::floor((L::digits - 1) * std::log10(2.0))));
  EXPECT_EQ(L::max_digits10, static_cast<int>(std::ceil(1 + L::digits * std::log10(2.0))));
  EXPECT_EQ(L::min_exponent10, static_cast<int>(std::ceil(std::log10(limit_value(L::min())))));
  EXPECT_EQ(L::max_exponent10, static_cast<int>(std::floor(std::log10(limit_value(L::max())))));
  EXPECT_EQ(limit_value(L::round_error()), 0.5f);
  // max is the last finite pattern and the next one is inf; epsilon is the gap above 1.
  EXPECT_EQ(L::max().bits(), f.max_bits());
  EXPECT_TRUE(std::isinf(limit_value(T::from_bits(static_cast<uint16_t>(f.max_bits() + 1)))));
  EXPECT_EQ(limit_value(L::lowest()), -limit_value(L::max()));
  const uint16_t one = T(1.0f).bits();
  EXPECT_EQ(limit_value(T::from_bits(static_cast<uint16_t>(one + 1))) - 1.0f, limit_value(L::epsilon()));
  // NaNs: the quiet one has the quiet bit, the signalling one has not.
  EXPECT_TRUE(std::isnan(limit_value(L::quiet_NaN())));
  EXPECT_NE(L::quiet_NaN().bits() & f.quiet_bit(), 0);
  EXPECT_EQ(L::signaling_NaN().bits() & f.exp_mask(), f.exp_mask());
  EXPECT_EQ(L::signaling_NaN().bits() & f.quiet_bit(), 0);
  EXPECT_NE(L::signaling_NaN().bits() & (f.quiet_bit() - 1), 0);
}

TEST(HalfLimits, Float16MatchesTable) {
  using L = std::numeric_limits<float16>;
  EXPECT_EQ(limit_value(L::max()), 65504.0f);
  EXPECT_EQ(limit_value(L::lowest()), -65504.0f);
  EXPECT_EQ(limit_value(L::min()), std::ldexp(1.0f, -14));
  EXPECT_EQ(limit_value(L::denorm_min()), std::ldexp(1.0f, -24));
  EXPECT_EQ(limit_value(L::epsilon()), std::ldexp(1.0f, -10));
  EXPECT_EQ(limit_value(L::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(limit_value(L::quiet_NaN())));
  EXPECT_TRUE(L::is_iec559);
  check_limit_consistency<float16>(kFp16);
}

TEST(HalfLimits, BFloat16MatchesTable) {
  using L = std::numeric_limits<bfloat16>;
  EXPECT_EQ(limit_value(L::max()), std::ldexp(2.0f - std::ldexp(1.0f, -7), 127));
  EXPECT_NEAR(limit_value(L::max()) / 3.3895e38f, 1.0f, 1e-4f);
  EXPECT_EQ(limit_value(L::lowest()), -limit_value(L::max()));
  EXPECT_EQ(limit_value(L::min()), std::ldexp(1.0f, -126));
  EXPECT_EQ(limit_value(L::denorm_min()), std::ldexp(1.0f, -133));
  EXPECT_EQ(limit_value(L::epsilon()), std::ldexp(1.0f, -7));
  EXPECT_EQ(limit_value(L::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(limit_value(L::quiet_NaN())));
  check_limit_consistency<bfloat16>(kBf16);
}

// ---------------------------------------------------------------------------------------------
// Scalar converters against the reference.

TEST(HalfScalar, UsableInConstantExpressions) {
  static_assert(float16(1.0f).bits() == 0x3c00);
  static_assert(bfloat16(1.0f).bits() == 0x3f80);
  static_assert(static_cast<float>(float16::from_bits(0x3c00)) == 1.0f);
  static_assert(static_cast<float>(bfloat16::from_bits(0xc000)) == -2.0f);
  SUCCEED();
}

TEST(HalfScalar, ReferenceSelfCheck) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_EQ(ref_decode(0x3c00, kFp16), 1.0);
  EXPECT_EQ(ref_decode(0x0001, kFp16), std::ldexp(1.0, -24));
  EXPECT_EQ(ref_decode(0x7bff, kFp16), 65504.0);
  EXPECT_EQ(ref_decode(0x0001, kBf16), std::ldexp(1.0, -133));
  EXPECT_EQ(ref_encode(65504.0, kFp16), 0x7bff);
  EXPECT_EQ(ref_encode(-std::ldexp(1.0, -24), kFp16), 0x8001);
  EXPECT_EQ(ref_round(1.0f + std::ldexp(1.0f, -11), kFp16), 0x3c00);  // tie, even is 1.0
}

void check_all_widen(const Format& f) {
  int failures = 0;
  for (uint32_t i = 0; i < 65536 && failures < 10; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float w = scalar_widen(h, f);
    const double ref = ref_decode(h, f);
    uint32_t want = 0;
    if (std::isnan(ref)) {
      // The payload moves to the top of the fp32 mantissa. fp16 NaNs come out quiet (as vcvtph2ps
      // makes them); bf16 widening is a plain shift that keeps every bit.
      const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
      const uint32_t payload = static_cast<uint32_t>(h & ((1u << f.mant_bits) - 1u)) << (23 - f.mant_bits);
      want = sign | 0x7f800000u | payload | (&f == &kFp16 ? 0x00400000u : 0u);
    } else {
      want = bits_of(static_cast<float>(ref));  // exact: ref holds at most 11 significant bits
    }
    if (bits_of(w) != want) {
      ++failures;
      ADD_FAILURE() << f.name << " " << hex(h) << " widened to " << hex(bits_of(w)) << ", want " << hex(want);
    }
  }
}

TEST(HalfScalar, Float16WidensEveryPattern) { check_all_widen(kFp16); }
TEST(HalfScalar, BFloat16WidensEveryPattern) { check_all_widen(kBf16); }

void check_round_trip(const Format& f) {
  int failures = 0;
  for (uint32_t i = 0; i < 65536 && failures < 10; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float w = scalar_widen(h, f);
    const uint16_t back = scalar_narrow(w, f);
    if (std::isnan(w)) {
      // NaN stays NaN with its sign, quiet, with its payload (as far as the quiet bit lets it).
      const uint16_t want = static_cast<uint16_t>(h | f.quiet_bit());
      if (back != want) {
        ++failures;
        ADD_FAILURE() << f.name << " NaN " << hex(h) << " came back as " << hex(back);
      }
    } else if (back != h) {
      ++failures;
      ADD_FAILURE() << f.name << " " << hex(h) << " came back as " << hex(back);
    }
  }
}

TEST(HalfScalar, Float16RoundTripsEveryPattern) { check_round_trip(kFp16); }
TEST(HalfScalar, BFloat16RoundTripsEveryPattern) { check_round_trip(kBf16); }

TEST(HalfScalar, BFloat16TargetedValues) {
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);           // tie -> even 1.0
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.015625f);  // tie -> even 1+2^-6
  EXPECT_EQ(static_cast<float>(bfloat16(0.1f)), 0.10009765625f);
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f / 3.0f)), 0.333984375f);
  EXPECT_EQ(static_cast<float>(bfloat16(-1.0f / 3.0f)), -0.333984375f);
  EXPECT_EQ(bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -23)).bits(), 0x3f81);  // above the tie
  // Overflow: the midpoint between max and 2^128 ties to the even 2^128, i.e. inf.
  EXPECT_EQ(bfloat16(float_of(0x7f7f7fffu)).bits(), 0x7f7f);
  EXPECT_EQ(bfloat16(float_of(0x7f7f8000u)).bits(), 0x7f80);
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::max()).bits(), 0x7f80);
  EXPECT_EQ(bfloat16(-std::numeric_limits<float>::max()).bits(), 0xff80);
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::infinity()).bits(), 0x7f80);
  EXPECT_EQ(bfloat16(-std::numeric_limits<float>::infinity()).bits(), 0xff80);
  // fp32 denormals round like any other value (no flush to zero).
  EXPECT_EQ(bfloat16(float_of(0x00000001u)).bits(), 0x0000);
  EXPECT_EQ(bfloat16(float_of(0x00008000u)).bits(), 0x0000);  // tie -> even 0
  EXPECT_EQ(bfloat16(float_of(0x00008001u)).bits(), 0x0001);
  EXPECT_EQ(bfloat16(float_of(0x00018000u)).bits(), 0x0002);  // tie -> even 2
  EXPECT_EQ(bfloat16(float_of(0x00400000u)).bits(), 0x0040);
  EXPECT_EQ(bfloat16(float_of(0x007f7fffu)).bits(), 0x007f);
  EXPECT_EQ(bfloat16(float_of(0x007fffffu)).bits(), 0x0080);  // largest denormal -> min normal
  EXPECT_EQ(bfloat16(float_of(0x807fffffu)).bits(), 0x8080);
  EXPECT_EQ(bfloat16(float_of(0x00800000u)).bits(), 0x0080);
  // Signed zero.
  EXPECT_EQ(bfloat16(0.0f).bits(), 0x0000);
  EXPECT_EQ(bfloat16(-0.0f).bits(), 0x8000);
}

TEST(HalfScalar, Float16TargetedValues) {
  EXPECT_EQ(static_cast<float>(float16(65519.0f)), 65504.0f);
  EXPECT_EQ(float16(65520.0f).bits(), 0x7c00);  // tie between max and 2^16 -> even, i.e. inf
  EXPECT_EQ(float16(std::nextafter(65520.0f, 0.0f)).bits(), 0x7bff);
  EXPECT_EQ(float16(-65520.0f).bits(), 0xfc00);
  EXPECT_EQ(float16(1e5f).bits(), 0x7c00);
  EXPECT_EQ(float16(std::numeric_limits<float>::max()).bits(), 0x7c00);
  EXPECT_EQ(float16(-std::numeric_limits<float>::max()).bits(), 0xfc00);
  EXPECT_EQ(float16(std::numeric_limits<float>::infinity()).bits(), 0x7c00);
  EXPECT_EQ(float16(-std::numeric_limits<float>::infinity()).bits(), 0xfc00);
  EXPECT_EQ(float16(std::ldexp(1.0f, -25)).bits(), 0x0000);  // tie -> even 0
  EXPECT_EQ(float16(-std::ldexp(1.0f, -25)).bits(), 0x8000);
  EXPECT_EQ(float16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits(), 0x0001);
  EXPECT_EQ(static_cast<float>(float16(3 * std::ldexp(1.0f, -26))), std::ldexp(1.0f, -24));
  EXPECT_EQ(float16(3 * std::ldexp(1.0f, -25)).bits(), 0x0002);  // tie between 1 and 2 quanta -> 2
  EXPECT_EQ(float16(5 * std::ldexp(1.0f, -25)).bits(), 0x0002);  // tie between 2 and 3 quanta -> 2
  EXPECT_EQ(float16(std::ldexp(1.0f, -24)).bits(), 0x0001);
  EXPECT_EQ(float16(1023 * std::ldexp(1.0f, -24)).bits(), 0x03ff);                 // largest subnormal
  EXPECT_EQ(float16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)).bits(), 0x0400);  // rounds up to min normal
  EXPECT_EQ(float16(std::ldexp(1.0f, -14)).bits(), 0x0400);
  EXPECT_EQ(float16(1.0f + std::ldexp(1.0f, -11)).bits(), 0x3c00);      // tie -> even 1.0
  EXPECT_EQ(float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits(), 0x3c02);  // tie -> even
  EXPECT_EQ(float16(float_of(0x00000001u)).bits(), 0x0000);             // fp32 denormals are far below 2^-25
  EXPECT_EQ(float16(float_of(0x807fffffu)).bits(), 0x8000);
  EXPECT_EQ(float16(0.0f).bits(), 0x0000);
  EXPECT_EQ(float16(-0.0f).bits(), 0x8000);
  EXPECT_EQ(static_cast<float>(float16(0.1f)), 0.0999755859375f);
}

TEST(HalfScalar, NaNIsQuietedKeepingSignAndPayload) {
  struct Case {
    uint32_t in;
    uint16_t fp16, bf16;
  };
  // clang-format off
  const Case cases[] = {
      {0x7f800001u, 0x7e00, 0x7fc0},  // signalling, payload only in low bits: must not become inf
      {0xff800001u, 0xfe00, 0xffc0},
      {0x7fa00000u, 0x7f00, 0x7fe0},  // signalling with a high payload bit
      {0x7fc00000u, 0x7e00, 0x7fc0},  // the default quiet NaN
      {0xffc00000u, 0xfe00, 0xffc0},
      {0x7f802000u, 0x7e01, 0x7fc0},
      {0x7f810000u, 0x7e08, 0x7fc1},
      {0x7fffffffu, 0x7fff, 0x7fff},
      {0xffbfffffu, 0xffff, 0xffff},
  };
  // clang-format on
  for (const Case& c : cases) {
    const float x = float_of(c.in);
    EXPECT_EQ(float16(x).bits(), c.fp16) << hex(c.in);
    EXPECT_EQ(bfloat16(x).bits(), c.bf16) << hex(c.in);
    EXPECT_EQ(ref_round(x, kFp16), c.fp16) << hex(c.in);
    EXPECT_EQ(ref_round(x, kBf16), c.bf16) << hex(c.in);
  }
  // Widening: fp16 NaNs come out quiet, bf16 NaNs keep every bit.
  EXPECT_EQ(bits_of(static_cast<float>(float16::from_bits(0x7c01))), 0x7fc02000u);
  EXPECT_EQ(bits_of(static_cast<float>(float16::from_bits(0xfd00))), 0xffe00000u);
  EXPECT_EQ(bits_of(static_cast<float>(float16::from_bits(0x7e00))), 0x7fc00000u);
  EXPECT_EQ(bits_of(static_cast<float>(bfloat16::from_bits(0x7f81))), 0x7f810000u);
  EXPECT_EQ(bits_of(static_cast<float>(bfloat16::from_bits(0xffc0))), 0xffc00000u);
}

// Every midpoint between neighbouring 16-bit values goes to the even one, and the fp32 values just
// either side of it go to the nearer one: ties at every exponent, subnormals and the overflow edge.
void check_all_midpoints(const Format& f) {
  int failures = 0;
  auto check = [&](float x, uint16_t want) {
    for (float s : {1.0f, -1.0f}) {
      const uint16_t w = s > 0 ? want : static_cast<uint16_t>(want | 0x8000u);
      const uint16_t got = scalar_narrow(s * x, f);
      if (got != w && failures++ < 10) {
        ADD_FAILURE() << f.name << ": " << hex(bits_of(s * x)) << " -> " << hex(got) << ", want " << hex(w);
      }
    }
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (uint16_t p = 0; p < f.max_bits(); ++p) {
    const auto q = static_cast<uint16_t>(p + 1);
    const double mid_d = (ref_decode(p, f) + ref_decode(q, f)) / 2;
    const auto mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d) << "midpoint not exact in fp32";
    check(mid, (p & 1u) == 0 ? p : q);
    check(std::nextafter(mid, 0.0f), p);
    check(std::nextafter(mid, inf), q);
  }
  // Past the largest finite value: the midpoint to 2^(emax+1) ties to the even 2^(emax+1) = inf.
  const auto over = static_cast<float>(f.max_finite() + std::ldexp(1.0, f.emax() - f.mant_bits - 1));
  check(over, f.exp_mask());
  check(std::nextafter(over, 0.0f), f.max_bits());
  check(std::nextafter(over, inf), f.exp_mask());
}

TEST(HalfScalar, Float16EveryMidpointTiesToEven) { check_all_midpoints(kFp16); }
TEST(HalfScalar, BFloat16EveryMidpointTiesToEven) { check_all_midpoints(kBf16); }

void check_against_reference(const std::vector<uint32_t>& inputs, const Format& f) {
  int failures = 0;
  for (uint32_t u : inputs) {
    const float x = float_of(u);
    const uint16_t got = scalar_narrow(x, f);
    const uint16_t want = ref_round(x, f);
    if (got != want && failures++ < 10) {
      ADD_FAILURE() << f.name << ": " << hex(u) << " -> " << hex(got) << ", reference " << hex(want);
    }
  }
}

TEST(HalfScalar, RandomFp32PatternsMatchReference) {
  std::mt19937 rng(20240611);
  std::vector<uint32_t> in(1 << 21);
  for (auto& u : in) u = rng();
  check_against_reference(in, kFp16);
  check_against_reference(in, kBf16);
}

// Every fp32 pattern within `radius` ulps of each boundary, both signs.
std::vector<uint32_t> neighbourhoods(const std::vector<uint32_t>& centres, uint32_t radius) {
  std::vector<uint32_t> out;
  for (uint32_t c : centres) {
    const uint32_t lo = c > radius ? c - radius : 0;
    const uint32_t hi = std::min<uint32_t>(c + radius, 0x7fffffffu);
    for (uint32_t u = lo; u <= hi; ++u) {
      out.push_back(u);
      out.push_back(u | 0x80000000u);
    }
  }
  return out;
}

TEST(HalfScalar, Float16BoundaryNeighbourhoodsMatchReference) {
  std::vector<uint32_t> centres;
  for (int k = -27; k <= 17; ++k) centres.push_back(bits_of(std::ldexp(1.0f, k)));  // every binade edge
  for (float v : {65504.0f, 65520.0f, 3 * std::ldexp(1.0f, -26), 1023 * std::ldexp(1.0f, -24)}) {
    centres.push_back(bits_of(v));
  }
  centres.push_back(0);                                           // zero and fp32 denormals
  centres.push_back(bits_of(std::numeric_limits<float>::max()));  // fp32 max, inf, NaNs
  centres.push_back(0x7f800000u);
  // 2^14 fp32 ulps is two fp16 ulps in the normal range: every rounding case around each edge.
  check_against_reference(neighbourhoods(centres, 1u << 14), kFp16);
}

TEST(HalfScalar, BFloat16BoundaryNeighbourhoodsMatchReference) {
  std::vector<uint32_t> centres;
  for (int k = -149; k <= 127; ++k) centres.push_back(bits_of(std::ldexp(1.0f, k)));  // every fp32 binade
  check_against_reference(neighbourhoods(centres, 1u << 10), kBf16);
  // Two bf16 ulps around the edges that matter: zero / denormals, min normal, max, inf and NaN.
  const std::vector<uint32_t> edges = {0x00000000u, 0x007fffffu, 0x00800000u, 0x3f800000u,
                                       0x7f7f8000u, 0x7f800000u, 0x7fc00000u};
  check_against_reference(neighbourhoods(edges, 1u << 17), kBf16);
}

TEST(HalfScalar, Printing) {
  std::ostringstream os;
  os << float16(1.5f) << " " << bfloat16(-2.0f) << " " << float16(65520.0f);
  EXPECT_EQ(os.str(), "1.5 -2 inf");
  std::ostringstream precise;
  precise.precision(12);
  precise << bfloat16(0.1f);
  EXPECT_EQ(precise.str(), "0.10009765625");
}

// ---------------------------------------------------------------------------------------------
// SIMD implementations against the scalar one.

const Format& format_of(HalfConversion c) {
  return c == HalfConversion::kFp32ToFp16 || c == HalfConversion::kFp16ToFp32 ? kFp16 : kBf16;
}

std::string impl_list(HalfConversion c) {
  std::string s;
  for (HalfImpl i : mt::detail::supported_half_impls(c)) s += std::string(s.empty() ? "" : ", ") + std::string(to_string(i));
  return s;
}

std::vector<HalfImpl> simd_impls(HalfConversion c) {
  std::vector<HalfImpl> out;
  for (HalfImpl i : mt::detail::supported_half_impls(c)) {
    if (i != HalfImpl::kScalar) out.push_back(i);
  }
  return out;
}

// Narrow `n` floats with one implementation; the result as raw bits.
std::vector<uint16_t> narrow_with(HalfImpl impl, HalfConversion c, const float* src, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xdead);  // one guard element past the end
  if (c == HalfConversion::kFp32ToFp16) {
    mt::detail::convert_fp32_to_fp16_using(impl, src, reinterpret_cast<float16*>(out.data()), n);
  } else {
    mt::detail::convert_fp32_to_bf16_using(impl, src, reinterpret_cast<bfloat16*>(out.data()), n);
  }
  EXPECT_EQ(out.back(), 0xdead) << to_string(impl) << " wrote past the end (n = " << n << ")";
  out.pop_back();
  return out;
}

std::vector<uint32_t> widen_with(HalfImpl impl, HalfConversion c, const uint16_t* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n) + 1, float_of(0xdeadbeefu));
  if (c == HalfConversion::kFp16ToFp32) {
    mt::detail::convert_fp16_to_fp32_using(impl, reinterpret_cast<const float16*>(src), out.data(), n);
  } else {
    mt::detail::convert_bf16_to_fp32_using(impl, reinterpret_cast<const bfloat16*>(src), out.data(), n);
  }
  EXPECT_EQ(bits_of(out.back()), 0xdeadbeefu) << to_string(impl) << " wrote past the end (n = " << n << ")";
  std::vector<uint32_t> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[static_cast<size_t>(i)] = bits_of(out[static_cast<size_t>(i)]);
  return b;
}

// Returns the number of mismatches, reporting the first few.
template <typename In, typename Out>
int compare(std::string_view what, HalfImpl impl, const In* in, const std::vector<Out>& got, const std::vector<Out>& want) {
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && failures++ < 5) {
      ADD_FAILURE() << what << " " << to_string(impl) << " [" << i << "/" << want.size() << "] input "
                    << hex(static_cast<uint32_t>(
                           std::bit_cast<std::conditional_t<sizeof(In) == 4, uint32_t, uint16_t>>(in[i])))
                    << ": got " << hex(got[i]) << ", scalar " << hex(want[i]);
    }
  }
  return failures;
}

constexpr int64_t kLengths[] = {1, 7, 15, 16, 17, 31, 33, 1000003};

void check_narrow_matches_scalar(HalfConversion c, const std::vector<float>& data) {
  for (HalfImpl impl : simd_impls(c)) {
    for (int64_t n : kLengths) {
      for (int64_t offset : {0, 1}) {  // offset 1: unaligned source and destination
        ASSERT_LE(offset + n, static_cast<int64_t>(data.size()));
        const float* src = data.data() + offset;
        const auto want = narrow_with(HalfImpl::kScalar, c, src, n);
        const auto got = narrow_with(impl, c, src, n);
        ASSERT_EQ(compare(to_string(c), impl, src, got, want), 0) << "n = " << n << ", offset = " << offset;
      }
    }
  }
}

// Random bit patterns, with NaNs (signalling and quiet), infinities, zeros, fp32 denormals and
// rounding ties planted densely.
std::vector<float> random_bit_patterns(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t specials[] = {0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7fc00000u, 0xffffffffu, 0x7f800000u,
                               0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x807fffffu,
                               0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u, 0x477ff000u, 0x33000000u,
                               0x7f7f8000u, 0x7f7fffffu, 0x3f801000u, 0x3f803000u, 0x38800000u, 0x387fffffu};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = rng();
    switch (rng() % 8) {
      case 0: u = specials[rng() % std::size(specials)]; break;
      case 1: u &= 0x807fffffu; break;                 // fp32 denormal or zero
      case 2: u = (u & 0xffff0000u) | 0x8000u; break;  // bf16 tie
      case 3: u = (u & 0xffffe000u) | 0x1000u; break;  // fp16 tie (in the normal range)
      default: break;
    }
    v[i] = float_of(u);
  }
  return v;
}

// Random values across the range where the format's rounding is interesting.
std::vector<float> random_normal_values(size_t n, uint32_t seed, const Format& f) {
  std::mt19937 rng(seed);
  const int lo = f.emin() - f.mant_bits - 2, hi = f.emax() + 1;
  std::uniform_int_distribution<int> exp(std::max(lo, -126), std::min(hi, 127));
  std::vector<float> v(n);
  for (auto& x : v) {
    const uint32_t u = rng();
    x = float_of((u & 0x807fffffu) | static_cast<uint32_t>(exp(rng) + 127) << 23);
  }
  return v;
}

TEST(HalfSimd, ReportsImplementations) {
  for (HalfConversion c : mt::detail::kAllHalfConversions) {
    const auto impls = mt::detail::supported_half_impls(c);
    ASSERT_FALSE(impls.empty());
    EXPECT_EQ(impls.front(), HalfImpl::kScalar);
    // Dispatch takes the most preferred usable implementation.
    EXPECT_EQ(mt::detail::selected_half_impl(c), impls.back()) << to_string(c);
    std::cout << "[ half     ] " << to_string(c) << ": supported {" << impl_list(c) << "}, selected "
              << to_string(mt::detail::selected_half_impl(c)) << "\n";
  }
  EXPECT_TRUE(mt::detail::cpu_supports(HalfImpl::kScalar));
  EXPECT_TRUE(mt::detail::implements(HalfImpl::kAvx512Bf16, HalfConversion::kFp32ToBf16) == MT_X86_TARGETS);
  EXPECT_FALSE(mt::detail::implements(HalfImpl::kF16C, HalfConversion::kFp32ToBf16));
  EXPECT_FALSE(mt::detail::implements(HalfImpl::kAvx512Bf16, HalfConversion::kFp16ToFp32));
}

TEST(HalfSimd, UsingAnUnusableImplementationThrows) {
  float x = 1.0f;
  bfloat16 y;
  EXPECT_THROW(mt::detail::convert_fp32_to_bf16_using(HalfImpl::kF16C, &x, &y, 1), mt::Error);
}

TEST(HalfSimd, NarrowRandomBitPatternsMatchScalar) {
  const auto data = random_bit_patterns(1000003 + 1, 1);
  check_narrow_matches_scalar(HalfConversion::kFp32ToFp16, data);
  check_narrow_matches_scalar(HalfConversion::kFp32ToBf16, data);
}

TEST(HalfSimd, NarrowRandomNormalValuesMatchScalar) {
  check_narrow_matches_scalar(HalfConversion::kFp32ToFp16, random_normal_values(1000003 + 1, 2, kFp16));
  check_narrow_matches_scalar(HalfConversion::kFp32ToBf16, random_normal_values(1000003 + 1, 3, kBf16));
}

// vcvtneps2bf16 reads fp32 denormals as zero; the kernels must not.
TEST(HalfSimd, NarrowEveryFp32DenormalMatchesScalar) {
  constexpr uint32_t kChunk = 1u << 20;
  std::vector<float> data(kChunk);
  for (HalfConversion c : {HalfConversion::kFp32ToFp16, HalfConversion::kFp32ToBf16}) {
    for (HalfImpl impl : simd_impls(c)) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        for (uint32_t start = 0; start < (1u << 23); start += kChunk) {
          for (uint32_t i = 0; i < kChunk; ++i) data[i] = float_of(sign | (start + i));
          const auto want = narrow_with(HalfImpl::kScalar, c, data.data(), kChunk);
          const auto got = narrow_with(impl, c, data.data(), kChunk);
          ASSERT_EQ(compare(to_string(c), impl, data.data(), got, want), 0);
        }
      }
    }
  }
}

TEST(HalfSimd, WidenEveryPatternMatchesScalar) {
  std::vector<uint16_t> all(1000003 + 1);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // odd: every pattern
  std::vector<uint16_t> patterns(65536);
  for (uint32_t i = 0; i < 65536; ++i) patterns[i] = static_cast<uint16_t>(i);
  for (HalfConversion c : {HalfConversion::kFp16ToFp32, HalfConversion::kBf16ToFp32}) {
    for (HalfImpl impl : simd_impls(c)) {
      const auto want = widen_with(HalfImpl::kScalar, c, patterns.data(), 65536);
      ASSERT_EQ(compare(to_string(c), impl, patterns.data(), widen_with(impl, c, patterns.data(), 65536), want), 0);
      for (int64_t n : kLengths) {
        for (int64_t offset : {0, 1}) {
          const uint16_t* src = all.data() + offset;
          ASSERT_EQ(compare(to_string(c), impl, src, widen_with(impl, c, src, n), widen_with(HalfImpl::kScalar, c, src, n)),
                    0)
              << "n = " << n << ", offset = " << offset;
        }
      }
    }
  }
}

#if defined(__x86_64__)
// Sets MXCSR for the scope and restores it.
class MxcsrScope {
 public:
  explicit MxcsrScope(unsigned set) : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | set); }
  ~MxcsrScope() { _mm_setcsr(saved_); }
  MxcsrScope(const MxcsrScope&) = delete;
  MxcsrScope& operator=(const MxcsrScope&) = delete;

 private:
  unsigned saved_;
};

// Kernels do not depend on the caller's FPU state: flush-to-zero, denormals-are-zero and
// round-toward-zero (which other libraries may leave set) change nothing.
TEST(HalfSimd, ResultsIgnoreMxcsr) {
  const auto narrow_in = random_bit_patterns(4099, 4);
  std::vector<uint16_t> widen_in(65536);
  for (uint32_t i = 0; i < 65536; ++i) widen_in[i] = static_cast<uint16_t>(i);
  const int64_t nn = static_cast<int64_t>(narrow_in.size());
  for (HalfConversion c : mt::detail::kAllHalfConversions) {
    const bool narrowing = c == HalfConversion::kFp32ToFp16 || c == HalfConversion::kFp32ToBf16;
    const auto want16 = narrowing ? narrow_with(HalfImpl::kScalar, c, narrow_in.data(), nn) : std::vector<uint16_t>{};
    const auto want32 = narrowing ? std::vector<uint32_t>{} : widen_with(HalfImpl::kScalar, c, widen_in.data(), 65536);
    for (HalfImpl impl : mt::detail::supported_half_impls(c)) {
      std::vector<uint16_t> got16;
      std::vector<uint32_t> got32;
      {
        MxcsrScope scope(0x8040u | 0x6000u);  // FTZ | DAZ | round toward zero
        if (narrowing) {
          got16 = narrow_with(impl, c, narrow_in.data(), nn);
        } else {
          got32 = widen_with(impl, c, widen_in.data(), 65536);
        }
      }
      if (narrowing) {
        EXPECT_EQ(compare(to_string(c), impl, narrow_in.data(), got16, want16), 0);
      } else {
        EXPECT_EQ(compare(to_string(c), impl, widen_in.data(), got32, want32), 0);
      }
    }
  }
}
#endif

TEST(HalfSimd, PublicConvertersMatchScalar) {
  const auto in32 = random_bit_patterns(4097, 5);
  const auto n = static_cast<int64_t>(in32.size());
  std::vector<float16> h(in32.size());
  std::vector<bfloat16> b(in32.size());
  mt::convert_fp32_to_fp16(in32.data(), h.data(), n);
  mt::convert_fp32_to_bf16(in32.data(), b.data(), n);
  std::vector<float> wh(in32.size()), wb(in32.size());
  mt::convert_fp16_to_fp32(h.data(), wh.data(), n);
  mt::convert_bf16_to_fp32(b.data(), wb.data(), n);
  for (size_t i = 0; i < in32.size(); ++i) {
    ASSERT_EQ(h[i].bits(), float16(in32[i]).bits()) << hex(bits_of(in32[i]));
    ASSERT_EQ(b[i].bits(), bfloat16(in32[i]).bits()) << hex(bits_of(in32[i]));
    ASSERT_EQ(bits_of(wh[i]), bits_of(static_cast<float>(h[i])));
    ASSERT_EQ(bits_of(wb[i]), bits_of(static_cast<float>(b[i])));
  }
  // Empty rows touch nothing; a negative length is a user error.
  mt::convert_fp32_to_fp16(nullptr, nullptr, 0);
  mt::convert_bf16_to_fp32(nullptr, nullptr, 0);
  EXPECT_THROW(mt::convert_fp32_to_bf16(in32.data(), b.data(), -1), mt::Error);
  EXPECT_THROW(mt::convert_fp16_to_fp32(h.data(), wh.data(), -1), mt::Error);
}

// The strided row converters write exactly the row converters' bits into each row and leave the
// gaps between rows alone; zero rows or zero columns touch nothing; negative sizes are user errors.
TEST(HalfSimd, RowConvertersMatchScalarAndKeepTheGaps) {
  // 37 rows of 21 elements (a tail at every vector width) read 40 apart and written 24 apart.
  constexpr int64_t kRows = 37, kN = 21, kSrcStride = 40, kDstStride = 24;
  const auto in32 = random_bit_patterns(kRows * kSrcStride, 6);
  std::vector<float16> h(kRows * kDstStride, float16::from_bits(0x7e01));  // a NaN payload as the gap marker
  std::vector<bfloat16> b(kRows * kDstStride, bfloat16::from_bits(0x7f81));
  mt::convert_fp32_to_fp16_rows(in32.data(), kSrcStride, h.data(), kDstStride, kRows, kN);
  mt::convert_fp32_to_bf16_rows(in32.data(), kSrcStride, b.data(), kDstStride, kRows, kN);
  std::vector<float> wh(kRows * kSrcStride, -1.5f), wb(kRows * kSrcStride, -1.5f);
  mt::convert_fp16_to_fp32_rows(h.data(), kDstStride, wh.data(), kSrcStride, kRows, kN);
  mt::convert_bf16_to_fp32_rows(b.data(), kDstStride, wb.data(), kSrcStride, kRows, kN);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kDstStride; ++i) {
      const float x = in32[r * kSrcStride + i];
      const size_t d = static_cast<size_t>(r * kDstStride + i), w = static_cast<size_t>(r * kSrcStride + i);
      if (i < kN) {
        ASSERT_EQ(h[d].bits(), float16(x).bits()) << "row " << r << " col " << i;
        ASSERT_EQ(b[d].bits(), bfloat16(x).bits()) << "row " << r << " col " << i;
        ASSERT_EQ(bits_of(wh[w]), bits_of(static_cast<float>(float16(x))));
        ASSERT_EQ(bits_of(wb[w]), bits_of(static_cast<float>(bfloat16(x))));
      } else {
        ASSERT_EQ(h[d].bits(), 0x7e01) << "gap written at row " << r << " col " << i;
        ASSERT_EQ(b[d].bits(), 0x7f81) << "gap written at row " << r << " col " << i;
        ASSERT_EQ(wh[w], -1.5f);
        ASSERT_EQ(wb[w], -1.5f);
      }
    }
  }
  // Stride 0 reads (or writes) one row again and again: the last row written wins.
  std::vector<float> one(kN);
  mt::convert_bf16_to_fp32_rows(b.data() + 5 * kDstStride, 0, one.data(), 0, 3, kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(bits_of(one[i]), bits_of(static_cast<float>(b[5 * kDstStride + i])));
  mt::convert_fp32_to_bf16_rows(nullptr, 7, nullptr, 7, 0, kN);
  mt::convert_fp16_to_fp32_rows(nullptr, 7, nullptr, 7, kRows, 0);
  EXPECT_THROW(mt::convert_fp32_to_bf16_rows(in32.data(), kSrcStride, b.data(), kDstStride, -1, kN), mt::Error);
  EXPECT_THROW(mt::convert_bf16_to_fp32_rows(b.data(), kDstStride, wb.data(), kSrcStride, kRows, -1), mt::Error);
  EXPECT_THROW(mt::convert_fp32_to_fp16_rows(in32.data(), -kSrcStride, h.data(), kDstStride, kRows, kN), mt::Error);
}

// All 2^32 fp32 patterns: the scalar converters against the reference and every SIMD
// implementation against the scalar one. Minutes of CPU; run by hand with
// --gtest_also_run_disabled_tests --gtest_filter='*Exhaustive*'.
TEST(HalfExhaustive, DISABLED_EveryFp32Pattern) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  constexpr uint64_t kChunk = 1u << 16;
  std::atomic<uint64_t> next{0};
  std::atomic<int> failures{0};
  auto worker = [&] {
    std::vector<float> in(kChunk);
    for (;;) {
      const uint64_t start = next.fetch_add(kChunk);
      if (start >= (1ull << 32) || failures.load() > 10) return;
      for (uint64_t i = 0; i < kChunk; ++i) in[i] = float_of(static_cast<uint32_t>(start + i));
      for (HalfConversion c : {HalfConversion::kFp32ToFp16, HalfConversion::kFp32ToBf16}) {
        const Format& f = format_of(c);
        const auto want = narrow_with(HalfImpl::kScalar, c, in.data(), kChunk);
        for (uint64_t i = 0; i < kChunk; ++i) {
          if (want[i] != ref_round(in[i], f)) {
            if (failures++ < 10) ADD_FAILURE() << f.name << " scalar vs reference at " << hex(bits_of(in[i]));
          }
        }
        for (HalfImpl impl : simd_impls(c)) {
          if (narrow_with(impl, c, in.data(), kChunk) != want && failures++ < 10) {
            ADD_FAILURE() << to_string(c) << " " << to_string(impl) << " differs in chunk " << hex(static_cast<uint32_t>(start));
          }
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
