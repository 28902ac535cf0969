// The Tensor member functions that run kernels or record autograd: conversions and moves between
// devices, element access through host copies, backward and in-place writes. They are declared on
// Tensor (include/mixtrain/tensor.h, the core layer) and defined here, in the ops layer, so that the
// core stays below the kernels and autograd (docs/notes/layers.md).
#include <vector>

#include "core/backend.h"
#include "kernels/copy.h"
#include "kernels/convert.h"
#include "kernels/dtype_dispatch.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/tensor.h"
#include "ops/inplace.h"

namespace mixtrain {

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = kernels::converted(*this, target);
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
  Tensor out = kernels::clone(*this);
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
