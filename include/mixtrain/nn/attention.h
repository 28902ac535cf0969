// mixtrain/nn/attention.h: multi-head self-attention.
#pragma once

#include <cstdint>
#include <memory>

#include "mixtrain/nn/generation.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct MultiheadAttentionOptions {
  bool causal = true;              // position t attends to positions <= t only
  bool bias = true;                // biases in the qkv and output projections
  Generator* generator = nullptr;  // for the initial values; nullptr: the process-wide generator
};

// Self-attention over x [B, T, C] -> [B, T, C], C = embed_dim = num_heads * head_dim:
//   q, k, v = split(qkv(x)) each [B, H, T, D];  o = softmax(q k^T / sqrt(D) [+ causal mask]) v;
//   out = proj(o merged back to [B, T, C]).
// Submodules: "qkv" Linear(C, 3C), "proj" Linear(C, C). qkv.weight [3C, C] stacks the q, k and v
// projections (rows 0..C-1, C..2C-1, 2C..3C-1) and within each, head h owns rows h*D..(h+1)*D-1.
// That is exactly the layout of PyTorch's nn.MultiheadAttention, so the PyTorch names map as
//   qkv.weight <-> in_proj_weight, qkv.bias <-> in_proj_bias,
//   proj.weight <-> out_proj.weight, proj.bias <-> out_proj.bias   (no transposes; docs/nn.md).
// The attention itself is nn::functional::qkv_attention on the packed qkv(x): one fused kernel
// that reads the heads in place (16-bit inputs under autocast, fp32 scores and softmax, the output
// rounded once) and returns [B, T, C] for proj.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opts = {});
  Tensor forward(const Tensor& x) override;
  // forward() for the positions after those in `cache` (causal attention only; nn/generation.h).
  Tensor forward_cached(const Tensor& x, KVCache& cache);
  std::string extra_repr() const override;

  const std::shared_ptr<Linear>& qkv() const { return qkv_; }
  const std::shared_ptr<Linear>& proj() const { return proj_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  int64_t embed_dim_, num_heads_;
  bool causal_;
  std::shared_ptr<Linear> qkv_, proj_;
};

}  // namespace mixtrain::nn
