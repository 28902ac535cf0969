// nn::GPT2: Hugging Face's names and shapes, the architecture written out op by op, the tied head's
// one gradient summing both uses, finite differences through a block, incremental decoding equal to
// the whole-sequence forward, and sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/generation.h"
#include "mixtrain/nn/gpt2.h"
#include "mixtrain/nn/modules.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace F = mixtrain::nn::functional;
using mt::testing::kFp32VsReference;
using mt::testing::kFp64VsReference;

namespace {

nn::GPT2Config tiny() {
  return {.vocab_size = 37, .n_positions = 16, .n_embd = 12, .n_layer = 2, .n_head = 3, .embd_pdrop = 0.0,
          .resid_pdrop = 0.0};
}

mt::Tensor tokens(const std::vector<int64_t>& v, int64_t batch = 1) {
  return mt::from_vector(v, {batch, static_cast<int64_t>(v.size()) / batch});
}

std::vector<int64_t> some_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int64_t>(mt::random::philox(i, seed)[0] % vocab);
  return t;
}

// GPT-2's forward written out from the module's parameters with separate ops: q, k, v split, the
// attention through scaled_dot_product_attention, GELU's tanh form, the head as a product with a
// separate handle `head` (the tied weight, or a copy of it).
mt::Tensor reference_forward(nn::GPT2& m, const mt::Tensor& tok, const mt::Tensor& emb, const mt::Tensor& head) {
  const nn::GPT2Config& c = m.config();
  const int64_t B = tok.size(0), T = tok.size(1), C = c.n_embd, H = c.n_head, D = C / H;
  const nn::StateDict sd = m.state_dict();
  auto p = [&](const std::string& n) { return sd.at(n); };
  mt::Tensor x = mt::add(F::embedding(tok, emb), F::embedding(mt::arange(T, {.dtype = mt::kInt64}), p("wpe.weight")));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string b = "h." + std::to_string(l) + ".";
    auto ln = [&](const mt::Tensor& v, const std::string& n) {
      return F::layer_norm(v, {C}, p(b + n + ".weight"), p(b + n + ".bias"), c.layer_norm_epsilon);
    };
    const mt::Tensor qkv = mt::linear(ln(x, "ln_1"), p(b + "attn.c_attn.weight"), p(b + "attn.c_attn.bias"));
    auto heads = [&](int64_t i) {  // [B, H, T, D]
      return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2).contiguous();
    };
    const mt::Tensor o = F::scaled_dot_product_attention(heads(0), heads(1), heads(2), true);
    const mt::Tensor merged = o.transpose(1, 2).reshape({B, T, C});
    x = mt::add(x, mt::linear(merged, p(b + "attn.c_proj.weight"), p(b + "attn.c_proj.bias")));
    const mt::Tensor a = mt::gelu(mt::linear(ln(x, "ln_2"), p(b + "mlp.c_fc.weight"), p(b + "mlp.c_fc.bias")),
                                  mt::GeluApproximation::kTanh);
    x = mt::add(x, mt::linear(a, p(b + "mlp.c_proj.weight"), p(b + "mlp.c_proj.bias")));
  }
  x = F::layer_norm(x, {C}, p("ln_f.weight"), p("ln_f.bias"), c.layer_norm_epsilon);
  return mt::linear(x, head);
}

}  // namespace

