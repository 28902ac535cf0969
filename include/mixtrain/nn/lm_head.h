// mixtrain/nn/lm_head.h: language models whose logits are one linear map of their last hidden
// states, so that a trainer can fuse that map with the loss (nn::functional::linear_cross_entropy)
// and never hold the [B, T, V] logits.
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain::nn {

// The output head: logits = hidden weight^T (+ bias). weight [V, C] (a parameter, possibly shared
// with the token embedding), bias [V] or undefined.
struct LinearHead {
  Tensor weight;
  Tensor bias;
};

// Implemented by nn::GPT and nn::GPT2. For every tokens [B, T]:
//   forward(tokens) == linear(hidden_states(tokens), output_head().weight, output_head().bias)
// with the same submodule calls (hooks, activation checkpointing, autocast) up to the head.
class LinearHeadLanguageModel {
 public:
  virtual ~LinearHeadLanguageModel() = default;
  // tokens [B, T] -> [B, T, C]: the final layer norm's output, what the head reads.
  virtual Tensor hidden_states(const Tensor& tokens) = 0;
  virtual LinearHead output_head() = 0;
};

}  // namespace mixtrain::nn
