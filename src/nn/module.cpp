// Module: registration, recursive traversal with dotted names, state_dict / load_state_dict,
// in-place dtype conversion and printing.
#include "mixtrain/nn/module.h"

#include <ostream>
#include <sstream>
#include <unordered_set>

#include "mixtrain/autograd.h"

namespace mixtrain::nn {

// ---------------------------------------------------------------------------------------------
// StateDict

StateDict::StateDict(std::initializer_list<NamedTensor> items) {
  for (const auto& [name, t] : items) insert(name, t);
}

StateDict::StateDict(std::vector<NamedTensor> items) {
  for (auto& [name, t] : items) insert(name, t);
}

void StateDict::insert(const std::string& name, const Tensor& tensor) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    items_[it->second].second = tensor;
    return;
  }
  index_.emplace(name, items_.size());
  items_.emplace_back(name, tensor);
}

bool StateDict::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const Tensor* StateDict::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (t == nullptr) {
    std::string keys;
    for (const auto& [k, v] : items_) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
    MT_FAIL("StateDict: no key \"", name, "\" (keys: ", keys.empty() ? "none" : keys, ")");
  }
  return *t;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Registration

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor& input) {
  MT_FAIL(type_name_, ": this module has no forward(const Tensor&); call its children directly");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty(), type_name_, ": ", what, " name must not be empty");
  MT_CHECK(name.find('.') == std::string::npos, type_name_, ": ", what, " name \"", name,
           "\" must not contain '.' (dots separate the levels of dotted state_dict names)");
  auto clash = [&](const std::string& kind) {
    MT_FAIL(type_name_, ": cannot register ", what, " \"", name, "\": a ", kind, " with that name exists");
  };
  for (const auto& p : params_)
    if (p.first == name) clash("parameter");
  for (const auto& b : buffers_)
    if (b.name == name) clash("buffer");
  for (const auto& c : children_)
    if (c.first == name) clash("submodule");
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name, "parameter");
  MT_CHECK(value.defined(), type_name_, ": parameter \"", name, "\" is an undefined tensor");
  MT_CHECK(value.is_floating_point(), type_name_, ": parameter \"", name, "\" must be floating point, got ",
           describe(value));
  MT_CHECK(value.is_leaf(), type_name_, ": parameter \"", name,
           "\" must be a leaf tensor (detach() it from the graph that produced it)");
  value.requires_grad_(requires_grad);
  params_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, BufferOptions opts) {
  check_new_name(name, "buffer");
  MT_CHECK(value.defined(), type_name_, ": buffer \"", name, "\" is an undefined tensor");
  buffers_.push_back({name, value, opts});
  return value;
}

std::shared_ptr<Module> Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  MT_CHECK(module != nullptr, type_name_, ": submodule \"", name, "\" is null");
  MT_CHECK(module.get() != this, type_name_, ": a module cannot be its own submodule");
  children_.emplace_back(name, module);
  return module;
}

const Tensor& Module::own_parameter(const std::string& name) const {
  for (const auto& p : params_)
    if (p.first == name) return p.second;
  MT_FAIL(type_name_, ": no parameter \"", name, "\"");
}

const Tensor& Module::own_buffer(const std::string& name) const {
  for (const auto& b : buffers_)
    if (b.name == name) return b.tensor;
  MT_FAIL(type_name_, ": no buffer \"", name, "\"");
}

// ---------------------------------------------------------------------------------------------
// Traversal

// PyTorch's order: this module's own entries, then each child's, depth first. A tensor shared by
// two modules is listed once (under its first name), as PyTorch's remove_duplicate does, so an
// optimizer never steps a tied weight twice.
void Module::collect_parameters(const std::string& prefix, bool recurse, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", true, out);
}

void Module::collect_buffers(const std::string& prefix, bool recurse, bool persistent_only,
                             std::vector<NamedTensor>& out) const {
  for (const auto& b : buffers_)
    if (!persistent_only || b.opts.persistent) out.emplace_back(prefix + b.name, b.tensor);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", true, persistent_only, out);
}

namespace {
std::vector<NamedTensor> dedupe(std::vector<NamedTensor> in) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<NamedTensor> out;
  out.reserve(in.size());
  for (auto& nt : in)
    if (seen.insert(nt.second.impl_ptr().get()).second) out.push_back(std::move(nt));
  return out;
}
}  // namespace

std::vector<NamedTensor> Module::named_parameters(bool recurse) const {
  std::vector<NamedTensor> out;
  collect_parameters("", recurse, out);
  return dedupe(std::move(out));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<NamedTensor> Module::named_buffers(bool recurse) const {
  std::vector<NamedTensor> out;
  collect_buffers("", recurse, false, out);
  return dedupe(std::move(out));
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (auto& [name, child] : children_) child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::set_scope_names() {
  for (auto& [name, module] : named_modules()) module->scope_name_ = name;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& c : children_) c.second->apply(fn);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

// ---------------------------------------------------------------------------------------------
// State

StateDict Module::state_dict() const {
  // Per module: own parameters, own persistent buffers, then children (PyTorch's _save_to_state_dict
  // order). Not deduplicated: PyTorch also saves a tied weight under each of its names.
  StateDict out;
  std::function<void(const Module&, const std::string&)> visit = [&](const Module& m, const std::string& prefix) {
    for (const auto& [name, t] : m.params_) out.insert(prefix + name, t.detach());
    for (const auto& b : m.buffers_)
      if (b.opts.persistent) out.insert(prefix + b.name, b.tensor.detach());
    for (const auto& [name, child] : m.children_) visit(*child, prefix + name + ".");
  };
  visit(*this, "");
  return out;
}

namespace {
// The dict's keys may come from a file: each quoted and escaped, at most kListed of them named.
constexpr size_t kListed = 4;
std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kListed; ++i) s += (i ? ", " : "") + detail::quote_untrusted(keys[i]);
  if (keys.size() > kListed) s += detail::concat(" and ", keys.size() - kListed, " more");
  return s;
}
}  // namespace

