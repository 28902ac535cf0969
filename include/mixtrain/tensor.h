// mixtrain/tensor.h: the Tensor handle.
//
// A Tensor is a cheap, shared handle to a TensorImpl: shape, strides (in elements), storage offset,
// dtype and a shared Storage. Views (reshape/view, transpose, permute, slice, expand, squeeze,
// unsqueeze, detach) share the storage; the storage's version counter is bumped by every in-place
// write, so autograd can detect a saved tensor that was modified (see Note [Saved tensor versions]
// in docs/notes/autograd.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/error.h"
#include "mixtrain/memory.h"
#include "mixtrain/shape.h"

namespace mixtrain {

namespace autograd {
class Node;
}

// A block of device memory from the accounted allocator (memory.h), with a version counter.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // What its bytes count as in the memory breakdown (memory.h): set at allocation, changed here.
  memory::Category category() const { return tag_.category; }
  void set_category(memory::Category category);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  memory::Tag tag_;
  std::atomic<uint64_t> version_{0};
};

class Tensor;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::shared_ptr<struct TensorImpl> grad;  // accumulated gradient of a leaf (same dtype as the leaf)
  std::weak_ptr<autograd::Node> grad_accumulator;  // the AccumulateGrad node of a leaf, shared by all uses
  // Tensor::register_post_accumulate_grad_hook's hooks, by id (ids are never reused).
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  uint64_t next_hook_id = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = kFloat32;
  std::unique_ptr<AutogradMeta> autograd;  // null until autograd needs it

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new, uninitialised, contiguous tensor (factories in factory.h fill it).
  static Tensor empty(const Shape& shape, DType dtype = kFloat32, Device device = Device{});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int dim() const { return impl().shape.size(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t storage_offset() const { return impl().offset; }
  size_t element_size() const { return mixtrain::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // True when both tensors view the same storage.
  bool shares_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }

  // Pointer to the first element (storage offset applied). Throws when T does not match dtype().
  template <typename T>
  T* data_ptr() const {
    MT_CHECK(dtype_v<T> == dtype(), "data_ptr: tensor has dtype ", dtype(), ", requested ", dtype_v<T>);
    return static_cast<T*>(impl().storage->data()) + impl().offset;
  }
  void* raw_data() const {
    return static_cast<char*>(impl().storage->data()) + impl().offset * static_cast<int64_t>(element_size());
  }

  // Conversions. to() returns *this when the dtype already matches (like PyTorch); it is recorded
  // by autograd, so gradients flow back converted to the source dtype.
  Tensor to(DType dtype) const;
  // A copy on `device` (*this when already there), through the backends' host transfers; recorded
  // by autograd, so gradients flow back to the source device. Values are copied bit for bit.
  Tensor to(Device device) const;
  Tensor contiguous() const;
  Tensor clone() const;

  // The single value of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  // All values in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // Views (share storage, recorded by autograd).
  Tensor view(const Shape& shape) const;     // requires compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const { return slice(dim, start, start + length); }
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim; size-1 dims broadcast with stride 0
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;

  // Autograd.
  bool requires_grad() const { return impl().autograd && impl().autograd->requires_grad; }
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const { return !impl().autograd || !impl().autograd->grad_fn; }
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const { return impl().autograd ? impl().autograd->output_nr : 0; }
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& g);
  // PyTorch's register_post_accumulate_grad_hook: `hook(leaf)` runs each time backward has finished
  // accumulating this leaf's gradient (once per backward pass that reaches it; not for autograd::grad,
  // which accumulates nothing), in registration order, on the thread running backward. It is where
  // data-parallel training starts reducing a gradient while the rest of backward still runs. Only
  // for leaves that require grad (else mt::Error). Returns an id for the removal.
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor& leaf)> hook);
  void remove_post_accumulate_grad_hook(uint64_t id);
  // Backpropagates from this tensor. Without `gradient` the tensor must hold one element.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // A tensor sharing storage with this one, cut from the graph (requires_grad false).
  Tensor detach() const;

  // In-place writes (bump the version counter). Refused on a leaf that requires grad while grad
  // mode is on, like PyTorch.
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src to this shape, converts its dtype, moves it from its device
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double value);
  uint64_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }

  std::string str() const;  // shape, dtype and (abbreviated) values

  TensorImpl& impl() const {
    MT_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// "[2, 3] float32" style description used in error messages.
std::string describe(const Tensor& t);

}  // namespace mixtrain
