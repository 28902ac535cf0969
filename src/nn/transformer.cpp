// MultiheadAttention, TransformerBlock and GPT.
//
// Submodules that draw initial values are constructed one statement at a time: arguments of one
// call (e.g. Sequential(Linear(...), GELU(), Linear(...))) are evaluated in an unspecified order,
// which would make the parameters depend on the compiler.
#include "mixtrain/factory.h"
#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/gpt.h"

namespace mixtrain::nn {

using mixtrain::detail::concat;

// ---------------------------------------------------------------------------------------------
// MultiheadAttention

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opts)
    : Module("MultiheadAttention"), embed_dim_(embed_dim), num_heads_(num_heads), causal_(opts.causal) {
  MT_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "MultiheadAttention: embed_dim (", embed_dim,
           ") must be a positive multiple of num_heads (", num_heads, ")");
  qkv_ = register_module("qkv", Linear(embed_dim, 3 * embed_dim, {.bias = opts.bias, .generator = opts.generator}));
  proj_ = register_module("proj", Linear(embed_dim, embed_dim, {.bias = opts.bias, .generator = opts.generator}));
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 3 && x.size(2) == embed_dim_, "MultiheadAttention(", embed_dim_, ", ", num_heads_,
           "): expected an input [B, T, ", embed_dim_, "], got ", describe(x));
  // qkv(x) is [B, T, 3C] = [B, T, (q|k|v), H, D]; the fused op reads the heads in place and
  // returns [B, T, C] with heads side by side, the projection's input layout: no copies.
  return (*proj_)(functional::qkv_attention((*qkv_)(x), num_heads_, causal_));
}

Tensor MultiheadAttention::forward_cached(const Tensor& x, KVCache& cache) {
  MT_CHECK(causal_, "MultiheadAttention: incremental decoding needs causal attention");
  MT_CHECK(x.dim() == 3 && x.size(2) == embed_dim_, "MultiheadAttention(", embed_dim_, ", ", num_heads_,
           "): expected an input [B, T, ", embed_dim_, "], got ", describe(x));
  return (*proj_)(cached_qkv_attention((*qkv_)(x), num_heads_, cache));
}

std::string MultiheadAttention::extra_repr() const {
  return concat("embed_dim=", embed_dim_, ", num_heads=", num_heads_, ", causal=", causal_ ? "true" : "false");
}

// ---------------------------------------------------------------------------------------------
// TransformerBlock

TransformerBlock::TransformerBlock(int64_t embed_dim, int64_t num_heads, TransformerBlockOptions opts)
    : Module("TransformerBlock") {
  MT_CHECK(opts.mlp_ratio > 0, "TransformerBlock: mlp_ratio must be positive, got ", opts.mlp_ratio);
  const int64_t hidden = opts.mlp_ratio * embed_dim;
  ln1_ = register_module("ln1", LayerNorm(embed_dim, {.eps = opts.ln_eps}));
  attn_ = register_module("attn",
                          MultiheadAttention(embed_dim, num_heads,
                                             {.causal = opts.causal, .bias = opts.bias, .generator = opts.generator}));
  ln2_ = register_module("ln2", LayerNorm(embed_dim, {.eps = opts.ln_eps}));
  auto mlp = std::make_shared<Sequential>();
  mlp->push_back(Linear(embed_dim, hidden, {.bias = opts.bias, .generator = opts.generator}));
  mlp->push_back(GELU());
  mlp->push_back(Linear(hidden, embed_dim, {.bias = opts.bias, .generator = opts.generator}));
  mlp_ = register_module("mlp", mlp);
}

// The MLP as built (Linear, exact GELU, Linear) runs its second half as gelu_linear, which keeps
// one [B, T, hidden] activation for backward instead of two; anything else runs as a Sequential,
// and so does the MLP in an FP8 region (each Linear quantises its own input there).
Tensor TransformerBlock::forward(const Tensor& x) { return mlp_branch(x + (*attn_)((*ln1_)(x))); }

Tensor TransformerBlock::forward_cached(const Tensor& x, KVCache& cache) {
  return mlp_branch(x + attn_->forward_cached((*ln1_)(x), cache));
}

