// Views without autograd (core/views.h): the shape and stride arithmetic of every view op.
#include "core/views.h"

#include <algorithm>

namespace mixtrain::views {

Tensor as_strided(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

namespace {

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

}  // namespace

bool try_view(const Tensor& t, const Shape& requested, const char* op, Tensor& out) {
  const Shape shape = infer_shape(requested, t.numel(), op, t);
  Shape strides;
  if (!view_strides(t, shape, strides)) return false;
  out = as_strided(t, shape, strides, t.storage_offset());
  return true;
}

Tensor view(const Tensor& t, const Shape& requested, const char* op) {
  Tensor out;
  MT_CHECK(try_view(t, requested, op, out), op, ": shape ", requested, " is not compatible with the strides of ",
           describe(t), " (strides ", t.strides(), "); use reshape() which copies when needed");
  return out;
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  const int a = wrap_dim(dim0, t.dim(), "transpose");
  const int b = wrap_dim(dim1, t.dim(), "transpose");
  Shape s = t.shape(), st = t.strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return as_strided(t, s, st, t.storage_offset());
}

Tensor permute(const Tensor& t, const Shape& dims, Shape* inverse_out) {
  MT_CHECK(dims.size() == t.dim(), "permute: got ", dims.size(), " dims ", dims, " for ", describe(t));
  Shape s, st, inverse = Shape::filled(t.dim(), -1);
  for (int i = 0; i < dims.size(); ++i) {
    const int d = wrap_dim(dims[i], t.dim(), "permute");
    MT_CHECK(inverse[d] == -1, "permute: dim ", d, " repeated in ", dims);
    inverse[d] = i;
    s.push_back(t.size(d));
    st.push_back(t.stride(d));
  }
  if (inverse_out != nullptr) *inverse_out = inverse;
  return as_strided(t, s, st, t.storage_offset());
}

int slice_bounds(const Tensor& t, int64_t dim, int64_t step, int64_t& start, int64_t& end) {
  const int d = wrap_dim(dim, t.dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = t.size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return d;
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const int d = slice_bounds(t, dim, step, start, end);
  Shape s = t.shape(), st = t.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return as_strided(t, s, st, t.storage_offset() + start * t.stride(d));
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) { return slice(t, dim, start, start + length); }

int64_t select_index(const Tensor& t, int d, int64_t index) {
  const int64_t n = t.size(d);
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of ", describe(t));
  return index < 0 ? index + n : index;
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  const int d = wrap_dim(dim, t.dim(), "select");
  const int64_t i = select_index(t, d, index);
  return squeeze(slice(t, d, i, i + 1), d);
}

Tensor expand(const Tensor& t, const Shape& target) {
  MT_CHECK(target.size() >= t.dim(), "expand: target shape ", target, " has fewer dims than ", describe(t));
  const int lead = target.size() - t.dim();
  Shape s = Shape::filled(target.size(), 0), st = Shape::filled(target.size(), 0);
  for (int i = 0; i < target.size(); ++i) {
    const int src = i - lead;
    if (src < 0) {
      MT_CHECK(target[i] >= 0, "expand: -1 is not allowed for new leading dims, got ", target);
      s[i] = target[i];
      st[i] = 0;
    } else if (target[i] == -1 || target[i] == t.size(src)) {
      s[i] = t.size(src);
      st[i] = t.stride(src);
    } else {
      MT_CHECK(t.size(src) == 1, "expand: cannot expand ", describe(t), " to ", target, " (dim ", i, " has size ",
               t.size(src), ", not 1)");
      s[i] = target[i];
      st[i] = 0;
    }
  }
  if (s == t.shape() && st == t.strides()) return t;
  return as_strided(t, s, st, t.storage_offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t;
  const int d = wrap_dim(dim, t.dim(), "squeeze");
  if (t.size(d) != 1) return t;
  Shape s = t.shape(), st = t.strides();
  s.erase(d);
  st.erase(d);
  return as_strided(t, s, st, t.storage_offset());
}

Tensor squeeze(const Tensor& t) {
  Shape s, st;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    s.push_back(t.size(d));
    st.push_back(t.stride(d));
  }
  return as_strided(t, s, st, t.storage_offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  const int d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape s = t.shape(), st = t.strides();
  const int64_t new_stride = d < t.dim() ? t.stride(d) * t.size(d) : 1;
  s.insert(d, 1);
  st.insert(d, new_stride);
  return as_strided(t, s, st, t.storage_offset());
}

}  // namespace mixtrain::views
