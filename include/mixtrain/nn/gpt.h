// mixtrain/nn/gpt.h: a small GPT (decoder-only Transformer language model).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mixtrain/nn/embedding.h"
#include "mixtrain/nn/generation.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/lm_head.h"
#include "mixtrain/nn/normalization.h"
#include "mixtrain/nn/transformer.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct GPTConfig {
  int64_t vocab_size = 256;  // bytes
  int64_t context = 128;     // maximum sequence length (rows of pos_emb)
  int64_t embed_dim = 256;   // C
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t mlp_ratio = 4;
};

// tokens int64 [B, T] (T <= context, values in [0, vocab_size)) -> logits [B, T, vocab_size]:
//   x = tok_emb(tokens) + pos_emb(0..T-1); x = blocks.0(x) ... blocks.{L-1}(x); logits = head(ln_f(x))
// Submodules: "tok_emb" Embedding(V, C), "pos_emb" Embedding(context, C) (learned positions,
// weight [context, C]), "blocks" (a Sequential of L causal TransformerBlocks: "blocks.0", ...),
// "ln_f" LayerNorm(C), "head" Linear(C, V) with bias; no weight tying.
class GPT : public Module, public IncrementalDecoder, public LinearHeadLanguageModel {
 public:
  explicit GPT(GPTConfig config = {}, Generator* generator = nullptr);
  Tensor forward(const Tensor& tokens) override;
  // The fused head's inputs (nn/lm_head.h): forward() == linear(hidden_states(), head weight, bias).
  Tensor hidden_states(const Tensor& tokens) override;
  LinearHead output_head() override;
  std::string extra_repr() const override;

  const GPTConfig& config() const { return config_; }
  // Incremental decoding (nn/generation.h).
  Tensor forward_cached(const Tensor& tokens, DecodeCache& cache) override;
  int64_t max_positions() const override { return config_.context; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  // Activation checkpointing per transformer block (nn/checkpoint.h): each block but the last keeps
  // only its input for backward and recomputes its activations there. Gradients are bit-identical.
  void set_checkpoint_activations(bool enabled);
  bool checkpoint_activations() const;

 private:
  GPTConfig config_;
  std::shared_ptr<Embedding> tok_emb_, pos_emb_;
  std::shared_ptr<Sequential> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> head_;
  // 0, 1, ..., context - 1 (int64) on the device of the last forward's tokens: made once per device,
  // so that a step copies nothing from the host for its positions. Not state: not in state_dict().
  Tensor positions_;
  Tensor embed(const Tensor& tokens, int64_t first_position);
};

}  // namespace mixtrain::nn
