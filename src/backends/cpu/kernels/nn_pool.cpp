// CPU max_pool2d and avg_pool2d over [N, C, H, W], forward and backward.
//
// Accumulation: fp32 (fp64 for fp64 input). General windows: each task owns whole (n, c) planes; a
// 16-bit plane is widened to fp32 once, windows are reduced in fp32 and outputs rounded once.
// Backward scatters into an fp32 copy of the input-gradient plane (overlapping windows add there, in
// output order) and rounds once; since a plane never spans two threads, the result does not depend
// on the thread count.
//
// max_pool2d with a 2x2 kernel, stride 2 and no padding (the common CNN case) has its own path: a
// row of outputs reads two input rows, and since the windows do not overlap, backward writes every
// input-gradient element exactly once (the gradient of its window's output, or zero) with no
// scratch and no scatter. Taking a maximum and routing a gradient are exact, so the selected
// elements are copied bit for bit (a 16-bit input is never widened and rounded back), and the fast
// path gives the same bits as the general one. With AVX-512 (cpu::isa() >= kAvx512) it runs
// 16 windows per step, with AVX2 8, comparing in
// fp32 and selecting the raw 16-bit (or fp32) values.
#include "core/isa_target.h"
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/elementwise.h"
#include "kernels/nn.h"
#include "mixtrain/cpu.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

#if MT_X86_TARGETS
#include <immintrin.h>

#include "core/half_convert_avx2.h"
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags at
// every inlining site (GCC bug 105593, fixed in GCC 13). The warning is about the header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace mixtrain::kernels {


namespace {

// A window of output (oh, ow): rows [h0, h1), cols [w0, w1) clipped to the input; its unclipped
// top-left corner (oh0, ow0), which argmax offsets count from; and its divisor for avg_pool2d (the
// window clipped to the padded input, PyTorch's count_include_pad=True).
struct Window {
  int64_t h0, h1, w0, w1, oh0, ow0, divisor;
};

inline Window window(const Pool2dParams& p, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw;
  int64_t h1 = std::min(h0 + p.kh, H + p.ph), w1 = std::min(w0 + p.kw, W + p.pw);
  const int64_t divisor = (h1 - h0) * (w1 - w0);
  return {std::max<int64_t>(h0, 0), std::min(h1, H), std::max<int64_t>(w0, 0), std::min(w1, W), h0, w0, divisor};
}

// Runs body(in, out) for each of the `planes` (n, c) planes, whole planes per task: `in` is the
// plane of src (in_size elements) as F, `out` an F row for the plane of dst (out_size elements),
// rounded into dst once body returns.
template <typename F, typename T, typename Body>
void for_planes(int64_t planes, int64_t plane_work, const T* src, int64_t in_size, T* dst, int64_t out_size,
                Body&& body) {
  parallel_for(planes, nnvec::row_grain(plane_work), [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const F* in = nnvec::load_row(src + pl * in_size, nnvec::scratch<F>(0, in_size), in_size);
      F* out = nnvec::out_row(dst + pl * out_size, nnvec::scratch<F>(1, out_size));
      body(in, out, pl);
      nnvec::store_row(out, dst + pl * out_size, out_size);
    }
  });
}

// Runs f(o, window) for the outputs o = oh * OW + ow of an OH x OW plane, in that order.
template <typename Fn>
void for_windows(const Pool2dParams& p, int64_t H, int64_t W, int64_t OH, int64_t OW, Fn&& f) {
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow) f(oh * OW + ow, window(p, H, W, oh, ow));
}

bool is_2x2_stride_2(const Pool2dParams& p) {
  return p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0;
}

// The vector level of the 2x2 path: kAvx512, kAvx2, or kGeneric for the scalar loops.
cpu::Isa pool_level() {
  if (!MT_X86_TARGETS) return cpu::Isa::kGeneric;
  return std::min(cpu::isa(), cpu::Isa::kAvx512);
}

// ---- 2x2 stride 2, scalar: rows `in0`, `in1` of the input, OW windows.

// The window offset (0..3) of the maximum of {a, b, c, d} (row-major order): the first maximum on
// ties, the first NaN when there is one (a NaN is never replaced).
template <typename F>
inline uint8_t argmax4(F a, F b, F c, F d) {
  F best = a;
  uint8_t k = 0;
  auto step = [&](F v, uint8_t kv) {
    if (best == best && (v > best || v != v)) best = v, k = kv;
  };
  step(b, 1);
  step(c, 2);
  step(d, 3);
  return k;
}

