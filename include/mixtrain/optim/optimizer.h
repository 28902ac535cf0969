// mixtrain/optim/optimizer.h: the optimizer base class: parameter groups, per-parameter state,
// fp32 master weights for 16-bit parameters, state dicts and the hook the GradScaler uses.
//
// Precision: every update runs in fp32 in one fused multi-tensor pass (param, grad and moments are
// read once and written once). Moments are always fp32. Two ways to train in mixed precision:
//
//  (a) fp32 parameters used through autocast (the default, PyTorch's AMP): nothing special here;
//      the parameters, their gradients and the moments are fp32.
//  (b) 16-bit parameters (bf16 or fp16) with fp32 master weights: the optimizer keeps an fp32 copy
//      of each 16-bit parameter, reads the 16-bit gradient widened to fp32, updates the master in
//      fp32 and writes the master, rounded to nearest even, back into the parameter. This is on by
//      default for 16-bit parameters (`.master_weights = true` in the options) because updating bf16
//      values directly loses every update smaller than 2^-8 of the weight. The masters are created
//      when the optimizer is constructed, from the parameters' values then: load pretrained weights
//      first, or call sync_masters_from_params() after changing the parameters.
//
// Memory per parameter element (see state_bytes()): fp32 params + fp32 grads = 8 bytes; 16-bit
// params + 16-bit grads + fp32 master = 8 bytes as well (2 + 2 + 4). SGD momentum adds 4, Adam 8
// (12 with amsgrad). Mode (b) saves memory only where activations and the autocast weight copies are
// concerned, not on the weights themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::optim {

// A parameter with a name ("0.weight"): names appear in error messages and in the GradScaler's
// diagnostics (which parameter had the first non-finite gradient).
struct NamedParameter {
  std::string name;
  Tensor param;
};

// One parameter group: its parameters, its options (every field, not overrides: copy the defaults
// and change what differs) and optional names, one per parameter.
template <typename Options>
struct ParamGroupSpec {
  std::vector<Tensor> params;
  Options options = {};
  std::vector<std::string> names = {};
};

// The optimizer state of one parameter. Tensors are fp32, contiguous, shaped like the parameter, and
// undefined when unused.
struct ParamState {
  int64_t step = 0;        // updates applied to this parameter (skipped steps do not count)
  Tensor master;           // fp32 master weight (16-bit parameter in master-weight mode)
  Tensor momentum_buffer;  // SGD with momentum
  Tensor exp_avg;          // Adam/AdamW first moment
  Tensor exp_avg_sq;       // Adam/AdamW second moment
  Tensor max_exp_avg_sq;   // Adam/AdamW with amsgrad

  // The defined tensors with PyTorch's state keys ("momentum_buffer", "exp_avg", ...; "master" for
  // the master weight), in a fixed order: what a checkpoint writer serialises.
  std::vector<std::pair<std::string, Tensor>> named_tensors() const;
  // Deep copy.
  ParamState clone() const;
};

// A snapshot of an optimizer: per-parameter state in flat order (group by group, parameter by
// parameter: PyTorch's integer ids) and each group's hyperparameters as numbers (PyTorch's keys;
// booleans are 0/1, Adam's betas are "beta1"/"beta2"; "initial_lr" once a scheduler has set it).
struct OptimizerStateDict {
  std::vector<ParamState> state;
  std::vector<std::map<std::string, double>> param_groups;
};

// Bytes held by the optimizer state (storage bytes as counted by mt::memory).
struct StateBytes {
  int64_t moments = 0;  // momentum buffers and Adam moments
  int64_t masters = 0;  // fp32 master weights
  int64_t total() const { return moments + masters; }
};

// A group as the optimizer holds it. `names` has one entry per parameter ("" when unnamed).
struct ParamGroup {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::optional<double> initial_lr;  // set by the first LR scheduler attached to the optimizer
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* name() const = 0;

  // One update of every parameter that has a gradient (parameters without one are left alone, as in
  // PyTorch). Gradients must have the parameter's dtype and shape; any strides.
  void step();

