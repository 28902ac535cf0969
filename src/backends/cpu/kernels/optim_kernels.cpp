// Fused multi-tensor CPU kernels: scale + non-finite check, norm partials, SGD and Adam/AdamW steps.
//
// Accumulation dtype: fp32 everywhere (fp64 only for fp64 tensors in the scale/norm kernels). Each
// kernel is one template over the storage type, instantiated for float, float16 and bfloat16 by
// one switch; the work list is chunks of kMultiTensorChunk elements over all tensors, run in one
// OpenMP region (Note in optim_kernels.h). The update formulas follow PyTorch's single-tensor
// (foreach=False) implementations operation by operation, so an fp32 run matches PyTorch up to
// the order of fp32 roundings inside one expression.
//
// Vectorisation: contiguous data is processed in blocks of kBlock elements: 16-bit values are
// widened into an fp32 buffer with the bulk converters of half.h (F16C / AVX-512 when present),
// each step of the update is a separate branch-free loop over the buffer (the compiler vectorises
// them; the branches on options sit outside the loops), and the result is rounded back in bulk.
// sqrt is done with _mm_sqrt_ps because GCC only vectorises std::sqrt under -fno-math-errno; both
// are correctly rounded, so the results are the same bits. Adam/AdamW, the optimizer most runs use,
// has a second path, taken when cpu::isa() allows AVX-512 (tests lower the cap), that keeps the
// whole update of 16 elements in registers (one read and one write per tensor and element, no
// intermediate buffers); it performs the same operations in the same order (explicitly rounded, so
// never contracted into FMAs) and gives the bits of the block path, which tests check.
#include "core/isa_target.h"
#include "kernels/optim.h"
#include "backends/cpu/kernels/register.h"
#include "backends/cpu/kernels/host_ptr.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// The AVX-512 and AVX2 Adam kernels use per-function target attributes: GCC or Clang on x86-64.
#if MT_X86_TARGETS
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags at
// every inlining site (GCC bug 105593, fixed in GCC 13): a warning about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include "core/half_convert_avx2.h"
#include "core/half_convert_avx512.h"
#include "core/philox.h"
#include "backends/cpu/kernels/loops.h"
#include "kernels/elementwise.h"
#include "mixtrain/cpu.h"
#include "mixtrain/random.h"

namespace mixtrain::kernels {
namespace {

struct Chunk {
  int64_t tensor;
  int64_t begin, end;
};

std::vector<Chunk> make_chunks(const std::vector<int64_t>& numels, int64_t* total) {
  std::vector<Chunk> chunks;
  *total = 0;
  for (size_t t = 0; t < numels.size(); ++t) {
    for (int64_t b = 0; b < numels[t]; b += kMultiTensorChunk)
      chunks.push_back({static_cast<int64_t>(t), b, std::min(numels[t], b + kMultiTensorChunk)});
    *total += numels[t];
  }
  return chunks;
}

// Runs body(chunk_index, chunk) over every chunk; one OpenMP region when the work is large enough.
// Bodies must not throw (everything is validated before).
template <typename F>
void run_chunks(const std::vector<Chunk>& chunks, int64_t total, F&& body) {
  const int64_t n = static_cast<int64_t>(chunks.size());
  if (n <= 1 || total <= kGrainSize || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i, chunks[i]);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i, chunks[i]);
}

// Calls run(offset, count, stride) over the runs of elements [begin, end) (row-major order) of t;
// offsets are in elements from t's first element.
template <typename F>
void for_each_run(const Tensor& t, int64_t begin, int64_t end, F&& run) {
  if (t.is_contiguous()) {
    run(begin, end - begin, int64_t{1});
    return;
  }
  StridedLayout<1> layout(t.shape(), {&t.strides()});
  strided_ranges<1>(layout, begin, end,
                    [&](const std::array<int64_t, 1>& off, int64_t count, const std::array<int64_t, 1>& st) {
                      run(off[0], count, st[0]);
                    });
}

// The three storage types an optimizer updates.
template <typename F>
void dispatch_param(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: f.template operator()<float>(); return;
    case kFloat16: f.template operator()<float16>(); return;
    case kBFloat16: f.template operator()<bfloat16>(); return;
    default: MT_INTERNAL_ASSERT(false, "optimizer kernel: unexpected dtype");
  }
}

