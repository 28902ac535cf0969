// Front-ends of the binary elementwise ops (add, sub, mul, div, pow, their scalar forms), selection
// (where, masked_fill), comparisons, cast, and the in-place Tensor::add_ / Tensor::mul_.
//
// Binary ops promote both operands to promote_types(a, b) with Tensor::to() before anything is
// recorded, so the conversion is its own autograd node and the gradient reaches each input in the
// input's dtype; then they broadcast by passing stride-0 expand views to the kernel. Backward
// formulas reduce a broadcast gradient with sum_to and save only what the needed gradients use.
#include "core/views.h"
#include "kernels/elementwise.h"

#include "ops/inplace.h"
#include "kernels/copy.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/ops/reduce.h"
#include "ops/autocast_hook.h"

namespace mixtrain {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;
using kernels::BinaryOp;
using kernels::Scalars;

// `t` viewed with `shape` (stride 0 on broadcast dims), without an autograd node: the op records
// its own node on the unexpanded input.
Tensor broadcast_view(const Tensor& t, const Shape& shape) { return views::expand(t, shape); }

// A gradient of the broadcast output shape reduced to an input's shape.
Tensor reduce_to(const Tensor& g, const Shape& shape) { return g.shape() == shape ? g : sum_to(g, shape); }

void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(t.defined(), op, ": undefined tensor argument");
  MT_CHECK(t.is_floating_point(), op, ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ",
           describe(t));
}

struct Operands {
  Tensor a, b;  // converted to the common dtype (the same tensors when no conversion was needed)
  Shape shape;  // broadcast shape
  DType dtype;
};

// Checks, promotes and broadcasts the operands of a binary op. `floating_only` for arithmetic.
Operands prepare(const char* op, const Tensor& a, const Tensor& b, bool floating_only) {
  MT_CHECK(a.defined() && b.defined(), op, ": undefined tensor argument");
  MT_CHECK(a.device() == b.device(), op, ": tensors are on different devices, ", describe(a), " on ", a.device(),
           " and ", describe(b), " on ", b.device());
  const DType dt = promote_types(a.dtype(), b.dtype());
  MT_CHECK(!floating_only || is_floating(dt), op,
           ": expected floating-point tensors (float32, float64, float16, bfloat16), got ", describe(a), " and ",
           describe(b));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  return {a.to(dt), b.to(dt), shape, dt};
}

Tensor run_binary(BinaryOp op, const Operands& p, Scalars s = {}) {
  Tensor out = Tensor::empty(p.shape, p.dtype, p.a.device());
  kernels::binary_kernel(op)(out.device(), p.dtype)(out, broadcast_view(p.a, p.shape), broadcast_view(p.b, p.shape), s);
  return out;
}

// A fused backward piece (kernels::TernaryOp) on the broadcast shape of g.
Tensor run_ternary(kernels::TernaryOp op, const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(g.shape(), g.dtype(), g.device());
  kernels::ternary_kernel(op)(g.device(), g.dtype())(out, g, broadcast_view(a.to(g.dtype()), g.shape()),
                                                     broadcast_view(b.to(g.dtype()), g.shape()));
  return out;
}

Tensor run_unary(kernels::UnaryOp op, const Tensor& x, Scalars s) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::unary_kernel(op)(x.device(), x.dtype())(out, x, s);
  return out;
}

