// mixtrain/optim/optimizer.h: the optimizer base class: parameter groups, per-parameter state,
// fp32 master weights for 16-bit parameters, state dicts and the hook the GradScaler uses.
//
// Precision: every update runs in fp32 in one fused multi-tensor pass (param, grad and moments are
// read once and written once). The second moment is always fp32; Adam's first moment is fp32 unless
// AdamOptions::exp_avg_dtype asks for bf16. Three ways to train in mixed precision:
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
//  (c) bf16 parameters with packed masters (`.packed_master = true`, or pack_masters()): a bf16
//      value is the upper half of an fp32 bit pattern, so the fp32 master is stored as the bf16
//      parameter itself (its upper 16 bits) plus a 16-bit tensor of its lower 16 bits
//      (ParamState::master_low). The master is exactly the fp32 value of mode (b) and follows the
//      same trajectory bit for bit; it costs 2 bytes per element instead of 4. The difference is
//      what the forward pass sees: the master truncated to bf16 (rounded toward zero, at most one
//      bf16 ulp below the master's magnitude) instead of rounded to nearest. fp16 is not a prefix
//      of fp32, so fp16 parameters keep a full fp32 master under this option.
//
//  (d) bf16 parameters without masters (`.master_weights = false`, or release_masters()): updated in
//      place, rounded to nearest, stochastically or with a Kahan compensation (AdamOptions::bf16_update).
//
// Model-state bytes per parameter element (model_state_bytes(); weights + grads + masters + optimizer
// state), with AdamW:
//   (a) fp32 params 4 + fp32 grads 4 + moments 8                              = 16
//   (b) 16-bit params 2 + 16-bit grads 2 + fp32 master 4 + moments 8          = 16
//   (c) bf16 params 2 + bf16 grads 2 + low half 2 + bf16 m 2 + fp32 v 4       = 12
//       (with exp_avg_dtype = bf16; 14 with an fp32 first moment)
//   (d) bf16 params 2 + bf16 grads 2 + bf16 m 2 + bf16 v 2                    = 8 (stochastic)
//       + bf16 Kahan compensation 2                                           = 10 (Kahan)
// SGD with momentum has 4 bytes of optimizer state instead of 8 (amsgrad adds 4 to Adam).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

// The optimizer state of one parameter. Tensors are contiguous, shaped like the parameter, fp32
// unless said otherwise, and undefined when unused.
struct ParamState {
  int64_t step = 0;  // updates applied to this parameter (skipped steps do not count)
  Tensor master;     // fp32 master weight (16-bit parameter in master-weight mode (b))
  // Packed mode (c), bf16 parameters: the lower 16 bits of the fp32 master, whose upper 16 bits are
  // the parameter's bits. Raw storage, not numbers: uint8, shape [numel, 2], one native-endian
  // uint16 per element. Never in a state_dict(), which holds the reconstructed fp32 `master`.
  Tensor master_low;
  Tensor momentum_buffer;  // SGD with momentum
  Tensor exp_avg;          // Adam/AdamW first moment (fp32, or bf16 with AdamOptions::exp_avg_dtype)
  Tensor exp_avg_sq;       // Adam/AdamW second moment (fp32, or bf16 with AdamOptions::exp_avg_sq_dtype)
  Tensor max_exp_avg_sq;   // Adam/AdamW with amsgrad
  // bf16 parameter without a master under AdamOptions::bf16_update = kKahan: the bf16 compensation
  // (the part of the intended weight that the bf16 parameter could not hold).
  Tensor kahan_comp;

