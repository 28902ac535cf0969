// src/core/half_convert_x86.cpp: the x86 SIMD kernels of the bulk 16-bit converters.
//
// Each function carries its own target attribute, so this file needs no -m flags and the library
// still runs on any x86-64: half.cpp calls a kernel only after cpuid has shown the ISA is there.
// Every kernel gives the same bits as the scalar functions of mixtrain/half.h, NaN and subnormals
// included (Note [Half conversions] in docs/notes/conversions.md).
#include "core/isa_target.h"
#include "core/half_convert.h"
#include "core/half_convert_avx2.h"
#include "core/half_convert_avx512.h"

#if MT_X86_TARGETS

#include <immintrin.h>

#include <cstring>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags at
// every inlining site (GCC bug 105593, fixed in GCC 13). The warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif


namespace mixtrain::detail::x86 {

namespace {

// Masks the low `r` lanes of a 16-lane vector (0 < r < 16).
inline __mmask16 tail_mask(int64_t r) { return static_cast<__mmask16>((1u << r) - 1u); }

// ---- AVX + F16C: fp32 <-> fp16, 8 lanes. Tails go through a zero-padded buffer so that every
// element takes the same instruction.

MT_TARGET_F16C inline __m128i fp16_narrow8(const float* src) {
  return _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
}

MT_TARGET_F16C inline __m256 fp16_widen8(const float16* src) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}

// ---- AVX2: fp32 <-> bf16 with integer ops, 8 lanes.

// bf16_round8 and the 8-lane widening: core/half_convert_avx2.h.

// 16 floats -> 16 bf16 (lanes hold values <= 0xffff, so the unsigned-saturating pack is exact).
MT_TARGET_AVX2_NO_FMA inline __m256i bf16_narrow16_avx2(const float* src) {
  const __m256i packed = _mm256_packus_epi32(bf16_round8(_mm256_loadu_ps(src)), bf16_round8(_mm256_loadu_ps(src + 8)));
  return _mm256_permute4x64_epi64(packed, 0xd8);  // undo the per-128-bit-lane interleave of packus
}

MT_TARGET_AVX2_NO_FMA inline __m256 bf16_load8(const bfloat16* src) {
  return bf16_widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}

// ---- AVX-512 F/BW/VL: 16 lanes, tails with masked loads and stores.

// bf16_round16 and bf16_widen16: core/half_convert_avx512.h.

// ---- AVX-512 BF16.

// vcvtneps2bf16 rounds to nearest even and quiets NaN exactly as the scalar code does, but it reads
// fp32 denormal inputs as zero whatever MXCSR says (0x007fffff gives 0x0000, not 0x0080). Lanes
// holding an fp32 denormal are redone with the integer rounding.
MT_TARGET_AVX512BF16 inline __m256i bf16_narrow16_bf16(__m512 x) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 denormal = static_cast<__mmask16>(_mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)) &
                                                    _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)));
  if (denormal != 0) [[unlikely]]
    r = _mm256_mask_blend_epi16(denormal, r, bf16_round16(x));
  return r;
}

}  // namespace

MT_TARGET_F16C void fp32_to_fp16_f16c(const float* src, float16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = fp16_narrow8(src + i);
    const __m128i b = fp16_narrow8(src + i + 8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), b);
  }
  for (; i < n; i += 8) {
    const int64_t r = n - i < 8 ? n - i : 8;
    alignas(32) float in[8] = {};
    alignas(16) float16 out[8];
    std::memcpy(in, src + i, static_cast<size_t>(r) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out), fp16_narrow8(in));
    std::memcpy(dst + i, out, static_cast<size_t>(r) * sizeof(float16));
  }
}

MT_TARGET_F16C void fp16_to_fp32_f16c(const float16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = fp16_widen8(src + i);
    const __m256 b = fp16_widen8(src + i + 8);
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
  }
  for (; i < n; i += 8) {
    const int64_t r = n - i < 8 ? n - i : 8;
    alignas(16) float16 in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, static_cast<size_t>(r) * sizeof(float16));
    _mm256_store_ps(out, fp16_widen8(in));
    std::memcpy(dst + i, out, static_cast<size_t>(r) * sizeof(float));
  }
}

MT_TARGET_AVX2_NO_FMA void fp32_to_bf16_avx2(const float* src, bfloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_narrow16_avx2(src + i));
  if (i < n) {
    const int64_t r = n - i;
    alignas(32) float in[16] = {};
    alignas(32) bfloat16 out[16];
    std::memcpy(in, src + i, static_cast<size_t>(r) * sizeof(float));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), bf16_narrow16_avx2(in));
    std::memcpy(dst + i, out, static_cast<size_t>(r) * sizeof(bfloat16));
  }
}

MT_TARGET_AVX2_NO_FMA void bf16_to_fp32_avx2(const bfloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = bf16_load8(src + i);
    const __m256 b = bf16_load8(src + i + 8);
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
  }
  for (; i < n; i += 8) {
    const int64_t r = n - i < 8 ? n - i : 8;
    alignas(16) bfloat16 in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, static_cast<size_t>(r) * sizeof(bfloat16));
    _mm256_store_ps(out, bf16_load8(in));
    std::memcpy(dst + i, out, static_cast<size_t>(r) * sizeof(float));
  }
}

MT_TARGET_AVX512 void fp32_to_fp16_avx512(const float* src, float16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

MT_TARGET_AVX512 void fp16_to_fp32_avx512(const float16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

MT_TARGET_AVX512 void fp32_to_bf16_avx512(const float* src, bfloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_round16(_mm512_loadu_ps(src + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, bf16_round16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

MT_TARGET_AVX512 void bf16_to_fp32_avx512(const bfloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, bf16_widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, bf16_widen16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

MT_TARGET_AVX512BF16 void fp32_to_bf16_avx512bf16(const float* src, bfloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_narrow16_bf16(_mm512_loadu_ps(src + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, bf16_narrow16_bf16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

}  // namespace mixtrain::detail::x86

#endif  // MT_X86_TARGETS
