// Adam / AdamW: option checks, lazily created moments, and the call into the fused kernel.
#include "mixtrain/optim/adam.h"

#include "kernels/optim.h"
#include "mixtrain/factory.h"

namespace mixtrain::optim {
namespace {

// Kahan-compensated updates apply to bf16 parameters without a master (full or packed): what a step
// creates a compensation for, and so what a complete state dict holds.
bool keeps_kahan_compensation(const AdamOptions& o, const Tensor& param, const ParamState& s) {
  return o.bf16_update == Bf16Update::kKahan && param.dtype() == kBFloat16 && !s.master.defined() &&
         !s.master_low.defined();
}

void check_options(const AdamOptions& o, const char* name, size_t group) {
  MT_CHECK(o.lr >= 0.0, name, ": invalid learning rate ", o.lr, " in param group ", group, " (must be >= 0)");
  MT_CHECK(o.eps >= 0.0, name, ": invalid epsilon ", o.eps, " in param group ", group, " (must be >= 0)");
  MT_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, name, ": invalid beta parameter at index 0: ", o.betas.first,
           " in param group ", group, " (must be in [0, 1))");
  MT_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, name, ": invalid beta parameter at index 1: ", o.betas.second,
           " in param group ", group, " (must be in [0, 1))");
  MT_CHECK(o.exp_avg_dtype == kFloat32 || o.exp_avg_dtype == kBFloat16, name, ": exp_avg_dtype must be float32 or ",
           "bfloat16, got ", o.exp_avg_dtype, " in param group ", group);
  MT_CHECK(o.exp_avg_sq_dtype == kFloat32 || o.exp_avg_sq_dtype == kBFloat16, name,
           ": exp_avg_sq_dtype must be float32 or bfloat16, got ", o.exp_avg_sq_dtype, " in param group ", group);
  MT_CHECK(o.bf16_update == Bf16Update::kNearest || o.bf16_update == Bf16Update::kStochastic ||
               o.bf16_update == Bf16Update::kKahan,
           name, ": invalid bf16_update ", static_cast<int>(o.bf16_update), " in param group ", group);
  MT_CHECK(o.weight_decay.value_or(0.0) >= 0.0, name, ": invalid weight_decay ", o.weight_decay.value_or(0.0),
           " in param group ", group, " (must be >= 0)");
}

}  // namespace

