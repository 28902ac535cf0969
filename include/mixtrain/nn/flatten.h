// mixtrain/nn/flatten.h: Flatten, PyTorch's nn.Flatten (start_dim = 1: keeps the batch dim).
#pragma once

#include <cstdint>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

// Merges dims start_dim..end_dim (negative counts from the end) into one: [N, 1, 28, 28] -> [N, 784].
// A view when the input's strides allow, else a copy (Tensor::flatten).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace mixtrain::nn