template <typename C>
inline bool nonfinite(C v) {
  return !(std::abs(v) <= std::numeric_limits<C>::max());  // true for NaN too
}

// Block size of the buffered loops: a multiple of 16 (the norm's lane count) that keeps a few
// fp32 buffers in L1.
constexpr int64_t kBlock = 256;

template <typename T>
constexpr bool kBlockType = std::is_same_v<T, float> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

template <typename T>
void load_block(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  else if constexpr (std::is_same_v<T, float16>)
    convert_fp16_to_fp32(src, dst, n);
  else
    convert_bf16_to_fp32(src, dst, n);
}

template <typename T>
void store_block(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  else if constexpr (std::is_same_v<T, float16>)
    convert_fp32_to_fp16(src, dst, n);
  else
    convert_fp32_to_bf16(src, dst, n);
}

void sqrt_block(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// 1 when any of x[0, n) is inf or NaN (branch-free, vectorisable).
inline bool any_nonfinite(const float* x, int64_t n) {
  unsigned bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<unsigned>(!(std::abs(x[i]) <= std::numeric_limits<float>::max()));
  return bad != 0;
}

// ------------------------------------------------------------------------------------------------
// Scale and check.

template <typename T>
bool scale_run(T* p, int64_t count, int64_t stride, float factor) {
  if constexpr (kBlockType<T>) {
    if (stride == 1) {
      // Block by block; fp32 in place (one read and, unless factor is 1, one write per element),
      // 16-bit values through an fp32 buffer. The check looks at the values before scaling.
      alignas(64) float buf[kBlock];
      bool bad = false;
      for (int64_t s = 0; s < count; s += kBlock) {
        const int64_t n = std::min(kBlock, count - s);
        float* q = buf;
        if constexpr (std::is_same_v<T, float>)
          q = p + s;
        else
          load_block(p + s, buf, n);
        bad |= any_nonfinite(q, n);
        if (factor == 1.0f) continue;  // check only: PyTorch's kernel skips the multiply when inv_scale == 1
        for (int64_t j = 0; j < n; ++j) q[j] *= factor;
        if constexpr (!std::is_same_v<T, float>) store_block(buf, p + s, n);
      }
      return bad;
    }
  }
  using C = opmath_t<T>;
  bool bad = false;
  const C f = static_cast<C>(factor);
  for (int64_t i = 0; i < count; ++i) {
    C v = convert<C>(p[i * stride]);
    bad |= nonfinite(v);
    if (factor != 1.0f) p[i * stride] = convert<T>(v * f);
  }
  return bad;
}

// ------------------------------------------------------------------------------------------------
// Norm partials.

// Sum of term(|x|) over a run; sixteen independent fp32 accumulators let the compiler vectorise the
// contiguous case without reassociating (the order is fixed by the code, hence deterministic).
template <typename T, typename Term>
float sum_run(const T* p, int64_t count, int64_t stride, Term term) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  if constexpr (kBlockType<T>) {
    if (stride == 1) {
      alignas(64) float buf[kBlock];
      for (; i + kLanes <= count; i += kBlock) {
        const int64_t n = std::min(kBlock, (count - i) / kLanes * kLanes);
        load_block(p + i, buf, n);
        for (int64_t b = 0; b < n; b += kLanes)
          for (int l = 0; l < kLanes; ++l) acc[l] += term(std::abs(buf[b + l]));
        if (n < kBlock) {
          i += n;
          break;
        }
      }
    }
  }
  for (; i < count; ++i) acc[i % kLanes] += term(std::abs(convert<float>(p[i * stride])));
  float s = 0.0f;
  for (float a : acc) s += a;
  return s;
}

