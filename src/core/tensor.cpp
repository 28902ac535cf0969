// Tensor basics: storage, metadata and the autograd metadata of a tensor. What runs kernels or
// records autograd -- conversions, element access, backward, in-place writes -- is in the ops layer
// (src/ops/tensor_methods.cpp), views in src/ops/views.cpp, printing in src/core/print.cpp.
#include "mixtrain/tensor.h"

#include "mixtrain/memory.h"

namespace mixtrain {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = memory::allocate(nbytes, device, tag_);
}

Storage::~Storage() { memory::deallocate(data_, nbytes_, device_, tag_); }

void Storage::set_category(memory::Category category) { memory::set_category(tag_, nbytes_, device_, category); }

void memory::set_category(const Tensor& t, Category category) {
  if (t.defined()) t.storage()->set_category(category);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  // Strides multiply every dim (zero dims count as one), and the byte size multiplies the element
  // count by the element size: both must fit, or the views and loops built on them overflow.
  int64_t span = 1, bytes = 0;
  for (int64_t d : shape) {
    MT_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
    MT_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span), "empty: shape ", shape,
             " has more elements than a 64-bit index can address");
  }
  MT_CHECK(!__builtin_mul_overflow(shape.numel(), static_cast<int64_t>(mixtrain::element_size(dtype)), &bytes),
           "empty: shape ", shape, " of ", dtype, " needs more bytes than a 64-bit size can count");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * mixtrain::element_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const Shape& s = shape();
  const Shape& st = strides();
  for (int d = s.size() - 1; d >= 0; --d) {
    if (s[d] == 1) continue;
    if (st[d] != expected) return false;
    expected *= s[d];
  }
  return true;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  MT_CHECK(!requires_grad || is_floating_point(), "requires_grad_: only floating-point tensors can require grad, got ",
           describe(*this));
  MT_CHECK(is_leaf() || requires_grad, "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()");
  impl().autograd_meta().requires_grad = requires_grad;
  return *this;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  return impl().autograd ? impl().autograd->grad_fn : kNone;
}

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->grad) return Tensor();
  return Tensor(impl().autograd->grad);
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    if (impl().autograd) impl().autograd->grad.reset();
    return;
  }
  MT_CHECK(g.shape() == shape(), "set_grad: gradient ", describe(g), " does not match tensor ", describe(*this));
  impl().autograd_meta().grad = g.impl_ptr();
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor& leaf)> hook) {
  MT_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: ", describe(*this),
           " is not a leaf that requires grad (post-accumulate-grad hooks run when a leaf's .grad is accumulated)");
  MT_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: the hook is empty");
  AutogradMeta& m = impl().autograd_meta();
  const uint64_t id = m.next_hook_id++;
  m.post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) {
  if (!impl().autograd) return;
  auto& hooks = impl().autograd->post_accumulate_hooks;
  std::erase_if(hooks, [id](const auto& h) { return h.first == id; });
}

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->offset = impl().offset;
  impl2->shape = impl().shape;
  impl2->strides = impl().strides;
  impl2->dtype = impl().dtype;
  return Tensor(std::move(impl2));
}

}  // namespace mixtrain
