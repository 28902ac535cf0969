// The CPU AdamW step, portable path (adam.h): each step of the update is a branch-free loop over an
// fp32 block (the compiler vectorises it), the 16-bit values widened and rounded back in bulk. Also
// the per-step scalars and the random bits of stochastic rounding, shared with the AVX2 path.
#include "backends/cpu/kernels/adam.h"

#include <array>
#include <cmath>

#include "backends/cpu/kernels/optim_blocks.h"
#include "core/isa_target.h"
#include "core/philox.h"
#include "mixtrain/random.h"

#if MT_X86_TARGETS
#include <immintrin.h>
#endif

namespace mixtrain::kernels::adam {

using namespace optim_blocks;

AdamScalars adam_scalars(const AdamHyper& h, int64_t t) {
  return AdamScalars{adam_constants(h), adam_bias_correction(h, t)};
}

namespace {
#if MT_X86_TARGETS
// random::philox on 8 consecutive blocks at once (one per 32-bit lane), AVX2: core/philox.h's rounds
// on eight lanes, the 32 x 32 -> 64-bit products split into their low halves (mullo) and high halves
// (two mul_epu32 over the even and odd lanes). out[4 * j + w] is word w of block first + j, as the
// scalar returns.
struct Avx2Lanes {
  using V = __m256i;
  MT_TARGET_AVX2 static void mullo(V& out, const V& a, uint32_t m) {
    out = _mm256_mullo_epi32(a, _mm256_set1_epi32(static_cast<int>(m)));
  }
  MT_TARGET_AVX2 static void mulhi(V& out, const V& a, uint32_t m) {
    const __m256i b = _mm256_set1_epi32(static_cast<int>(m));
    const __m256i even = _mm256_mul_epu32(a, b);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32));
    out = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
  }
  MT_TARGET_AVX2 static void xor3(V& out, const V& a, const V& b, const V& c) {
    out = _mm256_xor_si256(_mm256_xor_si256(a, b), c);
  }
  MT_TARGET_AVX2 static void add(V& v, uint32_t w) {
    v = _mm256_add_epi32(v, _mm256_set1_epi32(static_cast<int>(w)));
  }
};

MT_TARGET_AVX2 void philox8(uint64_t first, uint64_t key, uint32_t stream, uint32_t* out) {
  alignas(32) uint32_t lo[8], hi[8];
  for (int j = 0; j < 8; ++j) {
    lo[j] = static_cast<uint32_t>(first + static_cast<uint64_t>(j));
    hi[j] = static_cast<uint32_t>((first + static_cast<uint64_t>(j)) >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(stream)), c3 = _mm256_setzero_si256();
  const __m256i k0 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key)));
  const __m256i k1 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key >> 32)));
  random::detail::philox_rounds<Avx2Lanes>(c0, c1, c2, c3, k0, k1);
  alignas(32) uint32_t w[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[0]), c0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[1]), c1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[2]), c2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[3]), c3);
  for (int j = 0; j < 8; ++j)
    for (int k = 0; k < 4; ++k) out[4 * j + k] = w[k][j];
}
#endif

}  // namespace

// The low half of each element's 32 bits rounds the parameter, the high half the second moment.
void rounding_bits(uint64_t key, uint32_t stream, int64_t s, int64_t n, uint32_t* out, bool avx2) {
  int64_t j = 0;
#if MT_X86_TARGETS
  if (avx2)
    for (; j + 32 <= n && (s + j) % 4 == 0; j += 32)
      philox8(static_cast<uint64_t>(s + j) / 4, key, stream, out + j);
#else
  (void)avx2;
#endif
  while (j < n) {
    const uint64_t e = static_cast<uint64_t>(s + j);
    const std::array<uint32_t, 4> r = random::philox(e / 4, key, stream);
    for (uint64_t k = e % 4; k < 4 && j < n; ++k, ++j) out[j] = r[k];
  }
}


