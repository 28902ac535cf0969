// The dtype table and the type promotion table (include/mixtrain/dtype.h).
#include <gtest/gtest.h>

#include <sstream>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {

constexpr mt::DType kAll[] = {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64,
                              mt::kInt32,   mt::kInt64,   mt::kUInt8,    mt::kBool};

TEST(DType, TableIsIndexedByDType) {
  ASSERT_EQ(std::size(kAll), static_cast<size_t>(mt::kNumDTypes));
  for (mt::DType t : kAll) EXPECT_EQ(mt::info(t).dtype, t) << mt::to_string(t);
}

TEST(DType, SizesNamesAndKinds) {
  struct Row {
    mt::DType t;
    size_t size;
    const char* name;
    const char* safetensors;
    bool floating;
  };
  const Row rows[] = {
      {mt::kFloat32, 4, "float32", "F32", true},    {mt::kFloat16, 2, "float16", "F16", true},
      {mt::kBFloat16, 2, "bfloat16", "BF16", true}, {mt::kFloat64, 8, "float64", "F64", true},
      {mt::kInt32, 4, "int32", "I32", false},       {mt::kInt64, 8, "int64", "I64", false},
      {mt::kUInt8, 1, "uint8", "U8", false},        {mt::kBool, 1, "bool", "BOOL", false},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(mt::element_size(r.t), r.size);
    EXPECT_EQ(mt::to_string(r.t), r.name);
    EXPECT_EQ(mt::info(r.t).safetensors, r.safetensors);
    EXPECT_EQ(mt::is_floating(r.t), r.floating);
    std::ostringstream os;
    os << r.t;
    EXPECT_EQ(os.str(), r.name);
  }
  EXPECT_TRUE(mt::is_reduced_float(mt::kFloat16));
  EXPECT_TRUE(mt::is_reduced_float(mt::kBFloat16));
  EXPECT_FALSE(mt::is_reduced_float(mt::kFloat32));
  EXPECT_FALSE(mt::is_reduced_float(mt::kInt32));
}

TEST(DType, FloatFormatBitsMatchTheTypes) {
  // sign + exponent + mantissa fill the element exactly.
  for (mt::DType t : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64}) {
    const auto& i = mt::info(t);
    EXPECT_EQ(1 + i.exponent_bits + i.mantissa_bits, 8 * i.size) << i.name;
  }
  EXPECT_EQ(mt::info(mt::kFloat16).mantissa_bits + 1, std::numeric_limits<mt::float16>::digits);
  EXPECT_EQ(mt::info(mt::kBFloat16).mantissa_bits + 1, std::numeric_limits<mt::bfloat16>::digits);
}

TEST(DType, DTypeOfCppTypes) {
  static_assert(mt::dtype_v<float> == mt::kFloat32);
  static_assert(mt::dtype_v<mt::float16> == mt::kFloat16);
  static_assert(mt::dtype_v<mt::bfloat16> == mt::kBFloat16);
  static_assert(mt::dtype_v<double> == mt::kFloat64);
  static_assert(mt::dtype_v<int32_t> == mt::kInt32);
  static_assert(mt::dtype_v<int64_t> == mt::kInt64);
  static_assert(mt::dtype_v<uint8_t> == mt::kUInt8);
  static_assert(mt::dtype_v<bool> == mt::kBool);
  static_assert(std::is_same_v<mt::opmath_t<mt::bfloat16>, float>);
  static_assert(std::is_same_v<mt::opmath_t<mt::float16>, float>);
  static_assert(std::is_same_v<mt::opmath_t<double>, double>);
  EXPECT_EQ(mt::element_size(mt::dtype_v<mt::bfloat16>), sizeof(mt::bfloat16));
  EXPECT_EQ(mt::element_size(mt::dtype_v<int64_t>), sizeof(int64_t));
}

TEST(DTypePromotion, IsSymmetricAndIdempotent) {
  for (mt::DType a : kAll) {
    EXPECT_EQ(mt::promote_types(a, a), a) << a;
    for (mt::DType b : kAll) EXPECT_EQ(mt::promote_types(a, b), mt::promote_types(b, a)) << a << " " << b;
  }
}

TEST(DTypePromotion, FloatRules) {
  EXPECT_EQ(mt::promote_types(mt::kBFloat16, mt::kFloat16), mt::kFloat32);  // neither holds the other
  EXPECT_EQ(mt::promote_types(mt::kFloat16, mt::kFloat32), mt::kFloat32);
  EXPECT_EQ(mt::promote_types(mt::kBFloat16, mt::kFloat32), mt::kFloat32);
  EXPECT_EQ(mt::promote_types(mt::kFloat32, mt::kFloat64), mt::kFloat64);
  EXPECT_EQ(mt::promote_types(mt::kBFloat16, mt::kFloat64), mt::kFloat64);
}

TEST(DTypePromotion, FloatingWinsOverIntegerAndBool) {
  for (mt::DType f : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64})
    for (mt::DType i : {mt::kInt32, mt::kInt64, mt::kUInt8, mt::kBool})
      EXPECT_EQ(mt::promote_types(f, i), f) << f << " with " << i;
}

TEST(DTypePromotion, IntegerAndBoolRules) {
  EXPECT_EQ(mt::promote_types(mt::kInt32, mt::kInt64), mt::kInt64);
  EXPECT_EQ(mt::promote_types(mt::kUInt8, mt::kInt32), mt::kInt32);
  EXPECT_EQ(mt::promote_types(mt::kUInt8, mt::kInt64), mt::kInt64);
  EXPECT_EQ(mt::promote_types(mt::kBool, mt::kInt32), mt::kInt32);
  EXPECT_EQ(mt::promote_types(mt::kBool, mt::kInt64), mt::kInt64);
  EXPECT_EQ(mt::promote_types(mt::kBool, mt::kUInt8), mt::kUInt8);
  EXPECT_EQ(mt::promote_types(mt::kBool, mt::kBool), mt::kBool);
}

TEST(DTypePromotion, WithinAKindTheResultIsAtLeastAsWide) {
  // Among floats, or among integers and bool, promotion never narrows. (Across kinds the float
  // wins whatever its width: int64 with float16 gives float16, as in PyTorch.)
  for (mt::DType a : kAll)
    for (mt::DType b : kAll) {
      if (mt::is_floating(a) != mt::is_floating(b)) continue;
      mt::DType r = mt::promote_types(a, b);
      EXPECT_GE(mt::element_size(r), std::max(mt::element_size(a), mt::element_size(b))) << a << " " << b;
    }
}

}  // namespace
