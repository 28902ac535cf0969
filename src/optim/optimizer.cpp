// The optimizer base: groups, flat per-parameter state, master weights, state dicts.
#include "mixtrain/optim/optimizer.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kernels/optim.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/memory.h"

namespace mixtrain::optim {
namespace {

// Packed masters (mode (c)): the fp32 master's bits are (bf16 parameter bits << 16) | low, element by
// element kernels::unpack_master / pack_master (shared with the optimizer kernels).

// The lower halves of a bf16 parameter's packed master: zero for a master equal to the parameter,
// left uninitialised for one that pack_master fills completely.
Tensor new_master_low(const Tensor& param, bool zeroed) {
  const TensorOptions options{.dtype = kUInt8, .device = param.device()};
  return zeroed ? zeros({param.numel(), 2}, options) : empty({param.numel(), 2}, options);
}

// The fp32 master of a bf16 parameter and its packed lower half.
Tensor unpack_master(const Tensor& param, const Tensor& low) {
  Tensor master = empty(param.shape(), {.dtype = kFloat32, .device = param.device()});
  kernels::unpack_master_table(param.device(), kBFloat16)(param, low, master);
  return master;
}

// Splits an fp32 master into the bf16 parameter (upper bits) and the lower half.
void pack_master(const Tensor& master, const Tensor& param, const Tensor& low) {
  kernels::pack_master_table(param.device(), kBFloat16)(master.to(param.device()).contiguous(), param, low);
}

// Replaces s.master by its packed form: the bf16 parameter takes the upper bits, s.master_low the
// lower ones. The parameter's value may move (nearest -> truncated), hence the version bump.
void pack_state(ParamState& s, Tensor& param) {
  s.master_low = new_master_low(param, /*zeroed=*/false);
  pack_master(s.master, param, s.master_low);
  s.master = Tensor();
  param.bump_version();
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> ParamState::named_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  auto add = [&](const char* key, const Tensor& t) {
    if (t.defined()) out.emplace_back(key, t);
  };
  add("master", master);
  add("master_low", master_low);
  add("momentum_buffer", momentum_buffer);
  add("exp_avg", exp_avg);
  add("exp_avg_sq", exp_avg_sq);
  add("max_exp_avg_sq", max_exp_avg_sq);
  add("kahan_comp", kahan_comp);
  return out;
}

Tensor* ParamState::state_dict_entry(std::string_view key) {
  if (key == "master") return &master;
  if (key == "momentum_buffer") return &momentum_buffer;
  if (key == "exp_avg") return &exp_avg;
  if (key == "exp_avg_sq") return &exp_avg_sq;
  if (key == "max_exp_avg_sq") return &max_exp_avg_sq;
  if (key == "kahan_comp") return &kahan_comp;
  return nullptr;
}

ParamState ParamState::clone() const {
  NoGradGuard no_grad;
  auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
  ParamState s;
  s.step = step;
  s.master = copy(master);
  s.master_low = copy(master_low);
  s.momentum_buffer = copy(momentum_buffer);
  s.exp_avg = copy(exp_avg);
  s.exp_avg_sq = copy(exp_avg_sq);
  s.max_exp_avg_sq = copy(max_exp_avg_sq);
  s.kahan_comp = copy(kahan_comp);
  return s;
}

void Optimizer::add_param_group(std::vector<Tensor> params, std::vector<std::string> names, bool master_weights,
                                bool packed_master) {
  MT_CHECK(names.empty() || names.size() == params.size(), name(), ": param group ", groups_.size(), " has ",
           params.size(), " parameters but ", names.size(), " names");
  names.resize(params.size());
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) seen.insert(&p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    std::string where = names[i].empty()
                            ? "parameter " + std::to_string(i) + " of param group " + std::to_string(groups_.size())
                            : "parameter '" + names[i] + "'";
    MT_CHECK(p.defined(), name(), ": ", where, " is an undefined tensor");
    MT_CHECK(p.dtype() == kFloat32 || p.dtype() == kBFloat16 || p.dtype() == kFloat16, name(), ": ", where, " is ",
             describe(p), "; parameters must be float32, bfloat16 or float16");
    MT_CHECK(p.is_leaf(), name(), ": can't optimize a non-leaf tensor (", where, ", ", describe(p),
             "); optimize the leaf it was computed from");
    MT_CHECK(p.is_contiguous(), name(), ": ", where, " (", describe(p), ") is not contiguous");
    MT_CHECK(seen.insert(&p.impl()).second, name(), ": some parameters appear more than once in the parameter groups (",
             where, ")");
  }
  group_offset_.push_back(state_.size());
  for (const Tensor& p : params) {
    ParamState s;
    if (is_reduced_float(p.dtype())) {
      has_reduced_precision_params_ = true;
      if (master_weights && packed_master && p.dtype() == kBFloat16) {
        s.master_low = new_master_low(p, /*zeroed=*/true);  // the master is the parameter's value exactly
      } else if (master_weights) {
        NoGradGuard no_grad;
        s.master = p.detach().to(kFloat32);  // exact: every 16-bit value is an fp32 value
      }
    }
    rounding_streams_.emplace_back(static_cast<uint32_t>(state_.size()), 0);
    state_.push_back(std::move(s));
  }
  groups_.push_back({std::move(params), std::move(names), std::nullopt});
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

size_t Optimizer::group_of(size_t flat_index) const {
  MT_CHECK(flat_index < state_.size(), name(), ": parameter index ", flat_index, " out of range (", state_.size(),
           " parameters)");
  size_t g = groups_.size() - 1;
  while (group_offset_[g] > flat_index) --g;
  return g;
}

const Tensor& Optimizer::parameter(size_t flat_index) const {
  const size_t g = group_of(flat_index);
  return groups_[g].params[flat_index - group_offset_[g]];
}

std::vector<std::string> Optimizer::stepped_state_keys(size_t flat_index) const {
  group_of(flat_index);  // range check
  return {};
}

std::string Optimizer::param_name(size_t flat_index) const {
  const size_t g = group_of(flat_index);
  const size_t j = flat_index - group_offset_[g];
  if (!groups_[g].names[j].empty()) return groups_[g].names[j];
  return "param_groups[" + std::to_string(g) + "].params[" + std::to_string(j) + "]";
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

Tensor Optimizer::grad_for_step(size_t flat_index) const {
  const Tensor& p = parameter(flat_index);
  Tensor grad = p.grad();
  if (!grad.defined()) return grad;
  MT_CHECK(grad.dtype() == p.dtype() && grad.shape() == p.shape(), name(), ": the gradient of ", param_name(flat_index),
           " is ", describe(grad), " but the parameter is ", describe(p),
           "; gradients must match their parameter's dtype and shape");
  MT_CHECK(grad.device() == p.device(), name(), ": the gradient of ", param_name(flat_index), " is on ", grad.device(),
           ", the parameter on ", p.device());
  return grad.contiguous();
}

void Optimizer::step_all(float inv_scale) {
  NoGradGuard no_grad;
  // State follows its parameter (Module::to(Device) moved it since the last step). state_ is in
  // group order, as parameters() lists them; no allocation when nothing moved.
  size_t i = 0;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) {
      ParamState& s = state_.at(i++);
      for (Tensor* t : {&s.master, &s.master_low, &s.momentum_buffer, &s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq,
                        &s.kahan_comp})
        if (t->defined() && t->device() != p.device()) *t = t->to(p.device());
    }
  update(inv_scale);
  // The parameters with a gradient changed in place: a retained graph that saved one must notice.
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params)
      if (p.grad().defined()) p.bump_version();
}

void Optimizer::update(float inv_scale) {
  for (size_t g = 0; g < groups_.size(); ++g) step_group(g, inv_scale);
}

void Optimizer::step() { step_all(1.0f); }

bool Optimizer::step_scaled(float inv_scale, bool found_inf) {
  if (found_inf) return false;
  step_all(inv_scale);
  return true;
}

void Optimizer::set_rounding_stream(size_t flat_index, uint32_t stream, int64_t first_element) {
  MT_CHECK(flat_index < state_.size(), name(), ": parameter index ", flat_index, " out of range (", state_.size(),
           " parameters)");
  MT_CHECK(first_element >= 0, name(), ": first_element must be >= 0, got ", first_element);
  rounding_streams_[flat_index] = {stream, first_element};
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) p.set_grad(Tensor());
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  sd.state.reserve(state_.size());
  std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < state_.size(); ++i) {
    // State dicts hold the full fp32 master, whatever the layout: a packed lower half is read, not
    // copied, and a fresh master is built from it.
    ParamState shared = state_[i];  // tensor handles only
    const Tensor low = std::exchange(shared.master_low, Tensor());
    ParamState s = shared.clone();
    if (low.defined()) s.master = unpack_master(params[i], low);
    sd.state.push_back(std::move(s));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::map<std::string, double> h = group_hyperparameters(g);
    if (groups_[g].initial_lr) h["initial_lr"] = *groups_[g].initial_lr;
    sd.param_groups.push_back(std::move(h));
  }
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  MT_CHECK(sd.param_groups.size() == groups_.size(), name(), ".load_state_dict: the state dict has ",
           sd.param_groups.size(), " parameter groups, this optimizer has ", groups_.size());
  MT_CHECK(sd.state.size() == state_.size(), name(), ".load_state_dict: the state dict has ", sd.state.size(),
           " parameter states, this optimizer has ", state_.size(), " parameters");
  std::vector<Tensor> params = parameters();
  // Validate everything before changing anything.
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& src = sd.state[i];
    MT_CHECK(src.step >= 0, name(), ".load_state_dict: negative step for ", param_name(i));
    const bool has_master = state_[i].master.defined() || state_[i].master_low.defined();
    MT_CHECK(src.master.defined() == has_master, name(), ".load_state_dict: ", param_name(i), " (", describe(params[i]),
             ") ", has_master ? "has" : "has no", " fp32 master weight here but the state dict ",
             src.master.defined() ? "has one" : "has none (state 'master' is missing)", "; master-weight mode must match");
    MT_CHECK(!src.master_low.defined(), name(), ".load_state_dict: state 'master_low' of ", param_name(i),
             " is not a state-dict entry (state dicts hold the full fp32 'master')");
    MT_CHECK(!src.kahan_comp.defined() || (params[i].dtype() == kBFloat16 && !has_master), name(),
             ".load_state_dict: state 'kahan_comp' of ", param_name(i), " (", describe(params[i]),
             ") belongs to a bf16 parameter without a master");
    for (const auto& [key, t] : src.named_tensors()) {
      const bool may_be_bf16 = key == "exp_avg" || key == "exp_avg_sq";
      const bool dtype_ok = key == "kahan_comp" ? t.dtype() == kBFloat16
                                                : t.dtype() == kFloat32 || (may_be_bf16 && t.dtype() == kBFloat16);
      MT_CHECK(dtype_ok && t.shape() == params[i].shape(), name(), ".load_state_dict: state '", key, "' of ",
               param_name(i), " is ", describe(t), ", expected ",
               key == "kahan_comp" ? "bfloat16" : may_be_bf16 ? "float32 or bfloat16" : "float32", " with shape ",
               params[i].shape());
    }
  }
  // Hyperparameters next (they validate as they go): restore the old ones if a group is refused.
  std::vector<std::map<std::string, double>> old;
  for (size_t g = 0; g < groups_.size(); ++g) old.push_back(group_hyperparameters(g));
  size_t done = 0;
  try {
    for (; done < groups_.size(); ++done) set_group_hyperparameters(done, sd.param_groups[done]);
    // Complete, under the hyperparameters just loaded (amsgrad, momentum decide which moments exist).
    for (size_t i = 0; i < state_.size(); ++i) check_complete(sd.state[i], i);
  } catch (...) {
    for (size_t g = 0; g < done; ++g) set_group_hyperparameters(g, old[g]);
    throw;
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    const bool packed = state_[i].master_low.defined();
    state_[i] = sd.state[i].clone();
    if (packed) pack_state(state_[i], params[i]);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto it = sd.param_groups[g].find("initial_lr");
    groups_[g].initial_lr = it == sd.param_groups[g].end() ? std::nullopt : std::optional<double>(it->second);
  }
  // The parameters hold the rounded masters already when both come from one checkpoint; writing
  // them again keeps the two consistent when only the optimizer state was restored.
  NoGradGuard no_grad;
  for (size_t i = 0; i < state_.size(); ++i)
    if (state_[i].master.defined()) params[i].copy_(state_[i].master);
}

