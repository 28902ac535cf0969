// Front-ends of the reductions: sum, mean, amax/max, argmax, and sum_to (the backward of
// broadcasting).
//
// plan() brings any (dims, keepdim) request to the kernels' one form, a contiguous input viewed as
// [outer, reduce, inner]: size-1 dims are dropped and neighbouring dims of the same kind merged. A
// transposed/permuted input is read in memory order when that keeps the result's order; otherwise,
// and when the reduced dims are not one block (e.g. dims {0, 2} of a 3-D tensor), the input is
// permuted and copied once.
#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/copy.h"
#include "kernels/optim.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/ops/reduce.h"
#include "ops/autocast_hook.h"

namespace mixtrain {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;

struct Plan {
  Tensor input;  // contiguous, laid out as [outer, reduce, inner]
  kernels::ReduceShape shape;
  Shape out_shape;    // the result's shape (keepdim or not)
  Shape keep_shape;   // the result's shape with reduced dims kept as 1 (for backward)
  Shape dims;         // the reduced dims, wrapped and sorted
  int64_t count = 1;  // elements reduced into each output
};

Plan plan(const char* op, const Tensor& x, const Shape& dims, bool keepdim) {
  const int nd = x.dim();
  bool reduced[kMaxDims] = {};
  if (dims.empty()) {
    for (int d = 0; d < nd; ++d) reduced[d] = true;
  } else {
    for (int64_t d : dims) {
      const int w = wrap_dim(d, nd, op);
      if (nd == 0) continue;  // a 0-dim tensor accepts dim 0 / -1 and has nothing to reduce
      MT_CHECK(!reduced[w], op, ": dim ", w, " appears more than once in dims ", dims, " for ", describe(x));
      reduced[w] = true;
    }
  }
  Plan p;
  for (int d = 0; d < nd; ++d) {
    if (reduced[d]) {
      p.dims.push_back(d);
      p.count *= x.size(d);
      p.keep_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.keep_shape.push_back(x.size(d));
      p.out_shape.push_back(x.size(d));
    }
  }

  // The memory order to read x in: its own order when contiguous; the order of its strides when x
  // is a permutation of a contiguous tensor (a transpose) whose kept dims stay in order, so the
  // result comes out in the right order without copying x; else a contiguous copy.
  Tensor in = x.detach();
  Shape order;
  for (int d = 0; d < nd; ++d) order.push_back(d);
  if (!in.is_contiguous()) {
    // Dims of size > 1 by decreasing stride, then the size-1 dims (whose strides mean nothing).
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const bool a1 = x.size(a) == 1, b1 = x.size(b) == 1;
      if (a1 || b1) return !a1 && b1;
      return x.stride(a) > x.stride(b);
    });
    int last_kept = -1;
    bool kept_in_order = true;
    for (int64_t d : order) {
      if (reduced[d] || x.size(d) == 1) continue;
      kept_in_order = kept_in_order && d > last_kept;
      last_kept = static_cast<int>(d);
    }
    Tensor permuted = in.permute(order);
    if (kept_in_order && permuted.is_contiguous()) {
      in = permuted;
    } else {
      for (int d = 0; d < nd; ++d) order[d] = d;
      in = in.contiguous();
    }
  }

  // Group the dims in that order (size-1 dims belong to neither kind) into runs of one kind.
  int64_t groups[kMaxDims];
  bool kinds[kMaxDims];
  int ng = 0;
  for (int64_t d : order) {
    if (x.size(d) == 1) continue;
    if (ng > 0 && kinds[ng - 1] == reduced[d]) {
      groups[ng - 1] *= x.size(d);
    } else {
      groups[ng] = x.size(d);
      kinds[ng++] = reduced[d];
    }
  }
  int reduced_groups = 0;
  for (int g = 0; g < ng; ++g) reduced_groups += kinds[g];
  if (reduced_groups <= 1) {
    int g = 0;
    for (; g < ng && !kinds[g]; ++g) p.shape.outer *= groups[g];
    if (g < ng) p.shape.reduce = groups[g++];
    for (; g < ng; ++g) p.shape.inner *= groups[g];
  } else {
    // Reduced dims in several blocks: bring them together (kept dims first) with one copy.
    Shape perm;
    for (int d = 0; d < nd; ++d)
      if (!reduced[d]) perm.push_back(d);
    for (int64_t d : p.dims) perm.push_back(d);
    in = x.detach().permute(perm).contiguous();
    p.shape.outer = p.keep_shape.numel();
    p.shape.reduce = p.count;
    p.shape.inner = 1;
  }
  p.input = in;
  return p;
}

