// The optimizer base: groups, flat per-parameter state, master weights, state dicts.
#include "mixtrain/optim/optimizer.h"

#include <set>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"

namespace mixtrain::optim {

std::vector<std::pair<std::string, Tensor>> ParamState::named_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  auto add = [&](const char* key, const Tensor& t) {
    if (t.defined()) out.emplace_back(key, t);
  };
  add("master", master);
  add("momentum_buffer", momentum_buffer);
  add("exp_avg", exp_avg);
  add("exp_avg_sq", exp_avg_sq);
  add("max_exp_avg_sq", max_exp_avg_sq);
  return out;
}

ParamState ParamState::clone() const {
  NoGradGuard no_grad;
  auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
  ParamState s;
  s.step = step;
  s.master = copy(master);
  s.momentum_buffer = copy(momentum_buffer);
  s.exp_avg = copy(exp_avg);
  s.exp_avg_sq = copy(exp_avg_sq);
  s.max_exp_avg_sq = copy(max_exp_avg_sq);
  return s;
}

void Optimizer::add_param_group(std::vector<Tensor> params, std::vector<std::string> names, bool master_weights) {
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
      if (master_weights) {
        NoGradGuard no_grad;
        s.master = p.detach().to(kFloat32);  // exact: every 16-bit value is an fp32 value
      }
    }
    state_.push_back(std::move(s));
  }
  groups_.push_back({std::move(params), std::move(names), std::nullopt});
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

std::string Optimizer::param_name(size_t flat_index) const {
  MT_CHECK(flat_index < state_.size(), name(), ": parameter index ", flat_index, " out of range (", state_.size(),
           " parameters)");
  size_t g = groups_.size() - 1;
  while (group_offset_[g] > flat_index) --g;
  const size_t j = flat_index - group_offset_[g];
  if (!groups_[g].names[j].empty()) return groups_[g].names[j];
  return "param_groups[" + std::to_string(g) + "].params[" + std::to_string(j) + "]";
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

Tensor Optimizer::grad_for_step(size_t flat_index) const {
  size_t g = groups_.size() - 1;
  while (group_offset_[g] > flat_index) --g;
  const Tensor& p = groups_[g].params[flat_index - group_offset_[g]];
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
  for (size_t g = 0; g < groups_.size(); ++g) step_group(g, inv_scale);
  // The parameters with a gradient changed in place: a retained graph that saved one must notice.
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params)
      if (p.grad().defined()) p.bump_version();
}

void Optimizer::step() { step_all(1.0f); }

bool Optimizer::step_scaled(float inv_scale, bool found_inf) {
  if (found_inf) return false;
  step_all(inv_scale);
  return true;
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) p.set_grad(Tensor());
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  sd.state.reserve(state_.size());
  for (const ParamState& s : state_) sd.state.push_back(s.clone());
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
    MT_CHECK(src.master.defined() == state_[i].master.defined(), name(), ".load_state_dict: ", param_name(i), " (",
             describe(params[i]), ") ", state_[i].master.defined() ? "has" : "has no",
             " fp32 master weight here but the state dict ", src.master.defined() ? "has one" : "has none",
             "; master-weight mode must match");
    for (const auto& [key, t] : src.named_tensors())
      MT_CHECK(t.dtype() == kFloat32 && t.shape() == params[i].shape(), name(), ".load_state_dict: state '", key,
               "' of ", param_name(i), " is ", describe(t), ", expected float32 with shape ", params[i].shape());
  }
  // Hyperparameters next (they validate as they go): restore the old ones if a group is refused.
  std::vector<std::map<std::string, double>> old;
  for (size_t g = 0; g < groups_.size(); ++g) old.push_back(group_hyperparameters(g));
  size_t done = 0;
  try {
    for (; done < groups_.size(); ++done) set_group_hyperparameters(done, sd.param_groups[done]);
  } catch (...) {
    for (size_t g = 0; g < done; ++g) set_group_hyperparameters(g, old[g]);
    throw;
  }
  for (size_t i = 0; i < state_.size(); ++i) state_[i] = sd.state[i].clone();
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

StateBytes Optimizer::state_bytes() const {
  StateBytes b;
  for (const ParamState& s : state_)
    for (const auto& [key, t] : s.named_tensors()) (key == "master" ? b.masters : b.moments) += t.nbytes();
  return b;
}

void Optimizer::sync_masters_from_params() {
  NoGradGuard no_grad;
  std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < state_.size(); ++i)
    if (state_[i].master.defined()) state_[i].master.copy_(params[i]);
}

namespace detail {

double get_hyperparameter(const std::map<std::string, double>& values, const char* key, const char* optimizer) {
  auto it = values.find(key);
  MT_CHECK(it != values.end(), optimizer, ".load_state_dict: param group is missing key '", key, "'");
  return it->second;
}

}  // namespace detail
}  // namespace mixtrain::optim
