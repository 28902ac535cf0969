// src/core/half_convert_avx512.h (internal): the 16-lane fp32 <-> bf16 steps shared by the bulk
// converters (half_convert_x86.cpp) and the kernels that convert inside their own loops (the
// AVX-512 Adam kernel). Same bits as the scalar functions of mixtrain/half.h, NaN included.
//
// The functions carry their own target attribute; call them only from code that runs when
// cpu::isa() >= kAvx512 (mixtrain/cpu.h; a caller with a wider target list may inline them).
#pragma once

#include "core/isa_target.h"

#if MT_X86_TARGETS

#include <immintrin.h>

namespace mixtrain::detail::x86 {

// The AVX-512 subset these steps and the bulk converters of half_convert_x86.cpp are built for.

// The scalar fp32_to_bf16_bits on each of 16 lanes (round to nearest even, NaN -> quiet NaN with the
// top payload bits), the bf16 value kept as fp32: bf16_widen16(bf16_round16(x)) without the trip
// through 16 bits.
MT_TARGET_AVX512 inline __m512 bf16_round_through16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), high);
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, is_nan, _mm512_and_si512(u, high), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(r);
}

// The scalar fp32_to_bf16_bits on each of 16 lanes, packed to 16 bits.
MT_TARGET_AVX512 inline __m256i bf16_round16(__m512 x) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(bf16_round_through16(x)), 16));
}

// 16 bf16 values widened exactly to fp32.
MT_TARGET_AVX512 inline __m512 bf16_widen16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace mixtrain::detail::x86

#endif
