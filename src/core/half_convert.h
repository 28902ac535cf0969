// src/core/half_convert.h (internal): the implementations behind the bulk 16-bit converters of
// mixtrain/half.h, and the hooks that let tests run every implementation this CPU supports.
//
// The public converters pick one implementation per conversion at cpu::isa(), the CPU's level under
// the ISA cap of mixtrain/cpu.h (Note [Half conversions] in docs/notes/conversions.md). Every
// implementation is bit-identical to the scalar functions in mixtrain/half.h.
#pragma once

#include "core/isa_target.h"
#include <string_view>
#include <cstdint>
#include <vector>

#include "mixtrain/half.h"

// The x86 SIMD kernels use per-function target attributes (core/isa_target.h): GCC or Clang on x86-64.

namespace mixtrain::detail {

// Ordered from least to most preferred; dispatch takes the last one that the CPU supports and that
// implements the conversion.
enum class HalfImpl : uint8_t {
  kScalar,      // the constexpr functions of half.h, one element at a time: all four conversions
  kF16C,        // AVX + F16C, 8 lanes: fp32 <-> fp16
  kAvx2,        // AVX2 integer ops, 8 lanes: fp32 <-> bf16
  kAvx512,      // AVX-512 F/BW/VL, 16 lanes, masked tails: all four conversions
  kAvx512Bf16,  // AVX-512 BF16 (vcvtneps2bf16), 16 lanes: fp32 -> bf16
};
inline constexpr HalfImpl kAllHalfImpls[] = {HalfImpl::kScalar, HalfImpl::kF16C, HalfImpl::kAvx2, HalfImpl::kAvx512,
                                             HalfImpl::kAvx512Bf16};

enum class HalfConversion : uint8_t { kFp32ToFp16, kFp16ToFp32, kFp32ToBf16, kBf16ToFp32 };
inline constexpr HalfConversion kAllHalfConversions[] = {HalfConversion::kFp32ToFp16, HalfConversion::kFp16ToFp32,
                                                         HalfConversion::kFp32ToBf16, HalfConversion::kBf16ToFp32};

std::string_view to_string(HalfImpl impl);
std::string_view to_string(HalfConversion conv);

// True when `impl` was compiled in and may run at cpu::isa() (the CPU's level under the cap).
bool cpu_supports(HalfImpl impl);
// True when `impl` has a kernel for `conv`, whatever the CPU.
bool implements(HalfImpl impl, HalfConversion conv);
// The implementations usable for `conv` on this machine, kScalar first.
std::vector<HalfImpl> supported_half_impls(HalfConversion conv);
// The implementation the public converters use for `conv` at the current cpu::isa().
HalfImpl selected_half_impl(HalfConversion conv);

// Run one specific implementation. Throws mt::Error (internal) when it is not usable for the
// conversion on this machine.
void convert_fp32_to_fp16_using(HalfImpl impl, const float* src, float16* dst, int64_t n);
void convert_fp16_to_fp32_using(HalfImpl impl, const float16* src, float* dst, int64_t n);
void convert_fp32_to_bf16_using(HalfImpl impl, const float* src, bfloat16* dst, int64_t n);
void convert_bf16_to_fp32_using(HalfImpl impl, const bfloat16* src, float* dst, int64_t n);

#if MT_X86_TARGETS
// Kernels in half_convert_x86.cpp. Call one only when cpu_supports() says its ISA is there.
namespace x86 {
void fp32_to_fp16_f16c(const float* src, float16* dst, int64_t n);
void fp16_to_fp32_f16c(const float16* src, float* dst, int64_t n);
void fp32_to_bf16_avx2(const float* src, bfloat16* dst, int64_t n);
void bf16_to_fp32_avx2(const bfloat16* src, float* dst, int64_t n);
void fp32_to_fp16_avx512(const float* src, float16* dst, int64_t n);
void fp16_to_fp32_avx512(const float16* src, float* dst, int64_t n);
void fp32_to_bf16_avx512(const float* src, bfloat16* dst, int64_t n);
void bf16_to_fp32_avx512(const bfloat16* src, float* dst, int64_t n);
void fp32_to_bf16_avx512bf16(const float* src, bfloat16* dst, int64_t n);
}  // namespace x86
#endif

}  // namespace mixtrain::detail