// sum |x|^p over a run, or max |x| for p = inf (NaN propagates).
template <typename T>
float norm_run(const T* p, int64_t count, int64_t stride, double pnorm) {
  if (std::isinf(pnorm)) {
    float m = 0.0f;
    bool nan = false;
    for (int64_t i = 0; i < count; ++i) {
      float a = std::abs(convert<float>(p[i * stride]));
      nan |= (a != a);
      m = a > m ? a : m;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
  }
  if (pnorm == 2.0) return sum_run(p, count, stride, [](float a) { return a * a; });
  if (pnorm == 1.0) return sum_run(p, count, stride, [](float a) { return a; });
  const float pf = static_cast<float>(pnorm);
  return sum_run(p, count, stride, [pf](float a) { return std::pow(a, pf); });
}

// ------------------------------------------------------------------------------------------------
// Optimizer steps.

// The value being optimised, block by block: the fp32 master when there is one (the 16-bit
// parameter then receives the rounded result), the packed master (bf16 parameter bits << 16 | low)
// when there is a lower half, else the parameter itself.
template <typename T>
struct ParamBlocks {
  T* param;
  float* master;
  uint16_t* low;
  void load(int64_t s, float* x, int64_t n) const {
    if (master != nullptr) {
      std::memcpy(x, master + s, static_cast<size_t>(n) * sizeof(float));
    } else if (low != nullptr) {
      if constexpr (std::is_same_v<T, bfloat16>)
        for (int64_t j = 0; j < n; ++j) x[j] = unpack_master(param[s + j].x, low[s + j]);
    } else {
      load_block(param + s, x, n);
    }
  }
  void store(int64_t s, const float* x, int64_t n) const {
    if (low != nullptr) {
      if constexpr (std::is_same_v<T, bfloat16>)
        for (int64_t j = 0; j < n; ++j) {
          const PackedMaster packed = pack_master(x[j]);
          param[s + j] = bfloat16::from_bits(packed.param_bits);
          low[s + j] = packed.low;
        }
      return;
    }
    if (master != nullptr) std::memcpy(master + s, x, static_cast<size_t>(n) * sizeof(float));
    store_block(x, param + s, n);
  }
};

uint16_t* low_half(const Tensor& master_low) {
  return master_low.defined() ? reinterpret_cast<uint16_t*>(host_ptr<uint8_t>(master_low)) : nullptr;
}

template <typename T>
ParamBlocks<T> param_blocks(const Tensor& param, const Tensor& master, const Tensor& master_low) {
  return {host_ptr<T>(param), master.defined() ? host_ptr<float>(master) : nullptr, low_half(master_low)};
}

// g = grad * inv_scale (the multiply is exact and skipped when inv_scale is 1).
template <typename T>
void load_grad(const T* grad, int64_t s, float* g, int64_t n, float inv) {
  load_block(grad + s, g, n);
  if (inv != 1.0f)
    for (int64_t j = 0; j < n; ++j) g[j] *= inv;
}

template <typename T>
void sgd_chunk(const SgdTensors& t, const SgdHyper& h, int64_t b, int64_t e) {
  const ParamBlocks<T> p = param_blocks<T>(t.param, t.master, t.master_low);
  const T* grad = host_ptr<T>(t.grad);
  float* buf_all = t.momentum_buffer.defined() ? host_ptr<float>(t.momentum_buffer) : nullptr;
  const float wd = static_cast<float>(h.weight_decay), mom = static_cast<float>(h.momentum);
  const float one_minus_damp = static_cast<float>(1.0 - h.dampening), neg_lr = static_cast<float>(-h.lr);
  alignas(64) float g[kBlock], x[kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t n = std::min(kBlock, e - s);
    load_grad(grad, s, g, n, h.inv_scale);
    p.load(s, x, n);
    if (wd != 0.0f)
      for (int64_t j = 0; j < n; ++j) g[j] = g[j] + wd * x[j];  // grad.add(param, alpha=weight_decay)
    if (buf_all != nullptr) {
      float* buf = buf_all + s;
      if (t.first_step)  // buf = clone(grad)
        std::memcpy(buf, g, static_cast<size_t>(n) * sizeof(float));
      else  // buf.mul_(momentum).add_(grad, alpha=1-dampening)
        for (int64_t j = 0; j < n; ++j) buf[j] = buf[j] * mom + one_minus_damp * g[j];
      if (h.nesterov)
        for (int64_t j = 0; j < n; ++j) g[j] = g[j] + mom * buf[j];  // grad.add(buf, alpha=momentum)
      else
        std::memcpy(g, buf, static_cast<size_t>(n) * sizeof(float));
    }
    for (int64_t j = 0; j < n; ++j) x[j] = x[j] + neg_lr * g[j];  // param.add_(grad, alpha=-lr)
    p.store(s, x, n);
  }
}

// The fp32 scalars of one Adam step of one parameter. Host scalars in double (Python floats in
// PyTorch), rounded to fp32 where the tensor op would.
struct AdamScalars {
  float neg_step_size, bc2_sqrt, w, one_minus_w, b2, one_minus_b2, eps, wd, decay, inv;
  bool lerp_low, decoupled, amsgrad;
};

AdamScalars adam_scalars(const AdamHyper& h, int64_t t) {
  const double step = static_cast<double>(t);
  AdamScalars c{};
  c.neg_step_size = static_cast<float>(-(h.lr / (1.0 - std::pow(h.beta1, step))));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, step)));
  c.w = static_cast<float>(1.0 - h.beta1);  // lerp weight
  c.one_minus_w = 1.0f - c.w;
  c.lerp_low = std::abs(c.w) < 0.5f;  // ATen's lerp picks its formula by |weight|
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.wd = static_cast<float>(h.weight_decay);
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.inv = h.inv_scale;
  c.decoupled = h.decoupled_weight_decay;
  c.amsgrad = h.amsgrad;
  return c;
}

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
  random::detail::philox_rounds<Avx2Lanes>(c0, c1, c2, c3,
                                           _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key))),
                                           _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key >> 32))));
  alignas(32) uint32_t w[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[0]), c0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[1]), c1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[2]), c2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[3]), c3);
  for (int j = 0; j < 8; ++j)
    for (int k = 0; k < 4; ++k) out[4 * j + k] = w[k][j];
}
#endif

