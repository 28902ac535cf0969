// Row primitives for the nn and loss kernels (see nn_vec.h).
//
// Accumulation: fp32 for the float rows, fp64 for the double rows. Each primitive is written once as
// a template; the float instantiation is wrapped in a function built three times (AVX-512, AVX2,
// baseline) and chosen per call from cpu::isa() (the CPU's level under the ISA cap of
// mixtrain/cpu.h), the double one is built once. `omp simd reduction` lets the compiler vectorise
// the sums without -ffast-math. GCC builds this file with -fno-trapping-math (CMakeLists.txt):
// without it, it leaves the exp loops scalar at every level below AVX-512, because it will not
// if-convert their range selects next to a store. The AVX2 and AVX-512 builds may contract
// a * b + c into FMAs and sum in their own vector order, so results can differ in the last bits
// between ISA levels, never between thread counts or runs on one machine.
#include "core/isa_target.h"
#include "backends/cpu/kernels/nn_vec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/fast_math.h"

#include "mixtrain/cpu.h"

// The x86-64-v3 (AVX2, FMA, F16C, BMI) and x86-64-v4 (+ AVX-512 F/BW/VL/DQ/CD) micro-architecture
// levels, the same levels as cpu::Isa::kAvx2 and kAvx512.


namespace mixtrain::kernels::nnvec {
namespace {

// exp for fp32 rows, vectorisable (libm's expf is a call the compiler cannot vectorise): 2^n * e^r
// as in fastmath::exp_parts (Cephes expf), relative error below 2 ulp. Below -87.34 (where exp
// leaves the fp32 normal range, and for -inf) the result is 0; above 88 it is inf; NaN stays NaN.
// Softmax and cross-entropy only ever call it on x - max <= 0.
[[gnu::always_inline]] inline float fast_exp(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.0f;
  const float xc = std::min(std::max(x, kLo), kHi);
  const fastmath::ExpParts e = fastmath::exp_parts(xc);
  float res = e.exp_r * fastmath::pow2i(static_cast<int32_t>(e.n));
  res = x < kLo ? 0.0f : res;
  res = x > kHi ? std::numeric_limits<float>::infinity() : res;
  return x != x ? x : res;
}

template <typename F>
[[gnu::always_inline]] inline F vexp(F x) {
  if constexpr (std::is_same_v<F, float>) {
    return fast_exp(x);
  } else {
    return std::exp(x);
  }
}

template <typename F>
[[gnu::always_inline]] inline F max_impl(const F* x, int64_t n) {
  F m = -std::numeric_limits<F>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? std::numeric_limits<F>::quiet_NaN() : m;
}

template <typename F>
[[gnu::always_inline]] inline F sum_impl(const F* x, int64_t n) {
  F s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

template <typename F>
[[gnu::always_inline]] inline F dot_impl(const F* a, const F* b, int64_t n) {
  F s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <typename F>
[[gnu::always_inline]] inline F exp_sum_impl(const F* x, F shift, F* out, int64_t n) {
  F s = 0;
  if (out) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      const F e = vexp(x[i] - shift);
      out[i] = e;
      s += e;
    }
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += vexp(x[i] - shift);
  }
  return s;
}

template <typename F>
[[gnu::always_inline]] inline void affine_impl(const F* x, F a, F b, F* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + b;
}

template <typename F>
[[gnu::always_inline]] inline void sub2_impl(const F* x, F a, F b, F* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - a) - b;
}

template <typename F>
[[gnu::always_inline]] inline void exp_affine_impl(const F* x, F a, F b, F sub, F mul, F* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = (vexp((x[i] - a) - b) - sub) * mul;
}

template <typename F>
[[gnu::always_inline]] inline void softmax_bwd_impl(const F* y, const F* gy, F d, F scale, F* gx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = scale * y[i] * (gy[i] - d);
}

template <typename F>
[[gnu::always_inline]] inline void log_softmax_bwd_impl(const F* y, const F* gy, F gsum, F* gx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] - vexp(y[i]) * gsum;
}

template <typename F>
[[gnu::always_inline]] inline F sq_dev_sum_impl(const F* x, F mean, int64_t n) {
  F s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

template <typename F>
[[gnu::always_inline]] inline void norm_affine_impl(const F* x, F mean, F rstd, const F* w, const F* b, F* out,
                                                    int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

// Two passes over the row, the parameter partials riding along when kParams: db on the first, dw
// on the second (which computes the normalised input anyway). Each partial gets the same
// expression as in a pass of its own, so the bits do not depend on where it is summed.
template <bool kParams, typename F>
[[gnu::always_inline]] inline void layer_norm_bwd_row(const F* x, const F* gy, const F* w, F mean, F rstd, F* gx,
                                                      F* dw, F* db, int64_t n) {
  F sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t i = 0; i < n; ++i) {
    const F g = gy[i] * w[i];
    sum_g += g;
    sum_gx += g * ((x[i] - mean) * rstd);
    if constexpr (kParams) db[i] += gy[i];
  }
  const F inv_n = F(1) / static_cast<F>(n);
  const F a = sum_g * inv_n, c = sum_gx * inv_n;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const F xh = (x[i] - mean) * rstd;
    gx[i] = rstd * (gy[i] * w[i] - a - xh * c);
    if constexpr (kParams) dw[i] += gy[i] * xh;
  }
}

