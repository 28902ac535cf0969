// Front-ends of matmul, bmm and linear: autocast, argument checks, views that bring operands to
// the kernel's [batch..., rows, cols] form without copying, and the autograd records.
//
// Backward formulas (dC the output gradient):  dA = dC @ B^T,  dB = A^T @ dC,  dbias = column sums
// of dC. On the fp32 route of 16-bit matmuls, linear's backward widens dC once for both products
// and the bias sum (ops::LinearOutputGrad, shared with gelu_linear). The transposes are strided
// views that the oneDNN kernel reads in place, and the products go through the same cached
// primitives as the forward. A broadcast batch dim of an operand gets the sum of its gradient over
// that dim; when B is a plain matrix under a batched A (the common x @ W case) the batch is folded
// into the rows instead, so dB is one GEMM with no reduction.
#include "mixtrain/ops/linalg.h"

#include "kernels/linalg.h"
#include "mixtrain/autograd.h"
#include "ops/autocast_hook.h"
#include "ops/linear_grad.h"

namespace mixtrain {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;

void check_floating(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  MT_CHECK(t.is_floating_point(), op, ": expected a floating-point ", what,
           " (float32, bfloat16, float16, float64), got ", describe(t));
}

// Same dtype and device for two operands. Different floating dtypes are an error (as in PyTorch),
// not a silent promotion: mixing them is what autocast is for.
void check_same(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  MT_CHECK(a.dtype() == b.dtype(), op, ": expected ", an, " and ", bn, " to have the same dtype, got ", an, " ",
           describe(a), " and ", bn, " ", describe(b), " (convert one with .to(dtype), or run under autocast)");
  MT_CHECK(a.device() == b.device(), op, ": expected ", an, " and ", bn, " on the same device, got ", a.device(),
           " and ", b.device());
}

// The checks matmul and bmm share: floating operands of one dtype, on one device.
void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_floating(op, a, "first argument");
  check_floating(op, b, "second argument");
  check_same(op, a, "a", b, "b");
}

// True when the batch and row dims of `a` (rank >= 2) merge into one dim without a copy.
bool rows_mergeable(const Tensor& a) {
  int64_t expected = -1;  // stride the next outer (non-size-1) dim must have
  for (int d = a.dim() - 2; d >= 0; --d) {
    if (a.size(d) == 1) continue;
    if (expected >= 0 && a.stride(d) != expected) return false;
    expected = a.stride(d) * a.size(d);
  }
  return true;
}

Tensor left_pad(Tensor t, int rank) {
  while (t.dim() < rank) t = t.unsqueeze(0);
  return t;
}

// Batched product of detached operands of rank >= 2 (batch dims broadcast), no autograd.
// Returns a contiguous [batch..., n, m].
Tensor mm(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  const int64_t k = a.size(-1), m = b.size(-1);
  const auto& kernel = *kernels::matmul_kernel()(a.device(), a.dtype());
  if (b.dim() == 2 && a.dim() > 2 && a.numel() > 0 && rows_mergeable(a)) {
    // One GEMM over all rows: bigger M for oneDNN, and no per-batch loop.
    Tensor a2 = a.reshape({-1, k});
    Tensor out = Tensor::empty({a2.size(0), m}, a.dtype(), a.device());
    kernel(a2, b, bias, out);
    Shape shape = a.shape();
    shape[shape.size() - 1] = m;
    return out.view(shape);
  }
  Shape batch_a(std::span<const int64_t>(a.shape().begin(), a.dim() - 2));
  Shape batch_b(std::span<const int64_t>(b.shape().begin(), b.dim() - 2));
  Shape shape = broadcast_shapes(batch_a, batch_b, "matmul");
  shape.push_back(a.size(-2));
  shape.push_back(m);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernel(left_pad(a, shape.size()), left_pad(b, shape.size()), bias, out);
  return out;
}

// Sums a gradient of the broadcast shape down to an operand's `shape` (fewer or size-1 batch dims).
Tensor reduce_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Shape padded = shape;
  while (padded.size() < g.dim()) padded.insert(0, 1);
  Tensor out = g;
  if (!(padded == g.shape())) {
    out = Tensor::empty(padded, g.dtype(), g.device());
    kernels::sum_to_size(g, out);
  }
  return out.reshape(shape);
}