// h + mlp(ln2(h)).
Tensor TransformerBlock::mlp_branch(const Tensor& h) {
  const Tensor u = (*ln2_)(h);
  const Sequential& mlp = *mlp_;
  if (mlp.size() == 3 && !amp::is_fp8_enabled()) {
    auto fc1 = std::dynamic_pointer_cast<Linear>(mlp[0]);
    auto act = std::dynamic_pointer_cast<GELU>(mlp[1]);
    auto fc2 = std::dynamic_pointer_cast<Linear>(mlp[2]);
    if (fc1 && fc2 && act && act->approximate() == GeluApproximation::kNone) {
      const Tensor a = (*fc1)(u);
      // The fused GELU + second Linear belongs to the MLP's scope (for op observers).
      autograd::ScopeGuard scope(autograd::module_scopes_enabled() ? &mlp_->scope_name() : nullptr);
      return h + functional::gelu_linear(a, fc2->weight(), fc2->bias());
    }
  }
  return h + (*mlp_)(u);
}

// ---------------------------------------------------------------------------------------------
// GPT

GPT::GPT(GPTConfig config, Generator* generator) : Module("GPT"), config_(config) {
  MT_CHECK(config.vocab_size > 0 && config.context > 0 && config.num_layers >= 0,
           "GPT: vocab_size and context must be positive and num_layers non-negative, got ", config.vocab_size, ", ",
           config.context, ", ", config.num_layers);
  const int64_t C = config.embed_dim;
  tok_emb_ = register_module("tok_emb", Embedding(config.vocab_size, C, {.generator = generator}));
  pos_emb_ = register_module("pos_emb", Embedding(config.context, C, {.generator = generator}));
  auto blocks = std::make_shared<Sequential>();
  for (int64_t i = 0; i < config.num_layers; ++i)
    blocks->push_back(TransformerBlock(C, config.num_heads, {.mlp_ratio = config.mlp_ratio, .generator = generator}));
  blocks_ = register_module("blocks", blocks);
  ln_f_ = register_module("ln_f", LayerNorm(C));
  // The output head stays out of FP8 regions, as FP8 recipes keep the last layer in 16-bit: its
  // logits feed the softmax directly and a coarse grid there costs accuracy for little time.
  head_ = register_module("head", Linear(C, config.vocab_size, {.generator = generator, .fp8 = false}));
}

Tensor GPT::embed(const Tensor& tokens, int64_t first) {
  MT_CHECK(tokens.dim() == 2 && (tokens.dtype() == kInt64 || tokens.dtype() == kInt32),
           "GPT: expected int64 tokens [B, T], got ", describe(tokens));
  const int64_t T = tokens.size(1);
  MT_CHECK(T >= 1 && first + T <= config_.context, "GPT: positions ", first, " .. ", first + T - 1,
           " must lie in [0, context = ", config_.context, ")");
  // On the tokens' device: a model moved to a device gets no host tensor here.
  if (!positions_.defined() || positions_.device() != tokens.device())
    positions_ = arange(config_.context, {.dtype = kInt64, .device = tokens.device()});
  const Tensor pos = positions_.narrow(0, first, T);  // [T] int64
  return (*tok_emb_)(tokens) + (*pos_emb_)(pos);      // [B, T, C] + [T, C]
}

Tensor GPT::forward(const Tensor& tokens) {
  const Tensor x = (*blocks_)(embed(tokens, 0));
  return (*head_)((*ln_f_)(x));  // [B, T, V]
}

Tensor GPT::hidden_states(const Tensor& tokens) { return (*ln_f_)((*blocks_)(embed(tokens, 0))); }

LinearHead GPT::output_head() { return {head_->weight(), head_->bias()}; }

Tensor GPT::forward_cached(const Tensor& tokens, DecodeCache& cache) {
  NoGradGuard no_grad;
  if (cache.layers.empty()) cache.layers.resize(blocks_->size());
  MT_CHECK(cache.layers.size() == blocks_->size(), "GPT: the cache holds ", cache.layers.size(), " layers, the model ",
           blocks_->size());
  Tensor x = embed(tokens, cache.length);
  for (size_t i = 0; i < blocks_->size(); ++i)
    x = static_cast<TransformerBlock*>((*blocks_)[i].get())->forward_cached(x, cache.layers[i]);
  cache.length += tokens.size(1);
  return (*head_)((*ln_f_)(x));
}

void GPT::set_checkpoint_activations(bool enabled) {
  blocks_->set_checkpoint_segments(enabled ? static_cast<int64_t>(blocks_->size()) : 0);
}

bool GPT::checkpoint_activations() const { return blocks_->checkpoint_segments() > 0; }

std::string GPT::extra_repr() const {
  return concat("vocab_size=", config_.vocab_size, ", context=", config_.context, ", embed_dim=", config_.embed_dim,
                ", num_layers=", config_.num_layers, ", num_heads=", config_.num_heads);
}

}  // namespace mixtrain::nn