TEST(Gpt2Test, NamesShapesAndCountsAreHuggingFaces) {
  mt::Generator g(1);
  nn::GPT2 m(tiny(), &g);
  const std::vector<std::string> keys = m.state_dict().keys();
  const std::vector<std::string> first = {"wte.weight",
                                          "wpe.weight",
                                          "h.0.ln_1.weight",
                                          "h.0.ln_1.bias",
                                          "h.0.attn.c_attn.weight",
                                          "h.0.attn.c_attn.bias",
                                          "h.0.attn.c_proj.weight",
                                          "h.0.attn.c_proj.bias",
                                          "h.0.ln_2.weight",
                                          "h.0.ln_2.bias",
                                          "h.0.mlp.c_fc.weight",
                                          "h.0.mlp.c_fc.bias",
                                          "h.0.mlp.c_proj.weight",
                                          "h.0.mlp.c_proj.bias"};
  ASSERT_GE(keys.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + first.size()), first);
  EXPECT_EQ(keys.back(), "ln_f.bias");
  EXPECT_EQ(keys.size(), 2 + 12 * 2 + 2u);
  // The head is the embedding: no parameter of its own, counted once.
  EXPECT_EQ(m.num_parameters(), nn::num_parameters(tiny()));
  EXPECT_EQ(m.parameters().size(), keys.size());
  EXPECT_EQ(m.state_dict().at("h.1.mlp.c_fc.weight").shape(), (mt::Shape{48, 12}));
  EXPECT_EQ(nn::num_parameters(nn::GPT2Config::small()), 124439808);  // GPT-2 small, as published
  EXPECT_EQ(nn::num_parameters(nn::GPT2Config::xl()), 1557611200);
  const mt::Tensor logits = m(tokens({1, 2, 3, 4, 5, 6}, 2));
  EXPECT_EQ(logits.shape(), (mt::Shape{2, 3, 37}));
}

