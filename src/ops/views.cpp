// View ops: new shape/strides over the same storage (core/views.h does the arithmetic), each
// recorded by autograd with the backward that maps the view's gradient back to the base's shape.
#include "core/views.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/reduce.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
namespace {

using autograd::TensorList;

void record_reshape_backward(const char* name, const Tensor& input, const Tensor& out) {
  if (!autograd::needs_grad({&input})) return;
  Shape in_shape = input.shape();
  autograd::record(name, {input}, out, [in_shape](const TensorList& g) { return TensorList{g[0].reshape(in_shape)}; });
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Tensor out = views::view(*this, requested, "view");
  record_reshape_backward("view", *this, out);
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Tensor out;
  if (views::try_view(*this, requested, "reshape", out)) {
    record_reshape_backward("reshape", *this, out);
    return out;
  }
  return contiguous().view(requested);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int s = wrap_dim(start_dim, dim(), "flatten");
  int e = wrap_dim(end_dim, dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for ", describe(*this));
  Shape out;
  for (int d = 0; d < s; ++d) out.push_back(size(d));
  int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= size(d);
  out.push_back(merged);
  for (int d = e + 1; d < dim(); ++d) out.push_back(size(d));
  return reshape(out);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Tensor out = views::transpose(*this, dim0, dim1);
  if (autograd::needs_grad({this})) {
    const int a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
    autograd::record("transpose", {*this}, out, [a, b](const TensorList& g) { return TensorList{g[0].transpose(a, b)}; });
  }
  return out;
}

Tensor Tensor::permute(const Shape& dims) const {
  Shape inverse;
  Tensor out = views::permute(*this, dims, &inverse);
  if (autograd::needs_grad({this})) {
    autograd::record("permute", {*this}, out, [inverse](const TensorList& g) { return TensorList{g[0].permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  const int d = views::slice_bounds(*this, dim_, step, start, end);
  Tensor out = views::slice(*this, d, start, end, step);
  if (autograd::needs_grad({this})) {
    Shape in_shape = shape();
    DType dt = dtype();
    Device dev = device();
    autograd::record("slice", {*this}, out, [=](const TensorList& g) {
      Tensor gi = zeros(in_shape, {.dtype = dt, .device = dev});
      gi.slice(d, start, end, step).copy_(g[0]);
      return TensorList{gi};
    });
  }
  return out;
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  const int d = wrap_dim(dim_, dim(), "select");
  const int64_t i = views::select_index(*this, d, index);
  return slice(d, i, i + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& target) const {
  Tensor out = views::expand(*this, target);
  if (out.is_same(*this)) return *this;
  if (autograd::needs_grad({this})) {
    Shape in_shape = shape();
    autograd::record("expand", {*this}, out, [in_shape](const TensorList& g) { return TensorList{sum_to(g[0], in_shape)}; });
  }
  return out;
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  const int d = wrap_dim(dim_, dim(), "squeeze");
  if (size(d) != 1) return *this;
  Tensor out = views::squeeze(*this, d);
  record_reshape_backward("squeeze", *this, out);
  return out;
}

Tensor Tensor::squeeze() const {
  Tensor out = views::squeeze(*this);
  record_reshape_backward("squeeze", *this, out);
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  Tensor out = views::unsqueeze(*this, dim_);
  record_reshape_backward("unsqueeze", *this, out);
  return out;
}

}  // namespace mixtrain
