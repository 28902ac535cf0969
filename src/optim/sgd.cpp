// SGD: option checks, lazily created momentum buffers, and the call into the fused kernel.
#include "mixtrain/optim/sgd.h"

#include "kernels/optim.h"
#include "mixtrain/factory.h"

namespace mixtrain::optim {
namespace {

void check_options(const SGDOptions& o, size_t group) {
  MT_CHECK(o.lr >= 0.0, "SGD: invalid learning rate ", o.lr, " in param group ", group, " (must be >= 0)");
  MT_CHECK(o.momentum >= 0.0, "SGD: invalid momentum ", o.momentum, " in param group ", group, " (must be >= 0)");
  MT_CHECK(o.weight_decay >= 0.0, "SGD: invalid weight_decay ", o.weight_decay, " in param group ", group,
           " (must be >= 0)");
  MT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (param group ", group, ": momentum ",
           o.momentum, ", dampening ", o.dampening, ")");
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(detail::single_group(std::move(params), options)) {}

SGD::SGD(std::vector<NamedParameter> params, const SGDOptions& options)
    : SGD(detail::single_group(std::move(params), options)) {}

SGD::SGD(std::vector<ParamGroupSpec<SGDOptions>> groups) {
  MT_CHECK(detail::count_params(groups) > 0, "SGD: optimizer got an empty parameter list");
  for (auto& g : groups) {
    check_options(g.options, options_.size());
    add_param_group(std::move(g.params), std::move(g.names), g.options.master_weights, g.options.packed_master);
    options_.push_back(g.options);
  }
}

void SGD::step_group(size_t g, float inv_scale) {
  const SGDOptions& o = options_[g];
  check_options(o, g);  // options are mutable between steps
  const auto& params = param_groups()[g].params;
  std::vector<kernels::SgdTensors> work;
  for (size_t j = 0; j < params.size(); ++j) {
    const size_t i = group_offset(g) + j;
    Tensor grad = grad_for_step(i);
    if (!grad.defined()) continue;
    ParamState& s = mutable_state(i);
    kernels::SgdTensors t{params[j], grad, s.master, s.master_low, Tensor(), false};
    if (o.momentum != 0.0) {
      if (!s.momentum_buffer.defined()) {
        s.momentum_buffer = zeros(params[j].shape(), {.dtype = kFloat32, .device = params[j].device()});
        t.first_step = true;
      }
      t.momentum_buffer = s.momentum_buffer;
    }
    ++s.step;
    work.push_back(std::move(t));
  }
  kernels::sgd_step(work, {.lr = o.lr,
                           .momentum = o.momentum,
                           .dampening = o.dampening,
                           .weight_decay = o.weight_decay,
                           .nesterov = o.nesterov,
                           .inv_scale = inv_scale});
}

std::vector<std::string> SGD::stepped_state_keys(size_t i) const {
  if (options_.at(group_of(i)).momentum == 0.0) return {};
  return {"momentum_buffer"};
}

std::map<std::string, double> SGD::group_hyperparameters(size_t g) const {
  const SGDOptions& o = options_.at(g);
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void SGD::set_group_hyperparameters(size_t g, const std::map<std::string, double>& v) {
  SGDOptions o = options_.at(g);
  o.lr = detail::get_hyperparameter(v, "lr", "SGD");
  o.momentum = detail::get_hyperparameter(v, "momentum", "SGD");
  o.dampening = detail::get_hyperparameter(v, "dampening", "SGD");
  o.weight_decay = detail::get_hyperparameter(v, "weight_decay", "SGD");
  o.nesterov = detail::get_hyperparameter(v, "nesterov", "SGD") != 0.0;
  check_options(o, g);
  options_.at(g) = o;
}

}  // namespace mixtrain::optim
