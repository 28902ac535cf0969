// mixtrain/nn/linear.h: Linear and Identity.
#pragma once

#include <cstdint>
#include <memory>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct LinearOptions {
  bool bias = true;
  Generator* generator = nullptr;  // for the initial values; nullptr: the process-wide generator
  bool fp8 = true;                 // runs in FP8 inside an amp::Fp8Autocast region (amp/fp8.h)
};

// y = x W^T + b.  x [..., in_features] -> y [..., out_features] through mt::linear (oneDNN; 16-bit
// under autocast with fp32 accumulation).
// Parameters (PyTorch's names and layouts): "weight" [out_features, in_features], "bias"
// [out_features]. Initialisation as PyTorch: weight kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)); bias U(-1/sqrt(in), 1/sqrt(in)). Both fp32.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built with bias = false
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  // Whether the layer takes part in FP8 regions (LinearOptions::fp8).
  bool fp8() const { return fp8_; }
  void set_fp8(bool fp8) { fp8_ = fp8; }
  // The FP8 scaling state: nullptr until the first forward in an FP8 region.
  const std::shared_ptr<amp::Fp8LinearState>& fp8_state() const { return fp8_state_; }
  void set_fp8_state(std::shared_ptr<amp::Fp8LinearState> state) { fp8_state_ = std::move(state); }

  // The FP8 state as extra state (Module::extra_state): per role (input, weight, grad_output) a
  // "<role>.scale" float32 [1] and a "<role>.amax_history" float32 [n <= 65536] (also when empty, so
  // that a missing history is an error); nothing before the first FP8 forward. Loading validates
  // every value (amp::Fp8Scaling::restore's rules) and requires all six tensors when any is there,
  // or when the layer takes part in FP8 and the state comes from after FP8 steps.
  StateDict extra_state() const override;
  void check_extra_state(const StateDict& state, bool after_fp8_steps,
                         const std::string& key_prefix = "") const override;
  void load_extra_state(const StateDict& state, bool after_fp8_steps) override;

 private:
  int64_t in_features_, out_features_;
  Tensor weight_, bias_;
  bool fp8_ = true;
  std::shared_ptr<amp::Fp8LinearState> fp8_state_;
};

// Returns its input unchanged (a placeholder in containers).
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace mixtrain::nn
