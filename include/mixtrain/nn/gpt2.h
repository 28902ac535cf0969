// mixtrain/nn/gpt2.h: GPT-2 (Radford et al. 2019) with its exact architecture, so that checkpoints
// of Hugging Face's GPT2LMHeadModel load into it (io/hf_gpt2.h) and its outputs are theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/nn/container.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/nn/embedding.h"
#include "mixtrain/nn/generation.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/lm_head.h"
#include "mixtrain/nn/normalization.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

// The architecture, named as Hugging Face's GPT2Config names it (config.json's keys).
struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;  // rows of the position embedding: the longest sequence
  int64_t n_embd = 768;        // C
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // width of the MLP; 0: 4 * n_embd (config.json's null)
  double layer_norm_epsilon = 1e-5;
  // Dropout after the embeddings (embd_pdrop) and on each residual branch (resid_pdrop), in training
  // mode only. Attention-probability dropout (config.json's attn_pdrop) is not applied: the fused
  // attention kernel has none (io/hf_gpt2.h reports a non-zero attn_pdrop when it reads one).
  double embd_pdrop = 0.1;
  double resid_pdrop = 0.1;
  double attn_pdrop = 0.1;          // kept for config.json only: not applied (see above)
  double initializer_range = 0.02;  // std of the normal initial weights

  int64_t mlp_width() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // The published sizes (124M, 355M, 774M, 1558M parameters).
  static GPT2Config small() { return {}; }
  static GPT2Config medium() { return {.n_embd = 1024, .n_layer = 24, .n_head = 16}; }
  static GPT2Config large() { return {.n_embd = 1280, .n_layer = 36, .n_head = 20}; }
  static GPT2Config xl() { return {.n_embd = 1600, .n_layer = 48, .n_head = 25}; }
};

// Throws mt::Error naming the first field out of range (sizes positive, n_embd a multiple of n_head,
// probabilities in [0, 1), epsilon positive).
void validate(const GPT2Config& config);

// One pre-LayerNorm block, x [B, T, C] -> [B, T, C]:
//   x = x + drop(c_proj(attention(c_attn(ln_1(x)))))           (causal, heads of C / n_head)
//   x = x + drop(mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x)))))
// Submodules "ln_1", "attn" ("c_attn" Linear(C, 3C), "c_proj" Linear(C, C)), "ln_2", "mlp" ("c_fc"
// Linear(C, W), "c_proj" Linear(W, C)): Hugging Face's names. Its Conv1D weights are stored [in, out],
// these Linear weights [out, in] (io/hf_gpt2.h transposes).
class GPT2Block : public Module {
 public:
  GPT2Block(const GPT2Config& config, Generator* generator);
  Tensor forward(const Tensor& x) override;

  // forward() for the positions after those in `cache`, appending their keys and values to it
  // (nn/generation.h: cached_qkv_attention). x [B, T, C] with T == 1 unless the cache is empty.
  Tensor forward_cached(const Tensor& x, KVCache& cache);

 private:
  Tensor attention_branch(const Tensor& x, KVCache* cache);
  Tensor mlp_branch(const Tensor& x);

  int64_t n_head_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Linear> c_attn_, attn_c_proj_, c_fc_, mlp_c_proj_;
  std::shared_ptr<Dropout> attn_drop_, mlp_drop_;
};

// tokens int64 or int32 [B, T] (T <= n_positions, values in [0, vocab_size)) -> logits [B, T, V]:
//   x = drop(wte(tokens) + wpe(0..T-1)); x = h.0(x) ... h.{L-1}(x); logits = ln_f(x) wte.weight^T
// Submodules "wte" Embedding(V, C), "wpe" Embedding(n_positions, C), "drop", "h" (a Sequential of
// GPT2Blocks), "ln_f" LayerNorm(C, eps); state_dict keys as Hugging Face's GPT2Model's
// ("wte.weight", "h.0.attn.c_attn.weight", ...).
//
// The output head is tied to the token embedding: wte.weight [V, C] is one parameter used twice,
// its gradient the sum of both uses, so the optimizer, master weights, checkpoints, DDP and FP8
// see it once. The head is a plain product (no bias) and stays out of FP8 regions, as the last
// layer of FP8 recipes does; under autocast it runs in 16 bits with fp32 accumulation.
//
// Initial values as Hugging Face's: Linear and embedding weights N(0, initializer_range), the
// residual projections (attn.c_proj, mlp.c_proj) N(0, initializer_range / sqrt(2 n_layer)),
// biases 0, LayerNorms 1 and 0; drawn in module order from `generator` (the process-wide one when
// null), which also seeds each Dropout.
class GPT2 : public Module, public IncrementalDecoder, public LinearHeadLanguageModel {
 public:
  explicit GPT2(GPT2Config config = {}, Generator* generator = nullptr);
  Tensor forward(const Tensor& tokens) override;
  // The fused head's inputs (nn/lm_head.h): forward() == linear(hidden_states(), head weight, bias).
  Tensor hidden_states(const Tensor& tokens) override;
  LinearHead output_head() override;
  std::string extra_repr() const override;

  const GPT2Config& config() const { return config_; }
  const std::shared_ptr<Embedding>& wte() const { return wte_; }

  // Incremental decoding (nn/generation.h).
  Tensor forward_cached(const Tensor& tokens, DecodeCache& cache) override;
  int64_t max_positions() const override { return config_.n_positions; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  // Activation checkpointing per block (nn/checkpoint.h), as nn::GPT's.
  void set_checkpoint_activations(bool enabled);
  bool checkpoint_activations() const;

 private:
  Tensor embed(const Tensor& tokens, int64_t first_position);
  Tensor head(const Tensor& x);

  GPT2Config config_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<Sequential> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  Tensor positions_;  // 0 .. n_positions - 1 on the device of the last tokens (not state)
};

// Parameters of a GPT2 of this configuration (the tied head counted once).
int64_t num_parameters(const GPT2Config& config);

}  // namespace mixtrain::nn