Tensor to_dtype(const Tensor& g, DType dtype) { return g.dtype() == dtype ? g : g.to(dtype); }

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  auto region = ops::autocast(OpId::kMatmul, {&a, &b});
  check_operands("matmul", a, b);
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got ", describe(a), " and ",
           describe(b));
  // NumPy: a 1-D left operand is a row vector, a 1-D right operand a column vector; the added dim
  // is dropped from the result.
  Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
  MT_CHECK(a2.size(-1) == b2.size(-2), "matmul: inner dimensions differ: ", describe(a), " @ ", describe(b), " (",
           a2.size(-1), " vs ", b2.size(-2), ")");
  Tensor full = mm(a2, b2);
  Shape result_shape = full.shape();
  if (b.dim() == 1) result_shape.erase(result_shape.size() - 1);
  if (a.dim() == 1) result_shape.erase(result_shape.size() - (b.dim() == 1 ? 1 : 2));
  Tensor out = full.view(result_shape);

  if (autograd::needs_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const Shape a_shape = a.shape(), b_shape = b.shape(), full_shape = full.shape();
    const DType dt = a.dtype();
    SavedTensor sa = need_b ? SavedTensor(a) : SavedTensor(), sb = need_a ? SavedTensor(b) : SavedTensor();
    const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
    autograd::record("matmul", {a, b}, out, [=](const TensorList& grads) {
      Tensor g = to_dtype(grads[0], dt).reshape(full_shape);
      TensorList result(2);
      if (need_a) {
        Tensor B = sb.unpack("matmul");
        if (b_vec) B = B.unsqueeze(1);
        result[0] = reduce_to(mm(g, B.transpose(-1, -2)), a_vec ? Shape{1, a_shape[0]} : a_shape).reshape(a_shape);
      }
      if (need_b) {
        Tensor A = sa.unpack("matmul");
        if (a_vec) A = A.unsqueeze(0);
        const Shape b2_shape = b_vec ? Shape{b_shape[0], 1} : b_shape;
        if (b2_shape.size() == 2 && A.dim() > 2 && A.numel() > 0 && rows_mergeable(A)) {
          // dB = sum over the batch of A_i^T dC_i = (rows of A)^T @ (rows of dC): one GEMM.
          Tensor A2 = A.reshape({-1, A.size(-1)});
          result[1] = mm(A2.t(), g.reshape({-1, g.size(-1)})).reshape(b_shape);
        } else {
          result[1] = reduce_to(mm(A.transpose(-1, -2), g), b2_shape).reshape(b_shape);
        }
      }
      return result;
    });
  }
  return out;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  auto region = ops::autocast(OpId::kBmm, {&a, &b});
  check_operands("bmm", a, b);
  MT_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors [batch, n, k] and [batch, k, m], got ", describe(a),
           " and ", describe(b));
  MT_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", describe(a), " and ", describe(b),
           " (bmm does not broadcast; use matmul)");
  MT_CHECK(a.size(2) == b.size(1), "bmm: inner dimensions differ: ", describe(a), " @ ", describe(b), " (", a.size(2),
           " vs ", b.size(1), ")");
  Tensor out = mm(a.detach(), b.detach());
  if (autograd::needs_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const DType dt = a.dtype();
    SavedTensor sa = need_b ? SavedTensor(a) : SavedTensor(), sb = need_a ? SavedTensor(b) : SavedTensor();
    autograd::record("bmm", {a, b}, out, [=](const TensorList& grads) {
      Tensor g = to_dtype(grads[0], dt);
      TensorList result(2);
      if (need_a) result[0] = mm(g, sb.unpack("bmm").transpose(1, 2));
      if (need_b) result[1] = mm(sa.unpack("bmm").transpose(1, 2), g);
      return result;
    });
  }
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  Tensor x = x_in, w = w_in, b = b_in;
  bool params_rounded = false;
  auto region = ops::autocast_linear(OpId::kLinear, x, w, b, params_rounded);
  return ops::linear_after_autocast(x, w, b, params_rounded);
}

