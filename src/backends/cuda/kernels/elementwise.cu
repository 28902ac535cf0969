// CUDA elementwise kernels (kernels/elementwise.h): unary forward and fused backward, binary
// arithmetic, the fused binary-backward pieces, selection and comparisons. Operands of one shape
// with any strides (broadcast inputs are stride-0 views); fp32 math for 16-bit storage.
//
// The formulas are the CPU kernels' (src/backends/cpu/kernels/elementwise_unary.cpp); the transcendental
// functions are CUDA's (within 2 ulp of the CPU's), so results agree to the tolerances of
// tests/cuda, not bit for bit. Add, mul, div and selection are exact and agree bit for bit.
// Arithmetic on contiguous, 16-byte aligned operands moves 16 bytes per access (map_elements in
// common.cuh); other layouts go element by element.
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/elementwise.h"

namespace mixtrain::kernels::cuda {
namespace {

// ---- unary ops: forward f(x) and backward(g, saved) as in the CPU file.
template <typename C>
struct neg_op {
  __host__ explicit neg_op(Scalars) {}
  __device__ C operator()(C x) const { return -x; }
  __device__ C backward(C g, C) const { return -g; }
};
template <typename C>
struct exp_op {
  __host__ explicit exp_op(Scalars) {}
  __device__ C operator()(C x) const { return exp(x); }
  __device__ C backward(C g, C y) const { return g * y; }
};
template <typename C>
struct log_op {
  __host__ explicit log_op(Scalars) {}
  __device__ C operator()(C x) const { return log(x); }
  __device__ C backward(C g, C x) const { return g / x; }
};
template <typename C>
struct sqrt_op {
  __host__ explicit sqrt_op(Scalars) {}
  __device__ C operator()(C x) const { return sqrt(x); }
  __device__ C backward(C g, C y) const { return g / (C(2) * y); }
};
template <typename C>
struct rsqrt_op {
  __host__ explicit rsqrt_op(Scalars) {}
  __device__ C operator()(C x) const { return C(1) / sqrt(x); }
  __device__ C backward(C g, C y) const { return C(-0.5) * g * y * y * y; }
};
template <typename C>
struct tanh_op {
  __host__ explicit tanh_op(Scalars) {}
  __device__ C operator()(C x) const { return tanh(x); }
  __device__ C backward(C g, C y) const { return g * (C(1) - y * y); }
};
template <typename C>
struct sigmoid_op {
  __host__ explicit sigmoid_op(Scalars) {}
  __device__ C operator()(C x) const { return C(1) / (C(1) + exp(-x)); }
  __device__ C backward(C g, C y) const { return g * y * (C(1) - y); }
};
template <typename C>
struct relu_op {
  __host__ explicit relu_op(Scalars) {}
  __device__ C operator()(C x) const { return x < C(0) ? C(0) : x; }  // NaN propagates
  __device__ C backward(C g, C y) const { return y > C(0) ? g : C(0); }
};
template <typename C>
struct gelu_op {
  __host__ explicit gelu_op(Scalars) {}
  __device__ C operator()(C x) const { return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440))); }
  __device__ C backward(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
    const C pdf = exp(C(-0.5) * x * x) * C(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};
template <typename C>
struct gelu_tanh_op {
  __host__ explicit gelu_tanh_op(Scalars) {}
  static constexpr double kBeta = 0.79788456080286535588, kKappa = 0.044715;
  __device__ C operator()(C x) const { return C(0.5) * x * (C(1) + tanh(C(kBeta) * (x + C(kKappa) * x * x * x))); }
  __device__ C backward(C g, C x) const {
    const C x2 = x * x;
    const C t = tanh(C(kBeta) * (x + C(kKappa) * x2 * x));
    const C left = C(0.5) * x, right = C(1) + t;
    const C dright = left * (C(1) - t * t) * C(kBeta) * (C(1) + C(3) * C(kKappa) * x2);
    return g * (C(0.5) * right + dright);
  }
};
template <typename C>
struct silu_op {
  __host__ explicit silu_op(Scalars) {}
  __device__ C operator()(C x) const { return x / (C(1) + exp(-x)); }
  __device__ C backward(C g, C x) const {
    const C s = C(1) / (C(1) + exp(-x));
    return g * s * (C(1) + x * (C(1) - s));
  }
};
template <typename C>
struct clamp_op {
  __host__ explicit clamp_op(Scalars s) : lo(static_cast<C>(s.a)), hi(static_cast<C>(s.b)) {}
  C lo, hi;
  __device__ C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
  __device__ C backward(C g, C x) const { return (x >= lo && x <= hi) ? g : C(0); }
};
template <typename C>
struct add_scalar_op {
  __host__ explicit add_scalar_op(Scalars s) : v(static_cast<C>(s.a)) {}
  C v;
  __device__ C operator()(C x) const { return x + v; }
  __device__ C backward(C g, C) const { return g; }
};
template <typename C>
struct mul_scalar_op {
  __host__ explicit mul_scalar_op(Scalars s) : v(static_cast<C>(s.a)) {}
  C v;
  __device__ C operator()(C x) const { return x * v; }
  __device__ C backward(C g, C) const { return g * v; }
};
template <typename C>
struct square_op {
  __host__ explicit square_op(Scalars) {}
  __device__ C operator()(C x) const { return x * x; }
  __device__ C backward(C g, C x) const { return g * C(2) * x; }
};
template <typename C>
struct pow_scalar_op {
  __host__ explicit pow_scalar_op(Scalars s) : e(static_cast<C>(s.a)) {}
  C e;
  __device__ C operator()(C x) const { return pow(x, e); }
  __device__ C backward(C g, C x) const { return e == C(0) ? C(0) : g * e * pow(x, e - C(1)); }
};

template <template <typename> class Op>
struct Unary {
  template <typename T>
  struct Forward {
    static void run(const Tensor& out, const Tensor& x, Scalars s) {
      using D = dev_t<T>;
      using C = opmath_t<D>;
      const Op<C> op(s);
      map_elements<D, 1>(out, {&x}, [=] __device__(C v) { return op(v); }, "unary op");
    }
  };
  template <typename T>
  struct Backward {
    static void run(const Tensor& grad_in, const Tensor& grad_out, const Tensor& saved, Scalars s) {
      using D = dev_t<T>;
      using C = opmath_t<D>;
      const Op<C> op(s);
      map_elements<D, 2>(grad_in, {&grad_out, &saved}, [=] __device__(C g, C v) { return op.backward(g, v); },
                         "unary op backward");
    }
  };
};

// ---- gelu's forward and input gradient in one pass (kernels/elementwise.h): one erf per element,
// the same expressions as gelu_op's forward and backward, so the same values as the two kernels.
// grad_in may alias grad_out: each thread reads its element before writing it.
template <typename T>
struct GeluForwardBackward {
  static void run(const Tensor& y, const Tensor& grad_in, const Tensor& grad_out, const Tensor& x) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    D* py = static_cast<D*>(y.raw_data());
    D* pgi = static_cast<D*>(grad_in.raw_data());
    const D* pgo = static_cast<const D*>(grad_out.raw_data());
    const D* px = static_cast<const D*>(x.raw_data());
    for_each_index(y.device(), y.numel(), [=] __device__(int64_t i) {
      const C v = load(px + i), g = load(pgo + i);
      const C e = erf(v * C(0.70710678118654752440));
      const C cdf = C(0.5) * (C(1) + e);
      const C pdf = exp(C(-0.5) * v * v) * C(0.39894228040143267794);
      py[i] = round_to<D>(C(0.5) * v * (C(1) + e));
      pgi[i] = round_to<D>(g * (cdf + v * pdf));
    }, "gelu forward and backward");
  }
};

