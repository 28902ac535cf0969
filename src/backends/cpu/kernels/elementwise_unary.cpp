// CPU unary elementwise kernels, forward and fused backward, and the ISA selection of the map loop.
//
// Accumulation/compute dtype: fp32 for fp32, fp16 and bf16 (loaded exactly, rounded once on
// store); fp64 for fp64. Each op is one functor template on the compute type C with
// operator()(x) for the forward and backward(grad_out, saved) for the fused backward; one kernel
// template (Unary<Op>) turns it into a DispatchTable entry per dtype through ew::map.
//
// fp32 exp, tanh and erf are written here as branch-free polynomials (Cephes exp/tanh, Eigen's
// rational erf) so the map loop vectorises them; they are within 2 ulp (exp, tanh) and 7 ulp (erf)
// of the correctly rounded result. fp64 uses the C library, as fp64 runs only in tests and
// gradient checks.
#pragma GCC optimize("no-math-errno", "no-trapping-math")  // see backends/cpu/kernels/elementwise_loops.h

#include <atomic>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/elementwise_loops.h"
#include "backends/cpu/kernels/register.h"
#include "backends/cpu/kernels/fast_math.h"
#include "kernels/elementwise.h"

namespace mixtrain::kernels {
namespace {

namespace math {

// e^x: x = n ln2 + r and e^r as in fastmath::exp_parts (Cephes expf), 2^n built in two
// exponent-field halves so that results in the subnormal range and overflow to inf come out
// right. NaN propagates through r.
inline float exp(float x) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 88.8f ? 88.8f : x;
  const fastmath::ExpParts e = fastmath::exp_parts(x);
  const int32_t ni = static_cast<int32_t>(e.n == e.n ? e.n : 0.0f);
  const int32_t half = ni >> 1;
  return e.exp_r * fastmath::pow2i(half) * fastmath::pow2i(ni - half);
}
inline double exp(double x) { return std::exp(x); }

// tanh: an odd polynomial below 0.625 (where 1 - 2/(e^2x + 1) would cancel), the exp form above.
inline float tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  const float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) *
          z * x +
      x;
  const float big = 1.0f - 2.0f / (exp(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : (x < 0.0f ? -big : big);
}
inline double tanh(double x) { return std::tanh(x); }

// erf: odd/even rational approximation on [-4, 4] (erf is +-1 in fp32 outside).
inline float erf(float a) {
  float x = a < -4.0f ? -4.0f : a;
  x = x > 4.0f ? 4.0f : x;
  const float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p - 2.10102402082508e-06f;
  p = x2 * p - 5.69250639462346e-05f;
  p = x2 * p - 7.34990630326855e-04f;
  p = x2 * p - 2.95459980854025e-03f;
  p = x2 * p - 1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
  q = x2 * q - 1.68282697438203e-03f;
  q = x2 * q - 7.37332916720468e-03f;
  q = x2 * q - 1.42647390514189e-02f;
  return x * p / q;
}
inline double erf(double x) { return std::erf(x); }

template <typename C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}

}  // namespace math

// ---- Functors. backward(g, v): v is the saved output y or input x, as elementwise.h lists. ----

template <typename C>
struct neg_op {
  explicit neg_op(Scalars) {}
  C operator()(C x) const { return -x; }
};

template <typename C>
struct exp_op {
  explicit exp_op(Scalars) {}
  C operator()(C x) const { return math::exp(x); }
  C backward(C g, C y) const { return g * y; }
};

template <typename C>
struct log_op {
  explicit log_op(Scalars) {}
  C operator()(C x) const { return std::log(x); }
  C backward(C g, C x) const { return g / x; }
};

template <typename C>
struct sqrt_op {
  explicit sqrt_op(Scalars) {}
  C operator()(C x) const { return std::sqrt(x); }
  C backward(C g, C y) const { return g / (C(2) * y); }
};

template <typename C>
struct rsqrt_op {
  explicit rsqrt_op(Scalars) {}
  C operator()(C x) const { return C(1) / std::sqrt(x); }
  C backward(C g, C y) const { return C(-0.5) * g * y * y * y; }  // d/dx x^-1/2 = -x^-3/2 / 2
};

template <typename C>
struct tanh_op {
  explicit tanh_op(Scalars) {}
  C operator()(C x) const { return math::tanh(x); }
  C backward(C g, C y) const { return g * (C(1) - y * y); }
};

template <typename C>
struct sigmoid_op {
  explicit sigmoid_op(Scalars) {}
  C operator()(C x) const { return math::sigmoid(x); }
  C backward(C g, C y) const { return g * y * (C(1) - y); }
};

template <typename C>
struct relu_op {
  explicit relu_op(Scalars) {}
  // Written so that NaN propagates (x < 0 is false for NaN), as PyTorch's relu does.
  C operator()(C x) const { return x < C(0) ? C(0) : x; }
  // PyTorch's threshold_backward on the output: no gradient where y <= 0.
  C backward(C g, C y) const { return y > C(0) ? g : C(0); }
};

template <typename C>
struct gelu_op {  // x * Phi(x), Phi the standard normal CDF through erf
  explicit gelu_op(Scalars) {}
  static constexpr C kSqrtHalf = C(0.70710678118654752440);
  static constexpr C kInvSqrt2Pi = C(0.39894228040143267794);
  C operator()(C x) const { return forward_from_erf(x, math::erf(x * kSqrtHalf)); }
  C backward(C g, C x) const { return backward_from_erf(g, x, math::erf(x * kSqrtHalf)); }
  C forward_from_erf(C x, C e) const { return C(0.5) * x * (C(1) + e); }
  C backward_from_erf(C g, C x, C e) const {
    const C cdf = C(0.5) * (C(1) + e);
    const C pdf = math::exp(C(-0.5) * x * x) * kInvSqrt2Pi;
    return g * (cdf + x * pdf);
  }
};