// A reduction's result (or its gradient) with the reduced dims kept as size 1 (`keep_shape`, the
// plan's): a view.
Tensor with_kept_dims(const Tensor& t, const Shape& keep_shape, bool keepdim) {
  return keepdim ? t : t.reshape(keep_shape);
}

// The accumulation dtype of the sum kernels: what sum(x, dtype=...) can store without converting
// the input first.
DType acc_dtype(DType t) {
  if (!is_floating(t)) return kInt64;
  return t == kFloat64 ? kFloat64 : kFloat32;
}

// sum and mean (scale = 1 / count). `op` names the op in errors and in the autograd graph.
// `shape`, when given, replaces the result's shape: any shape with the same elements in the same
// order that broadcasts to x's (sum_to's target).
Tensor reduce_sum(const char* op, Tensor x, const Shape& dims, bool keepdim, std::optional<DType> dtype, bool mean,
                  const std::optional<Shape>& shape = std::nullopt) {
  MT_CHECK(x.defined(), op, ": undefined tensor argument");
  DType out_dtype;
  if (dtype) {
    out_dtype = *dtype;
    MT_CHECK(!mean || is_floating(out_dtype), op, ": dtype must be floating, got ", out_dtype);
    // The kernel stores the input dtype or its accumulation dtype; anything else converts the
    // input first, as PyTorch does.
    if (out_dtype != x.dtype() && out_dtype != acc_dtype(x.dtype())) x = x.to(out_dtype);
  } else if (x.is_floating_point()) {
    out_dtype = x.dtype();
  } else {
    MT_CHECK(!mean, op, ": input ", describe(x), " is not floating-point; pass a floating dtype");
    out_dtype = kInt64;  // integer and bool sums count in int64 (PyTorch)
  }

  Plan p = plan(op, x, dims, keepdim);
  const double scale = mean ? 1.0 / static_cast<double>(p.count) : 1.0;
  if (shape) {
    MT_INTERNAL_ASSERT(shape->numel() == p.out_shape.numel(), op, ": shape ", *shape, " for ", p.out_shape);
    p.out_shape = *shape;
    keepdim = true;  // the result broadcasts to x as it is
  }
  Tensor out = Tensor::empty(p.out_shape, out_dtype, x.device());
  kernels::reduce_kernel(kernels::ReduceKind::kSum)(x.device(), p.input.dtype())(out, p.input, p.shape, scale);

  if (is_floating(out_dtype) && autograd::needs_grad({&x})) {
    autograd::record(
        op, {x}, out,
        [kept = p.keep_shape, keepdim, in_shape = x.shape(), in_dtype = x.dtype(), scale, mean](const TensorList& g) {
          Tensor go = with_kept_dims(g[0], kept, keepdim);
          if (mean) go = mul(go, scale);
          // Expand and convert in one pass.
          Tensor gi = Tensor::empty(in_shape, in_dtype, go.device());
          kernels::copy(gi, go.expand(in_shape));
          return TensorList{gi};
        });
  }
  return out;
}