  // The GradScaler's fused path (PyTorch's _step_supports_amp_scaling): the gradients still carry
  // the loss scale. When found_inf is true nothing changes and false is returned; otherwise every
  // gradient is multiplied by inv_scale as it is read (in fp32, so a 16-bit gradient is never
  // unscaled in 16 bits) and true is returned. The gradients themselves are not modified.
  bool step_scaled(float inv_scale, bool found_inf);

  // True when the GradScaler should pass the scale to step_scaled() instead of unscaling the
  // gradients in place: when any parameter is 16-bit (fp16 gradients cannot be unscaled in place
  // without flushing small values to zero).
  virtual bool supports_fused_unscale() const { return has_reduced_precision_params_; }

  // Sets every gradient to undefined (PyTorch's set_to_none=True).
  void zero_grad();

  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t num_param_groups() const { return groups_.size(); }
  // All parameters in flat order.
  std::vector<Tensor> parameters() const;
  size_t num_parameters() const { return state_.size(); }
  // The name of the parameter with flat index i, or "param_groups[g].params[j]" when unnamed.
  std::string param_name(size_t flat_index) const;

  virtual double lr(size_t group = 0) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  void set_lr(double lr);  // every group
  std::optional<double> initial_lr(size_t group) const { return groups_.at(group).initial_lr; }
  void set_initial_lr(size_t group, double lr) { groups_.at(group).initial_lr = lr; }

  // State of the parameter with flat index i.
  const ParamState& state(size_t flat_index) const { return state_.at(flat_index); }
  // A deep copy of the state and hyperparameters.
  OptimizerStateDict state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters of the same shapes and
  // dtypes (masters must be present exactly for the 16-bit parameters in master-weight mode). The
  // masters are the values being optimised, so each 16-bit parameter is set to its loaded master,
  // rounded (what the next step would write anyway).
  void load_state_dict(const OptimizerStateDict& state_dict);

  StateBytes state_bytes() const;
  // Re-reads every fp32 master from its 16-bit parameter (after the parameters were changed outside
  // the optimizer, e.g. weights loaded after construction).
  void sync_masters_from_params();

 protected:
  Optimizer() = default;

  // Registers a group; creates fp32 masters for its 16-bit parameters when master_weights is true.
  void add_param_group(std::vector<Tensor> params, std::vector<std::string> names, bool master_weights);
  // Flat index of the first parameter of group g.
  size_t group_offset(size_t g) const { return group_offset_.at(g); }
  ParamState& mutable_state(size_t flat_index) { return state_.at(flat_index); }
  // The gradient of the parameter with flat index i, checked (dtype, shape) and contiguous; undefined
  // when the parameter has none.
  Tensor grad_for_step(size_t flat_index) const;

  // Updates group g; grads are multiplied by inv_scale as they are read.
  virtual void step_group(size_t g, float inv_scale) = 0;
  virtual std::map<std::string, double> group_hyperparameters(size_t g) const = 0;
  virtual void set_group_hyperparameters(size_t g, const std::map<std::string, double>& values) = 0;

 private:
  void step_all(float inv_scale);

  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_offset_;
  std::vector<ParamState> state_;
  bool has_reduced_precision_params_ = false;
};

namespace detail {

// Helpers for the optimizers' constructors: one group from a parameter list.
template <typename Options>
std::vector<ParamGroupSpec<Options>> single_group(std::vector<Tensor> params, const Options& options) {
  std::vector<ParamGroupSpec<Options>> groups(1);
  groups[0].params = std::move(params);
  groups[0].options = options;
  return groups;
}

template <typename Options>
std::vector<ParamGroupSpec<Options>> single_group(std::vector<NamedParameter> params, const Options& options) {
  std::vector<ParamGroupSpec<Options>> groups(1);
  for (auto& p : params) {
    groups[0].names.push_back(std::move(p.name));
    groups[0].params.push_back(std::move(p.param));
  }
  groups[0].options = options;
  return groups;
}

template <typename Options>
size_t count_params(const std::vector<ParamGroupSpec<Options>>& groups) {
  size_t n = 0;
  for (const auto& g : groups) n += g.params.size();
  return n;
}

// Reads a required key of a hyperparameter map (mt::Error naming the optimizer when missing).
double get_hyperparameter(const std::map<std::string, double>& values, const char* key, const char* optimizer);

}  // namespace detail
}  // namespace mixtrain::optim