// 32 random bits for each element [s, s + n) of the parameter with stream id `stream` (kernels/optim.h,
// rounding_key): the low half rounds the parameter, the high half the second moment. With `avx2`,
// whole groups of 8 blocks come from philox8 (the same bits).
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

// The portable path: each step of the update is a branch-free loop over an fp32 block. M and V are
// the storage types of exp_avg and exp_avg_sq (float or bfloat16).
template <typename T, typename M, typename V>
void adam_chunk(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e,
                bool philox_avx2 = false) {
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
    if (random) rounding_bits(key, t.stream, s, n, bits, philox_avx2);
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

#if MT_X86_TARGETS
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
    if (random) rounding_bits(key, t.stream, i0, 32, bits, /*avx2=*/true);
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
  if (i0 < e) adam_chunk<T, M, V>(t, c, h, i0, e, /*philox_avx2=*/true);
}
#endif

template <typename Tensors>
void check_step_tensors(const Tensors& t, const char* op) {
  MT_INTERNAL_ASSERT(t.param.is_contiguous() && t.grad.is_contiguous() && t.grad.dtype() == t.param.dtype() &&
                         t.grad.numel() == t.param.numel(),
                     op, ": param/grad mismatch");
  MT_INTERNAL_ASSERT(!t.master.defined() || (t.master.dtype() == kFloat32 && t.master.numel() == t.param.numel()), op,
                     ": bad master");
  MT_INTERNAL_ASSERT(!t.master_low.defined() ||
                         (!t.master.defined() && t.param.dtype() == kBFloat16 && t.master_low.dtype() == kUInt8 &&
                          t.master_low.is_contiguous() && t.master_low.numel() == 2 * t.param.numel()),
                     op, ": bad packed master");
}

// Runs chunk_fn<T>(tensors[i], b, e) over all chunks, T being tensors[i].param's storage type.
template <typename Tensors, typename ChunkFn>
void run_step(const std::vector<Tensors>& tensors, ChunkFn&& chunk_fn) {
  std::vector<int64_t> numels;
  numels.reserve(tensors.size());
  for (const auto& t : tensors) numels.push_back(t.param.numel());
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(numels, &total);
  run_chunks(chunks, total, [&](int64_t, const Chunk& c) {
    const Tensors& t = tensors[c.tensor];
    dispatch_param(t.param.dtype(), [&]<typename T>() { chunk_fn.template operator()<T>(t, c.begin, c.end); });
  });
}