  // The defined tensors with PyTorch's state keys ("momentum_buffer", "exp_avg", ...; "master" for
  // the master weight, "master_low" for a packed master's lower half, "kahan_comp"), in a fixed
  // order: what a checkpoint writer serialises (state_dict() entries never hold "master_low").
  std::vector<std::pair<std::string, Tensor>> named_tensors() const;
  // The field of a state-dict key ("master", "momentum_buffer", "exp_avg", "exp_avg_sq",
  // "max_exp_avg_sq", "kahan_comp"), or nullptr for any other key ("master_low" included: state
  // dicts never hold it). What a checkpoint reader fills.
  Tensor* state_dict_entry(std::string_view key);
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
  int64_t masters = 0;  // fp32 master weights, the lower halves of packed masters, Kahan compensations
  int64_t total() const { return moments + masters; }
};

// The model state of a training run: what lives for the whole run, activations excluded.
struct ModelStateBytes {
  int64_t num_elements = 0;     // parameter elements
  int64_t params = 0;           // the parameters' storage, in their dtype
  int64_t grads = 0;            // one gradient per parameter, in the parameter's dtype
  int64_t masters = 0;          // StateBytes::masters
  int64_t optimizer_state = 0;  // StateBytes::moments
  int64_t total() const { return params + grads + masters + optimizer_state; }
  double bytes_per_param() const {
    return num_elements > 0 ? static_cast<double>(total()) / static_cast<double>(num_elements) : 0.0;
  }
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

  // Where the stochastic rounding of the parameter with flat index i draws its random bits: Philox
  // stream `stream` (by default its flat index), element 0 at position `first_element` (by default 0).
  // An optimizer over views of larger parameters (dist::ZeroRedundancyOptimizer's shards) sets the
  // whole parameter's stream and the view's offset, so that every element draws the bits it would
  // draw in an optimizer over the whole parameters.
  void set_rounding_stream(size_t flat_index, uint32_t stream, int64_t first_element);

  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t num_param_groups() const { return groups_.size(); }
  // All parameters in flat order.
  std::vector<Tensor> parameters() const;
  size_t num_parameters() const { return state_.size(); }
  // The name of the parameter with flat index i, or "param_groups[g].params[j]" when unnamed.
  std::string param_name(size_t flat_index) const;

  // Group g's hyperparameters by name ("lr", "weight_decay", "beta1", ...): what state_dict() stores.
  std::map<std::string, double> hyperparameters(size_t group) const { return group_hyperparameters(group); }
  // Sets group g's hyperparameters from such a map (every key the optimizer needs; validated, and on
  // an error nothing changes). What load_state_dict() does for each group.
  void set_hyperparameters(size_t group, const std::map<std::string, double>& values) {
    set_group_hyperparameters(group, values);
  }

  virtual double lr(size_t group = 0) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  void set_lr(double lr);  // every group
  std::optional<double> initial_lr(size_t group) const { return groups_.at(group).initial_lr; }
  void set_initial_lr(size_t group, double lr) { groups_.at(group).initial_lr = lr; }

  // State of the parameter with flat index i.
  const ParamState& state(size_t flat_index) const { return state_.at(flat_index); }
  // A deep copy of the state and hyperparameters.
  // A state dict always holds the full fp32 `master` (reconstructed for packed masters), so packed and
  // unpacked optimizers load each other's state dicts.
  virtual OptimizerStateDict state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters of the same shapes and
  // dtypes (masters must be present exactly for the 16-bit parameters in master-weight mode; state
  // tensors are fp32, except exp_avg, which may be bf16 and is converted to the optimizer's
  // exp_avg_dtype at its next step). The masters are the values being optimised, so each 16-bit
  // parameter is set to its loaded master, rounded to nearest (truncated for a packed master:
  // in both cases what the next step would write anyway).
  // Exact or refused: a parameter that has taken a step (step > 0) must bring every tensor of
  // stepped_state_keys(), and one that has not, none of them; a missing moment is an error naming
  // the parameter and the key, never a silent fresh start.
  virtual void load_state_dict(const OptimizerStateDict& state_dict);

