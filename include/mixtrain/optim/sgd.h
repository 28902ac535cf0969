// mixtrain/optim/sgd.h: stochastic gradient descent with momentum, dampening, Nesterov momentum and
// (L2) weight decay: PyTorch's torch.optim.SGD update, fused over all parameters of a group.
//
//   g = grad * inv_scale (+ weight_decay * p)
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g     (when momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
//
// All math in fp32; the momentum buffer is fp32; 16-bit parameters update an fp32 master (see
// optimizer.h).
#pragma once

#include <vector>

#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;       // requires momentum > 0 and dampening == 0
  bool master_weights = true;  // fp32 masters for 16-bit parameters (no effect on fp32 ones)
  bool packed_master = false;  // packed masters for bf16 parameters, mode (c) of optimizer.h
};

class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  explicit SGD(std::vector<NamedParameter> params, const SGDOptions& options = {});
  explicit SGD(std::vector<ParamGroupSpec<SGDOptions>> groups);

  const char* name() const override { return "SGD"; }
  // The options of a group; mutable, so hyperparameters can change between steps (master_weights is
  // read at construction only).
  SGDOptions& options(size_t group = 0) { return options_.at(group); }
  const SGDOptions& options(size_t group = 0) const { return options_.at(group); }

  double lr(size_t group = 0) const override { return options_.at(group).lr; }
  using Optimizer::set_lr;
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }
  std::vector<std::string> stepped_state_keys(size_t flat_index) const override;

 protected:
  void step_group(size_t g, float inv_scale) override;
  std::map<std::string, double> group_hyperparameters(size_t g) const override;
  void set_group_hyperparameters(size_t g, const std::map<std::string, double>& values) override;

 private:
  std::vector<SGDOptions> options_;
};

}  // namespace mixtrain::optim