template <typename T>
void max2x2_row(const T* in0, const T* in1, T* out, uint8_t* am, int64_t OW) {
  using F = opmath_t<T>;
  for (int64_t ow = 0; ow < OW; ++ow) {
    const T* r0 = in0 + 2 * ow;
    const T* r1 = in1 + 2 * ow;
    const uint8_t k = argmax4(convert<F>(r0[0]), convert<F>(r0[1]), convert<F>(r1[0]), convert<F>(r1[1]));
    out[ow] = (k < 2 ? r0 : r1)[k & 1];
    am[ow] = k;
  }
}

// Writes columns [0, 2 * OW) of the 2 x W gradient rows of one output row (the caller zeroes a
// last odd column).
template <typename T>
void max2x2_bwd_row(const T* gy, const uint8_t* am, T* gx0, T* gx1, int64_t OW) {
  const T zero = convert<T>(0.0f);
  for (int64_t ow = 0; ow < OW; ++ow) {
    const uint8_t k = am[ow];
    gx0[2 * ow] = k == 0 ? gy[ow] : zero;
    gx0[2 * ow + 1] = k == 1 ? gy[ow] : zero;
    gx1[2 * ow] = k == 2 ? gy[ow] : zero;
    gx1[2 * ow + 1] = k == 3 ? gy[ow] : zero;
  }
}

// ---- 2x2 stride 2, AVX-512: 16 windows per step, masked tails.
#if MT_X86_TARGETS

// 16 horizontally adjacent pairs of one input row: their fp32 values (even / odd columns) for the
// comparisons and their raw bits, one per 32-bit lane, for the copy.
struct Pairs {
  __m512 even, odd;
  __m512i even_bits, odd_bits;
};

MT_TARGET_AVX512 inline __mmask32 mask32(int64_t n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1; }
MT_TARGET_AVX512 inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// Loads the 2n (n <= 16) elements of `src` as n pairs; lanes past n are zero.
template <typename T>
MT_TARGET_AVX512 inline Pairs load_pairs(const T* src, int64_t n) {
  Pairs p;
  if constexpr (std::is_same_v<T, float>) {
    const __m512 lo = _mm512_maskz_loadu_ps(mask16(2 * n), src);
    const __m512 hi = _mm512_maskz_loadu_ps(mask16(2 * n - 16 > 0 ? 2 * n - 16 : 0), src + 16);
    const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    p.even = _mm512_permutex2var_ps(lo, even_idx, hi);
    p.odd = _mm512_permutex2var_ps(lo, odd_idx, hi);
    p.even_bits = _mm512_castps_si512(p.even);
    p.odd_bits = _mm512_castps_si512(p.odd);
  } else {
    // Each 32-bit lane holds one pair: the even element in its low half, the odd one in its high half.
    const __m512i v = _mm512_maskz_loadu_epi16(mask32(2 * n), src);
    p.even_bits = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
    p.odd_bits = _mm512_srli_epi32(v, 16);
    if constexpr (std::is_same_v<T, bfloat16>) {
      p.even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      p.odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    } else {
      p.even = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(p.even_bits));
      p.odd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(p.odd_bits));
    }
  }
  return p;
}

// argmax4 on 16 lanes: v (window offset kv) replaces best when best is not NaN and v is greater or NaN.
MT_TARGET_AVX512 inline void argmax_step(__m512& best, __m512i& bits, __m512i& k, __m512 v, __m512i vbits, int kv) {
  const __mmask16 take = _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) &
                         (_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  best = _mm512_mask_mov_ps(best, take, v);
  bits = _mm512_mask_mov_epi32(bits, take, vbits);
  k = _mm512_mask_mov_epi32(k, take, _mm512_set1_epi32(kv));
}

// g where k == kv, else 0.
MT_TARGET_AVX512 inline __m512i pick(__m512i k, __m512i g, int kv) {
  return _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(kv)), g);
}

