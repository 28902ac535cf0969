// mixtrain/dtype.h: the dtype table, the single source of truth for element types, and the type
// promotion table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <iterator>
#include <string_view>

#include "mixtrain/half.h"

namespace mixtrain {

// Order matters: it indexes kDTypeInfo and kPromotionTable below.
enum class DType : uint8_t { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kBool };
inline constexpr int kNumDTypes = 8;

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kUInt8 = DType::kUInt8;
inline constexpr DType kBool = DType::kBool;

struct DTypeInfo {
  DType dtype;
  std::string_view name;         // "float32", as PyTorch spells it
  std::string_view safetensors;  // "F32", the safetensors header spelling
  uint8_t size;                  // bytes per element
  bool is_floating;
  uint8_t mantissa_bits;  // explicit significand bits (0 for integers)
  uint8_t exponent_bits;
};

inline constexpr DTypeInfo kDTypeInfo[] = {
    {DType::kFloat32, "float32", "F32", 4, true, 23, 8},
    {DType::kFloat16, "float16", "F16", 2, true, 10, 5},
    {DType::kBFloat16, "bfloat16", "BF16", 2, true, 7, 8},
    {DType::kFloat64, "float64", "F64", 8, true, 52, 11},
    {DType::kInt32, "int32", "I32", 4, false, 0, 0},
    {DType::kInt64, "int64", "I64", 8, false, 0, 0},
    {DType::kUInt8, "uint8", "U8", 1, false, 0, 0},
    {DType::kBool, "bool", "BOOL", 1, false, 0, 0},
};
static_assert(std::size(kDTypeInfo) == kNumDTypes);

constexpr const DTypeInfo& info(DType t) { return kDTypeInfo[static_cast<int>(t)]; }
constexpr size_t element_size(DType t) { return info(t).size; }
constexpr bool is_floating(DType t) { return info(t).is_floating; }
constexpr bool is_reduced_float(DType t) { return t == kFloat16 || t == kBFloat16; }
constexpr std::string_view to_string(DType t) { return info(t).name; }
std::ostream& operator<<(std::ostream& os, DType t);

// Result dtype of a binary op on two tensors (PyTorch's rules for tensors of equal rank category):
// floating wins over integer, the wider float wins, and float16 with bfloat16 gives float32 because
// neither holds the other.
//         f32  f16  bf16 f64  i32  i64  u8   bool
inline constexpr DType kPromotionTable[kNumDTypes][kNumDTypes] = {
    /* f32  */ {kFloat32, kFloat32, kFloat32, kFloat64, kFloat32, kFloat32, kFloat32, kFloat32},
    /* f16  */ {kFloat32, kFloat16, kFloat32, kFloat64, kFloat16, kFloat16, kFloat16, kFloat16},
    /* bf16 */ {kFloat32, kFloat32, kBFloat16, kFloat64, kBFloat16, kBFloat16, kBFloat16, kBFloat16},
    /* f64  */ {kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64},
    /* i32  */ {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kInt32, kInt32},
    /* i64  */ {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt64, kInt64, kInt64},
    /* u8   */ {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kUInt8},
    /* bool */ {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kBool},
};

constexpr DType promote_types(DType a, DType b) { return kPromotionTable[static_cast<int>(a)][static_cast<int>(b)]; }

// C++ type <-> DType.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = kFloat32; };
template <> struct dtype_of<float16> { static constexpr DType value = kFloat16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = kBFloat16; };
template <> struct dtype_of<double> { static constexpr DType value = kFloat64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kInt32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kInt64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct dtype_of<bool> { static constexpr DType value = kBool; };
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The type kernels compute and accumulate in: fp64 for fp64, fp32 for every other float.
template <typename T>
struct opmath {
  using type = float;
};
template <>
struct opmath<double> {
  using type = double;
};
template <typename T>
using opmath_t = typename opmath<T>::type;

// Exact widening / rounding store between a storage type and its opmath type.
template <typename T>
constexpr opmath_t<T> load(T v) {
  return static_cast<opmath_t<T>>(v);
}
template <typename T>
constexpr T store(opmath_t<T> v) {
  return static_cast<T>(v);
}

}  // namespace mixtrain
