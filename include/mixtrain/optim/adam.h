// mixtrain/optim/adam.h: Adam and AdamW (decoupled weight decay), with amsgrad and bias
// correction: PyTorch's torch.optim.Adam / AdamW update, fused over all parameters of a group.
//
//   g = grad * inv_scale
//   Adam:  g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1)                v = beta2 * v + (1 - beta2) * g * g
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
//
// t is the parameter's own step count (skipped steps do not count). The bias-correction scalars are
// computed in double and rounded to fp32; all element math is fp32; m is fp32 or bf16 (exp_avg_dtype:
// read widened, updated in fp32, stored rounded to nearest even), v is fp32 or bf16 (exp_avg_sq_dtype:
// stored with stochastic rounding), v_max fp32; 16-bit parameters update an fp32 master, full or
// packed (see optimizer.h), or, without masters, are rounded per bf16_update.
//
// Why m may be bf16 and v may not: with beta1 = 0.9 each step moves m by 10% of (g - m), far more
// than bf16's relative rounding step 2^-8, so storing m in bf16 adds a rounding error of at most
// 2^-9 relative per step that does not accumulate into a bias. With beta2 = 0.999 each step moves v
// by 0.1% of (g^2 - v), less than half a bf16 ulp of v: a bf16 v rounded to nearest rounds back to
// its old value and stops following the gradient scale altogether (tests/optim/test_compact_state.cpp
// shows the stall). Stochastic rounding removes the stall: each store rounds up with the probability
// that makes its expected value the fp32 result, so v follows the gradient scale on average, with a
// noise of at most one bf16 ulp per step that the next steps average out; a bf16 v is therefore
// always stored that way.
//
// Updating bf16 parameters without any fp32 master (master_weights = false) has the same problem as
// a bf16 v: every update below half a bf16 ulp of the weight is lost. bf16_update chooses the cure:
//   kNearest     round to nearest even: PyTorch's behaviour for a bf16 parameter, small updates lost
//   kStochastic  stochastic rounding: unbiased (the expected weight follows the fp32 trajectory);
//                with bf16 m and v, 8 bytes of model state per parameter (weights 2, grads 2, m 2, v 2)
//   kKahan       round to nearest and keep the rounding error in a bf16 compensation tensor
//                (ParamState::kahan_comp) that is added to the next update: deterministic, about 16
//                significant bits, 2 more bytes per parameter
// The random bits come from Philox keyed by (rounding_seed, the parameter's step count) and
// addressed by (parameter, element): reruns are bit-identical, whatever the thread count.
#pragma once

#include <string_view>
#include <optional>
#include <utility>
#include <vector>

#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

// How bf16 parameters without fp32 masters store each update (see above).
enum class Bf16Update { kNearest, kStochastic, kKahan };

// "nearest", "stochastic", "kahan".
std::string_view to_string(Bf16Update mode);

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  std::optional<double> weight_decay;  // unset: 0 for Adam, 1e-2 for AdamW (PyTorch's defaults)
  bool amsgrad = false;
  bool master_weights = true;  // fp32 masters for 16-bit parameters (no effect on fp32 ones)
  // With master_weights: store the fp32 master of each bf16 parameter packed, as the parameter (upper
  // 16 bits) plus a 16-bit lower half, mode (c) of optimizer.h. Read at construction only.
  bool packed_master = false;
  // Storage of the first moment: kFloat32 or kBFloat16 (2 bytes per element instead of 4). Math is
  // fp32 either way. Mutable between steps: existing moments are converted at the next step.
  DType exp_avg_dtype = kFloat32;
  // Storage of the second moment: kFloat32, or kBFloat16 stored with stochastic rounding. Mutable
  // between steps like exp_avg_dtype.
  DType exp_avg_sq_dtype = kFloat32;
  // bf16 parameters updated without a master (master_weights = false, or after
  // Optimizer::release_masters()): round to nearest, stochastically, or Kahan-compensated. No effect
  // on fp32 parameters, fp16 parameters or parameters with masters. Mutable between steps (a
  // compensation is created at the first Kahan step and dropped when leaving kKahan).
  Bf16Update bf16_update = Bf16Update::kNearest;
  // Seed of the stochastic rounding (bf16_update = kStochastic and a bf16 second moment).
  uint64_t rounding_seed = 0;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  explicit Adam(std::vector<NamedParameter> params, const AdamOptions& options = {});
  explicit Adam(std::vector<ParamGroupSpec<AdamOptions>> groups);

  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  // The options of a group (weight_decay always set after construction); mutable between steps.
  AdamOptions& options(size_t group = 0) { return options_.at(group); }
  const AdamOptions& options(size_t group = 0) const { return options_.at(group); }

  double lr(size_t group = 0) const override { return options_.at(group).lr; }
  using Optimizer::set_lr;
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }
  std::vector<std::string> stepped_state_keys(size_t flat_index) const override;

 protected:
  Adam(std::vector<ParamGroupSpec<AdamOptions>> groups, bool decoupled_weight_decay);
  void step_group(size_t g, float inv_scale) override;
  std::map<std::string, double> group_hyperparameters(size_t g) const override;
  void set_group_hyperparameters(size_t g, const std::map<std::string, double>& values) override;

 private:
  bool decoupled_;
  std::vector<AdamOptions> options_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter); weight_decay defaults to 1e-2.
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamOptions& options = {});
  explicit AdamW(std::vector<NamedParameter> params, const AdamOptions& options = {});
  explicit AdamW(std::vector<ParamGroupSpec<AdamOptions>> groups);
};

}  // namespace mixtrain::optim