template <typename F>
[[gnu::always_inline]] inline void layer_norm_bwd_impl(const F* x, const F* gy, const F* w, F mean, F rstd, F* gx,
                                                       F* dw, F* db, int64_t n) {
  if (dw != nullptr)
    layer_norm_bwd_row<true>(x, gy, w, mean, rstd, gx, dw, db, n);
  else
    layer_norm_bwd_row<false>(x, gy, w, mean, rstd, gx, dw, db, n);
}

}  // namespace

// Per primitive: one float entry point that calls the build for cpu::isa(), and one double entry
// point. The per-call choice costs a load and two compares next to a row of work.
#if MT_X86_TARGETS
#define MT_NNVEC_DEFINE(ret, name, params, args)                                     \
  namespace {                                                                        \
  MT_TARGET_AVX512 ret<float> name##_v4 params(float) { return name##_impl<float> args; } \
  MT_TARGET_AVX2 ret<float> name##_v3 params(float) { return name##_impl<float> args; } \
  }                                                                                  \
  ret<float> name params(float) {                                                    \
    const cpu::Isa isa = cpu::isa();                                                 \
    if (isa >= cpu::Isa::kAvx512) return name##_v4 args;                             \
    if (isa >= cpu::Isa::kAvx2) return name##_v3 args;                               \
    return name##_impl<float> args;                                                  \
  }                                                                                  \
  ret<double> name params(double) { return name##_impl<double> args; }
#else
#define MT_NNVEC_DEFINE(ret, name, params, args)                            \
  ret<float> name params(float) { return name##_impl<float> args; } \
  ret<double> name params(double) { return name##_impl<double> args; }
#endif

template <typename F>
using Ret = F;
template <typename F>
using Void = void;

#define MT_P_MAX(F) (const F* x, int64_t n)
#define MT_P_SUM(F) (const F* x, int64_t n)
#define MT_P_DOT(F) (const F* a, const F* b, int64_t n)
#define MT_P_EXP_SUM(F) (const F* x, F shift, F* out, int64_t n)
#define MT_P_AFFINE(F) (const F* x, F a, F b, F* out, int64_t n)
#define MT_P_SUB2(F) (const F* x, F a, F b, F* out, int64_t n)
#define MT_P_EXP_AFFINE(F) (const F* x, F a, F b, F sub, F mul, F* out, int64_t n)
#define MT_P_SOFTMAX_BWD(F) (const F* y, const F* gy, F dot, F scale, F* gx, int64_t n)
#define MT_P_LOG_SOFTMAX_BWD(F) (const F* y, const F* gy, F gsum, F* gx, int64_t n)
#define MT_P_SQ_DEV_SUM(F) (const F* x, F mean, int64_t n)
#define MT_P_NORM_AFFINE(F) (const F* x, F mean, F rstd, const F* w, const F* b, F* out, int64_t n)
#define MT_P_LAYER_NORM_BWD(F) \
  (const F* x, const F* gy, const F* w, F mean, F rstd, F* gx, F* dw, F* db, int64_t n)

MT_NNVEC_DEFINE(Ret, max, MT_P_MAX, (x, n))
MT_NNVEC_DEFINE(Ret, sum, MT_P_SUM, (x, n))
MT_NNVEC_DEFINE(Ret, dot, MT_P_DOT, (a, b, n))
MT_NNVEC_DEFINE(Ret, exp_sum, MT_P_EXP_SUM, (x, shift, out, n))
MT_NNVEC_DEFINE(Void, affine, MT_P_AFFINE, (x, a, b, out, n))
MT_NNVEC_DEFINE(Void, sub2, MT_P_SUB2, (x, a, b, out, n))
MT_NNVEC_DEFINE(Void, exp_affine, MT_P_EXP_AFFINE, (x, a, b, sub, mul, out, n))
MT_NNVEC_DEFINE(Void, softmax_bwd, MT_P_SOFTMAX_BWD, (y, gy, dot, scale, gx, n))
MT_NNVEC_DEFINE(Void, log_softmax_bwd, MT_P_LOG_SOFTMAX_BWD, (y, gy, gsum, gx, n))
MT_NNVEC_DEFINE(Ret, sq_dev_sum, MT_P_SQ_DEV_SUM, (x, mean, n))
MT_NNVEC_DEFINE(Void, norm_affine, MT_P_NORM_AFFINE, (x, mean, rstd, w, b, out, n))
MT_NNVEC_DEFINE(Void, layer_norm_bwd, MT_P_LAYER_NORM_BWD, (x, gy, w, mean, rstd, gx, dw, db, n))

}  // namespace mixtrain::kernels::nnvec