// a + alpha * b; `name` is "add" or "sub" (sub passes -alpha).
Tensor add_impl(const char* name, const Tensor& a, const Tensor& b, double alpha) {
  Operands p = prepare(name, a, b, true);
  Tensor out = run_binary(BinaryOp::kAdd, p, {alpha});
  if (autograd::needs_grad({&p.a, &p.b})) {
    const bool ra = p.a.requires_grad(), rb = p.b.requires_grad();
    autograd::record(name, {p.a, p.b}, out, [ra, rb, alpha, sa = p.a.shape(), sb = p.b.shape()](const TensorList& g) {
      Tensor ga, gb;
      if (ra) ga = reduce_to(g[0], sa);
      if (rb) gb = reduce_to(alpha == 1.0 ? g[0] : mul(g[0], alpha), sb);
      return TensorList{ga, gb};
    });
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a_, const Tensor& b_, double alpha) {
  Tensor a = a_, b = b_;
  auto region = ops::autocast(OpId::kAdd, {&a, &b});
  return add_impl("add", a, b, alpha);
}

Tensor sub(const Tensor& a_, const Tensor& b_, double alpha) {
  Tensor a = a_, b = b_;
  auto region = ops::autocast(OpId::kSub, {&a, &b});
  return add_impl("sub", a, b, -alpha);
}

Tensor mul(const Tensor& a_, const Tensor& b_) {
  Tensor a = a_, b = b_;
  auto region = ops::autocast(OpId::kMul, {&a, &b});
  Operands p = prepare("mul", a, b, true);
  Tensor out = run_binary(BinaryOp::kMul, p);
  if (autograd::needs_grad({&p.a, &p.b})) {
    const bool ra = p.a.requires_grad(), rb = p.b.requires_grad();
    // Each gradient needs the other operand only.
    SavedTensor saved_a = rb ? SavedTensor(p.a) : SavedTensor();
    SavedTensor saved_b = ra ? SavedTensor(p.b) : SavedTensor();
    autograd::record("mul", {p.a, p.b}, out,
                     [ra, rb, saved_a, saved_b, sa = p.a.shape(), sb = p.b.shape()](const TensorList& g) {
                       Tensor ga, gb;
                       if (ra) ga = reduce_to(mul(g[0], saved_b.unpack("mul")), sa);
                       if (rb) gb = reduce_to(mul(g[0], saved_a.unpack("mul")), sb);
                       return TensorList{ga, gb};
                     });
  }
  return out;
}

Tensor div(const Tensor& a_, const Tensor& b_) {
  Tensor a = a_, b = b_;
  auto region = ops::autocast(OpId::kDiv, {&a, &b});
  Operands p = prepare("div", a, b, true);
  Tensor out = run_binary(BinaryOp::kDiv, p);
  if (autograd::needs_grad({&p.a, &p.b})) {
    const bool ra = p.a.requires_grad(), rb = p.b.requires_grad();
    SavedTensor saved_a = rb ? SavedTensor(p.a) : SavedTensor();
    SavedTensor saved_b(p.b);
    autograd::record(
        "div", {p.a, p.b}, out, [ra, rb, saved_a, saved_b, sa = p.a.shape(), sb = p.b.shape()](const TensorList& g) {
          const Tensor bv = saved_b.unpack("div");
          Tensor ga, gb;
          if (ra) ga = reduce_to(div(g[0], bv), sa);
          if (rb) gb = reduce_to(run_ternary(kernels::TernaryOp::kDivGradB, g[0], saved_a.unpack("div"), bv), sb);
          return TensorList{ga, gb};
        });
  }
  return out;
}

Tensor pow(const Tensor& a_, const Tensor& e_) {
  Tensor a = a_, e = e_;
  auto region = ops::autocast(OpId::kPow, {&a, &e});
  Operands p = prepare("pow", a, e, true);
  Tensor out = run_binary(BinaryOp::kPow, p);
  if (autograd::needs_grad({&p.a, &p.b})) {
    const bool ra = p.a.requires_grad(), rb = p.b.requires_grad();
    SavedTensor saved_a(p.a), saved_e(p.b);
    autograd::record("pow", {p.a, p.b}, out,
                     [ra, rb, saved_a, saved_e, sa = p.a.shape(), sb = p.b.shape()](const TensorList& g) {
                       const Tensor av = saved_a.unpack("pow"), ev = saved_e.unpack("pow");
                       Tensor ga, gb;
                       if (ra) ga = reduce_to(run_ternary(kernels::TernaryOp::kPowGradBase, g[0], av, ev), sa);
                       if (rb) gb = reduce_to(run_ternary(kernels::TernaryOp::kPowGradExponent, g[0], av, ev), sb);
                       return TensorList{ga, gb};
                     });
  }
  return out;
}

Tensor add(const Tensor& a_, double b) {
  Tensor a = a_;
  auto region = ops::autocast(OpId::kAdd, {&a});
  check_floating("add", a);
  Tensor out = run_unary(kernels::UnaryOp::kAddScalar, a, {b});
  if (autograd::needs_grad({&a})) {
    autograd::record("add", {a}, out, [](const TensorList& g) { return TensorList{g[0]}; });
  }
  return out;
}

Tensor mul(const Tensor& a_, double b) {
  Tensor a = a_;
  auto region = ops::autocast(OpId::kMul, {&a});
  check_floating("mul", a);
  Tensor out = run_unary(kernels::UnaryOp::kMulScalar, a, {b});
  if (autograd::needs_grad({&a})) {
    autograd::record("mul", {a}, out, [b](const TensorList& g) { return TensorList{mul(g[0], b)}; });
  }
  return out;
}

Tensor where(const Tensor& cond_, const Tensor& a_, const Tensor& b_) {
  Tensor cond = cond_, a = a_, b = b_;
  auto region = ops::autocast(OpId::kWhere, {&a, &b});
  MT_CHECK(cond.defined(), "where: undefined condition");
  MT_CHECK(cond.dtype() == kBool, "where: the condition must be a bool tensor, got ", describe(cond));
  Operands p = prepare("where", a, b, false);
  const Shape shape = broadcast_shapes(cond.shape(), p.shape, "where");
  MT_CHECK(cond.device() == p.a.device(), "where: condition on ", cond.device(), ", values on ", p.a.device());
  Tensor out = Tensor::empty(shape, p.dtype, p.a.device());
  kernels::where_kernel()(out.device(), p.dtype)(out, broadcast_view(cond, shape), broadcast_view(p.a, shape),
                                                 broadcast_view(p.b, shape));
  if (is_floating(p.dtype) && autograd::needs_grad({&p.a, &p.b})) {
    const bool ra = p.a.requires_grad(), rb = p.b.requires_grad();
    SavedTensor saved_cond(cond);
    autograd::record("where", {p.a, p.b}, out,
                     [ra, rb, saved_cond, sa = p.a.shape(), sb = p.b.shape()](const TensorList& g) {
                       const Tensor c = saved_cond.unpack("where");
                       const Tensor zero = scalar_tensor(0.0, {.dtype = g[0].dtype(), .device = g[0].device()});
                       Tensor ga, gb;
                       if (ra) ga = reduce_to(where(c, g[0], zero), sa);
                       if (rb) gb = reduce_to(where(c, zero, g[0]), sb);
                       return TensorList{ga, gb};
                     });
  }
  return out;
}

Tensor masked_fill(const Tensor& x_, const Tensor& mask, double value) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kMaskedFill, {&x});
  MT_CHECK(x.defined() && mask.defined(), "masked_fill: undefined tensor argument");
  MT_CHECK(mask.dtype() == kBool, "masked_fill: the mask must be a bool tensor, got ", describe(mask));
  MT_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask ", describe(mask),
           " does not broadcast to the input ", describe(x));
  MT_CHECK(mask.device() == x.device(), "masked_fill: mask on ", mask.device(), ", input on ", x.device());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::masked_fill_kernel()(x.device(), x.dtype())(out, x, broadcast_view(mask, x.shape()), value);
  if (autograd::needs_grad({&x})) {
    SavedTensor saved_mask(mask);
    autograd::record("masked_fill", {x}, out, [saved_mask](const TensorList& g) {
      return TensorList{masked_fill(g[0], saved_mask.unpack("masked_fill"), 0.0)};
    });
  }
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) {
  Operands p = prepare("eq", a, b, false);
  Tensor out = Tensor::empty(p.shape, kBool, p.a.device());
  kernels::eq_kernel()(out.device(), p.dtype)(out, broadcast_view(p.a, p.shape), broadcast_view(p.b, p.shape));
  return out;
}

