// mixtrain/nn/transformer.h: the pre-norm Transformer block (GPT-2 style).
#pragma once

#include <cstdint>
#include <memory>

#include "mixtrain/nn/attention.h"
#include "mixtrain/nn/container.h"
#include "mixtrain/nn/normalization.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct TransformerBlockOptions {
  int64_t mlp_ratio = 4;  // hidden width of the MLP = mlp_ratio * C
  bool causal = true;
  bool bias = true;
  double ln_eps = 1e-5;
  Generator* generator = nullptr;  // for the initial values; nullptr: the process-wide generator
};

// x [B, T, C] -> [B, T, C]:
//   x = x + attn(ln1(x))
//   x = x + mlp(ln2(x)),   mlp = Sequential(Linear(C, r C), GELU (exact), Linear(r C, C))
// Submodules: "ln1" LayerNorm(C), "attn" MultiheadAttention, "ln2" LayerNorm(C), "mlp" Sequential,
// so the keys are ln1.weight, attn.qkv.weight, attn.proj.weight, ln2.weight, mlp.0.weight,
// mlp.2.weight (and the biases). A PyTorch module built with the same attribute names and an
// nn.Sequential MLP has identical state_dict keys (docs/nn.md).
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t embed_dim, int64_t num_heads, TransformerBlockOptions opts = {});
  Tensor forward(const Tensor& x) override;
  // forward() for the positions after those in `cache` (a causal block; nn/generation.h).
  Tensor forward_cached(const Tensor& x, KVCache& cache);

  const std::shared_ptr<LayerNorm>& ln1() const { return ln1_; }
  const std::shared_ptr<MultiheadAttention>& attn() const { return attn_; }
  const std::shared_ptr<LayerNorm>& ln2() const { return ln2_; }
  const std::shared_ptr<Sequential>& mlp() const { return mlp_; }

 private:
  Tensor mlp_branch(const Tensor& h);

  std::shared_ptr<LayerNorm> ln1_;
  std::shared_ptr<MultiheadAttention> attn_;
  std::shared_ptr<LayerNorm> ln2_;
  std::shared_ptr<Sequential> mlp_;
};

}  // namespace mixtrain::nn
