// mixtrain/nn/module.h: the Module base class and StateDict.
//
// A Module owns named parameters (leaf tensors that require grad), named buffers (state that is
// not trained, e.g. BatchNorm's running statistics) and named submodules, all kept in registration
// order. Recursive names are dotted as in PyTorch ("0.weight", "blocks.1.attn.qkv.weight"), and
// state_dict() lists a module's own parameters, then its own persistent buffers, then each child's
// entries in registration order: PyTorch's order, so checkpoints map one to one.
//
// Modules are handles to shared state: submodules are held by std::shared_ptr, parameters are
// Tensor handles. Copying a module copies the handles (the copy shares parameters, buffers and
// children with the original, as copying a Tensor shares its storage). Containers take modules by
// value and store shared_ptrs:
//
//   mt::nn::Sequential model(mt::nn::Conv2d(1, 32, 3, {.padding = 1}), mt::nn::ReLU());
//   mt::Tensor y = model(x);
//
// to(dtype) converts parameters and buffers *in place* (the TensorImpl each handle points at gets
// the new storage and dtype), so member handles, optimizers' parameter lists and references taken
// earlier all see the converted tensor. Do not call it inside an autocast region (the cast cache
// is keyed by tensor identity).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixtrain/autograd.h"
#include "mixtrain/tensor.h"

namespace mixtrain::nn {

using NamedTensor = std::pair<std::string, Tensor>;

// An ordered name -> Tensor map (insertion order kept, lookup by name in O(1)), the format of
// state_dict() and load_state_dict(). Iterates as std::pair<std::string, Tensor>.
class StateDict {
 public:
  using const_iterator = std::vector<NamedTensor>::const_iterator;

  StateDict() = default;
  StateDict(std::initializer_list<NamedTensor> items);
  StateDict(std::vector<NamedTensor> items);  // NOLINT: implicit, e.g. from io::NamedTensors
  // From any map-like container of (name, Tensor), e.g. io::load_safetensors(path).tensors, so
  // `model.load_state_dict(file.tensors)` works. Keeps the container's iteration order.
  template <typename Map>
  requires(!std::same_as<std::remove_cvref_t<Map>, StateDict> &&
           !std::same_as<std::remove_cvref_t<Map>, std::vector<NamedTensor>>) &&
      requires(const Map& m) {
    { m.begin()->first } -> std::convertible_to<std::string>;
    { m.begin()->second } -> std::convertible_to<Tensor>;
  }
  StateDict(const Map& items) {  // NOLINT: implicit by design
    for (const auto& [name, t] : items) insert(name, t);
  }

  // Adds `name`, or replaces its tensor (keeping its position) when it is already present.
  void insert(const std::string& name, const Tensor& tensor);
  bool erase(const std::string& name);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws mt::Error naming the key (and listing the keys present) when absent.
  const Tensor& at(const std::string& name) const;
  // nullptr when absent.
  const Tensor* find(const std::string& name) const;

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  const std::vector<NamedTensor>& items() const { return items_; }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<NamedTensor> items_;
  std::unordered_map<std::string, size_t> index_;
};

// What load_state_dict(..., strict = false) skipped (strict mode throws instead).
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module
};

struct BufferOptions {
  // Persistent buffers appear in state_dict() (PyTorch's `persistent`).
  bool persistent = true;
  // Module::to(dtype) leaves the buffer in its dtype. BatchNorm's running statistics use this:
  // accumulating them in 16 bits would lose the small momentum updates (0.1 * delta rounds away).
  bool keep_dtype = false;
};

class Module;

// A module type: derived from Module (containers accept these by value and by shared_ptr).
template <typename M>
concept ModuleType = std::derived_from<std::remove_cvref_t<M>, Module>;

class Module {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = default;
  Module(Module&&) = default;
  Module& operator=(const Module&) = default;
  Module& operator=(Module&&) = default;

  // The computation. The default throws: a module without forward is a pure container.
  virtual Tensor forward(const Tensor& input);
  // forward(), inside this module's scope while module_scopes_enabled() (autograd.h): what
  // the numerics monitor, the non-finite origin finder and the memory breakdown name ops by. Containers call children
  // this way; a module calling a child's forward() directly leaves the child's ops in its own scope.
  Tensor operator()(const Tensor& input) {
    if (!autograd::module_scopes_enabled() || scope_name_.empty()) return forward(input);
    autograd::ScopeGuard scope(&scope_name_);
    return forward(input);
  }
  // The module's path in the model ("blocks.0.attn"), as set by set_scope_names on the root; "" for
  // the root and before any set_scope_names.
  const std::string& scope_name() const { return scope_name_; }
  // Names every descendant's scope by its path from this module (named_modules()'s names).
  void set_scope_names();

