// src/core/half_convert_avx2.h (internal): the 8-lane fp32 <-> bf16 steps shared by the bulk
// converters (half_convert_x86.cpp) and the kernels that convert inside their own loops (the AVX2
// Adam kernel). Same bits as the scalar functions of mixtrain/half.h, NaN included.
//
// The functions carry their own target attribute; call them only from code that runs when
// cpu::isa() >= kAvx2 (mixtrain/cpu.h; a caller with a wider target list may inline them).
#pragma once

#include "core/isa_target.h"

#if MT_X86_TARGETS

#include <immintrin.h>

namespace mixtrain::detail::x86 {


// The scalar fp32_to_bf16_bits on each of 8 lanes (round to nearest even, NaN -> quiet NaN with the
// top payload bits), the bf16 value kept as fp32: bf16_widen8 of bf16_round8(x) without the trip
// through 16 bits.
MT_TARGET_AVX2_NO_FMA inline __m256 bf16_round_through8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), high);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // abs >= 0: signed is fine
  const __m256i quiet_nan = _mm256_or_si256(_mm256_and_si256(u, high), _mm256_set1_epi32(0x00400000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet_nan, is_nan));
}

// The bf16 bits of 8 floats, one per 32-bit lane: the scalar fp32_to_bf16_bits on each lane.
MT_TARGET_AVX2_NO_FMA inline __m256i bf16_round8(__m256 x) {
  return _mm256_srli_epi32(_mm256_castps_si256(bf16_round_through8(x)), 16);
}

// The low 16 bits of each of 8 32-bit lanes holding values <= 0xffff, packed into 8 uint16 (the
// unsigned-saturating pack is exact for such values).
MT_TARGET_AVX2_NO_FMA inline __m128i pack8_epi32_to_epi16(__m256i lanes) {
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
}

// 8 bf16 values (raw bits) widened exactly to fp32.
MT_TARGET_AVX2_NO_FMA inline __m256 bf16_widen8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

}  // namespace mixtrain::detail::x86

#endif