Tensor reduce_max(OpId id, const char* op, const Tensor& x_, const Shape& dims, bool keepdim) {
  Tensor x = x_;
  auto region = ops::autocast(id, {&x});
  MT_CHECK(x.defined(), op, ": undefined tensor argument");
  MT_CHECK(x.is_floating_point(), op, ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ",
           describe(x));
  Plan p = plan(op, x, dims, keepdim);
  MT_CHECK(p.count > 0 || p.out_shape.numel() == 0, op, ": cannot reduce over an empty dimension of ", describe(x),
           " (the maximum of no elements is undefined)");
  Tensor out = Tensor::empty(p.out_shape, x.dtype(), x.device());
  kernels::reduce_kernel(kernels::ReduceKind::kMax)(x.device(), x.dtype())(out, p.input, p.shape, 1.0);

  if (autograd::needs_grad({&x})) {
    SavedTensor saved_x(x), saved_out(out);
    autograd::record(op, {x}, out,
                     [saved_x, saved_out, op, keepdim, rdims = p.dims, kept = p.keep_shape](const TensorList& g) {
                       // The gradient goes to every position holding the maximum, split evenly among ties.
                       const Tensor xv = saved_x.unpack(op);
                       const Tensor is_max = eq(xv, with_kept_dims(saved_out.unpack(op), kept, keepdim)).to(xv.dtype());
                       const Tensor ties = sum(is_max, rdims, /*keepdim=*/true);
                       return TensorList{mul(is_max, div(with_kept_dims(g[0], kept, keepdim), ties))};
                     });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kSum, {&x});
  return reduce_sum("sum", x, dims, keepdim, dtype, false);
}

Tensor mean(const Tensor& x_, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kMean, {&x});
  return reduce_sum("mean", x, dims, keepdim, dtype, true);
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_max(OpId::kAmax, "amax", x, dims, keepdim);
}
Tensor max(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_max(OpId::kMax, "max", x, dims, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  MT_CHECK(x.defined(), "argmax: undefined tensor argument");
  const int d = wrap_dim(dim, x.dim(), "argmax");
  if (x.dim() == 0) return zeros({}, {.dtype = kInt64, .device = x.device()});
  MT_CHECK(x.size(d) > 0, "argmax: cannot reduce over the empty dim ", d, " of ", describe(x));
  Shape perm, out_shape;
  for (int k = 0; k < x.dim(); ++k) {
    if (k == d) {
      if (keepdim) out_shape.push_back(1);
      continue;
    }
    perm.push_back(k);
    out_shape.push_back(x.size(k));
  }
  perm.push_back(d);
  // The reduced dim last and contiguous (a copy only when it is not already).
  Tensor in = x.detach().permute(perm).contiguous();
  Tensor out = Tensor::empty(out_shape, kInt64, x.device());
  if (out.numel() > 0) kernels::argmax_kernel()(x.device(), x.dtype())(out, in, out.numel(), x.size(d));
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  MT_CHECK(x.defined(), "sum_to: undefined tensor argument");
  if (x.shape() == shape) return x;
  MT_CHECK(shape.size() <= x.dim(), "sum_to: cannot sum ", describe(x), " to shape ", shape, " (more dims)");
  const int lead = x.dim() - shape.size();
  Shape dims;
  for (int d = 0; d < lead; ++d) dims.push_back(d);
  for (int i = 0; i < shape.size(); ++i) {
    const int64_t n = x.size(lead + i);
    MT_CHECK(shape[i] == n || shape[i] == 1, "sum_to: cannot sum ", describe(x), " to shape ", shape, " (dim ",
             lead + i, ": ", n, " vs ", shape[i], ")");
    if (shape[i] == 1 && n != 1) dims.push_back(lead + i);
  }
  // (When only size-1 leading dims differ, dims holds just those: the sum is a copy.)
  return reduce_sum("sum_to", x, dims, /*keepdim=*/true, std::nullopt, false, shape);
}

int64_t first_non_finite(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> list;
  std::vector<size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || t.numel() == 0) continue;
    MT_CHECK(t.is_floating_point(), "first_non_finite: tensor ", i, " is ", describe(t), "; expected a floating dtype");
    MT_CHECK(list.empty() || t.device() == list.front().device(), "first_non_finite: tensor ", i, " is on ", t.device(),
             " but tensor ", index.front(), " is on ", list.front().device(), "; all must be on one device");
    list.push_back(t);
    index.push_back(i);
  }
  // The multi-tensor check with a factor of 1 writes nothing; called at the kernel level it leaves
  // the versions alone.
  const int64_t first = kernels::multi_tensor_scale_and_check(list, 1.0f);
  return first < 0 ? -1 : static_cast<int64_t>(index[static_cast<size_t>(first)]);
}

}  // namespace mixtrain