// The element counts of gradient tensors for make_chunks; `what` names the operation in the error
// for a tensor that is not float32, float16, bfloat16 or float64.
std::vector<int64_t> floating_numels(const std::vector<Tensor>& tensors, const char* what) {
  std::vector<int64_t> numels;
  numels.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    MT_CHECK(t.is_floating_point(), what, " of gradients: expected float32, float16, bfloat16 or float64, got ",
             describe(t));
    numels.push_back(t.numel());
  }
  return numels;
}

int64_t scale_and_check_cpu(const std::vector<Tensor>& tensors, float factor) {
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(floating_numels(tensors, "scale/unscale"), &total);
  std::vector<uint8_t> bad(chunks.size(), 0);
  run_chunks(chunks, total, [&](int64_t i, const Chunk& c) {
    const Tensor& t = tensors[c.tensor];
    dispatch_floating(t.dtype(), "scale", [&]<typename T>() {
      T* base = static_cast<T*>(host_data(t));
      bool b = false;
      for_each_run(t, c.begin, c.end, [&](int64_t off, int64_t count, int64_t stride) {
        b |= scale_run(base + off, count, stride, factor);
      });
      bad[i] = b;
    });
  });
  for (size_t i = 0; i < chunks.size(); ++i)
    if (bad[i]) return chunks[i].tensor;  // chunks are in tensor order
  return -1;
}

std::vector<float> norm_partials_cpu(const std::vector<Tensor>& tensors, double p) {
  MT_CHECK(p > 0 && !std::isnan(p), "norm: norm_type must be > 0 or inf, got ", p);
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(floating_numels(tensors, "norm"), &total);
  std::vector<float> partial(chunks.size(), 0.0f);
  run_chunks(chunks, total, [&](int64_t i, const Chunk& c) {
    const Tensor& t = tensors[c.tensor];
    dispatch_floating(t.dtype(), "norm", [&]<typename T>() {
      const T* base = static_cast<const T*>(host_data(t));
      float acc = 0.0f;
      bool nan = false;
      for_each_run(t, c.begin, c.end, [&](int64_t off, int64_t count, int64_t stride) {
        float r = norm_run(base + off, count, stride, p);
        nan |= (r != r);
        acc = std::isinf(p) ? std::max(acc, r) : acc + r;
      });
      partial[i] = nan ? std::numeric_limits<float>::quiet_NaN() : acc;
    });
  });
  std::vector<float> out(tensors.size(), 0.0f);
  std::vector<uint8_t> nan(tensors.size(), 0);
  for (size_t i = 0; i < chunks.size(); ++i) {  // chunk order: deterministic
    float& o = out[chunks[i].tensor];
    nan[chunks[i].tensor] |= (partial[i] != partial[i]);
    o = std::isinf(p) ? std::max(o, partial[i]) : o + partial[i];
  }
  for (size_t t = 0; t < out.size(); ++t)
    if (nan[t]) out[t] = std::numeric_limits<float>::quiet_NaN();
  return out;
}

void sgd_step_cpu(const std::vector<SgdTensors>& tensors, const SgdHyper& h) {
  for (const auto& t : tensors) {
    check_step_tensors(t, "sgd_step");
    MT_INTERNAL_ASSERT(h.momentum == 0 || (t.momentum_buffer.defined() && t.momentum_buffer.dtype() == kFloat32),
                       "sgd_step: missing momentum buffer");
  }
  run_step(tensors, [&]<typename T>(const SgdTensors& t, int64_t b, int64_t e) { sgd_chunk<T>(t, h, b, e); });
}