void Optimizer::check_complete(const ParamState& src, size_t i) const {
  const std::vector<std::string> want = stepped_state_keys(i);
  const std::vector<std::pair<std::string, Tensor>> have = src.named_tensors();
  std::string missing, extra;
  for (const std::string& key : want)
    if (src.step > 0 && std::none_of(have.begin(), have.end(), [&](const auto& kv) { return kv.first == key; }))
      missing += (missing.empty() ? "'" : ", '") + key + "'";
  for (const auto& [key, t] : have) {
    if (key == "master") continue;
    if (src.step == 0 || std::find(want.begin(), want.end(), key) == want.end())
      extra += (extra.empty() ? "'" : ", '") + key + "'";
  }
  MT_CHECK(missing.empty(), name(), ".load_state_dict: ", param_name(i), " has taken ", src.step,
           src.step == 1 ? " step" : " steps", " but its state has no ", missing,
           ": the state dict is incomplete (a fresh moment would silently change the trajectory)");
  MT_CHECK(extra.empty(), name(), ".load_state_dict: ", param_name(i), " has taken ", src.step,
           src.step == 1 ? " step" : " steps", " and holds state ", extra, " that ", name(), " with these ",
           "hyperparameters does not keep", src.step == 0 ? " before its first step" : "");
}