  // The state tensors (besides the master, which the master-weight mode fixes) that the parameter
  // with flat index i holds once it has taken a step, under the group's current hyperparameters:
  // Adam's "exp_avg" and "exp_avg_sq" (+ "max_exp_avg_sq" with amsgrad, + "kahan_comp" for a bf16
  // parameter without a master under Kahan updates), SGD's "momentum_buffer" with momentum.
  virtual std::vector<std::string> stepped_state_keys(size_t flat_index) const;

  // The state this process holds (a sharded optimizer counts its shard only).
  virtual StateBytes state_bytes() const;
  // Parameters, gradients (counted whether or not allocated now: each is the size of its parameter),
  // masters and optimizer state. Optimizer state is created by the first step: call this after one.
  ModelStateBytes model_state_bytes() const;
  // Labels the memory of the parameters, their gradients, the masters (with a Kahan compensation,
  // as model_state_bytes() counts it) and the optimizer state with their categories in the memory
  // breakdown (mixtrain/memory.h). The Trainer calls it before training and after every step, when
  // state may be new.
  void label_memory() const;
  // Re-reads every fp32 master from its 16-bit parameter (after the parameters were changed outside
  // the optimizer, e.g. weights loaded after construction). A packed master's lower half becomes 0.
  virtual void sync_masters_from_params();
  // Switches every bf16 parameter's fp32 master to the packed layout of mode (c), exactly: the
  // parameter takes the master's upper 16 bits and master_low its lower 16 (so the parameter moves
  // from the master rounded to nearest to the master truncated). fp16 parameters keep their fp32
  // masters; parameters without a master are left alone. Idempotent.
  virtual void pack_masters();
  // True when some parameter has a packed master.
  virtual bool has_packed_masters() const;
  // Drops the fp32 masters (full or packed) of the bf16 parameters, which the optimizer then updates
  // in place: mode (d). Each parameter keeps its current value (its master rounded to nearest, or
  // truncated for a packed master). fp16 parameters keep their masters. Idempotent.
  virtual void release_masters();

 protected:
  Optimizer() = default;

  // Registers a group; creates fp32 masters for its 16-bit parameters when master_weights is true,
  // packed ones (mode (c)) for its bf16 parameters when packed_master is true as well.
  void add_param_group(std::vector<Tensor> params, std::vector<std::string> names, bool master_weights,
                       bool packed_master = false);
  // Flat index of the first parameter of group g.
  size_t group_offset(size_t g) const { return group_offset_.at(g); }
  // The group of the parameter with flat index i, and that parameter.
  size_t group_of(size_t flat_index) const;
  const Tensor& parameter(size_t flat_index) const;
  // set_rounding_stream()'s values for the parameter with flat index i.
  std::pair<uint32_t, int64_t> rounding_stream(size_t flat_index) const { return rounding_streams_.at(flat_index); }
  ParamState& mutable_state(size_t flat_index) { return state_.at(flat_index); }
  // The gradient of the parameter with flat index i, checked (dtype, shape) and contiguous; undefined
  // when the parameter has none.
  Tensor grad_for_step(size_t flat_index) const;

  // Updates group g; grads are multiplied by inv_scale as they are read.
  virtual void step_group(size_t g, float inv_scale) = 0;
  // One update of every group (step() and step_scaled() call it under a NoGradGuard): step_group for
  // each group. An optimizer that delegates (dist::ZeroRedundancyOptimizer) replaces it.
  virtual void update(float inv_scale);
  virtual std::map<std::string, double> group_hyperparameters(size_t g) const = 0;
  virtual void set_group_hyperparameters(size_t g, const std::map<std::string, double>& values) = 0;

 private:
  void step_all(float inv_scale);
  // mt::Error unless `src` holds exactly the state tensors stepped_state_keys(i) names (none at step 0).
  void check_complete(const ParamState& src, size_t i) const;

  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_offset_;
  std::vector<ParamState> state_;
  std::vector<std::pair<uint32_t, int64_t>> rounding_streams_;  // per parameter: stream, first element
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
