// Kernel tables of the elementwise family (front-ends in src/ops/elementwise*.cpp, CPU kernels in
// src/backends/cpu/kernels/elementwise*.cpp).
//
// Every kernel takes operands of one shape with any strides (broadcast inputs arrive as stride-0
// expand views) and, except where noted, one floating dtype shared by the output and the inputs;
// the front-end promotes and broadcasts first. Accumulation/compute dtype: fp32 for fp32, fp16 and
// bf16 storage, fp64 for fp64; 16-bit results are rounded once on store.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// Scalar parameters an op hands to its kernel (alpha, exponent, clamp bounds, scale). They stay
// doubles until the kernel converts them to its compute type, so a double scalar never changes a
// tensor's dtype and is never rounded to 16 bits.
struct Scalars {
  double a = 0.0;
  double b = 0.0;
};

// Unary ops with one table for the forward and, where the op is differentiable by a fused kernel,
// one for the backward. The list of unary kernels (enumerator, kernel name): the enum, the tables'
// names and each backend's registration are generated from it, so they cannot drift.
#define MT_FORALL_UNARY_KERNELS(_)                                                                    \
  _(Neg, neg) _(Exp, exp) _(Log, log) _(Sqrt, sqrt) _(Rsqrt, rsqrt) _(Tanh, tanh) _(Sigmoid, sigmoid) \
      _(Relu, relu) _(Gelu, gelu) _(GeluTanh, gelu_tanh) _(Silu, silu) _(Clamp, clamp)                  \
          _(AddScalar, add_scalar) _(MulScalar, mul_scalar) _(Square, square) _(PowScalar, pow_scalar)

enum class UnaryOp : uint8_t {
#define MT_UNARY_ENUM(Name, name) k##Name,
  MT_FORALL_UNARY_KERNELS(MT_UNARY_ENUM)
#undef MT_UNARY_ENUM
      kCount
};

// out = f(x; s). clamp: s = {min, max}; add_scalar: x + s.a; mul_scalar: x * s.a; pow_scalar: x^s.a.
using UnaryFn = void(const Tensor& out, const Tensor& x, Scalars s);
// grad_in = grad_out * f'(.), computed in one pass from the saved tensor the op's backward needs:
// the output y for exp, sqrt, rsqrt, tanh, sigmoid, relu; the input x for the others.
using UnaryBackwardFn = void(const Tensor& grad_in, const Tensor& grad_out, const Tensor& saved, Scalars s);

using UnaryForwardTables = std::array<DispatchTable<UnaryFn>, static_cast<int>(UnaryOp::kCount)>;
// Named after the op: errors read "gelu: no kernel for dtype ...".
#define MT_UNARY_FORWARD_TABLE(Name, name) DispatchTable<UnaryFn>{#name},
#define MT_UNARY_BACKWARD_TABLE(Name, name) DispatchTable<UnaryBackwardFn>{#name},
MT_KERNEL_TABLE(UnaryForwardTables, unary_forward_tables, MT_FORALL_UNARY_KERNELS(MT_UNARY_FORWARD_TABLE));
using UnaryBackwardTables = std::array<DispatchTable<UnaryBackwardFn>, static_cast<int>(UnaryOp::kCount)>;
MT_KERNEL_TABLE(UnaryBackwardTables, unary_backward_tables, MT_FORALL_UNARY_KERNELS(MT_UNARY_BACKWARD_TABLE));
inline const DispatchTable<UnaryFn>& unary_kernel(UnaryOp op) { return unary_forward_tables[static_cast<int>(op)]; }
// Empty for ops whose backward is composed of other ops (neg, add/mul_scalar): looking one up throws.
inline const DispatchTable<UnaryBackwardFn>& unary_backward_kernel(UnaryOp op) {
  return unary_backward_tables[static_cast<int>(op)];
}

// gelu's forward and backward in one pass over the saved input, for an op that saved x and needs
// both gelu(x) and the input gradient (gelu_linear recomputes gelu(x) in its backward):
// y = gelu(x), grad_in = grad_out * gelu'(x), erf(x / sqrt 2) evaluated once per element. Bit for
// bit what unary_kernel(k_gelu) and unary_backward_kernel(k_gelu) give. All four operands have one
// dtype and shape and are contiguous; grad_in may be grad_out itself (each element is read before
// it is written).
using GeluForwardBackwardFn = void(const Tensor& y, const Tensor& grad_in, const Tensor& grad_out, const Tensor& x);
MT_KERNEL_TABLE(DispatchTable<GeluForwardBackwardFn>, gelu_forward_backward_table, "gelu");
inline const DispatchTable<GeluForwardBackwardFn>& gelu_forward_backward_kernel() {
  return gelu_forward_backward_table;
}

