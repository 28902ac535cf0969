// Tensor basics: storage, metadata queries, conversions, element access and in-place writes.
// Views live in src/ops/views.cpp; printing in src/core/print.cpp.
#include "mixtrain/tensor.h"

#include "core/backend.h"
#include "core/inplace.h"
#include "kernels/copy.h"
#include "kernels/cpu/loops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/memory.h"

namespace mixtrain {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = memory::allocate(nbytes, device);
}

Storage::~Storage() { memory::deallocate(data_, nbytes_, device_); }

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

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), target, device());
  kernels::copy(out, *this);
  // Only float<->float casts carry gradients; integer results are constants.
  if (is_floating(target) && autograd::needs_grad({this})) {
    DType source = dtype();
    autograd::record("to", {*this}, out, [source](const autograd::TensorList& g) {
      return autograd::TensorList{g[0].to(source)};
    });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  const Device source = device();
  Tensor src = contiguous();
  Tensor out = Tensor::empty(shape(), dtype(), target);
  const size_t n = nbytes();
  if (source.is_cpu()) {
    backend_for(target).copy_from_host(out.raw_data(), src.raw_data(), n, target);
  } else if (target.is_cpu()) {
    backend_for(source).copy_to_host(out.raw_data(), src.raw_data(), n, source);
  } else {
    // Between two non-host devices: staged through host memory (a backend with a direct path,
    // such as CUDA peer copies, will take it here).
    Tensor staging = Tensor::empty(shape(), dtype(), Device{});
    backend_for(source).copy_to_host(staging.raw_data(), src.raw_data(), n, source);
    backend_for(target).copy_from_host(out.raw_data(), staging.raw_data(), n, target);
  }
  if (is_floating_point() && autograd::needs_grad({this})) {
    autograd::record("to_device", {*this}, out, [source](const autograd::TensorList& g) {
      return autograd::TensorList{g[0].to(source)};
    });
  }
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  kernels::copy(out, *this);
  if (autograd::needs_grad({this})) {
    autograd::record("clone", {*this}, out, [](const autograd::TensorList& g) { return g; });
  }
  return out;
}

template <typename T>
T Tensor::item() const {
  MT_CHECK(numel() == 1, "item: tensor must have exactly one element, got ", describe(*this));
  return kernels::dispatch_all(dtype(), [&]<typename S>() -> T {
    S value;
    backend_for(device()).copy_to_host(&value, raw_data(), sizeof(S), device());
    return kernels::convert<T>(value);
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  // Converted and made contiguous on the tensor's device, then one transfer to the host.
  Tensor flat = Tensor::empty(shape(), dtype_v<T>, device());
  kernels::copy(flat, *this);
  std::vector<T> values(static_cast<size_t>(flat.numel()));
  backend_for(device()).copy_to_host(values.data(), flat.raw_data(), flat.nbytes(), device());
  return values;
}

template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  std::vector<uint8_t> bytes = to(kUInt8).to_vector<uint8_t>();
  return std::vector<bool>(bytes.begin(), bytes.end());
}

#define MT_INSTANTIATE_ACCESS(T) \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
MT_INSTANTIATE_ACCESS(float)
MT_INSTANTIATE_ACCESS(double)
MT_INSTANTIATE_ACCESS(float16)
MT_INSTANTIATE_ACCESS(bfloat16)
MT_INSTANTIATE_ACCESS(int32_t)
MT_INSTANTIATE_ACCESS(int64_t)
MT_INSTANTIATE_ACCESS(uint8_t)
template bool Tensor::item<bool>() const;
#undef MT_INSTANTIATE_ACCESS

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

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  MT_CHECK(requires_grad(), "backward: tensor ", describe(*this),
           " does not require grad and has no grad_fn (did the forward run under NoGradGuard, or do no inputs "
           "require grad?)");
  Tensor g = gradient;
  if (!g.defined()) {
    MT_CHECK(numel() == 1, "backward: a gradient must be given for a non-scalar output ", describe(*this));
    g = ones(shape(), {.dtype = dtype(), .device = device()});
  }
  MT_CHECK(g.shape() == shape(), "backward: gradient ", describe(g), " does not match output ", describe(*this));
  autograd::run_backward({*this}, {g}, retain_graph);
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

using detail::check_inplace;

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  kernels::fill(*this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  Tensor s = src.device() == device() ? src : src.detach().to(device());  // a copy from another device
  s = s.shape() == shape() ? s : s.expand(shape());
  if (s.shares_storage(*this) && !s.is_same(*this)) s = s.detach().clone();  // overlapping views
  kernels::copy(*this, s.detach());
  bump_version();
  return *this;
}

}  // namespace mixtrain