namespace {
// What counts with the weights (masters, a packed master's lower half, a Kahan compensation) rather
// than as moments.
bool is_master_key(const std::string& key) { return key == "master" || key == "master_low" || key == "kahan_comp"; }
}  // namespace

StateBytes Optimizer::state_bytes() const {
  StateBytes b;
  for (const ParamState& s : state_)
    for (const auto& [key, t] : s.named_tensors())
      (is_master_key(key) ? b.masters : b.moments) += static_cast<int64_t>(t.nbytes());
  return b;
}

void Optimizer::label_memory() const {
  for (const Tensor& p : parameters()) {
    memory::set_category(p, memory::Category::kParameters);
    memory::set_category(p.grad(), memory::Category::kGradients);
  }
  for (const ParamState& s : state_)
    for (const auto& [key, t] : s.named_tensors())
      memory::set_category(t, is_master_key(key) ? memory::Category::kMasterWeights : memory::Category::kOptimizerState);
}

ModelStateBytes Optimizer::model_state_bytes() const {
  ModelStateBytes b;
  for (const Tensor& p : parameters()) {
    b.num_elements += p.numel();
    b.params += static_cast<int64_t>(p.nbytes());
    b.grads += static_cast<int64_t>(p.nbytes());  // step() requires grad dtype == param dtype
  }
  const StateBytes s = state_bytes();
  b.masters = s.masters;
  b.optimizer_state = s.moments;
  return b;
}

void Optimizer::sync_masters_from_params() {
  NoGradGuard no_grad;
  std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].master.defined()) state_[i].master.copy_(params[i]);
    if (state_[i].master_low.defined()) state_[i].master_low.zero_();
  }
}

void Optimizer::pack_masters() {
  NoGradGuard no_grad;
  std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState& s = state_[i];
    if (s.master.defined() && params[i].dtype() == kBFloat16) pack_state(s, params[i]);
  }
}

void Optimizer::release_masters() {
  NoGradGuard no_grad;
  std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState& s = state_[i];
    if (params[i].dtype() != kBFloat16) continue;
    // The parameter already holds its master rounded to nearest (full master) or truncated (packed).
    s.master = Tensor();
    s.master_low = Tensor();
  }
}

bool Optimizer::has_packed_masters() const {
  for (const ParamState& s : state_)
    if (s.master_low.defined()) return true;
  return false;
}

namespace detail {

double get_hyperparameter(const std::map<std::string, double>& values, const char* key, const char* optimizer) {
  auto it = values.find(key);
  MT_CHECK(it != values.end(), optimizer, ".load_state_dict: param group is missing key '", key, "'");
  return it->second;
}

}  // namespace detail
}  // namespace mixtrain::optim