// ---- binary and ternary: out = f(a, b) / f(g, a, b), one rounding.
struct AddOp {
  template <typename C>
  __device__ C operator()(C a, C b, C alpha) const { return a + alpha * b; }
};
struct MulOp {
  template <typename C>
  __device__ C operator()(C a, C b, C) const { return a * b; }
};
struct DivOp {
  template <typename C>
  __device__ C operator()(C a, C b, C) const { return a / b; }
};
struct PowOp {
  template <typename C>
  __device__ C operator()(C a, C b, C) const { return pow(a, b); }
};

template <typename Op>
struct Binary {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& a, const Tensor& b, Scalars s) {
      using D = dev_t<T>;
      using C = opmath_t<D>;
      const C alpha = static_cast<C>(s.a);
      map_elements<D, 2>(out, {&a, &b}, [=] __device__(C x, C y) { return Op{}(x, y, alpha); }, "binary op");
    }
  };
};

struct DivGradB {
  template <typename C>
  __device__ C operator()(C g, C a, C b) const { return -g * a / (b * b); }
};
struct PowGradBase {
  template <typename C>
  __device__ C operator()(C g, C a, C b) const { return b == C(0) ? C(0) : g * b * pow(a, b - C(1)); }
};
struct PowGradExponent {
  template <typename C>
  __device__ C operator()(C g, C a, C b) const { return (a == C(0) && b >= C(0)) ? C(0) : g * pow(a, b) * log(a); }
};

