// mixtrain/nn/activation.h: elementwise activations as modules (no parameters; each runs in its
// input dtype, computing in fp32 for 16-bit inputs: see ops/elementwise.h).
#pragma once

#include "mixtrain/nn/module.h"
#include "mixtrain/ops/elementwise.h"

namespace mixtrain::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

struct GELUOptions {
  GeluApproximation approximate = GeluApproximation::kNone;  // exact erf form, PyTorch's default
};

class GELU : public Module {
 public:
  explicit GELU(GELUOptions opts = {}) : Module("GELU"), opts_(opts) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  GeluApproximation approximate() const { return opts_.approximate; }

 private:
  GELUOptions opts_;
};

// x * sigmoid(x).
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace mixtrain::nn