template <typename T>
MT_TARGET_AVX512 void max2x2_row_avx512(const T* in0, const T* in1, T* out, uint8_t* am, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const Pairs top = load_pairs(in0 + 2 * ow, n), bottom = load_pairs(in1 + 2 * ow, n);
    __m512 best = top.even;
    __m512i bits = top.even_bits, k = _mm512_setzero_si512();
    argmax_step(best, bits, k, top.odd, top.odd_bits, 1);
    argmax_step(best, bits, k, bottom.even, bottom.even_bits, 2);
    argmax_step(best, bits, k, bottom.odd, bottom.odd_bits, 3);
    const __mmask16 m = mask16(n);
    if constexpr (std::is_same_v<T, float>) {
      _mm512_mask_storeu_epi32(out + ow, m, bits);
    } else {
      _mm256_mask_storeu_epi16(out + ow, m, _mm512_cvtepi32_epi16(bits));
    }
    _mm_mask_storeu_epi8(am + ow, m, _mm512_cvtepi32_epi8(k));
  }
}

template <typename T>
MT_TARGET_AVX512 void max2x2_bwd_row_avx512(const T* gy, const uint8_t* am, T* gx0, T* gx1, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const __mmask16 m = mask16(n);
    const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, am + ow));
    __m512i g;
    if constexpr (std::is_same_v<T, float>) {
      g = _mm512_maskz_loadu_epi32(m, gy + ow);
    } else {
      g = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, gy + ow));
    }
    const __m512i e0 = pick(k, g, 0), e1 = pick(k, g, 1), e2 = pick(k, g, 2), e3 = pick(k, g, 3);
    if constexpr (std::is_same_v<T, float>) {
      // Interleave (e0, e1) into the 2n values of the top row, (e2, e3) into the bottom row.
      const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
      const __mmask16 mlo = mask16(2 * n), mhi = mask16(2 * n - 16 > 0 ? 2 * n - 16 : 0);
      _mm512_mask_storeu_epi32(gx0 + 2 * ow, mlo, _mm512_permutex2var_epi32(e0, lo_idx, e1));
      _mm512_mask_storeu_epi32(gx0 + 2 * ow + 16, mhi, _mm512_permutex2var_epi32(e0, hi_idx, e1));
      _mm512_mask_storeu_epi32(gx1 + 2 * ow, mlo, _mm512_permutex2var_epi32(e2, lo_idx, e3));
      _mm512_mask_storeu_epi32(gx1 + 2 * ow + 16, mhi, _mm512_permutex2var_epi32(e2, hi_idx, e3));
    } else {
      const __mmask32 m2 = mask32(2 * n);
      _mm512_mask_storeu_epi16(gx0 + 2 * ow, m2, _mm512_or_si512(e0, _mm512_slli_epi32(e1, 16)));
      _mm512_mask_storeu_epi16(gx1 + 2 * ow, m2, _mm512_or_si512(e2, _mm512_slli_epi32(e3, 16)));
    }
  }
}

// ---- 2x2 stride 2, AVX2: 8 windows per step (the same selection as the AVX-512 kernel).

using detail::x86::pack8_epi32_to_epi16;

// 8 horizontally adjacent pairs of one input row (16 elements), as Pairs on 8 lanes.
struct Pairs8 {
  __m256 even, odd;
  __m256i even_bits, odd_bits;
};

template <typename T>
MT_TARGET_AVX2_NO_FMA inline Pairs8 load_pairs8(const T* src) {
  Pairs8 p;
  if constexpr (std::is_same_v<T, float>) {
    const __m256 lo = _mm256_loadu_ps(src), hi = _mm256_loadu_ps(src + 8);
    // shuffle_ps works per 128-bit half: (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6); the 64-bit permute
    // puts the halves in order.
    p.even = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), 0xd8));
    p.odd = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), 0xd8));
    p.even_bits = _mm256_castps_si256(p.even);
    p.odd_bits = _mm256_castps_si256(p.odd);
  } else {
    // Each 32-bit lane holds one pair: the even element in its low half, the odd one in its high half.
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    p.even_bits = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    p.odd_bits = _mm256_srli_epi32(v, 16);
    if constexpr (std::is_same_v<T, bfloat16>) {
      p.even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      p.odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    } else {
      p.even = _mm256_cvtph_ps(pack8_epi32_to_epi16(p.even_bits));
      p.odd = _mm256_cvtph_ps(pack8_epi32_to_epi16(p.odd_bits));
    }
  }
  return p;
}

MT_TARGET_AVX2_NO_FMA inline void argmax_step8(__m256& best, __m256i& bits, __m256i& k, __m256 v, __m256i vbits, int kv) {
  const __m256 take = _mm256_and_ps(_mm256_cmp_ps(best, best, _CMP_ORD_Q),
                                    _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  const __m256i take_bits = _mm256_castps_si256(take);
  best = _mm256_blendv_ps(best, v, take);
  bits = _mm256_blendv_epi8(bits, vbits, take_bits);
  k = _mm256_blendv_epi8(k, _mm256_set1_epi32(kv), take_bits);
}

MT_TARGET_AVX2_NO_FMA inline __m256i pick8(__m256i k, __m256i g, int kv) {
  return _mm256_and_si256(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(kv)), g);
}

