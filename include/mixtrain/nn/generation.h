// mixtrain/nn/generation.h: text generation with the GPT models: a key/value cache, so that each new
// token costs one position (not the whole prefix), and sampling (greedy, temperature, top-k).
//
// Precision: generation runs in the dtype of the model's parameters, or under an autocast region the
// caller opens (amp/autocast.h); the sampling itself reads the last position's logits in fp32.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::nn {

// The keys and values one attention layer has seen, each [B, H, S, D] (undefined before the first
// call).
struct KVCache {
  Tensor k, v;
};

// Self-attention of new positions over a packed projection qkv [B, T, 3C] (as functional::qkv_attention
// takes it: (q | k | v) x heads x D) -> [B, T, C] with the heads side by side, after appending the new
// keys and values to `cache`. The first call (empty cache) attends causally among its T positions;
// later calls take T == 1, a position that sees every cached key. Scores and softmax in fp32 as
// scaled_dot_product_attention; no autograd graph is needed (call it under NoGradGuard).
Tensor cached_qkv_attention(const Tensor& qkv, int64_t num_heads, KVCache& cache);

// Every layer's cache of a model and the number of positions it holds.
struct DecodeCache {
  std::vector<KVCache> layers;
  int64_t length = 0;
};

// A language model that decodes incrementally (nn::GPT, nn::GPT2).
class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  // Logits [B, T, V] of tokens [B, T] at positions cache.length .. cache.length + T - 1, appended to
  // the cache. The first call (empty cache) may pass a whole prompt, later ones one token each. The
  // logits equal forward()'s on the whole sequence up to rounding (the attention sums group
  // differently). No autograd graph; dropout follows the model's mode (call eval() first).
  virtual Tensor forward_cached(const Tensor& tokens, DecodeCache& cache) = 0;
  // The longest sequence (prompt and generated tokens) the model takes.
  virtual int64_t max_positions() const = 0;
  virtual int64_t vocab_size() const = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  // 0: greedy (the first of the largest logits; deterministic). > 0: sample from softmax(logits / T).
  double temperature = 1.0;
  // > 0: sample among the top_k largest logits only (ties at the k-th value all kept).
  int64_t top_k = 0;
  // The sampling stream: the same seed, prompt and model give the same tokens.
  uint64_t seed = 0;
  // Stop after generating this token (kept in the output); -1: none.
  int64_t stop_token = -1;
};

// The next token from one position's logits (any floating dtype, [V], on any device), by
// `options`' rule; `step` selects the random numbers (one Philox block per step).
int64_t sample_token(const Tensor& logits, const GenerateOptions& options, int64_t step);

// Appends up to max_new_tokens tokens to `prompt` (at least one token, ids in [0, vocab_size)) and
// returns the generated ones. The prompt plus the new tokens must fit in max_positions(). The model's
// mode is left alone; eval() it first for dropout-free generation. `on_token` (may be empty) is
// called with each new token as it is made. Tokens go to the model's device, given by `device`.
std::vector<int64_t> generate(IncrementalDecoder& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options, Device device = kCPU,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace mixtrain::nn
