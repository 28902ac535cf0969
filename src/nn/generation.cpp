// Cached attention, sampling and the generation loop (nn/generation.h).
#include "mixtrain/nn/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mixtrain/autograd.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/shape_ops.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

Tensor cached_qkv_attention(const Tensor& qkv, int64_t num_heads, KVCache& cache) {
  MT_CHECK(qkv.dim() == 3 && num_heads > 0 && qkv.size(2) % (3 * num_heads) == 0,
           "cached_qkv_attention: expected qkv [B, T, 3 * num_heads * D], got ", describe(qkv), " with ", num_heads,
           " heads");
  const bool first = !cache.k.defined();
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / num_heads;
  MT_CHECK(first || T == 1, "cached_qkv_attention: after the first call a step takes one position, got ", T);
  const Tensor heads = qkv.contiguous().view({B, T, 3, num_heads, D}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, D]
  const Tensor q = heads.select(0, 0).contiguous();
  const Tensor k = heads.select(0, 1).contiguous();
  const Tensor v = heads.select(0, 2).contiguous();
  if (first) {
    cache.k = k;
    cache.v = v;
  } else {
    MT_CHECK(cache.k.dim() == 4 && cache.k.size(0) == B && cache.k.size(1) == num_heads && cache.k.size(3) == D,
             "cached_qkv_attention: the cache holds keys ", describe(cache.k), ", the step has [", B, ", ", num_heads,
             ", 1, ", D, "]");
    cache.k = cat({cache.k, k}, 2);
    cache.v = cat({cache.v, v}, 2);
  }
  // A prompt attends causally among its own positions; a later single position sees every key.
  const Tensor o = functional::scaled_dot_product_attention(q, cache.k, cache.v, /*is_causal=*/first && T > 1);
  return o.transpose(1, 2).reshape({B, T, C});  // heads side by side, as qkv_attention returns
}

int64_t sample_token(const Tensor& logits, const GenerateOptions& o, int64_t step) {
  MT_CHECK(logits.dim() == 1 && logits.numel() >= 1 && logits.is_floating_point(),
           "sample_token: expected floating logits [V], got ", describe(logits));
  MT_CHECK(o.temperature >= 0.0 && std::isfinite(o.temperature), "sample_token: temperature must be >= 0, got ",
           o.temperature);
  MT_CHECK(o.top_k >= 0, "sample_token: top_k must be >= 0, got ", o.top_k);
  const std::vector<float> l = logits.to(kCPU).to(kFloat32).to_vector<float>();
  const int64_t V = static_cast<int64_t>(l.size());
  for (int64_t i = 0; i < V; ++i)
    MT_CHECK(!std::isnan(l[i]), "sample_token: logit ", i, " is NaN (the model diverged or overflowed in this precision)");
  if (o.temperature == 0.0) return std::max_element(l.begin(), l.end()) - l.begin();  // the first maximum
  float floor = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<float> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    floor = sorted[static_cast<size_t>(o.top_k - 1)];  // keep every logit >= the k-th largest
  }
  const double top = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size(), 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    if (l[i] < floor) continue;
    p[i] = std::exp((static_cast<double>(l[i]) - top) / o.temperature);
    total += p[i];
  }
  // One uniform double in [0, 1) from the step's Philox block (53 bits).
  const auto r = random::philox(static_cast<uint64_t>(step), o.seed, /*stream=*/11);
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (static_cast<uint64_t>(r[1]) >> 11);
  const double u = static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53 * total;
  double acc = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (p[i] == 0.0) continue;
    acc += p[i];
    last = i;
    if (u < acc) return i;
  }
  return last;  // u rounded to the total
}

std::vector<int64_t> generate(IncrementalDecoder& model, const std::vector<int64_t>& prompt, const GenerateOptions& o,
                              Device device, const std::function<void(int64_t)>& on_token) {
  MT_CHECK(!prompt.empty(), "generate: the prompt needs at least one token");
  MT_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  const int64_t V = model.vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i)
    MT_CHECK(prompt[i] >= 0 && prompt[i] < V, "generate: prompt token ", prompt[i], " at position ", i,
             " is outside the vocabulary [0, ", V, ")");
  const int64_t n = static_cast<int64_t>(prompt.size());
  MT_CHECK(n + o.max_new_tokens <= model.max_positions(), "generate: ", n, " prompt tokens + ", o.max_new_tokens,
           " new ones exceed the model's ", model.max_positions(), " positions");
  NoGradGuard no_grad;
  DecodeCache cache;
  std::vector<int64_t> out;
  Tensor input = from_vector(prompt, {1, n}).to(device);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const Tensor logits = model.forward_cached(input, cache);  // [1, T, V]
    const int64_t token = sample_token(logits.select(0, 0).select(0, logits.size(1) - 1), o, step);
    out.push_back(token);
    if (on_token) on_token(token);
    if (token == o.stop_token) break;
    input = from_vector(std::vector<int64_t>{token}, {1, 1}).to(device);
  }
  return out;
}

}  // namespace mixtrain::nn