std::string_view to_string(Bf16Update mode) {
  switch (mode) {
    case Bf16Update::kNearest: return "nearest";
    case Bf16Update::kStochastic: return "stochastic";
    case Bf16Update::kKahan: return "kahan";
  }
  return "?";
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(detail::single_group(std::move(params), options), false) {}
Adam::Adam(std::vector<NamedParameter> params, const AdamOptions& options)
    : Adam(detail::single_group(std::move(params), options), false) {}
Adam::Adam(std::vector<ParamGroupSpec<AdamOptions>> groups) : Adam(std::move(groups), false) {}

Adam::Adam(std::vector<ParamGroupSpec<AdamOptions>> groups, bool decoupled_weight_decay)
    : decoupled_(decoupled_weight_decay) {
  MT_CHECK(detail::count_params(groups) > 0, name(), ": optimizer got an empty parameter list");
  for (auto& g : groups) {
    if (!g.options.weight_decay) g.options.weight_decay = decoupled_ ? 1e-2 : 0.0;
    check_options(g.options, name(), options_.size());
    add_param_group(std::move(g.params), std::move(g.names), g.options.master_weights, g.options.packed_master);
    options_.push_back(g.options);
  }
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(detail::single_group(std::move(params), options), true) {}
AdamW::AdamW(std::vector<NamedParameter> params, const AdamOptions& options)
    : Adam(detail::single_group(std::move(params), options), true) {}
AdamW::AdamW(std::vector<ParamGroupSpec<AdamOptions>> groups) : Adam(std::move(groups), true) {}

void Adam::step_group(size_t g, float inv_scale) {
  const AdamOptions& o = options_[g];
  check_options(o, name(), g);  // options are mutable between steps
  const auto& params = param_groups()[g].params;
  std::vector<kernels::AdamTensors> work;
  for (size_t j = 0; j < params.size(); ++j) {
    const size_t i = group_offset(g) + j;
    Tensor grad = grad_for_step(i);
    if (!grad.defined()) continue;
    ParamState& s = mutable_state(i);
    const TensorOptions fp32{.dtype = kFloat32, .device = params[j].device()};
    if (!s.exp_avg.defined())
      s.exp_avg = zeros(params[j].shape(), {.dtype = o.exp_avg_dtype, .device = params[j].device()});
    if (s.exp_avg.dtype() != o.exp_avg_dtype) s.exp_avg = s.exp_avg.to(o.exp_avg_dtype).contiguous();
    if (!s.exp_avg_sq.defined())
      s.exp_avg_sq = zeros(params[j].shape(), {.dtype = o.exp_avg_sq_dtype, .device = params[j].device()});
    if (s.exp_avg_sq.dtype() != o.exp_avg_sq_dtype) s.exp_avg_sq = s.exp_avg_sq.to(o.exp_avg_sq_dtype).contiguous();
    if (o.amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros(params[j].shape(), fp32);
    const bool kahan = keeps_kahan_compensation(o, params[j], s);
    if (kahan && !s.kahan_comp.defined())
      s.kahan_comp = zeros(params[j].shape(), {.dtype = kBFloat16, .device = params[j].device()});
    if (!kahan) s.kahan_comp = Tensor();
    ++s.step;
    work.push_back({.param = params[j],
                    .grad = grad,
                    .master = s.master,
                    .master_low = s.master_low,
                    .exp_avg = s.exp_avg,
                    .exp_avg_sq = s.exp_avg_sq,
                    .max_exp_avg_sq = o.amsgrad ? s.max_exp_avg_sq : Tensor(),
                    .kahan_comp = s.kahan_comp,
                    .step = s.step,
                    .stream = rounding_stream(i).first,
                    .first_element = rounding_stream(i).second});
  }
  kernels::adam_step(work, {.lr = o.lr,
                            .beta1 = o.betas.first,
                            .beta2 = o.betas.second,
                            .eps = o.eps,
                            .weight_decay = o.weight_decay.value_or(0.0),
                            .decoupled_weight_decay = decoupled_,
                            .amsgrad = o.amsgrad,
                            .inv_scale = inv_scale,
                            .stochastic_rounding = o.bf16_update == Bf16Update::kStochastic,
                            .rounding_seed = o.rounding_seed});
}

std::vector<std::string> Adam::stepped_state_keys(size_t i) const {
  const AdamOptions& o = options_.at(group_of(i));
  std::vector<std::string> keys = {"exp_avg", "exp_avg_sq"};
  if (o.amsgrad) keys.emplace_back("max_exp_avg_sq");
  if (keeps_kahan_compensation(o, parameter(i), state(i))) keys.emplace_back("kahan_comp");
  return keys;
}

std::map<std::string, double> Adam::group_hyperparameters(size_t g) const {
  const AdamOptions& o = options_.at(g);
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay.value_or(0.0)},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

void Adam::set_group_hyperparameters(size_t g, const std::map<std::string, double>& v) {
  AdamOptions o = options_.at(g);
  o.lr = detail::get_hyperparameter(v, "lr", name());
  o.betas = {detail::get_hyperparameter(v, "beta1", name()), detail::get_hyperparameter(v, "beta2", name())};
  o.eps = detail::get_hyperparameter(v, "eps", name());
  o.weight_decay = detail::get_hyperparameter(v, "weight_decay", name());
  o.amsgrad = detail::get_hyperparameter(v, "amsgrad", name()) != 0.0;
  check_options(o, name(), g);
  options_.at(g) = o;
}

}  // namespace mixtrain::optim