namespace {

// The portable path: each step of the update is a branch-free loop over an fp32 block. M and V are
// the storage types of exp_avg and exp_avg_sq (float or bfloat16).
template <typename T, typename M, typename V>
void adam_chunk(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e,
                bool philox_avx2) {
  const ParamBlocks<T> p = param_blocks<T>(t.param, t.master, t.master_low);
  const T* grad = host_ptr<T>(t.grad);
  M* m_all = host_ptr<M>(t.exp_avg);
  V* v_all = host_ptr<V>(t.exp_avg_sq);
  float* vmax_all = c.amsgrad ? host_ptr<float>(t.max_exp_avg_sq) : nullptr;
  // bf16 parameters without a master: Kahan-compensated or stochastically rounded when asked.
  bfloat16* comp_all = nullptr;
  bool sr_param = false;
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (p.master == nullptr && p.low == nullptr) {
      comp_all = t.kahan_comp.defined() ? host_ptr<bfloat16>(t.kahan_comp) : nullptr;
      sr_param = comp_all == nullptr && h.stochastic_rounding;
    }
  }
  const bool random = sr_param || std::is_same_v<V, bfloat16>;
  const uint64_t key = random ? rounding_key(h.rounding_seed, t.step) : 0;
  alignas(64) float g[kBlock], x[kBlock], d[kBlock], mbuf[kBlock], vbuf[kBlock], x0[kBlock], cbuf[kBlock];
  alignas(64) uint32_t bits[kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t n = std::min(kBlock, e - s);
    if (random) rounding_bits(key, t.stream, t.first_element + s, n, bits, philox_avx2);
    float* m = mbuf;
    if constexpr (std::is_same_v<M, float>)
      m = m_all + s;
    else
      load_block(m_all + s, mbuf, n);
    float* v = vbuf;
    if constexpr (std::is_same_v<V, float>)
      v = v_all + s;
    else
      load_block(v_all + s, vbuf, n);
    load_grad(grad, s, g, n, c.inv);
    p.load(s, x, n);
    if (comp_all != nullptr) std::memcpy(x0, x, static_cast<size_t>(n) * sizeof(float));
    if (c.wd != 0.0f) {
      if (c.decoupled)
        for (int64_t j = 0; j < n; ++j) x[j] = x[j] * c.decay;  // param.mul_(1 - lr * weight_decay)
      else
        for (int64_t j = 0; j < n; ++j) g[j] = g[j] + c.wd * x[j];  // grad.add(param, alpha=weight_decay)
    }
    if (c.lerp_low)  // exp_avg.lerp_(grad, 1 - beta1)
      for (int64_t j = 0; j < n; ++j) m[j] = m[j] + c.w * (g[j] - m[j]);
    else
      for (int64_t j = 0; j < n; ++j) m[j] = g[j] - (g[j] - m[j]) * c.one_minus_w;
    if constexpr (!std::is_same_v<M, float>) {  // the update reads m as stored
      store_block(mbuf, m_all + s, n);
      load_block(m_all + s, mbuf, n);
    }
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] * c.b2 + c.one_minus_b2 * g[j] * g[j];  // mul_(b2).addcmul_(g, g, 1-b2)
    if constexpr (!std::is_same_v<V, float>) {  // stochastically rounded; the update reads v as stored
      for (int64_t j = 0; j < n; ++j) {
        v_all[s + j] = bfloat16::from_bits(bf16_bits_stochastic(v[j], static_cast<uint16_t>(bits[j] >> 16)));
        v[j] = static_cast<float>(v_all[s + j]);
      }
    }
    const float* vhat = v;
    if (vmax_all != nullptr) {  // torch.maximum(max_exp_avg_sq, exp_avg_sq): NaN propagates
      float* vmax = vmax_all + s;
      for (int64_t j = 0; j < n; ++j) vmax[j] = (v[j] > vmax[j] || v[j] != v[j]) ? v[j] : vmax[j];
      vhat = vmax;
    }
    std::memcpy(d, vhat, static_cast<size_t>(n) * sizeof(float));
    sqrt_block(d, n);
    // denom = sqrt(v_hat) / sqrt(bias_correction2) + eps; param.addcdiv_(exp_avg, denom, value=-step_size)
    for (int64_t j = 0; j < n; ++j) x[j] = x[j] + c.neg_step_size * (m[j] / (d[j] / c.bc2_sqrt + c.eps));
    if constexpr (std::is_same_v<T, bfloat16>) {
      if (comp_all != nullptr) {
        // Kahan: the intended value is the old weight plus this update plus the carried compensation;
        // the weight takes it rounded to nearest and the compensation what the rounding dropped
        // (sum - rounded is exact in fp32), itself rounded to bf16.
        bfloat16* param = p.param + s;
        bfloat16* comp = comp_all + s;
        load_block(comp, cbuf, n);
        for (int64_t j = 0; j < n; ++j) {
          const float sum = x0[j] + ((x[j] - x0[j]) + cbuf[j]);
          param[j] = bfloat16(sum);
          cbuf[j] = sum - static_cast<float>(param[j]);
        }
        store_block(cbuf, comp, n);
        continue;
      }
      if (sr_param) {
        for (int64_t j = 0; j < n; ++j)
          p.param[s + j] = bfloat16::from_bits(bf16_bits_stochastic(x[j], static_cast<uint16_t>(bits[j])));
        continue;
      }
    }
    p.store(s, x, n);
  }
}

}  // namespace

template <typename T>
void step_portable(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e,
                   bool philox_avx2) {
  const bool m_bf16 = t.exp_avg.dtype() == kBFloat16, v_bf16 = t.exp_avg_sq.dtype() == kBFloat16;
  if (m_bf16 && v_bf16)
    adam_chunk<T, bfloat16, bfloat16>(t, c, h, b, e, philox_avx2);
  else if (m_bf16)
    adam_chunk<T, bfloat16, float>(t, c, h, b, e, philox_avx2);
  else if (v_bf16)
    adam_chunk<T, float, bfloat16>(t, c, h, b, e, philox_avx2);
  else
    adam_chunk<T, float, float>(t, c, h, b, e, philox_avx2);
}

#define MT_ADAM_DEFINE_PORTABLE(T) \
  template void step_portable<T>(const AdamTensors&, const AdamScalars&, const AdamHyper&, int64_t, int64_t, bool);
MT_ADAM_INSTANCES(MT_ADAM_DEFINE_PORTABLE)

}  // namespace mixtrain::kernels::adam