  // "Linear", "Sequential", ...: the class name, as PyTorch prints it.
  const std::string& type_name() const { return type_name_; }

  // ---- registration (names: non-empty, no '.', unique among this module's params/buffers/children)
  // Registers `value` (floating point) as a parameter and returns the same handle. The tensor is
  // made to require grad unless `requires_grad` is false.
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value, BufferOptions opts = {});
  std::shared_ptr<Module> register_module(const std::string& name, std::shared_ptr<Module> module);
  template <ModuleType M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_module(name, std::static_pointer_cast<Module>(module));
    return module;
  }
  // By value: the module is moved (or, from an lvalue, shallow-copied) into a new shared_ptr.
  template <ModuleType M>
  std::shared_ptr<std::remove_cvref_t<M>> register_module(const std::string& name, M&& module) {
    return register_module(name, std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }

  // ---- access (recurse: include submodules' entries, with dotted names)
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<NamedTensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<NamedTensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // Every module in the tree, pre-order, this one first with name "". The pointers are non-owning
  // and valid while this module lives.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn on this module and every descendant, pre-order.
  void apply(const std::function<void(Module&)>& fn);

  // ---- mode: propagates to every descendant (Dropout and BatchNorm read it)
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- state
  // Parameters and persistent buffers, detached handles sharing storage with the module (as in
  // PyTorch: writing into them writes into the model; clone() them to snapshot).
  StateDict state_dict() const;
  // Copies every entry into the matching tensor in place. Shapes must match exactly. A floating
  // entry of another float dtype is converted to the module tensor's dtype; integer entries (e.g.
  // num_batches_tracked) convert between integer dtypes; floating <-> integer is an error.
  // strict: missing or unexpected keys are an error. Every problem is listed in one mt::Error and
  // nothing is copied unless all entries are valid.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

  // State beyond parameters and buffers that an exact resume of training needs (PyTorch's
  // get_extra_state / set_extra_state): nn::Linear's FP8 scales and amax histories. This module's
  // own, not its children's; keys are the module's ("input.scale"); a training checkpoint stores
  // them per module path. Host tensors. Default: none.
  virtual StateDict extra_state() const { return {}; }
  // Checks `state` as a whole (keys, dtypes, shapes, values) without changing anything; throws
  // mt::Error naming the key, as `key_prefix` + key (the name the caller stores it under).
  // `after_fp8_steps`: it comes from a run that has taken steps under FP8, so a module that keeps
  // FP8 state must find it complete there (a fresh state would silently change the trajectory). An
  // empty `state` is valid when nothing is required.
  virtual void check_extra_state(const StateDict& state, bool after_fp8_steps,
                                 const std::string& key_prefix = "") const;
  // check_extra_state, then replaces the module's extra state with `state` (empty: cleared).
  virtual void load_extra_state(const StateDict& state, bool after_fp8_steps);

  // Converts every floating parameter and buffer to `dtype` in place (gradients too), except
  // buffers registered with keep_dtype (BatchNorm running stats stay fp32). requires_grad is kept.
  Module& to(DType dtype);
  // Moves every parameter and buffer (gradients too) to `device` in place, bit for bit, the same
  // way: handles taken earlier, optimizers included, see the moved tensors. An optimizer's state
  // follows its parameters at its next step.
  Module& to(Device device);
  // Clears gradients: drops them (set_to_none, PyTorch's default) or writes zeros.
  void zero_grad(bool set_to_none = true);
  // Total elements over parameters() (only those requiring grad when trainable_only).
  int64_t num_parameters(bool trainable_only = false) const;

  // One line of constructor arguments for printing ("in_features=784, out_features=512, bias=true").
  virtual std::string extra_repr() const { return ""; }
  // A PyTorch-style tree of the module and its children.
  std::string repr() const;

 protected:
  // The registered handle of a parameter/buffer of this module (not recursive); throws if absent.
  const Tensor& own_parameter(const std::string& name) const;
  const Tensor& own_buffer(const std::string& name) const;

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    BufferOptions opts;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void collect_parameters(const std::string& prefix, bool recurse, std::vector<NamedTensor>& out) const;
  void collect_buffers(const std::string& prefix, bool recurse, bool persistent_only,
                       std::vector<NamedTensor>& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out);
  void repr_into(std::string& out, int indent) const;

  std::string type_name_;
  std::string scope_name_;
  std::vector<NamedTensor> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace mixtrain::nn