// 8 windows: 16 elements of each input row, 8 outputs and argmax bytes.
template <typename T>
MT_TARGET_AVX2_NO_FMA inline void max2x2_block8(const T* in0, const T* in1, T* out, uint8_t* am) {
  const Pairs8 top = load_pairs8(in0), bottom = load_pairs8(in1);
  __m256 best = top.even;
  __m256i bits = top.even_bits, k = _mm256_setzero_si256();
  argmax_step8(best, bits, k, top.odd, top.odd_bits, 1);
  argmax_step8(best, bits, k, bottom.even, bottom.even_bits, 2);
  argmax_step8(best, bits, k, bottom.odd, bottom.odd_bits, 3);
  if constexpr (std::is_same_v<T, float>)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bits);
  else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), pack8_epi32_to_epi16(bits));
  const __m128i k16 = pack8_epi32_to_epi16(k);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(am), _mm_packus_epi16(k16, k16));
}

// A row's last OW % 8 windows: when the row has 8 or more, one more block ending at the row's end
// (it recomputes a few windows and writes the same values again); a shorter row (a 28 x 28 image
// pools to OW = 14, then 7) goes through zero-padded buffers (AVX2 has no masked 16-bit loads).
template <typename T>
MT_TARGET_AVX2_NO_FMA void max2x2_row_avx2(const T* in0, const T* in1, T* out, uint8_t* am, int64_t OW) {
  int64_t ow = 0;
  for (; ow + 8 <= OW; ow += 8) max2x2_block8(in0 + 2 * ow, in1 + 2 * ow, out + ow, am + ow);
  if (ow == OW) return;
  if (OW >= 8) {
    ow = OW - 8;
    return max2x2_block8(in0 + 2 * ow, in1 + 2 * ow, out + ow, am + ow);
  }
  const size_t n = static_cast<size_t>(OW - ow);
  T t0[16] = {}, t1[16] = {}, o[8];
  uint8_t a[8];
  std::memcpy(t0, in0 + 2 * ow, 2 * n * sizeof(T));
  std::memcpy(t1, in1 + 2 * ow, 2 * n * sizeof(T));
  max2x2_block8(t0, t1, o, a);
  std::memcpy(out + ow, o, n * sizeof(T));
  std::memcpy(am + ow, a, n);
}

// a0 b0 a1 b1 ... a7 b7 into dst[0, 16); unpack works per 128-bit half, permute2x128 puts the
// halves in order.
MT_TARGET_AVX2_NO_FMA inline void store_interleaved8(float* dst, __m256i a, __m256i b) {
  const __m256i lo = _mm256_unpacklo_epi32(a, b), hi = _mm256_unpackhi_epi32(a, b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute2x128_si256(lo, hi, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// 8 windows of the backward: 8 gradients and argmax bytes, 16 elements of each gradient row.
template <typename T>
MT_TARGET_AVX2_NO_FMA inline void max2x2_bwd_block8(const T* gy, const uint8_t* am, T* gx0, T* gx1) {
  const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(am)));
  __m256i g;
  if constexpr (std::is_same_v<T, float>)
    g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gy));
  else
    g = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gy)));
  const __m256i e0 = pick8(k, g, 0), e1 = pick8(k, g, 1), e2 = pick8(k, g, 2), e3 = pick8(k, g, 3);
  if constexpr (std::is_same_v<T, float>) {
    // Interleave (e0, e1) into the 16 values of the top row, (e2, e3) into the bottom row.
    store_interleaved8(gx0, e0, e1);
    store_interleaved8(gx1, e2, e3);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(gx0), _mm256_or_si256(e0, _mm256_slli_epi32(e1, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(gx1), _mm256_or_si256(e2, _mm256_slli_epi32(e3, 16)));
  }
}

