// CPU binary elementwise kernels (add/sub, mul, div, pow), selection (where, masked_fill) and
// comparisons (eq, gt, lt).
//
// Accumulation/compute dtype: arithmetic runs in opmath_t (fp32 for fp32, fp16 and bf16; fp64 for
// fp64) through ew::map and rounds once on store. Selection copies stored values bit for bit (no
// compute type). Comparisons compare in fp32 for 16-bit inputs, in the storage type otherwise
// (integers against a double scalar in fp64).
#pragma GCC optimize("no-math-errno", "no-trapping-math")  // see backends/cpu/kernels/elementwise_loops.h

#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/elementwise_loops.h"
#include "backends/cpu/kernels/register.h"
#include "kernels/elementwise.h"
#include "backends/cpu/kernels/host_ptr.h"

namespace mixtrain::kernels {
namespace {

// ---- Arithmetic: one functor per op on the compute type C. ----

template <typename C>
struct add_op {  // a + alpha * b (sub passes -alpha)
  explicit add_op(Scalars s) : alpha(static_cast<C>(s.a)) {}
  C alpha;
  C operator()(C a, C b) const { return a + alpha * b; }
};

template <typename C>
struct mul_op {
  explicit mul_op(Scalars) {}
  C operator()(C a, C b) const { return a * b; }
};

template <typename C>
struct div_op {
  explicit div_op(Scalars) {}
  C operator()(C a, C b) const { return a / b; }
};

template <typename C>
struct pow_op {
  explicit pow_op(Scalars) {}
  C operator()(C a, C b) const { return std::pow(a, b); }
};

template <template <typename> class Op>
struct Binary {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& a, const Tensor& b, Scalars s) {
      ew::map<T>(Op<opmath_t<T>>(s), out, a, b);
    }
  };
};

template <typename C>
struct div_grad_b_op {
  C operator()(C g, C a, C b) const { return -(g * a) / (b * b); }
};

template <typename C>
struct pow_grad_base_op {
  C operator()(C g, C a, C b) const { return b == C(0) ? C(0) : g * b * std::pow(a, b - C(1)); }
};

template <typename C>
struct pow_grad_exponent_op {
  C operator()(C g, C a, C b) const { return (a == C(0) && b >= C(0)) ? C(0) : g * std::pow(a, b) * std::log(a); }
};

template <template <typename> class Op>
struct Ternary {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& g, const Tensor& a, const Tensor& b) {
      ew::map<T>(Op<opmath_t<T>>(), out, g, a, b);
    }
  };
};

// ---- Selection and comparison: a strided loop over operands of mixed element types. ----

// The type values are compared in: fp32 for 16-bit storage, the storage type otherwise.
template <typename T>
using compare_t = std::conditional_t<ew::is_half_v<T>, float, T>;
// The type a value is compared with a double scalar in: as compare_t, but fp64 for integers.
template <typename T>
using compare_scalar_t = std::conditional_t<std::is_integral_v<T>, double, compare_t<T>>;

// out[i] = f(in_0[i], ...) with raw (unconverted) element access; Out and Ins are storage types.
template <typename Out, typename... Ins, typename F>
void raw_loop(const F& f, const Tensor& out, TensorFor<Ins>... ins) {
  constexpr int N = 1 + sizeof...(Ins);
  const int64_t n = out.numel();
  if (n == 0) return;
  Out* const o = static_cast<Out*>(host_data(out));
  const std::tuple<const Ins*...> p{static_cast<const Ins*>(host_data(ins))...};
  StridedLayout<N> layout(out.shape(), {&out.strides(), &ins.strides()...});
  parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) {
    strided_ranges<N>(
        layout, b, e, [&](const std::array<int64_t, N>& off, int64_t count, const std::array<int64_t, N>& st) {
          [&]<size_t... I>(std::index_sequence<I...>) {
            Out* dst = o + off[0];
            const auto src = std::make_tuple((std::get<I>(p) + off[I + 1])...);
            if (((st[I + 1] == 1) && ...) && st[0] == 1) {  // the contiguous case as its own loop, so it vectorises
              for (int64_t i = 0; i < count; ++i) dst[i] = f(std::get<I>(src)[i]...);
            } else {
              for (int64_t i = 0; i < count; ++i) dst[i * st[0]] = f(std::get<I>(src)[i * st[I + 1]]...);
            }
          }
          (std::index_sequence_for<Ins...>{});
        });
  });
}

template <typename T>
struct WhereKernel {
  static void run(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
    raw_loop<T, bool, T, T>([](bool c, T x, T y) { return c ? x : y; }, out, cond, a, b);
  }
};

template <typename T>
struct MaskedFillKernel {
  static void run(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
    const T v = convert<T>(value);
    raw_loop<T, T, bool>([v](T x, bool m) { return m ? v : x; }, out, x, mask);
  }
};

template <typename T>
struct EqKernel {
  static void run(const Tensor& out, const Tensor& a, const Tensor& b) {
    using C = compare_t<T>;
    raw_loop<bool, T, T>([](T x, T y) { return static_cast<C>(x) == static_cast<C>(y); }, out, a, b);
  }
};

struct Greater {
  template <typename C>
  bool operator()(C x, C y) const {
    return x > y;
  }
};
struct Less {
  template <typename C>
  bool operator()(C x, C y) const {
    return x < y;
  }
};

template <typename Cmp>
struct CompareScalar {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& a, double b) {
      using C = compare_scalar_t<T>;
      const C s = static_cast<C>(b);
      raw_loop<bool, T>([s](T x) { return Cmp{}(static_cast<C>(x), s); }, out, a);
    }
  };
};

}  // namespace

void register_cpu_binary(const Registry& r) {
  r.floating<Binary<add_op>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kAdd)]);
  r.floating<Binary<mul_op>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kMul)]);
  r.floating<Binary<div_op>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kDiv)]);
  r.floating<Binary<pow_op>::Kernel>(binary_tables[static_cast<int>(BinaryOp::kPow)]);
  r.floating<Ternary<div_grad_b_op>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kDivGradB)]);
  r.floating<Ternary<pow_grad_base_op>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kPowGradBase)]);
  r.floating<Ternary<pow_grad_exponent_op>::Kernel>(ternary_tables[static_cast<int>(TernaryOp::kPowGradExponent)]);
  r.all_dtypes<CompareScalar<Greater>::Kernel>(compare_scalar_tables[static_cast<int>(CompareOp::kGt)]);
  r.all_dtypes<CompareScalar<Less>::Kernel>(compare_scalar_tables[static_cast<int>(CompareOp::kLt)]);
  r.all_dtypes<WhereKernel>(where_table);
  r.all_dtypes<MaskedFillKernel>(masked_fill_table);
  r.all_dtypes<EqKernel>(eq_table);
}

}  // namespace mixtrain::kernels