template <typename C>
struct gelu_tanh_op {  // PyTorch's approximate='tanh' formula and its backward
  explicit gelu_tanh_op(Scalars) {}
  static constexpr C kBeta = C(0.79788456080286535588);  // sqrt(2 / pi)
  static constexpr C kKappa = C(0.044715);
  C operator()(C x) const { return C(0.5) * x * (C(1) + math::tanh(kBeta * (x + kKappa * x * x * x))); }
  C backward(C g, C x) const {
    const C x2 = x * x;
    const C t = math::tanh(kBeta * (x + kKappa * x2 * x));
    const C left = C(0.5) * x;
    const C right = C(1) + t;
    const C dright = left * (C(1) - t * t) * kBeta * (C(1) + C(3) * kKappa * x2);
    return g * (C(0.5) * right + dright);
  }
};

template <typename C>
struct silu_op {
  explicit silu_op(Scalars) {}
  C operator()(C x) const { return x / (C(1) + math::exp(-x)); }
  C backward(C g, C x) const {
    const C s = math::sigmoid(x);
    return g * s * (C(1) + x * (C(1) - s));
  }
};

template <typename C>
struct clamp_op {
  explicit clamp_op(Scalars s) : lo(static_cast<C>(s.a)), hi(static_cast<C>(s.b)) {}
  C lo, hi;
  // NaN propagates (both comparisons are false).
  C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
  // PyTorch passes the gradient on the boundary: mask lo <= x <= hi.
  C backward(C g, C x) const { return (x >= lo && x <= hi) ? g : C(0); }
};

template <typename C>
struct add_scalar_op {
  explicit add_scalar_op(Scalars s) : v(static_cast<C>(s.a)) {}
  C v;
  C operator()(C x) const { return x + v; }
};

template <typename C>
struct mul_scalar_op {
  explicit mul_scalar_op(Scalars s) : v(static_cast<C>(s.a)) {}
  C v;
  C operator()(C x) const { return x * v; }
};

template <typename C>
struct square_op {
  explicit square_op(Scalars) {}
  C operator()(C x) const { return x * x; }
  C backward(C g, C x) const { return g * C(2) * x; }
};

template <typename C>
struct pow_scalar_op {
  explicit pow_scalar_op(Scalars s) : e(static_cast<C>(s.a)) {}
  C e;
  C operator()(C x) const { return std::pow(x, e); }
  // PyTorch: zero gradient for exponent 0 (also where x^-1 would be inf).
  C backward(C g, C x) const { return e == C(0) ? C(0) : g * e * std::pow(x, e - C(1)); }
};

// ---- One kernel template per signature. ----

template <template <typename> class Op>
struct Unary {
  template <typename T>
  struct Forward {
    static void run(const Tensor& out, const Tensor& x, Scalars s) { ew::map<T>(Op<opmath_t<T>>(s), out, x); }
  };
  template <typename T>
  struct Backward {
    static void run(const Tensor& grad_in, const Tensor& grad_out, const Tensor& saved, Scalars s) {
      using C = opmath_t<T>;
      const Op<C> op(s);
      ew::map<T>([op](C g, C v) { return op.backward(g, v); }, grad_in, grad_out, saved);
    }
  };
};


// gelu(x) and its input gradient from one erf per element (kernels/elementwise.h); the same
// gelu_op arithmetic as the forward and backward kernels, so the same bits.
template <typename T>
struct GeluForwardBackward {
  static void run(const Tensor& y, const Tensor& grad_in, const Tensor& grad_out, const Tensor& x) {
    using C = opmath_t<T>;
    const gelu_op<C> op(Scalars{});
    ew::map2<T>(
        [op](C g, C v) {
          const C e = math::erf(v * gelu_op<C>::kSqrtHalf);
          return std::pair<C, C>(op.forward_from_erf(v, e), op.backward_from_erf(g, v, e));
        },
        y, grad_in, grad_out, x);
  }
};

}  // namespace

void register_cpu_unary(const Registry& r) {
  r.floating<GeluForwardBackward>(gelu_forward_backward_table);
#define MT_REGISTER_FORWARD(Name, name) r.floating<Unary<name##_op>::Forward>(unary_forward_tables[static_cast<int>(UnaryOp::k##Name)]);
  MT_FORALL_UNARY_KERNELS(MT_REGISTER_FORWARD)
#undef MT_REGISTER_FORWARD
#define MT_REGISTER_BACKWARD(Name, name) \
  r.floating<Unary<name##_op>::Backward>(unary_backward_tables[static_cast<int>(UnaryOp::k##Name)]);
  // Ops whose backward is one fused pass (neg, add_scalar and mul_scalar compose other ops).
  MT_REGISTER_BACKWARD(Exp, exp)
  MT_REGISTER_BACKWARD(Log, log)
  MT_REGISTER_BACKWARD(Sqrt, sqrt)
  MT_REGISTER_BACKWARD(Rsqrt, rsqrt)
  MT_REGISTER_BACKWARD(Tanh, tanh)
  MT_REGISTER_BACKWARD(Sigmoid, sigmoid)
  MT_REGISTER_BACKWARD(Relu, relu)
  MT_REGISTER_BACKWARD(Gelu, gelu)
  MT_REGISTER_BACKWARD(GeluTanh, gelu_tanh)
  MT_REGISTER_BACKWARD(Silu, silu)
  MT_REGISTER_BACKWARD(Clamp, clamp)
  MT_REGISTER_BACKWARD(Square, square)
  MT_REGISTER_BACKWARD(PowScalar, pow_scalar)
#undef MT_REGISTER_BACKWARD
}

}  // namespace mixtrain::kernels
