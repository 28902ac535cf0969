// The CPU AdamW step on AVX2 (adam.h): 8 lanes, every layout (bf16 moments, stochastic rounding,
// Kahan compensation). The same operations in the same order as the portable path, which takes
// the tail of fewer than 8 elements: its bits.
#include "backends/cpu/kernels/adam.h"
#include "core/isa_target.h"

#if MT_X86_TARGETS
#include <immintrin.h>

#include <type_traits>

#include "backends/cpu/kernels/optim_blocks.h"
#include "core/half_convert_avx2.h"

namespace mixtrain::kernels::adam {

using namespace optim_blocks;

namespace {

// The AVX2 path: 8 lanes, same operations in the same order as adam_chunk. Its target has no FMA
// (MT_TARGET_AVX2_NO_FMA), so the compiler cannot contract a * b + c (the portable path and PyTorch's kernels do not).
// The tail of fewer than 8 elements goes to the portable path, which gives the same bits.

using detail::x86::bf16_round8;
using detail::x86::bf16_widen8;
using detail::x86::pack8_epi32_to_epi16;

template <typename T>
MT_TARGET_AVX2_NO_FMA inline __m256 load8(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return _mm256_loadu_ps(p);
  else if constexpr (std::is_same_v<T, float16>)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else
    return bf16_widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

MT_TARGET_AVX2_NO_FMA inline void store8_bits(void* p, __m128i bits) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
}

template <typename T>
MT_TARGET_AVX2_NO_FMA inline void store8(T* p, __m256 x) {
  if constexpr (std::is_same_v<T, float>)
    _mm256_storeu_ps(p, x);
  else if constexpr (std::is_same_v<T, float16>)
    store8_bits(p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    store8_bits(p, pack8_epi32_to_epi16(bf16_round8(x)));
}

// bf16_bits_stochastic (kernels/optim.h) on 8 lanes: the random 16 bits in the low half of each lane
// of r16; the result's low half is the bf16 pattern.
MT_TARGET_AVX2_NO_FMA inline __m256i bf16_stochastic8(__m256 x, __m256i r16) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, r16), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// bf16 bits in the low half of each lane -> fp32.
MT_TARGET_AVX2_NO_FMA inline __m256 bf16_bits_to_ps(__m256i bits16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(bits16, 16));
}

// Every layout of adam_chunk, 8 lanes in registers; M and V are the storage types of the moments.
// bf16 parameters without a master take their update stochastically rounded or Kahan-compensated
// as in adam_chunk, with the same random bits (rounding_bits, 32 elements at a time).
template <typename T, typename M, typename V>
MT_TARGET_AVX2_NO_FMA void adam_chunk_avx2(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b,
                                          int64_t e) {
  T* param = host_ptr<T>(t.param);
  const T* grad = host_ptr<T>(t.grad);
  float* master = t.master.defined() ? host_ptr<float>(t.master) : nullptr;
  uint16_t* low = low_half(t.master_low);
  M* m_all = host_ptr<M>(t.exp_avg);
  V* v_all = host_ptr<V>(t.exp_avg_sq);
  bfloat16* comp_all = nullptr;
  bool sr_param = false;
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (master == nullptr && low == nullptr) {
      comp_all = t.kahan_comp.defined() ? host_ptr<bfloat16>(t.kahan_comp) : nullptr;
      sr_param = comp_all == nullptr && h.stochastic_rounding;
    }
  }
  const bool random = sr_param || std::is_same_v<V, bfloat16>;
  const uint64_t key = random ? rounding_key(h.rounding_seed, t.step) : 0;
  alignas(32) uint32_t bits[32] = {};
  float* vmax_all = c.amsgrad ? host_ptr<float>(t.max_exp_avg_sq) : nullptr;
  const __m256 inv = _mm256_set1_ps(c.inv), decay = _mm256_set1_ps(c.decay), wd = _mm256_set1_ps(c.wd);
  const __m256 w = _mm256_set1_ps(c.w), one_minus_w = _mm256_set1_ps(c.one_minus_w);
  const __m256 b2 = _mm256_set1_ps(c.b2), one_minus_b2 = _mm256_set1_ps(c.one_minus_b2);
  const __m256 bc2_sqrt = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps);
  const __m256 neg_step_size = _mm256_set1_ps(c.neg_step_size);
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const bool scale = c.inv != 1.0f, decoupled = c.wd != 0.0f && c.decoupled, l2 = c.wd != 0.0f && !c.decoupled;
  int64_t i0 = b;
  for (; i0 + 32 <= e; i0 += 32) {
    if (random) rounding_bits(key, t.stream, t.first_element + i0, 32, bits, /*avx2=*/true);
    for (int k = 0; k < 32; k += 8) {
      const int64_t i = i0 + k;
      const __m256i r = _mm256_load_si256(reinterpret_cast<const __m256i*>(bits + k));
      __m256 g = load8(grad + i);
      if (scale) g = _mm256_mul_ps(g, inv);
      __m256 x;
      if (master != nullptr) {
        x = _mm256_loadu_ps(master + i);
      } else if (low != nullptr) {  // unpack_master on 8 lanes
        const __m256i hi = _mm256_castps_si256(load8(param + i));
        const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(low + i)));
        x = _mm256_castsi256_ps(_mm256_or_si256(hi, lo));
      } else {
        x = load8(param + i);
      }
      const __m256 x0 = x;  // the weight as loaded (Kahan)
      if (decoupled) x = _mm256_mul_ps(x, decay);
      if (l2) g = _mm256_add_ps(g, _mm256_mul_ps(wd, x));
      __m256 m = load8(m_all + i);
      m = c.lerp_low ? _mm256_add_ps(m, _mm256_mul_ps(w, _mm256_sub_ps(g, m)))
                     : _mm256_sub_ps(g, _mm256_mul_ps(_mm256_sub_ps(g, m), one_minus_w));
      if constexpr (std::is_same_v<M, float>) {
        _mm256_storeu_ps(m_all + i, m);
      } else {  // rounded once; the update reads m as stored
        const __m256i m16 = bf16_round8(m);
        store8_bits(m_all + i, pack8_epi32_to_epi16(m16));
        m = _mm256_castsi256_ps(_mm256_slli_epi32(m16, 16));
      }
      __m256 v = load8(v_all + i);
      v = _mm256_add_ps(_mm256_mul_ps(v, b2), _mm256_mul_ps(_mm256_mul_ps(one_minus_b2, g), g));
      if constexpr (std::is_same_v<V, float>) {
        _mm256_storeu_ps(v_all + i, v);
      } else {  // stochastically rounded with the high half of the bits; the update reads v as stored
        const __m256i v16 = bf16_stochastic8(v, _mm256_srli_epi32(r, 16));
        store8_bits(v_all + i, pack8_epi32_to_epi16(v16));
        v = bf16_bits_to_ps(v16);
      }
      __m256 vhat = v;
      if (vmax_all != nullptr) {
        const __m256 vmax = _mm256_loadu_ps(vmax_all + i);
        const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, vmax, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        vhat = _mm256_blendv_ps(vmax, v, take);
        _mm256_storeu_ps(vmax_all + i, vhat);
      }
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vhat), bc2_sqrt), eps);
      x = _mm256_add_ps(x, _mm256_mul_ps(neg_step_size, _mm256_div_ps(m, denom)));
      if (master != nullptr) {
        _mm256_storeu_ps(master + i, x);
        store8(param + i, x);
      } else if (low != nullptr) {  // pack_master on 8 lanes
        const __m256i u = _mm256_castps_si256(x);
        store8_bits(param + i, pack8_epi32_to_epi16(_mm256_srli_epi32(u, 16)));
        store8_bits(low + i, pack8_epi32_to_epi16(_mm256_and_si256(u, low16)));
      } else {
        bool stored = false;
        if constexpr (std::is_same_v<T, bfloat16>) {  // the modes of bf16 weights without a master
          if (comp_all != nullptr) {  // Kahan, as adam_chunk: sum - rounded is exact in fp32
            const __m256 comp = load8(comp_all + i);
            const __m256 sum = _mm256_add_ps(x0, _mm256_add_ps(_mm256_sub_ps(x, x0), comp));
            const __m256i p16 = bf16_round8(sum);
            store8_bits(param + i, pack8_epi32_to_epi16(p16));
            store8(comp_all + i, _mm256_sub_ps(sum, bf16_bits_to_ps(p16)));
            stored = true;
          } else if (sr_param) {
            store8_bits(param + i, pack8_epi32_to_epi16(bf16_stochastic8(x, _mm256_and_si256(r, low16))));
            stored = true;
          }
        }
        if (!stored) store8(param + i, x);
      }
    }
  }
  if (i0 < e) step_portable<T>(t, c, h, i0, e, /*philox_avx2=*/true);
}
}  // namespace

template <typename T>
void step_avx2(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e) {
  const bool m_bf16 = t.exp_avg.dtype() == kBFloat16, v_bf16 = t.exp_avg_sq.dtype() == kBFloat16;
  if (m_bf16 && v_bf16)
    adam_chunk_avx2<T, bfloat16, bfloat16>(t, c, h, b, e);
  else if (m_bf16)
    adam_chunk_avx2<T, bfloat16, float>(t, c, h, b, e);
  else if (v_bf16)
    adam_chunk_avx2<T, float, bfloat16>(t, c, h, b, e);
  else
    adam_chunk_avx2<T, float, float>(t, c, h, b, e);
}

#define MT_ADAM_DEFINE_AVX2(T) \
  template void step_avx2<T>(const AdamTensors&, const AdamScalars&, const AdamHyper&, int64_t, int64_t);
MT_ADAM_INSTANCES(MT_ADAM_DEFINE_AVX2)

}  // namespace mixtrain::kernels::adam

#endif  // MT_X86_TARGETS