template <typename T>
MT_TARGET_AVX2_NO_FMA void max2x2_bwd_row_avx2(const T* gy, const uint8_t* am, T* gx0, T* gx1, int64_t OW) {
  int64_t ow = 0;
  for (; ow + 8 <= OW; ow += 8) max2x2_bwd_block8(gy + ow, am + ow, gx0 + 2 * ow, gx1 + 2 * ow);
  if (ow == OW) return;
  if (OW >= 8) {  // as in the forward: the last block ends at the row's end
    ow = OW - 8;
    return max2x2_bwd_block8(gy + ow, am + ow, gx0 + 2 * ow, gx1 + 2 * ow);
  }
  const size_t n = static_cast<size_t>(OW - ow);
  T g[8] = {}, o0[16], o1[16];
  uint8_t a[8] = {};
  std::memcpy(g, gy + ow, n * sizeof(T));
  std::memcpy(a, am + ow, n);
  max2x2_bwd_block8(g, a, o0, o1);
  std::memcpy(gx0 + 2 * ow, o0, 2 * n * sizeof(T));
  std::memcpy(gx1 + 2 * ow, o1, 2 * n * sizeof(T));
}
#endif

// Runs body(r, in_row) over the N * C * OH output rows r, in_row being the first of its two input
// rows (offset into the [N, C, H, W] input), `row_work` elements per row.
template <typename Body>
void for_2x2_rows(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t row_work, Body&& body) {
  parallel_for(planes * OH, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(row_work, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) body(r, (r / OH) * H * W + (r % OH) * 2 * W);
               });
}

template <typename T>
void max_pool_2x2_fwd(const Tensor& x, const Tensor& y, const Tensor& argmax) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* xp = host_ptr<T>(x);
  T* yp = host_ptr<T>(y);
  uint8_t* ap = host_ptr<uint8_t>(argmax);
  const cpu::Isa level = std::is_same_v<T, double> ? cpu::Isa::kGeneric : pool_level();
  for_2x2_rows(x.size(0) * x.size(1), H, W, OH, 4 * OW, [&](int64_t r, int64_t in) {
    const T *in0 = xp + in, *in1 = xp + in + W;
#if MT_X86_TARGETS
    if constexpr (!std::is_same_v<T, double>) {
      if (level == cpu::Isa::kAvx512) return max2x2_row_avx512(in0, in1, yp + r * OW, ap + r * OW, OW);
      if (level == cpu::Isa::kAvx2) return max2x2_row_avx2(in0, in1, yp + r * OW, ap + r * OW, OW);
    }
#endif
    max2x2_row(in0, in1, yp + r * OW, ap + r * OW, OW);
  });
}

template <typename T>
void max_pool_2x2_bwd(const Tensor& gy, const Tensor& argmax, const Tensor& gx) {
  const int64_t H = gx.size(2), W = gx.size(3), OH = gy.size(2), OW = gy.size(3);
  const T* gp = host_ptr<T>(gy);
  const uint8_t* ap = host_ptr<uint8_t>(argmax);
  T* xp = host_ptr<T>(gx);
  const cpu::Isa level = std::is_same_v<T, double> ? cpu::Isa::kGeneric : pool_level();
  for_2x2_rows(gy.size(0) * gy.size(1), H, W, OH, 4 * OW, [&](int64_t r, int64_t in) {
    T* gx0 = xp + in;
    bool done = false;
#if MT_X86_TARGETS
    if constexpr (!std::is_same_v<T, double>) {
      if (level == cpu::Isa::kAvx512) max2x2_bwd_row_avx512(gp + r * OW, ap + r * OW, gx0, gx0 + W, OW), done = true;
      if (level == cpu::Isa::kAvx2) max2x2_bwd_row_avx2(gp + r * OW, ap + r * OW, gx0, gx0 + W, OW), done = true;
    }
#endif
    if (!done) max2x2_bwd_row(gp + r * OW, ap + r * OW, gx0, gx0 + W, OW);
    // A last odd column (left out by floor rounding) gets no gradient.
    const T zero = convert<T>(0.0f);
    for (int64_t w = 2 * OW; w < W; ++w) gx0[w] = gx0[W + w] = zero;
    // The last output row of a plane also clears the input row that floor rounding left out.
    if (r % OH == OH - 1 && 2 * OH < H) std::fill_n(gx0 + 2 * W, W, zero);
  });
}

// ---- General windows.

