// Float -> integer conversion (kernels/float_to_int.h): toward zero, saturating at the integer
// type's range, NaN -> 0, on every device, through to(), item() and fill_(). Checked against an
// independent rule in long double: every 16-bit pattern into every integer type, and fp32 / fp64
// values at and around each type's bounds. Also the conversions that need no rule: integer
// narrowing wraps, "!= 0" for bool.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"

namespace mt = mixtrain;

namespace {

// The documented rule, written without the library's helper: trunc in long double, then clamp.
template <typename I>
I expected_int(long double x) {
  if (std::isnan(x)) return 0;
  const long double t = std::trunc(x);
  if (t <= static_cast<long double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<long double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

// Values at, just inside and just outside each integer type's bounds, and the special ones.
std::vector<double> edge_values() {
  std::vector<double> v = {0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1.0, -1.0, 1.5, -1.5, 254.5, 255.0, 255.9, 256.0,
                           300.5, -523.7, 65504.0, 3.4e38, -3.4e38, 1e300, -1e300,
                           std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::denorm_min()};
  for (double bound : {2147483647.0, -2147483648.0, 9223372036854775807.0, -9223372036854775808.0}) {
    v.push_back(bound);
    v.push_back(std::nextafter(bound, 0.0));
    v.push_back(std::nextafter(bound, bound > 0 ? 1e300 : -1e300));
    v.push_back(static_cast<double>(std::nextafter(static_cast<float>(bound), 0.0f)));
    v.push_back(static_cast<double>(std::nextafter(static_cast<float>(bound), bound > 0 ? 1e30f : -1e30f)));
  }
  return v;
}

template <typename I>
void expect_conversions(const mt::Tensor& src, const std::vector<long double>& exact) {
  const mt::DType to = mt::dtype_of<I>::value;
  const std::vector<I> got = src.to(to).template to_vector<I>();
  ASSERT_EQ(got.size(), exact.size());
  int shown = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const I want = expected_int<I>(exact[i]);
    if (got[i] != want && shown++ < 8)
      ADD_FAILURE() << mt::to_string(src.dtype()) << " " << static_cast<double>(exact[i]) << " -> " << mt::to_string(to) << ": got "
                    << +got[i] << ", want " << +want;
  }
  EXPECT_EQ(shown, 0) << "mismatches in " << mt::to_string(src.dtype()) << " -> " << mt::to_string(to);
}

template <typename F>
void check_source(mt::DType dtype, const std::vector<F>& host_values) {
  SCOPED_TRACE(mt::to_string(dtype));
  const mt::Device dev = mt::testing::test_device();
  const mt::Tensor src = mt::from_vector(host_values, {static_cast<int64_t>(host_values.size())}, {.dtype = mt::dtype_v<F>, .device = dev});
  std::vector<long double> exact;
  for (const F& v : host_values) {
    if constexpr (std::is_same_v<F, double>) exact.push_back(static_cast<long double>(v));
    else exact.push_back(static_cast<long double>(static_cast<float>(v)));  // 16-bit and fp32: exact in float
  }
  expect_conversions<int32_t>(src, exact);
  expect_conversions<int64_t>(src, exact);
  expect_conversions<uint8_t>(src, exact);
}

TEST(FloatToInt, EverySixteenBitPatternIntoEveryIntegerType) {
  std::vector<mt::float16> h;
  std::vector<mt::bfloat16> b;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    h.push_back(mt::float16::from_bits(static_cast<uint16_t>(bits)));
    b.push_back(mt::bfloat16::from_bits(static_cast<uint16_t>(bits)));
  }
  check_source(mt::kFloat16, h);
  check_source(mt::kBFloat16, b);
}

TEST(FloatToInt, Fp32AndFp64AtTheBoundsSaturateAndNanIsZero) {
  std::vector<double> d = edge_values();
  std::vector<float> f;
  for (double x : d) f.push_back(static_cast<float>(x));
  check_source(mt::kFloat64, d);
  check_source(mt::kFloat32, f);
  // The cases that disagreed between the devices before the rule.
  const mt::Device dev = mt::testing::test_device();
  EXPECT_EQ(mt::from_vector(std::vector<float>{3.4e38f}, {1}, {.dtype = mt::kFloat32, .device = dev}).to(mt::kInt32).item<int32_t>(),
            std::numeric_limits<int32_t>::max());
  EXPECT_EQ(mt::from_vector(std::vector<float>{-523.7f}, {1}, {.dtype = mt::kFloat32, .device = dev}).to(mt::kUInt8).item<uint8_t>(), 0);
}

TEST(FloatToInt, ItemAndFillFollowTheSameRule) {
  const mt::Device dev = mt::testing::test_device();
  const mt::Tensor big = mt::full({}, 1e20, {.dtype = mt::kFloat32, .device = dev});
  EXPECT_EQ(big.item<int32_t>(), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(big.item<int64_t>(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(mt::full({}, std::nan(""), {.dtype = mt::kFloat64, .device = dev}).item<int64_t>(), 0);
  mt::Tensor ints = mt::zeros({3}, {.dtype = mt::kUInt8, .device = dev});
  ints.fill_(-7.9);
  EXPECT_EQ(ints.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0, 0}));
  ints.fill_(1e9);
  EXPECT_EQ(ints.to_vector<uint8_t>(), (std::vector<uint8_t>{255, 255, 255}));
  mt::Tensor i32 = mt::zeros({2}, {.dtype = mt::kInt32, .device = dev});
  i32.fill_(-2.9);
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{-2, -2}));
}

TEST(FloatToInt, IntegerNarrowingWrapsAndBoolIsNonZero) {
  const mt::Device dev = mt::testing::test_device();
  const mt::Tensor wide =
      mt::from_vector(std::vector<int64_t>{300, -1, (int64_t{1} << 40) + 5, -129}, {4}, {.dtype = mt::kInt64, .device = dev});
  EXPECT_EQ(wide.to(mt::kUInt8).to_vector<uint8_t>(), (std::vector<uint8_t>{44, 255, 5, 127}));
  EXPECT_EQ(wide.to(mt::kInt32).to_vector<int32_t>(), (std::vector<int32_t>{300, -1, 5, -129}));
  const mt::Tensor f = mt::from_vector(
      std::vector<float>{0.0f, -0.0f, 1e-45f, std::numeric_limits<float>::quiet_NaN(), -2.0f}, {5},
      {.dtype = mt::kFloat32, .device = dev});
  EXPECT_EQ(f.to(mt::kBool).to_vector<bool>(), (std::vector<bool>{false, false, true, true, true}));
}

}  // namespace
