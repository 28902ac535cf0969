// The CPU AdamW step on AVX-512 (adam.h): the whole update of 16 elements in registers, one load
// and one store per tensor and element, masked at the chunk's tail. The same operations in the same
// order as the portable path, each explicitly rounded (never contracted into an FMA): its bits.
#include "backends/cpu/kernels/adam.h"
#include "core/isa_target.h"

#if MT_X86_TARGETS
#include <immintrin.h>

#include <type_traits>

#include "backends/cpu/kernels/optim_blocks.h"
#include "core/half_convert_avx512.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags at
// every inlining site (GCC bug 105593, fixed in GCC 13): a warning about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mixtrain::kernels::adam {

using namespace optim_blocks;

namespace {

// The AVX-512 path: the whole update of 16 elements in registers, one load and one store per
// tensor, masked at the chunk's tail. Same operations, same order as adam_chunk.

using detail::x86::bf16_round16;
using detail::x86::bf16_widen16;

template <typename T>
MT_TARGET_AVX512 inline __m512 load16(const T* p, __mmask16 k) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_maskz_loadu_ps(k, p);
  else if constexpr (std::is_same_v<T, float16>)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
  else
    return bf16_widen16(_mm256_maskz_loadu_epi16(k, p));
}

template <typename T>
MT_TARGET_AVX512 inline void store16(T* p, __mmask16 k, __m512 x) {
  if constexpr (std::is_same_v<T, float>)
    _mm512_mask_storeu_ps(p, k, x);
  else if constexpr (std::is_same_v<T, float16>)
    _mm256_mask_storeu_epi16(p, k, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm256_mask_storeu_epi16(p, k, bf16_round16(x));
}

// Arithmetic with explicit round-to-nearest: GCC contracts a * b + c written with the plain
// intrinsics into an FMA, which the portable path (and PyTorch's kernels) do not do; the embedded-
// rounding forms are never contracted, and give the default rounding's bits.
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
MT_TARGET_AVX512 inline __m512 vadd(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, kRoundNearest); }
MT_TARGET_AVX512 inline __m512 vsub(__m512 a, __m512 b) { return _mm512_sub_round_ps(a, b, kRoundNearest); }
MT_TARGET_AVX512 inline __m512 vmul(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, kRoundNearest); }
MT_TARGET_AVX512 inline __m512 vdiv(__m512 a, __m512 b) { return _mm512_div_round_ps(a, b, kRoundNearest); }
MT_TARGET_AVX512 inline __m512 vsqrt(__m512 a) { return _mm512_sqrt_round_ps(a, kRoundNearest); }

template <typename T, typename M>
MT_TARGET_AVX512 void adam_chunk_avx512(const AdamTensors& t, const AdamScalars& c, int64_t b, int64_t e) {
  T* param = host_ptr<T>(t.param);
  const T* grad = host_ptr<T>(t.grad);
  float* master = t.master.defined() ? host_ptr<float>(t.master) : nullptr;
  uint16_t* low = low_half(t.master_low);
  M* m_all = host_ptr<M>(t.exp_avg);
  float* v_all = host_ptr<float>(t.exp_avg_sq);
  float* vmax_all = c.amsgrad ? host_ptr<float>(t.max_exp_avg_sq) : nullptr;
  const __m512 inv = _mm512_set1_ps(c.inv), decay = _mm512_set1_ps(c.decay), wd = _mm512_set1_ps(c.wd);
  const __m512 w = _mm512_set1_ps(c.w), one_minus_w = _mm512_set1_ps(c.one_minus_w);
  const __m512 b2 = _mm512_set1_ps(c.b2), one_minus_b2 = _mm512_set1_ps(c.one_minus_b2);
  const __m512 bc2_sqrt = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps);
  const __m512 neg_step_size = _mm512_set1_ps(c.neg_step_size);
  const bool scale = c.inv != 1.0f, decoupled = c.wd != 0.0f && c.decoupled, l2 = c.wd != 0.0f && !c.decoupled;
  for (int64_t i = b; i < e; i += 16) {
    const __mmask16 k = e - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (e - i)) - 1u);
    __m512 g = load16(grad + i, k);
    if (scale) g = vmul(g, inv);
    __m512 x;
    if (master != nullptr) {
      x = _mm512_maskz_loadu_ps(k, master + i);
    } else if (low != nullptr) {
      // unpack_master on 16 lanes: the widened bf16 parameter, its zero lower half filled from low.
      const __m512i hi = _mm512_castps_si512(bf16_widen16(_mm256_maskz_loadu_epi16(k, param + i)));
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, low + i));
      x = _mm512_castsi512_ps(_mm512_or_si512(hi, lo));
    } else {
      x = load16(param + i, k);
    }
    if (decoupled) x = vmul(x, decay);
    if (l2) g = vadd(g, vmul(wd, x));
    __m512 m = load16(m_all + i, k);
    m = c.lerp_low ? vadd(m, vmul(w, vsub(g, m))) : vsub(g, vmul(vsub(g, m), one_minus_w));
    if constexpr (std::is_same_v<M, float>) {
      _mm512_mask_storeu_ps(m_all + i, k, m);
    } else {  // rounded once; the update reads m as stored
      const __m256i m16 = bf16_round16(m);
      _mm256_mask_storeu_epi16(m_all + i, k, m16);
      m = bf16_widen16(m16);
    }
    __m512 v = _mm512_maskz_loadu_ps(k, v_all + i);
    v = vadd(vmul(v, b2), vmul(vmul(one_minus_b2, g), g));
    _mm512_mask_storeu_ps(v_all + i, k, v);
    __m512 vhat = v;
    if (vmax_all != nullptr) {
      const __m512 vmax = _mm512_maskz_loadu_ps(k, vmax_all + i);
      const __mmask16 take = _mm512_cmp_ps_mask(v, vmax, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      vhat = _mm512_mask_blend_ps(take, vmax, v);
      _mm512_mask_storeu_ps(vmax_all + i, k, vhat);
    }
    const __m512 denom = vadd(vdiv(vsqrt(vhat), bc2_sqrt), eps);
    x = vadd(x, vmul(neg_step_size, vdiv(m, denom)));
    if (master != nullptr) {
      _mm512_mask_storeu_ps(master + i, k, x);
      store16(param + i, k, x);
    } else if (low != nullptr) {
      // pack_master on 16 lanes.
      const __m512i u = _mm512_castps_si512(x);
      _mm256_mask_storeu_epi16(param + i, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
      _mm256_mask_storeu_epi16(low + i, k, _mm512_cvtepi32_epi16(u));  // vpmovdw keeps the low 16 bits
    } else {
      store16(param + i, k, x);
    }
  }
}

}  // namespace

template <typename T>
void step_avx512(const AdamTensors& t, const AdamScalars& c, int64_t b, int64_t e) {
  if (t.exp_avg.dtype() == kBFloat16)
    adam_chunk_avx512<T, bfloat16>(t, c, b, e);
  else
    adam_chunk_avx512<T, float>(t, c, b, e);
}

#define MT_ADAM_DEFINE_AVX512(T) \
  template void step_avx512<T>(const AdamTensors&, const AdamScalars&, int64_t, int64_t);
MT_ADAM_INSTANCES(MT_ADAM_DEFINE_AVX512)

}  // namespace mixtrain::kernels::adam

#endif  // MT_X86_TARGETS
