// GPT2Block and GPT2 (nn/gpt2.h).
//
// Submodules that draw initial values are constructed one statement at a time, in Hugging Face's
// module order, so that the values do not depend on the compiler's argument evaluation order.
#include "mixtrain/nn/gpt2.h"

#include <cmath>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/ops/linalg.h"

namespace mixtrain::nn {

using mixtrain::detail::concat;

namespace {

// A Dropout's seed from `g` (one Philox block), as Dropout draws from the process-wide generator.
uint64_t draw_seed(Generator* g) {
  Generator& gen = g != nullptr ? *g : default_generator();
  const auto r = random::philox(gen.advance(1), gen.seed());
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

std::shared_ptr<Linear> make_linear(int64_t in, int64_t out, double std, Generator* g) {
  auto l = std::make_shared<Linear>(in, out, LinearOptions{.generator = g});
  NoGradGuard no_grad;
  init::normal_(l->weight(), 0.0, std, g);
  init::zeros_(l->bias());
  return l;
}

}  // namespace

void validate(const GPT2Config& c) {
  MT_CHECK(c.vocab_size > 0 && c.n_positions > 0 && c.n_embd > 0 && c.n_layer >= 0 && c.n_head > 0 && c.n_inner >= 0,
           "GPT2Config: sizes must be positive (n_layer, n_inner non-negative), got vocab_size ", c.vocab_size,
           ", n_positions ", c.n_positions, ", n_embd ", c.n_embd, ", n_layer ", c.n_layer, ", n_head ", c.n_head,
           ", n_inner ", c.n_inner);
  MT_CHECK(c.n_embd % c.n_head == 0, "GPT2Config: n_embd (", c.n_embd, ") must be a multiple of n_head (", c.n_head,
           ")");
  MT_CHECK(c.embd_pdrop >= 0.0 && c.embd_pdrop < 1.0 && c.resid_pdrop >= 0.0 && c.resid_pdrop < 1.0,
           "GPT2Config: dropout probabilities must be in [0, 1), got embd_pdrop ", c.embd_pdrop, ", resid_pdrop ",
           c.resid_pdrop);
  MT_CHECK(c.layer_norm_epsilon > 0.0 && std::isfinite(c.layer_norm_epsilon),
           "GPT2Config: layer_norm_epsilon must be positive, got ", c.layer_norm_epsilon);
  MT_CHECK(c.initializer_range >= 0.0 && std::isfinite(c.initializer_range),
           "GPT2Config: initializer_range must be non-negative, got ", c.initializer_range);
}

int64_t num_parameters(const GPT2Config& c) {
  const int64_t C = c.n_embd, W = c.mlp_width();
  const int64_t block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * W + W) + (W * C + C);
  return c.vocab_size * C + c.n_positions * C + c.n_layer * block + 2 * C;
}

// ---------------------------------------------------------------------------------------------
// GPT2Block

GPT2Block::GPT2Block(const GPT2Config& c, Generator* g) : Module("GPT2Block"), n_head_(c.n_head) {
  const int64_t C = c.n_embd, W = c.mlp_width();
  const double std = c.initializer_range;
  const double proj_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(c.n_layer, 1)));
  ln_1_ = register_module("ln_1", LayerNorm(C, {.eps = c.layer_norm_epsilon}));
  auto attn = std::make_shared<Module>("GPT2Attention");
  c_attn_ = attn->register_module("c_attn", make_linear(C, 3 * C, std, g));
  attn_c_proj_ = attn->register_module("c_proj", make_linear(C, C, proj_std, g));
  attn_drop_ = attn->register_module("resid_dropout", Dropout(c.resid_pdrop, {.seed = draw_seed(g)}));
  register_module("attn", attn);
  ln_2_ = register_module("ln_2", LayerNorm(C, {.eps = c.layer_norm_epsilon}));
  auto mlp = std::make_shared<Module>("GPT2MLP");
  c_fc_ = mlp->register_module("c_fc", make_linear(C, W, std, g));
  mlp_c_proj_ = mlp->register_module("c_proj", make_linear(W, C, proj_std, g));
  mlp_drop_ = mlp->register_module("dropout", Dropout(c.resid_pdrop, {.seed = draw_seed(g)}));
  register_module("mlp", mlp);
}

Tensor GPT2Block::attention_branch(const Tensor& x, KVCache* cache) {
  const Tensor qkv = (*c_attn_)((*ln_1_)(x));  // [B, T, 3C] = [B, T, (q|k|v), H, D]
  // Training and whole-sequence inference: the fused kernel reads the heads in place.
  const Tensor o = cache == nullptr ? functional::qkv_attention(qkv, n_head_, /*is_causal=*/true)
                                    : cached_qkv_attention(qkv, n_head_, *cache);
  return (*attn_drop_)((*attn_c_proj_)(o));
}