namespace {
Tensor compare_scalar(const char* op, kernels::CompareOp cmp, const Tensor& a, double b) {
  MT_CHECK(a.defined(), op, ": undefined tensor argument");
  Tensor out = Tensor::empty(a.shape(), kBool, a.device());
  kernels::compare_scalar_kernel(cmp)(a.device(), a.dtype())(out, a, b);
  return out;
}
}  // namespace

Tensor gt(const Tensor& a, double b) { return compare_scalar("gt", kernels::CompareOp::kGt, a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar("lt", kernels::CompareOp::kLt, a, b); }

Tensor cast(const Tensor& x, DType dtype) {
  MT_CHECK(x.defined(), "cast: undefined tensor argument");
  return x.to(dtype);
}

namespace {
// In-place writes through a view with a stride-0 dim would write one element several times.
void check_writable(const Tensor& t, const char* op) {
  for (int d = 0; d < t.dim(); ++d)
    MT_CHECK(t.stride(d) != 0 || t.size(d) <= 1, op, ": the target ", describe(t),
             " is an expanded view (several elements share memory); clone() it first");
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  detail::check_inplace(*this, "add_");
  check_floating("add_", *this);
  MT_CHECK(other.defined(), "add_: undefined tensor argument");
  MT_CHECK(!(GradMode::is_enabled() && other.requires_grad()), "add_: ", describe(other),
           " requires grad, and in-place ops are not recorded by autograd; use the out-of-place add");
  MT_CHECK(broadcast_shapes(shape(), other.shape(), "add_") == shape(), "add_: ", describe(other),
           " does not broadcast to the target ", describe(*this));
  check_writable(*this, "add_");
  NoGradGuard no_grad;
  const DType common = promote_types(dtype(), other.dtype());
  if (common != dtype()) {
    // A wider `other` (fp32 into a bf16 tensor): add in the wider type, round once into this.
    kernels::copy(*this, add(to(common), other, alpha));
  } else {
    Tensor o = other.to(common);
    if (o.shares_storage(*this) && !o.is_same(*this)) o = o.clone();  // a different view of the same memory
    kernels::binary_kernel(BinaryOp::kAdd)(device(), dtype())(*this, *this, broadcast_view(o, shape()), {alpha});
  }
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(double value) {
  detail::check_inplace(*this, "mul_");
  check_floating("mul_", *this);
  check_writable(*this, "mul_");
  kernels::unary_kernel(kernels::UnaryOp::kMulScalar)(device(), dtype())(*this, *this, {value});
  bump_version();
  return *this;
}

}  // namespace mixtrain