template <typename Op>
struct Ternary {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& g, const Tensor& a, const Tensor& b) {
      using D = dev_t<T>;
      using C = opmath_t<D>;
      map_elements<D, 3>(out, {&g, &a, &b}, [=] __device__(C gv, C x, C y) { return Op{}(gv, x, y); },
                         "binary op backward");
    }
  };
};

// ---- selection and comparison (bit copies; comparisons in the compute type)
template <typename T>
struct Where {
  static void run(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
    using D = dev_t<T>;
    const StridedView o = view_of(out), c = view_of(cond), va = view_of(a), vb = view_of(b);
    for_each_index(out.device(), out.numel(), [=] __device__(int64_t i) {
      *at<D>(o, i) = *at<bool>(c, i) ? *at<D>(va, i) : *at<D>(vb, i);
    }, "where");
  }
};

template <typename T>
struct MaskedFill {
  static void run(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
    using D = dev_t<T>;
    const D v = scalar_as<T>(value);
    const StridedView o = view_of(out), vx = view_of(x), m = view_of(mask);
    for_each_index(out.device(), out.numel(), [=] __device__(int64_t i) {
      *at<D>(o, i) = *at<bool>(m, i) ? v : *at<D>(vx, i);
    }, "masked_fill");
  }
};

template <typename T>
struct Eq {
  static void run(const Tensor& out, const Tensor& a, const Tensor& b) {
    using D = dev_t<T>;
    const StridedView o = view_of(out), va = view_of(a), vb = view_of(b);
    for_each_index(out.device(), out.numel(), [=] __device__(int64_t i) {
      *at<bool>(o, i) = load(at<D>(va, i)) == load(at<D>(vb, i));
    }, "eq");
  }
};

// The scalar in the compute type: fp32 for fp32 and 16-bit, fp64 for fp64 and integers.
template <bool kGreater>
struct CompareScalar {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& a, double b) {
      using D = dev_t<T>;
      using C = std::conditional_t<is_half_v<D> || std::is_same_v<D, float>, float, double>;
      const C s = static_cast<C>(b);
      const StridedView o = view_of(out), va = view_of(a);
      for_each_index(out.device(), out.numel(), [=] __device__(int64_t i) {
        const C x = static_cast<C>(load(at<D>(va, i)));
        *at<bool>(o, i) = kGreater ? x > s : x < s;
      }, kGreater ? "gt" : "lt");
    }
  };
};

}  // namespace

void register_cuda_elementwise(const Registry& r) {
#define MT_CUDA_UNARY(Name, name)                                                                            \
  r.floating<Unary<name##_op>::Forward>(unary_forward_tables[static_cast<int>(UnaryOp::k##Name)]); \
  r.floating<Unary<name##_op>::Backward>(unary_backward_tables[static_cast<int>(UnaryOp::k##Name)]);
  MT_FORALL_UNARY_KERNELS(MT_CUDA_UNARY)
#undef MT_CUDA_UNARY
  r.floating<Binary<AddOp>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kAdd)]);
  r.floating<Binary<MulOp>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kMul)]);
  r.floating<Binary<DivOp>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kDiv)]);
  r.floating<Binary<PowOp>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kPow)]);
  r.floating<Ternary<DivGradB>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kDivGradB)]);
  r.floating<Ternary<PowGradBase>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kPowGradBase)]);
  r.floating<Ternary<PowGradExponent>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kPowGradExponent)]);
  r.floating<GeluForwardBackward>(gelu_forward_backward_table);
  r.all_dtypes<Where>(where_table);
  r.all_dtypes<MaskedFill>(masked_fill_table);
  r.all_dtypes<Eq>(eq_table);
  r.all_dtypes<CompareScalar<true>::Kernel>(compare_scalar_tables[static_cast<int>(CompareOp::kGt)]);
  r.all_dtypes<CompareScalar<false>::Kernel>(compare_scalar_tables[static_cast<int>(CompareOp::kLt)]);
}

}  // namespace mixtrain::kernels::cuda