template <typename T, typename I>
void max_pool_general_fwd(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
  using F = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  I* ap = host_ptr<I>(argmax);
  for_planes<F>(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, host_ptr<T>(x), H * W, host_ptr<T>(y), OH * OW,
                [&](const F* xr, F* yr, int64_t pl) {
                  I* ar = ap + pl * OH * OW;
                  for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
                    F best = -std::numeric_limits<F>::infinity();
                    int64_t bh = win.h0, bw = win.w0;
                    // Strict '>' keeps the first maximum; a NaN wins and ends the scan (NaN propagates).
                    for (int64_t h = win.h0; h < win.h1; ++h) {
                      for (int64_t w = win.w0; w < win.w1; ++w) {
                        const F v = xr[h * W + w];
                        if (v > best || v != v) {
                          best = v;
                          bh = h, bw = w;
                          if (v != v) h = win.h1, w = win.w1;
                        }
                      }
                    }
                    yr[o] = best;
                    ar[o] = static_cast<I>((bh - win.oh0) * p.kw + (bw - win.ow0));
                  });
                });
}

template <typename T, typename I>
void max_pool_general_bwd(const Tensor& gy, const Tensor& argmax, const Tensor& gx, const Pool2dParams& p) {
  using F = opmath_t<T>;
  const int64_t H = gx.size(2), W = gx.size(3), OH = gy.size(2), OW = gy.size(3);
  const I* ap = host_ptr<I>(argmax);
  for_planes<F>(gx.size(0) * gx.size(1), H * W + OH * OW, host_ptr<T>(gy), OH * OW, host_ptr<T>(gx), H * W,
                [&](const F* gr, F* acc, int64_t pl) {
                  for (int64_t i = 0; i < H * W; ++i) acc[i] = F(0);
                  const I* ar = ap + pl * OH * OW;
                  for (int64_t oh = 0; oh < OH; ++oh) {
                    for (int64_t ow = 0; ow < OW; ++ow) {
                      const int64_t o = oh * OW + ow, k = ar[o];
                      acc[(oh * p.sh - p.ph + k / p.kw) * W + (ow * p.sw - p.pw + k % p.kw)] += gr[o];
                    }
                  }
                });
}

template <typename T>
struct MaxPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
    if (argmax.dtype() == kInt32) return max_pool_general_fwd<T, int32_t>(x, y, argmax, p);
    MT_INTERNAL_ASSERT(argmax.dtype() == kUInt8, "max_pool2d: argmax must be uint8 or int32");
    if (is_2x2_stride_2(p)) return max_pool_2x2_fwd<T>(x, y, argmax);
    max_pool_general_fwd<T, uint8_t>(x, y, argmax, p);
  }
};

template <typename T>
struct MaxPoolBwd {
  static void run(const Tensor& gy, const Tensor& argmax, const Tensor& gx, const Pool2dParams& p) {
    if (argmax.dtype() == kInt32) return max_pool_general_bwd<T, int32_t>(gy, argmax, gx, p);
    MT_INTERNAL_ASSERT(argmax.dtype() == kUInt8, "max_pool2d: argmax must be uint8 or int32");
    if (is_2x2_stride_2(p)) return max_pool_2x2_bwd<T>(gy, argmax, gx);
    max_pool_general_bwd<T, uint8_t>(gy, argmax, gx, p);
  }
};

template <typename T>
struct AvgPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
    for_planes<F>(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, host_ptr<T>(x), H * W, host_ptr<T>(y),
                  OH * OW, [&](const F* xr, F* yr, int64_t) {
                    for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
                      F s = 0;
                      for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) s += xr[h * W + w];
                      yr[o] = s / static_cast<F>(win.divisor);
                    });
                  });
  }
};

template <typename T>
struct AvgPoolBwd {
  static void run(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = gx.size(2), W = gx.size(3), OH = gy.size(2), OW = gy.size(3);
    for_planes<F>(gx.size(0) * gx.size(1), H * W + OH * OW * p.kh * p.kw, host_ptr<T>(gy), OH * OW, host_ptr<T>(gx),
                  H * W, [&](const F* gr, F* acc, int64_t) {
                    for (int64_t i = 0; i < H * W; ++i) acc[i] = F(0);
                    for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
                      const F g = gr[o] / static_cast<F>(win.divisor);
                      for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
                    });
                  });
  }
};

}  // namespace

void register_cpu_pool(const Registry& r) {
  r.floating<MaxPoolFwd>(max_pool2d_fwd);
  r.floating<MaxPoolBwd>(max_pool2d_bwd);
  r.floating<AvgPoolFwd>(avg_pool2d_fwd);
  r.floating<AvgPoolBwd>(avg_pool2d_bwd);
}

}  // namespace mixtrain::kernels
