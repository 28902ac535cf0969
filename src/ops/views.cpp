// View ops: new shape/strides over the same storage, each recorded by autograd with the backward
// that maps the view's gradient back to the base's shape.
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/reduce.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
namespace {

using autograd::TensorList;

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// Resolves a single -1 and checks the element count.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Tensor& t) {
  Shape out = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension can be -1, got shape ", requested);
      infer = i;
    } else {
      MT_CHECK(out[i] >= 0, op, ": invalid shape ", requested);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested, " is invalid for input ", describe(t));
    out[infer] = numel / known;
  }
  MT_CHECK(out.numel() == numel, op, ": shape ", requested, " is invalid for input ", describe(t), " (", numel,
           " elements)");
  return out;
}

// Strides for viewing `t` as `shape` without copying, if possible (PyTorch's computeStride):
// each group of old dims that merges or splits into new dims must be contiguous within itself.
bool view_strides(const Tensor& t, const Shape& shape, Shape& out) {
  const Shape& old_shape = t.shape();
  const Shape& old_strides = t.strides();
  out = Shape::filled(shape.size(), 0);
  if (old_shape.numel() == 0 || old_shape.empty()) {  // empty or 0-dim: any shape of that numel is a view
    out = contiguous_strides(shape);
    return true;
  }
  int view_d = shape.size() - 1;
  int64_t chunk_base_stride = old_strides.size() ? old_strides.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

void record_reshape_backward(const char* name, const Tensor& input, const Tensor& out) {
  if (!autograd::needs_grad({&input})) return;
  Shape in_shape = input.shape();
  autograd::record(name, {input}, out, [in_shape](const TensorList& g) { return TensorList{g[0].reshape(in_shape)}; });
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape shape2 = infer_shape(requested, numel(), "view", *this);
  Shape strides2;
  MT_CHECK(view_strides(*this, shape2, strides2), "view: shape ", requested, " is not compatible with the strides of ",
           describe(*this), " (strides ", strides(), "); use reshape() which copies when needed");
  Tensor out = make_view(*this, shape2, strides2, storage_offset());
  record_reshape_backward("view", *this, out);
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape2 = infer_shape(requested, numel(), "reshape", *this);
  Shape strides2;
  if (view_strides(*this, shape2, strides2)) {
    Tensor out = make_view(*this, shape2, strides2, storage_offset());
    record_reshape_backward("reshape", *this, out);
    return out;
  }
  return contiguous().view(shape2);
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
  int a = wrap_dim(dim0, dim(), "transpose");
  int b = wrap_dim(dim1, dim(), "transpose");
  Shape s = shape(), st = strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  Tensor out = make_view(*this, s, st, storage_offset());
  if (autograd::needs_grad({this})) {
    autograd::record("transpose", {*this}, out, [a, b](const TensorList& g) { return TensorList{g[0].transpose(a, b)}; });
  }
  return out;
}

Tensor Tensor::permute(const Shape& dims) const {
  MT_CHECK(dims.size() == dim(), "permute: got ", dims.size(), " dims ", dims, " for ", describe(*this));
  Shape s, st, inverse = Shape::filled(dim(), -1);
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], dim(), "permute");
    MT_CHECK(inverse[d] == -1, "permute: dim ", d, " repeated in ", dims);
    inverse[d] = i;
    s.push_back(size(d));
    st.push_back(stride(d));
  }
  Tensor out = make_view(*this, s, st, storage_offset());
  if (autograd::needs_grad({this})) {
    autograd::record("permute", {*this}, out, [inverse](const TensorList& g) { return TensorList{g[0].permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  int d = wrap_dim(dim_, dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, storage_offset() + start * stride(d));
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
  int d = wrap_dim(dim_, dim(), "select");
  const int64_t n = size(d);
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of ", describe(*this));
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& target) const {
  MT_CHECK(target.size() >= dim(), "expand: target shape ", target, " has fewer dims than ", describe(*this));
  const int lead = target.size() - dim();
  Shape s = Shape::filled(target.size(), 0), st = Shape::filled(target.size(), 0);
  for (int i = 0; i < target.size(); ++i) {
    int src = i - lead;
    if (src < 0) {
      MT_CHECK(target[i] >= 0, "expand: -1 is not allowed for new leading dims, got ", target);
      s[i] = target[i];
      st[i] = 0;
    } else if (target[i] == -1 || target[i] == size(src)) {
      s[i] = size(src);
      st[i] = stride(src);
    } else {
      MT_CHECK(size(src) == 1, "expand: cannot expand ", describe(*this), " to ", target, " (dim ", i, " has size ",
               size(src), ", not 1)");
      s[i] = target[i];
      st[i] = 0;
    }
  }
  if (s == shape() && st == strides()) return *this;
  Tensor out = make_view(*this, s, st, storage_offset());
  if (autograd::needs_grad({this})) {
    Shape in_shape = shape();
    autograd::record("expand", {*this}, out, [in_shape](const TensorList& g) { return TensorList{sum_to(g[0], in_shape)}; });
  }
  return out;
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  int d = wrap_dim(dim_, dim(), "squeeze");
  if (size(d) != 1) return *this;
  Shape s = shape(), st = strides();
  s.erase(d);
  st.erase(d);
  Tensor out = make_view(*this, s, st, storage_offset());
  record_reshape_backward("squeeze", *this, out);
  return out;
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int d = 0; d < dim(); ++d) {
    if (size(d) == 1) continue;
    s.push_back(size(d));
    st.push_back(stride(d));
  }
  Tensor out = make_view(*this, s, st, storage_offset());
  record_reshape_backward("squeeze", *this, out);
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int d = wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape s = shape(), st = strides();
  int64_t new_stride = d < dim() ? stride(d) * size(d) : 1;
  s.insert(d, 1);
  st.insert(d, new_stride);
  Tensor out = make_view(*this, s, st, storage_offset());
  record_reshape_backward("unsqueeze", *this, out);
  return out;
}

}  // namespace mixtrain