// Binary arithmetic: out = a + s.a * b (add, sub with negated alpha), a * b, a / b, pow(a, b).
enum class BinaryOp : uint8_t { kAdd, kMul, kDiv, kPow, kCount };
using BinaryFn = void(const Tensor& out, const Tensor& a, const Tensor& b, Scalars s);
using BinaryTables = std::array<DispatchTable<BinaryFn>, static_cast<int>(BinaryOp::kCount)>;
MT_KERNEL_TABLE(BinaryTables, binary_tables, DispatchTable<BinaryFn>{"add"}, DispatchTable<BinaryFn>{"mul"}, DispatchTable<BinaryFn>{"div"}, DispatchTable<BinaryFn>{"pow"});
inline const DispatchTable<BinaryFn>& binary_kernel(BinaryOp op) { return binary_tables[static_cast<int>(op)]; }

// Fused pieces of binary backward formulas, one pass and one rounding each: out = f(g, a, b) with
// g the output gradient and a, b the forward operands (broadcast to g's shape).
//   div_grad_b:        -g * a / b^2
//   pow_grad_base:     g * b * a^(b - 1), 0 where b == 0 (PyTorch)
//   pow_grad_exponent: g * a^b * log(a), 0 where a == 0 and b >= 0 (PyTorch)
enum class TernaryOp : uint8_t { kDivGradB, kPowGradBase, kPowGradExponent, kCount };
using TernaryFn = void(const Tensor& out, const Tensor& g, const Tensor& a, const Tensor& b);
using TernaryTables = std::array<DispatchTable<TernaryFn>, static_cast<int>(TernaryOp::kCount)>;
// Named after their forward op.
MT_KERNEL_TABLE(TernaryTables, ternary_tables, DispatchTable<TernaryFn>{"div"}, DispatchTable<TernaryFn>{"pow"}, DispatchTable<TernaryFn>{"pow"});
inline const DispatchTable<TernaryFn>& ternary_kernel(TernaryOp op) { return ternary_tables[static_cast<int>(op)]; }

// Selection, any dtype (no arithmetic, values are copied bit for bit):
//   where: out = cond ? a : b          (cond bool; a, b and out share a dtype)
//   masked_fill: out = mask ? value : x (mask bool; value converted once to out's dtype)
using WhereFn = void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
using MaskedFillFn = void(const Tensor& out, const Tensor& x, const Tensor& mask, double value);
MT_KERNEL_TABLE(DispatchTable<WhereFn>, where_table, "where");
MT_KERNEL_TABLE(DispatchTable<MaskedFillFn>, masked_fill_table, "masked_fill");
inline const DispatchTable<WhereFn>& where_kernel() { return where_table; }
inline const DispatchTable<MaskedFillFn>& masked_fill_kernel() { return masked_fill_table; }

// Comparisons, any dtype, bool output. eq compares two same-dtype tensors; gt/lt compare with a
// double scalar converted to the compute type (as PyTorch: 0.1 is compared as 0.1f with a float32
// tensor; fp32 for 16-bit tensors; integers are compared in fp64).
enum class CompareOp : uint8_t { kGt, kLt, kCount };
using CompareFn = void(const Tensor& out, const Tensor& a, const Tensor& b);
using CompareScalarFn = void(const Tensor& out, const Tensor& a, double b);
MT_KERNEL_TABLE(DispatchTable<CompareFn>, eq_table, "eq");
using CompareScalarTables = std::array<DispatchTable<CompareScalarFn>, static_cast<int>(CompareOp::kCount)>;
MT_KERNEL_TABLE(CompareScalarTables, compare_scalar_tables, DispatchTable<CompareScalarFn>{"gt"}, DispatchTable<CompareScalarFn>{"lt"});
inline const DispatchTable<CompareFn>& eq_kernel() { return eq_table; }
inline const DispatchTable<CompareScalarFn>& compare_scalar_kernel(CompareOp op) {
  return compare_scalar_tables[static_cast<int>(op)];
}

}  // namespace mixtrain::kernels