namespace ops {

Tensor linear_after_autocast(const Tensor& x, const Tensor& w, const Tensor& b, bool params_rounded) {
  check_floating("linear", x, "input");
  check_floating("linear", w, "weight");
  if (params_rounded) {
    MT_INTERNAL_ASSERT(w.dtype() == kFloat32 && (x.dtype() == kBFloat16 || x.dtype() == kFloat16),
                       "linear: rounded parameters with input ", describe(x), " and weight ", describe(w));
    MT_CHECK(x.device() == w.device(), "linear: expected input and weight on the same device, got ", x.device(),
             " and ", w.device());
  } else {
    check_same("linear", x, "input", w, "weight");
  }
  MT_CHECK(w.dim() == 2, "linear: expected a 2-D weight [out_features, in_features], got ", describe(w));
  MT_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ", describe(x),
           " does not end in in_features = ", w.size(1), " of weight ", describe(w));
  if (b.defined()) {
    check_floating("linear", b, "bias");
    if (params_rounded && b.dtype() == kFloat32) {
      MT_CHECK(x.device() == b.device(), "linear: expected input and bias on the same device, got ", x.device(),
               " and ", b.device());
    } else {
      check_same("linear", x, "input", b, "bias");
    }
    MT_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: expected a bias of shape [", w.size(0), "] for weight ",
             describe(w), ", got ", describe(b));
  }
  const int64_t in = w.size(1), out_features = w.size(0);
  // [.., in] -> [M, in]: a view unless the leading dims cannot merge.
  int64_t rows = 1;
  for (int d = 0; d < x.dim() - 1; ++d) rows *= x.size(d);
  Tensor x2 = x.detach().reshape({rows, in});
  Tensor bias = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor out2 = Tensor::empty({x2.size(0), out_features}, x.dtype(), x.device());
  // W^T is a strided (column-major) view of W: oneDNN reads it in place, bias fused. Rounded fp32
  // parameters go to the route's kernel, which reads fp32 operands as they are.
  if (params_rounded) {
    kernels::matmul_fp32_route(x2, w.detach().t(), bias, out2);
  } else {
    (*kernels::matmul_kernel()(x.device(), x.dtype()))(x2, w.detach().t(), bias, out2);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out_features;
  Tensor out = out2.view(out_shape);

  if (autograd::needs_grad({&x, &w, &b})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    const Shape x_shape = x.shape();
    const DType dt = x.dtype(), w_dt = w.dtype(), b_dt = b.defined() ? b.dtype() : dt;
    SavedTensor sx = need_w ? SavedTensor(x2) : SavedTensor(), sw = need_x ? SavedTensor(w) : SavedTensor();
    autograd::record("linear", {x, w, b}, out, [=](const TensorList& grads) {
      const ops::LinearOutputGrad gy(to_dtype(grads[0], dt).reshape({rows, out_features}));
      TensorList result(3);
      if (need_x) result[0] = gy.product(gy.g(), sw.unpack("linear")).reshape(x_shape);
      if (need_w) result[1] = gy.product(gy.g().t(), sx.unpack("linear"), w_dt);
      if (need_b) result[2] = gy.bias_grad(b_dt);
      return result;
    });
  }
  return out;
}

LinearOutputGrad::LinearOutputGrad(const Tensor& gy)
    : g_(kernels::uses_fp32_route(gy.device(), gy.dtype()) && gy.numel() > 0 ? gy.to(kFloat32) : gy),
      dtype_(gy.dtype()) {}

Tensor LinearOutputGrad::product(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) const {
  const DType dt = out_dtype.value_or(dtype_);
  if (!route()) return to_dtype(mm(a, b), dt);
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, dt, g_.device());
  kernels::matmul_fp32_route(a, b, Tensor(), out);
  return out;
}

Tensor LinearOutputGrad::bias_grad(std::optional<DType> out_dtype) const {
  const DType dt = out_dtype.value_or(dtype_);
  // sum_rows writes x's dtype, or a 16-bit rounding of an fp32 x.
  const bool direct = dt == g_.dtype() || g_.dtype() == kFloat32;
  Tensor out = Tensor::empty({g_.size(1)}, direct ? dt : g_.dtype(), g_.device());
  kernels::sum_rows(g_, out);
  return direct ? out : out.to(dt);
}

}  // namespace ops
}  // namespace mixtrain
