// cat, stack and index_select front-ends.
//
// cat and stack promote their inputs to the common dtype (promote_types over all of them, the same
// rule as autocast's promote policy) and copy each input into its slice of the output with the
// strided converting copy; backward hands each input its slice of the gradient, converted back to
// the input's dtype. index_select gathers rows (src/backends/cpu/kernels/shape_ops.cpp); its backward
// scatter-adds into zeros, summing repeated indices in a fixed order.
#include <string>

#include "kernels/copy.h"
#include "kernels/shape_ops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/ops/shape_ops.h"
#include "ops/autocast_hook.h"

namespace mixtrain {
namespace {

using autograd::TensorList;

// The common dtype of a non-empty list; checks every tensor is defined and on one device.
DType common_dtype(const char* op, const std::vector<Tensor>& tensors) {
  MT_CHECK(!tensors.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) MT_CHECK(tensors[i].defined(), op, ": tensor ", i, " is undefined");
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].device() == tensors[0].device(), op, ": tensor 0 is on ", tensors[0].device(), " but tensor ",
             i, " is on ", tensors[i].device());
    dtype = promote_types(dtype, tensors[i].dtype());
  }
  return dtype;
}

// Records the backward of cat/stack: input i gets slice(g) (narrowed or selected along dim).
template <typename Slice>
void record_split_backward(const char* op, const std::vector<Tensor>& inputs, const Tensor& out, Slice slice) {
  if (!autograd::needs_grad(inputs)) return;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype());
  autograd::record(op, inputs, out, [dtypes, slice](const TensorList& g) {
    TensorList grads(dtypes.size());
    for (size_t i = 0; i < dtypes.size(); ++i)
      if (is_floating(dtypes[i])) grads[i] = slice(g[0], static_cast<int64_t>(i)).to(dtypes[i]);
    return grads;
  });
}

}  // namespace

Tensor cat(const std::vector<Tensor>& inputs, int64_t dim) {
  std::vector<Tensor> tensors = inputs;
  auto region = ops::autocast(OpId::kCat, tensors);
  const DType dtype = common_dtype("cat", tensors);
  const Tensor& first = tensors[0];
  MT_CHECK(first.dim() > 0, "cat: zero-dimensional tensor 0 ", describe(first), " cannot be concatenated");
  const int d = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool match = t.dim() == first.dim();
    for (int k = 0; match && k < first.dim(); ++k) match = k == d || t.size(k) == first.size(k);
    MT_CHECK(match, "cat: tensors must have the same shape except in dimension ", d, ", but tensor 0 is ",
             describe(first), " and tensor ", i, " is ", describe(t));
    offsets.push_back(out_shape[d]);
    out_shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(out_shape, dtype, first.device());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t len = tensors[i].size(d);
    if (len > 0) kernels::copy(out.detach().narrow(d, offsets[i], len), tensors[i]);
  }
  std::vector<int64_t> lengths;
  for (const Tensor& t : tensors) lengths.push_back(t.size(d));
  record_split_backward("cat", tensors, out, [d, offsets, lengths](const Tensor& g, int64_t i) {
    return g.narrow(d, offsets[i], lengths[i]);
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& inputs, int64_t dim) {
  std::vector<Tensor> tensors = inputs;
  auto region = ops::autocast(OpId::kStack, tensors);
  const DType dtype = common_dtype("stack", tensors);
  const Tensor& first = tensors[0];
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].shape() == first.shape(), "stack: every tensor must have the same shape, but tensor 0 is ",
             describe(first), " and tensor ", i, " is ", describe(tensors[i]));
  }
  const int d = wrap_dim(dim, first.dim() + 1, "stack");
  Shape out_shape = first.shape();
  out_shape.insert(d, static_cast<int64_t>(tensors.size()));
  Tensor out = Tensor::empty(out_shape, dtype, first.device());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (first.numel() > 0) kernels::copy(out.detach().select(d, static_cast<int64_t>(i)), tensors[i]);
  }
  record_split_backward("stack", tensors, out, [d](const Tensor& g, int64_t i) { return g.select(d, i); });
  return out;
}

Tensor index_select(const Tensor& x_, int64_t dim, const Tensor& index) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kIndexSelect, {&x});
  MT_CHECK(x.dim() >= 1, "index_select: expected an input with at least one dimension, got ", describe(x));
  MT_CHECK((index.dtype() == kInt64 || index.dtype() == kInt32) && index.dim() <= 1,
           "index_select: index must be a 1-D int64 or int32 tensor, got ", describe(index));
  MT_CHECK(index.device() == x.device(), "index_select: index is on ", index.device(), " but the input is on ",
           x.device());
  const int d = wrap_dim(dim, x.dim(), "index_select");
  // (unsqueeze for a 0-d index: reshape of a 0-d tensor to [1] is refused by view_strides today)
  const Tensor idx = index.dim() == 0 ? index.unsqueeze(0) : index.contiguous();
  if (auto bad = kernels::check_index(idx, x.size(d)).bad) {
    MT_FAIL("index_select: index ", bad->value, " (at position ", bad->position, ") is out of range for dim ", d,
            " of size ", x.size(d), " of input ", describe(x), "; valid indices are 0 to ", x.size(d) - 1);
  }
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= x.size(k);
  for (int k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
  Shape out_shape = x.shape();
  out_shape[d] = idx.numel();
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) kernels::gather_rows(xc, idx, out, outer, inner);
  if (autograd::needs_grad({&xc})) {
    const Shape in_shape = x.shape();
    autograd::record("index_select", {xc}, out,
                     [si = autograd::SavedTensor(idx), in_shape, outer, inner](const TensorList& g) {
                       const Tensor gy = g[0].contiguous();
                       Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
                       if (gx.numel() > 0)
                         kernels::scatter_add_rows(gy.device(), gy.dtype())(gy, si.unpack("index_select"), gx, outer,
                                                                            inner);
                       return TensorList{gx};
                     });
  }
  return out;
}

}  // namespace mixtrain