// c_proj(gelu(c_fc(ln_2(x)))) with the GELU and c_proj fused (functional::gelu_linear): backward
// keeps c_fc's output [B, T, 4C] once instead of also keeping gelu's. In an FP8 region c_proj
// quantises its own input, so the modules run one by one there.
Tensor GPT2Block::mlp_branch(const Tensor& x) {
  const Tensor u = (*c_fc_)((*ln_2_)(x));
  if (!amp::is_fp8_enabled() || !mlp_c_proj_->fp8()) {
    // The fused GELU + c_proj belongs to c_proj's scope (for op observers).
    autograd::ScopeGuard scope(autograd::module_scopes_enabled() ? &mlp_c_proj_->scope_name() : nullptr);
    return (*mlp_drop_)(functional::gelu_linear(u, mlp_c_proj_->weight(), mlp_c_proj_->bias(), GeluApproximation::kTanh));
  }
  return (*mlp_drop_)((*mlp_c_proj_)(gelu(u, GeluApproximation::kTanh)));
}

Tensor GPT2Block::forward(const Tensor& x) {
  const Tensor h = x + attention_branch(x, nullptr);
  return h + mlp_branch(h);
}

Tensor GPT2Block::forward_cached(const Tensor& x, KVCache& cache) {
  const Tensor h = x + attention_branch(x, &cache);
  return h + mlp_branch(h);
}

// ---------------------------------------------------------------------------------------------
// GPT2

GPT2::GPT2(GPT2Config config, Generator* g) : Module("GPT2"), config_(config) {
  validate(config);
  const int64_t C = config.n_embd;
  wte_ = register_module("wte", Embedding(config.vocab_size, C, {.generator = g}));
  wpe_ = register_module("wpe", Embedding(config.n_positions, C, {.generator = g}));
  {
    NoGradGuard no_grad;
    init::normal_(wte_->weight(), 0.0, config.initializer_range, g);
    init::normal_(wpe_->weight(), 0.0, config.initializer_range, g);
  }
  drop_ = register_module("drop", Dropout(config.embd_pdrop, {.seed = draw_seed(g)}));
  auto h = std::make_shared<Sequential>();
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(config, g));
  h_ = register_module("h", h);
  ln_f_ = register_module("ln_f", LayerNorm(C, {.eps = config.layer_norm_epsilon}));
}

Tensor GPT2::embed(const Tensor& tokens, int64_t first) {
  MT_CHECK(tokens.dim() == 2 && (tokens.dtype() == kInt64 || tokens.dtype() == kInt32),
           "GPT2: expected int64 or int32 tokens [B, T], got ", describe(tokens));
  const int64_t T = tokens.size(1);
  MT_CHECK(T >= 1 && first + T <= config_.n_positions, "GPT2: positions ", first, " .. ", first + T - 1,
           " must lie below n_positions = ", config_.n_positions);
  // On the tokens' device: a model moved to a device gets no host tensor here.
  if (!positions_.defined() || positions_.device() != tokens.device())
    positions_ = arange(config_.n_positions, {.dtype = kInt64, .device = tokens.device()});
  const Tensor pos = positions_.narrow(0, first, T);      // [T]
  return (*drop_)((*wte_)(tokens) + (*wpe_)(pos));  // [B, T, C] + [T, C]
}

// The tied head: ln_f(x) wte.weight^T, no bias (V = vocab_size outputs).
Tensor GPT2::head(const Tensor& x) { return linear((*ln_f_)(x), wte_->weight()); }

Tensor GPT2::forward(const Tensor& tokens) { return head((*h_)(embed(tokens, 0))); }

Tensor GPT2::hidden_states(const Tensor& tokens) { return (*ln_f_)((*h_)(embed(tokens, 0))); }

LinearHead GPT2::output_head() { return {wte_->weight(), Tensor()}; }

Tensor GPT2::forward_cached(const Tensor& tokens, DecodeCache& cache) {
  NoGradGuard no_grad;
  if (cache.layers.empty()) cache.layers.resize(h_->size());
  MT_CHECK(cache.layers.size() == h_->size(), "GPT2: the cache holds ", cache.layers.size(), " layers, the model ",
           h_->size());
  Tensor x = embed(tokens, cache.length);
  for (size_t i = 0; i < h_->size(); ++i)
    x = static_cast<GPT2Block*>((*h_)[i].get())->forward_cached(x, cache.layers[i]);
  cache.length += tokens.size(1);
  return head(x);
}

void GPT2::set_checkpoint_activations(bool enabled) {
  h_->set_checkpoint_segments(enabled ? static_cast<int64_t>(h_->size()) : 0);
}

bool GPT2::checkpoint_activations() const { return h_->checkpoint_segments() > 0; }

std::string GPT2::extra_repr() const {
  return concat("vocab_size=", config_.vocab_size, ", n_positions=", config_.n_positions, ", n_embd=", config_.n_embd,
                ", n_layer=", config_.n_layer, ", n_head=", config_.n_head, ", tied head");
}

}  // namespace mixtrain::nn