TEST(Gpt2Test, InitialisationIsHuggingFaces) {
  nn::GPT2Config c = tiny();
  c.n_embd = 64;
  c.n_head = 4;
  c.n_layer = 8;
  c.vocab_size = 500;
  mt::Generator g(3);
  nn::GPT2 m(c, &g);
  auto stddev = [](const mt::Tensor& t) {
    const std::vector<float> v = t.to_vector<float>();
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double mean = s / v.size();
    return std::sqrt(s2 / v.size() - mean * mean);
  };
  const nn::StateDict sd = m.state_dict();
  EXPECT_NEAR(stddev(sd.at("wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(sd.at("h.0.mlp.c_fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(sd.at("h.0.mlp.c_proj.weight")), 0.02 / std::sqrt(16.0), 0.0005);  // 0.02 / sqrt(2 n_layer)
  EXPECT_EQ(stddev(sd.at("h.0.attn.c_attn.bias")), 0.0);
  EXPECT_EQ(sd.at("h.0.ln_1.weight").to_vector<float>(), std::vector<float>(64, 1.0f));
  // The same seed, the same model (dropout seeds included); another seed, another model.
  mt::Generator g2(3), g3(4);
  nn::GPT2 same(c, &g2), other(c, &g3);
  EXPECT_EQ(same.state_dict().at("h.7.mlp.c_proj.weight").to_vector<float>(),
            sd.at("h.7.mlp.c_proj.weight").to_vector<float>());
  EXPECT_NE(other.state_dict().at("wte.weight").to_vector<float>(), sd.at("wte.weight").to_vector<float>());
}

TEST(Gpt2Test, ForwardIsTheArchitectureWrittenOut) {
  mt::Generator g(5);
  nn::GPT2 m(tiny(), &g);
  const mt::Tensor tok = tokens(some_tokens(2 * 9, 37, 1), 2);
  const mt::Tensor wte = m.wte()->weight();
  EXPECT_CLOSE(m(tok), reference_forward(m, tok, wte.detach(), wte.detach()), kFp32VsReference);
}

TEST(Gpt2Test, TiedHeadGetsTheSumOfBothGradients) {
  // In fp64: the tied model's one gradient equals the sum of the gradients of two separate copies
  // (one used as the embedding, one as the head) in the written-out model.
  mt::Generator g(7);
  nn::GPT2 m(tiny(), &g);
  m.to(mt::kFloat64);
  const mt::Tensor tok = tokens(some_tokens(2 * 7, 37, 2), 2);
  const mt::Tensor target = tokens(some_tokens(2 * 7, 37, 3), 2);
  auto loss_of = [&](const mt::Tensor& logits) { return F::cross_entropy(logits.reshape({-1, 37}), target.reshape({-1})); };
  loss_of(m(tok)).backward();
  const mt::Tensor tied_grad = m.wte()->weight().grad();
  ASSERT_TRUE(tied_grad.defined());
  mt::Tensor emb = m.wte()->weight().detach().clone().requires_grad_(true);
  mt::Tensor head = m.wte()->weight().detach().clone().requires_grad_(true);
  loss_of(reference_forward(m, tok, emb, head)).backward();
  const mt::Tensor sum = mt::add(emb.grad(), head.grad());
  EXPECT_CLOSE(tied_grad, sum, kFp64VsReference);
  // Both parts matter: neither alone is the gradient.
  auto max_abs_diff = [](const mt::Tensor& a, const mt::Tensor& b) {
    const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
    return m;
  };
  EXPECT_GT(max_abs_diff(tied_grad, head.grad()), 1e-6);
  EXPECT_GT(max_abs_diff(tied_grad, emb.grad()), 1e-6);
}

TEST(Gpt2Test, BlockPassesGradcheck) {
  mt::Generator g(9);
  nn::GPT2Block block(tiny(), &g);
  block.to(mt::kFloat64);
  EXPECT_EQ(mt::testing::gradcheck([&](const std::vector<mt::Tensor>& in) { return block(in[0]); },
                                   {mt::testing::rand_input({2, 4, 12}, -1, 1, 5)}),
            "");
}

TEST(Gpt2Test, CheckpointedActivationsGiveTheSameGradients) {
  auto grads = [](bool checkpointed) {
    mt::Generator g(11);
    nn::GPT2 m(tiny(), &g);
    m.set_checkpoint_activations(checkpointed);
    EXPECT_EQ(m.checkpoint_activations(), checkpointed);
    const mt::Tensor tok = tokens(some_tokens(2 * 8, 37, 4), 2);
    mt::sum(m(tok)).backward();
    std::map<std::string, std::vector<float>> out;
    for (const auto& [name, p] : m.named_parameters()) out[name] = p.grad().to_vector<float>();
    return out;
  };
  EXPECT_EQ(grads(true), grads(false));
}

TEST(Gpt2Test, DropoutIsActiveInTrainingOnly) {
  nn::GPT2Config c = tiny();
  c.embd_pdrop = c.resid_pdrop = 0.5;
  mt::Generator g(13);
  nn::GPT2 m(c, &g);
  const mt::Tensor tok = tokens(some_tokens(8, 37, 5));
  const std::vector<float> a = m(tok).to_vector<float>(), b = m(tok).to_vector<float>();
  EXPECT_NE(a, b);  // two masks
  m.eval();
  EXPECT_EQ(m(tok).to_vector<float>(), m(tok).to_vector<float>());
}

TEST(Gpt2Test, ConfigIsValidated) {
  mt::testing::expect_error([] { nn::validate({.n_embd = 10, .n_head = 3}); }, {"n_embd (10)", "n_head (3)"});
  mt::testing::expect_error([] { nn::validate({.vocab_size = 0}); }, {"vocab_size 0"});
  mt::testing::expect_error([] { nn::validate({.resid_pdrop = 1.0}); }, {"resid_pdrop 1"});
  mt::testing::expect_error([] { nn::validate({.layer_norm_epsilon = 0.0}); }, {"layer_norm_epsilon"});
  mt::Generator g(1);
  nn::GPT2 m(tiny(), &g);
  EXPECT_MT_ERROR(m(tokens(some_tokens(17, 37, 1))), "positions 0 .. 16", "n_positions = 16");
  EXPECT_MT_ERROR(m(mt::zeros({2, 3})), "int64 or int32 tokens");
}

// Incremental decoding against the whole sequence, for both GPT models: the prompt's logits and
// each later position's.
template <typename Model>
void expect_cached_equals_full(Model& m, int64_t vocab, int64_t prompt_len, int64_t steps) {
  m.eval();
  const std::vector<int64_t> seq = some_tokens(prompt_len + steps, vocab, 21);
  const mt::Tensor full = m(tokens(seq));  // [1, T, V]
  nn::DecodeCache cache;
  const mt::Tensor first = m.forward_cached(tokens({seq.begin(), seq.begin() + prompt_len}), cache);
  EXPECT_CLOSE(first, full.narrow(1, 0, prompt_len), kFp32VsReference);
  nn::DecodeCache copy = cache;
  EXPECT_MT_ERROR(m.forward_cached(tokens({1, 2}), copy), "one position");
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t pos = prompt_len + s;
    const mt::Tensor step = m.forward_cached(tokens({seq[pos]}), cache);
    EXPECT_EQ(cache.length, pos + 1);
    EXPECT_CLOSE(step, full.narrow(1, pos, 1), kFp32VsReference) << "position " << pos;
  }
  EXPECT_MT_ERROR(m.forward_cached(tokens({1}), cache), "positions");  // past the last position
}

TEST(Gpt2Test, CachedDecodingEqualsTheWholeSequence) {
  mt::Generator g(15);
  nn::GPT2 m(tiny(), &g);
  expect_cached_equals_full(m, 37, 5, 11);
}

TEST(GenerationTest, GptCachedDecodingEqualsTheWholeSequence) {
  mt::Generator g(16);
  nn::GPT m({.vocab_size = 50, .context = 20, .embed_dim = 16, .num_layers = 2, .num_heads = 2}, &g);
  expect_cached_equals_full(m, 50, 1, 19);
}

TEST(GenerationTest, GreedyGenerationIsTheArgmaxOfTheWholeSequenceEachStep) {
  mt::Generator g(17);
  nn::GPT2 m(tiny(), &g);
  m.eval();
  const std::vector<int64_t> prompt = {3, 1, 4};
  const nn::GenerateOptions greedy{.max_new_tokens = 12, .temperature = 0.0};
  const std::vector<int64_t> out = nn::generate(m, prompt, greedy);
  ASSERT_EQ(out.size(), 12u);
  // Without a cache: the whole sequence again for every token.
  std::vector<int64_t> seq = prompt;
  for (int64_t t : out) {
    const mt::Tensor logits = m(tokens(seq));
    EXPECT_EQ(mt::argmax(logits.select(0, 0).select(0, logits.size(1) - 1), 0).item<int64_t>(), t);
    seq.push_back(t);
  }
  EXPECT_EQ(nn::generate(m, prompt, greedy), out);  // deterministic
  // Stop token: kept, and the end.
  const std::vector<int64_t> stopped = nn::generate(m, prompt, {.max_new_tokens = 12, .temperature = 0.0,
                                                                .stop_token = out[2]});
  EXPECT_EQ(stopped, std::vector<int64_t>(out.begin(), out.begin() + (std::find(out.begin(), out.end(), out[2]) -
                                                                     out.begin()) + 1));
  EXPECT_MT_ERROR(nn::generate(m, {}, greedy), "at least one token");
  EXPECT_MT_ERROR(nn::generate(m, {37}, greedy), "outside the vocabulary");
  EXPECT_MT_ERROR(nn::generate(m, prompt, {.max_new_tokens = 14}), "exceed the model's 16 positions");
}

TEST(GenerationTest, SamplingFollowsTemperatureTopKAndSeed) {
  const mt::Tensor logits = mt::from_vector(std::vector<float>{1.0f, 3.0f, 3.0f, 0.0f, 2.0f});
  EXPECT_EQ(nn::sample_token(logits, {.temperature = 0.0}, 0), 1);  // the first maximum
  // top_k = 1 keeps the ties at the largest value only.
  for (int64_t s = 0; s < 50; ++s) {
    const int64_t t = nn::sample_token(logits, {.temperature = 1.0, .top_k = 1, .seed = 3}, s);
    EXPECT_TRUE(t == 1 || t == 2);
  }
  // Frequencies at temperature 2 against softmax(logits / 2) over 20000 draws (4 sigma bounds).
  const int n = 20000;
  std::vector<int> count(5, 0);
  for (int s = 0; s < n; ++s) ++count[nn::sample_token(logits, {.temperature = 2.0, .seed = 9}, s)];
  double z = 0;
  for (float l : {1.0f, 3.0f, 3.0f, 0.0f, 2.0f}) z += std::exp(l / 2.0);
  const float lv[] = {1, 3, 3, 0, 2};
  for (int i = 0; i < 5; ++i) {
    const double p = std::exp(lv[i] / 2.0) / z, sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(count[i], n * p, 4 * sigma) << "token " << i;
  }
  // top_k = 3 never draws the two smallest.
  for (int s = 0; s < 200; ++s) {
    const int64_t t = nn::sample_token(logits, {.temperature = 5.0, .top_k = 3, .seed = 1}, s);
    EXPECT_NE(t, 0);
    EXPECT_NE(t, 3);
  }
  // The same seed and step, the same token; the stream depends on the seed.
  std::vector<int64_t> a, b, c;
  for (int s = 0; s < 64; ++s) {
    a.push_back(nn::sample_token(logits, {.temperature = 1.0, .seed = 5}, s));
    b.push_back(nn::sample_token(logits, {.temperature = 1.0, .seed = 5}, s));
    c.push_back(nn::sample_token(logits, {.temperature = 1.0, .seed = 6}, s));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_MT_ERROR(nn::sample_token(mt::from_vector(std::vector<float>{1.0f, NAN}), {}, 0), "logit 1 is NaN");
}

// What backward keeps of one block per token (docs/amp.md#what-backward-keeps), measured as the
// growth of the live tensor bytes after a forward with autograd over two layer counts and two
// sequence lengths (the difference of differences leaves one layer's per-token bytes: parameters,
// autocast's weight copies and the embeddings cancel). Dropout is on: its masks are drawn again in
// backward, so they are not kept. C = 64, H = 4:
//   fp32:                     ln_1 in 4C, ln_1 out 4C, qkv 12C, attention out 4C, h 4C, ln_2 out 4C,
//                             c_fc out 16C (gelu and c_proj fused)                 = 48C
//   bf16 autocast, fp32 masters: ln_1 in 4C (the fp32 residual stream), its output cast 2C, qkv 6C,
//                             out 2C, h 4C, ln_2 out cast 2C, c_fc out 8C          = 28C
//   bf16 parameters:          the same with a bf16 residual stream: ln_1 in 2C, h 2C = 24C
// plus the two layer norms' mean and rstd (16 bytes) and attention's log-sum-exp per head (4H).
TEST(Gpt2Test, BackwardKeepsTheListedBytesPerTokenPerLayer) {
  enum class Mode { kFp32, kBf16, kBf16Params };
  const int64_t C = 64, H = 4;
  auto bytes_after_forward = [&](Mode mode, int64_t layers, int64_t T) {
    mt::Generator g(1);
    nn::GPT2 m({.vocab_size = 100, .n_positions = 64, .n_embd = C, .n_layer = layers, .n_head = H}, &g);
    if (mode == Mode::kBf16Params) m.to(mt::kBFloat16);
    const mt::Tensor tok = tokens(some_tokens(2 * T, 100, 3), 2);
    const int64_t before = mt::memory::stats().current_bytes;
    mt::Tensor h;
    {
      std::optional<mt::amp::Autocast> ac;
      if (mode != Mode::kFp32) ac.emplace(mt::DeviceType::kCPU, mt::kBFloat16);
      h = m.hidden_states(tok);
    }
    EXPECT_TRUE(h.requires_grad());
    return mt::memory::stats().current_bytes - before;
  };
  for (auto [mode, per_c, name] : {std::tuple{Mode::kFp32, 48, "fp32"}, std::tuple{Mode::kBf16, 28, "bf16"},
                                   std::tuple{Mode::kBf16Params, 24, "bf16 parameters"}}) {
    SCOPED_TRACE(name);
    const int64_t per_layer_32 = bytes_after_forward(mode, 2, 32) - bytes_after_forward(mode, 1, 32);
    const int64_t per_layer_64 = bytes_after_forward(mode, 2, 64) - bytes_after_forward(mode, 1, 64);
    const int64_t tokens_added = 2 * 32;
    EXPECT_EQ((per_layer_64 - per_layer_32) % tokens_added, 0);
    EXPECT_EQ((per_layer_64 - per_layer_32) / tokens_added, per_c * C + 16 + 4 * H);
  }
}
