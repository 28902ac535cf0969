// Front-ends of the unary elementwise ops: neg, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu,
// silu, clamp and pow with a scalar exponent.
//
// They all go through unary(): autocast, a floating-dtype check, the forward kernel, and a node
// whose backward is one fused kernel pass (grad_in from grad_out and the saved input or output),
// or, for the linear ops, a scaled copy of the incoming gradient.
#include "kernels/elementwise.h"
#include "mixtrain/autograd.h"
#include "mixtrain/ops/elementwise.h"
#include "ops/autocast_hook.h"

namespace mixtrain {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;
using kernels::Scalars;
using kernels::UnaryOp;

// What the backward of a unary op reads.
enum class Saves {
  kInput,   // fused backward from x
  kOutput,  // fused backward from y (cheaper for exp, tanh, sigmoid, ...; y is what is kept anyway)
  kNone,    // linear op: grad_in = grad_out * linear_factor
};

struct UnarySpec {
  OpId id;
  const char* name;
  UnaryOp kernel;
  Saves saves;
  double linear_factor = 1.0;  // kNone only
};

Tensor unary(const UnarySpec& spec, const Tensor& x_, Scalars s = {}) {
  Tensor x = x_;
  auto region = ops::autocast(spec.id, {&x});
  MT_CHECK(x.defined(), spec.name, ": undefined tensor argument");
  MT_CHECK(x.is_floating_point(), spec.name,
           ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ", describe(x));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::unary_kernel(spec.kernel)(x.device(), x.dtype())(out, x, s);
  if (!autograd::needs_grad({&x})) return out;

  if (spec.saves == Saves::kNone) {
    const double factor = spec.linear_factor;
    autograd::record(spec.name, {x}, out,
                     [factor](const TensorList& g) { return TensorList{factor == 1.0 ? g[0] : mul(g[0], factor)}; });
    return out;
  }
  SavedTensor saved = spec.saves == Saves::kInput ? SavedTensor(x) : SavedTensor(out);
  autograd::record(spec.name, {x}, out, [saved, s, name = spec.name, kernel = spec.kernel](const TensorList& g) {
    const Tensor v = saved.unpack(name);
    const Tensor go = g[0].to(v.dtype());
    Tensor gi = Tensor::empty(v.shape(), v.dtype(), v.device());
    kernels::unary_backward_kernel(kernel)(v.device(), v.dtype())(gi, go, v, s);
    return TensorList{gi};
  });
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary({OpId::kNeg, "neg", UnaryOp::kNeg, Saves::kNone, -1.0}, x); }
Tensor exp(const Tensor& x) { return unary({OpId::kExp, "exp", UnaryOp::kExp, Saves::kOutput}, x); }
Tensor log(const Tensor& x) { return unary({OpId::kLog, "log", UnaryOp::kLog, Saves::kInput}, x); }
Tensor sqrt(const Tensor& x) { return unary({OpId::kSqrt, "sqrt", UnaryOp::kSqrt, Saves::kOutput}, x); }
Tensor rsqrt(const Tensor& x) { return unary({OpId::kRsqrt, "rsqrt", UnaryOp::kRsqrt, Saves::kOutput}, x); }
Tensor tanh(const Tensor& x) { return unary({OpId::kTanh, "tanh", UnaryOp::kTanh, Saves::kOutput}, x); }
Tensor sigmoid(const Tensor& x) { return unary({OpId::kSigmoid, "sigmoid", UnaryOp::kSigmoid, Saves::kOutput}, x); }
Tensor relu(const Tensor& x) { return unary({OpId::kRelu, "relu", UnaryOp::kRelu, Saves::kOutput}, x); }
Tensor silu(const Tensor& x) { return unary({OpId::kSilu, "silu", UnaryOp::kSilu, Saves::kInput}, x); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  const UnaryOp k = approximate == GeluApproximation::kTanh ? UnaryOp::kGeluTanh : UnaryOp::kGelu;
  return unary({OpId::kGelu, "gelu", k, Saves::kInput}, x);
}

Tensor clamp(const Tensor& x, double min, double max) {
  return unary({OpId::kClamp, "clamp", UnaryOp::kClamp, Saves::kInput}, x, {min, max});
}

Tensor pow(const Tensor& x, double exponent) {
  // x^2 is common (squared errors, variances) and much cheaper than std::pow.
  const UnaryOp k = exponent == 2.0 ? UnaryOp::kSquare : UnaryOp::kPowScalar;
  return unary({OpId::kPow, "pow", k, Saves::kInput}, x, {exponent});
}

}  // namespace mixtrain