void Module::check_extra_state(const StateDict& state, bool /*after_fp8_steps*/, const std::string& key_prefix) const {
  for (const auto& [key, t] : state)
    MT_FAIL("unexpected extra-state tensor ", mixtrain::detail::quote_untrusted(key_prefix + key), ": a ", type_name(),
            " keeps none");
}

void Module::load_extra_state(const StateDict& state, bool after_fp8_steps) {
  check_extra_state(state, after_fp8_steps);
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict own = state_dict();
  LoadResult result;
  std::vector<std::string> problems;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  for (const auto& [name, dst] : own) {
    const Tensor* src = dict.find(name);
    if (src == nullptr) {
      result.missing_keys.push_back(name);
      continue;
    }
    if (!src->defined()) {
      problems.push_back(detail::quote_untrusted(name) + ": the dict holds an undefined tensor");
      continue;
    }
    if (!(src->shape() == dst.shape())) {
      problems.push_back("size mismatch for " + detail::quote_untrusted(name) + ": copying a param with shape " + src->shape().str() +
                         " from the checkpoint, the shape in the current model is " + dst.shape().str());
      continue;
    }
    const bool same_kind =
        src->is_floating_point() == dst.is_floating_point() && src->dtype() != kBool && dst.dtype() != kBool;
    if (src->dtype() != dst.dtype() && !same_kind) {
      problems.push_back("dtype mismatch for " + detail::quote_untrusted(name) + ": the checkpoint has " + describe(*src) +
                         ", the model has " + describe(dst) + " (only float <-> float and int <-> int convert)");
      continue;
    }
    copies.emplace_back(dst, *src);
  }
  for (const auto& [name, t] : dict)
    if (!own.contains(name)) result.unexpected_keys.push_back(name);

  if (strict) {
    if (!result.missing_keys.empty()) problems.push_back("missing keys: " + quoted_list(result.missing_keys));
    if (!result.unexpected_keys.empty()) problems.push_back("unexpected keys: " + quoted_list(result.unexpected_keys));
  }
  if (!problems.empty()) {
    // One line whatever the dict holds: the first problems, then how many more.
    std::string msg;
    for (size_t i = 0; i < problems.size() && i < kListed; ++i) msg += (i ? "; " : " ") + problems[i];
    if (problems.size() > kListed) msg += detail::concat("; and ", problems.size() - kListed, " more problems");
    MT_FAIL("load_state_dict: error(s) loading the state dict into ", type_name_, ":", msg, " (nothing was loaded)");
  }
  NoGradGuard no_grad;  // writing into parameters is not part of any graph
  for (auto& [dst, src] : copies) {
    Tensor d = dst;
    if (!d.is_same(src)) d.copy_(src);  // copy_ converts the dtype
  }
  return result;
}

namespace {
// Replaces the storage behind `t`'s TensorImpl with a converted copy, so every handle to this
// TensorImpl (module members, optimizer lists) sees the new dtype; autograd metadata is kept.
// `t`'s TensorImpl takes `replacement`'s storage, layout and dtype, and its gradient becomes
// `redo(grad)`: one place for to(dtype) and to(device) to change a module tensor in place.
template <typename Redo>
void replace_in_place(const Tensor& t, const Tensor& replacement, Redo&& redo) {
  TensorImpl& impl = t.impl();
  impl.storage = replacement.storage();
  impl.offset = replacement.storage_offset();
  impl.strides = replacement.strides();
  impl.dtype = replacement.dtype();
  if (impl.autograd && impl.autograd->grad) impl.autograd->grad = redo(Tensor(impl.autograd->grad)).impl_ptr();
}

void convert_in_place(const Tensor& t, DType dtype) {
  if (!t.is_floating_point() || t.dtype() == dtype) return;
  replace_in_place(t, t.detach().to(dtype).contiguous(), [dtype](const Tensor& g) { return g.to(dtype).contiguous(); });
}
// The same for a move to another device.
void move_in_place(const Tensor& t, Device device) {
  if (t.device() == device) return;
  replace_in_place(t, t.detach().contiguous().to(device), [device](const Tensor& g) { return g.to(device); });
}
}  // namespace

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  apply([device](Module& m) {
    for (auto& [name, t] : m.params_) move_in_place(t, device);
    for (auto& b : m.buffers_) move_in_place(b.tensor, device);
  });
  return *this;
}

Module& Module::to(DType dtype) {
  MT_CHECK(is_floating(dtype), type_name_, ".to: expected a floating-point dtype, got ", dtype);
  NoGradGuard no_grad;
  apply([dtype](Module& m) {
    for (auto& [name, t] : m.params_) convert_in_place(t, dtype);
    for (auto& b : m.buffers_)
      if (!b.opts.keep_dtype) convert_in_place(b.tensor, dtype);
  });
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Printing

void Module::repr_into(std::string& out, int indent) const {
  out += type_name_ + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [name, child] : children_) {
      out += std::string(indent + 2, ' ') + "(" + name + "): ";
      child->repr_into(out, indent + 2);
      out += "\n";
    }
    out += std::string(indent, ' ');
  }
  out += ")";
}

std::string Module::repr() const {
  std::string s;
  repr_into(s, 0);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

}  // namespace mixtrain::nn