void adam_step_cpu(const std::vector<AdamTensors>& tensors, const AdamHyper& h) {
  for (const auto& t : tensors) {
    check_step_tensors(t, "adam_step");
    MT_INTERNAL_ASSERT(t.exp_avg.defined() && t.exp_avg_sq.defined() && (!h.amsgrad || t.max_exp_avg_sq.defined()),
                       "adam_step: missing moments");
    MT_INTERNAL_ASSERT(t.exp_avg.is_contiguous() && (t.exp_avg.dtype() == kFloat32 || t.exp_avg.dtype() == kBFloat16),
                       "adam_step: exp_avg must be contiguous float32 or bfloat16");
    MT_INTERNAL_ASSERT(t.exp_avg_sq.is_contiguous() &&
                           (t.exp_avg_sq.dtype() == kFloat32 || t.exp_avg_sq.dtype() == kBFloat16),
                       "adam_step: exp_avg_sq must be contiguous float32 or bfloat16");
    MT_INTERNAL_ASSERT(!t.kahan_comp.defined() ||
                           (t.param.dtype() == kBFloat16 && !t.master.defined() && !t.master_low.defined() &&
                            t.kahan_comp.dtype() == kBFloat16 && t.kahan_comp.is_contiguous() &&
                            t.kahan_comp.numel() == t.param.numel()),
                       "adam_step: bad Kahan compensation");
  }
  cpu::Isa isa = cpu::Isa::kGeneric;
#if MT_X86_TARGETS
  isa = cpu::isa();
#endif
  run_step(tensors, [&]<typename T>(const AdamTensors& t, int64_t b, int64_t e) {
    const AdamScalars c = adam_scalars(h, t.step);
    const bool m_bf16 = t.exp_avg.dtype() == kBFloat16, v_bf16 = t.exp_avg_sq.dtype() == kBFloat16;
    // The AVX-512 kernel covers round-to-nearest stores and an fp32 second moment, the AVX2 one every
    // layout.
    const bool plain =
        !v_bf16 && !t.kahan_comp.defined() &&
        !(h.stochastic_rounding && std::is_same_v<T, bfloat16> && !t.master.defined() && !t.master_low.defined());
#if MT_X86_TARGETS
    if (plain && isa >= cpu::Isa::kAvx512) {
      if (m_bf16)
        adam_chunk_avx512<T, bfloat16>(t, c, b, e);
      else
        adam_chunk_avx512<T, float>(t, c, b, e);
      return;
    }
    if (isa >= cpu::Isa::kAvx2) {
      if (m_bf16 && v_bf16)
        adam_chunk_avx2<T, bfloat16, bfloat16>(t, c, h, b, e);
      else if (m_bf16)
        adam_chunk_avx2<T, bfloat16, float>(t, c, h, b, e);
      else if (v_bf16)
        adam_chunk_avx2<T, float, bfloat16>(t, c, h, b, e);
      else
        adam_chunk_avx2<T, float, float>(t, c, h, b, e);
      return;
    }
#endif
    const bool philox_avx2 = isa >= cpu::Isa::kAvx2;
    if (m_bf16 && v_bf16)
      adam_chunk<T, bfloat16, bfloat16>(t, c, h, b, e, philox_avx2);
    else if (m_bf16)
      adam_chunk<T, bfloat16, float>(t, c, h, b, e, philox_avx2);
    else if (v_bf16)
      adam_chunk<T, float, bfloat16>(t, c, h, b, e, philox_avx2);
    else
      adam_chunk<T, float, float>(t, c, h, b, e, philox_avx2);
  });
}

void unpack_master_cpu(const Tensor& param, const Tensor& low, const Tensor& master) {
  const bfloat16* hi = host_ptr<bfloat16>(param);
  const auto* lo = reinterpret_cast<const uint16_t*>(host_ptr<uint8_t>(low));
  float* out = host_ptr<float>(master);
  for (int64_t i = 0; i < param.numel(); ++i) out[i] = unpack_master(hi[i].x, lo[i]);
}

void pack_master_cpu(const Tensor& master, const Tensor& param, const Tensor& low) {
  const float* in = host_ptr<float>(master);
  bfloat16* hi = host_ptr<bfloat16>(param);
  auto* lo = reinterpret_cast<uint16_t*>(host_ptr<uint8_t>(low));
  for (int64_t i = 0; i < param.numel(); ++i) {
    const PackedMaster packed = pack_master(in[i]);
    hi[i] = bfloat16::from_bits(packed.param_bits);
    lo[i] = packed.low;
  }
}

}  // namespace

void register_cpu_optim(const Registry& r) {
  r.set(scale_and_check_table, kFloat32, &scale_and_check_cpu);
  r.set(norm_partials_table, kFloat32, &norm_partials_cpu);
  r.set(sgd_step_table, kFloat32, &sgd_step_cpu);
  r.set(adam_step_table, kFloat32, &adam_step_cpu);
  r.set(unpack_master_table, kBFloat16, &unpack_master_cpu);
  r.set(pack_master_table, kBFloat16, &pack_master_cpu);
}

}  // namespace mixtrain::kernels
