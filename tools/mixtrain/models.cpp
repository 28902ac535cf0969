// The named models of the CLI (models.h): exact architectures, parameter counts and FLOP formulas.
//
// Layers are appended one statement at a time so that the initial values are drawn in layer order
// (the arguments of a single call are evaluated in an unspecified order).
#include "models.h"

#include "mixtrain/nn/modules.h"

namespace mixtrain::cli {

using namespace mixtrain::nn;  // the layers the models are built from

namespace {

using mixtrain::detail::concat;

constexpr int64_t linear_params(int64_t in, int64_t out) { return in * out + out; }
constexpr int64_t conv_params(int64_t in, int64_t out, int64_t k) { return out * in * k * k + out; }
constexpr int64_t layer_norm_params(int64_t c) { return 2 * c; }
// Training FLOPs for `macs` forward multiply-accumulates: forward 2, backward 4 (see ModelInfo).
constexpr int64_t train_flops(int64_t macs) { return 6 * macs; }

}  // namespace

std::shared_ptr<Module> make_mlp(int64_t h1, int64_t h2, uint64_t seed) {
  Generator generator(seed);
  Generator* g = &generator;
  auto m = std::make_shared<Sequential>();
  m->push_back(Flatten());
  m->push_back(Linear(784, h1, {.generator = g}));
  m->push_back(ReLU());
  m->push_back(Linear(h1, h2, {.generator = g}));
  m->push_back(ReLU());
  m->push_back(Linear(h2, 10, {.generator = g}));
  return m;
}

ModelInfo mlp_info(const std::string& name, int64_t h1, int64_t h2) {
  return {.name = name,
          .description =
              concat("Flatten, Linear(784,", h1, "), ReLU, Linear(", h1, ",", h2, "), ReLU, Linear(", h2, ",10)"),
          .task = ModelTask::kClassification,
          .sample_shape = {1, 28, 28},
          .input_dtype = kFloat32,
          .num_outputs = 10,
          .num_parameters = linear_params(784, h1) + linear_params(h1, h2) + linear_params(h2, 10),
          .flops_per_sample = train_flops(784 * h1 + h1 * h2 + h2 * 10)};
}

std::shared_ptr<Module> make_cnn(uint64_t seed) {
  Generator generator(seed);
  Generator* g = &generator;
  auto m = std::make_shared<Sequential>();
  m->push_back(Conv2d(1, 32, 3, {.padding = 1, .generator = g}));  // [N, 32, 28, 28]
  m->push_back(ReLU());
  m->push_back(MaxPool2d(2));                                       // [N, 32, 14, 14]
  m->push_back(Conv2d(32, 64, 3, {.padding = 1, .generator = g}));  // [N, 64, 14, 14]
  m->push_back(ReLU());
  m->push_back(MaxPool2d(2));  // [N, 64, 7, 7]
  m->push_back(Flatten());     // [N, 3136]
  m->push_back(Linear(3136, 128, {.generator = g}));
  m->push_back(ReLU());
  m->push_back(Linear(128, 10, {.generator = g}));
  return m;
}

ModelInfo cnn_info(const std::string& name) {
  // Conv MACs: output positions * out channels * (in channels * kh * kw).
  const int64_t macs = 28 * 28 * 32 * (1 * 9) + 14 * 14 * 64 * (32 * 9) + 3136 * 128 + 128 * 10;
  return {.name = name,
          .description =
              "Conv2d(1,32,3,pad 1), ReLU, MaxPool2d(2), Conv2d(32,64,3,pad 1), ReLU, MaxPool2d(2), Flatten, "
              "Linear(3136,128), ReLU, Linear(128,10)",
          .task = ModelTask::kClassification,
          .sample_shape = {1, 28, 28},
          .input_dtype = kFloat32,
          .num_outputs = 10,
          .num_parameters =
              conv_params(1, 32, 3) + conv_params(32, 64, 3) + linear_params(3136, 128) + linear_params(128, 10),
          .flops_per_sample = train_flops(macs)};
}

ModelInfo gpt_model_info(const GPTConfig& c) {
  const int64_t C = c.embed_dim, V = c.vocab_size, T = c.context, L = c.num_layers, R = c.mlp_ratio;
  const int64_t block_params = layer_norm_params(C) + linear_params(C, 3 * C) + linear_params(C, C) +
                               layer_norm_params(C) + linear_params(C, R * C) + linear_params(R * C, C);
  // Per sequence and layer: qkv, proj and MLP C*3C + C*C + 2*C*RC per token; causal attention
  // computes scores and att@v only for keys at or before the query: query t (1-based) sees t keys,
  // so the sequence costs 2 * C * T(T+1)/2 = C*T*(T+1) MACs there (mixtrain's fused kernel skips
  // the masked tiles; counting the full T x T square would count these products 2T/(T+1) times over).
  const int64_t macs_per_sequence = L * (T * (C * 3 * C + C * C + 2 * C * R * C) + C * T * (T + 1)) + T * C * V;
  return {.name = "gpt",
          .description = concat("GPT: byte vocabulary ", V, ", context ", T, ", C ", C, ", ", L, " pre-norm blocks, ",
                                c.num_heads, " heads, MLP ", R, "C GELU, final LayerNorm, Linear head"),
          .task = ModelTask::kLanguageModel,
          .sample_shape = {T},
          .input_dtype = kInt64,
          .num_outputs = V,
          .num_parameters = V * C + T * C + L * block_params + layer_norm_params(C) + linear_params(C, V),
          .flops_per_sample = train_flops(macs_per_sequence)};
}

ModelInfo gpt2_model_info(const GPT2Config& c, const std::string& name) {
  const int64_t C = c.n_embd, V = c.vocab_size, T = c.n_positions, L = c.n_layer, W = c.mlp_width();
  // As gpt_model_info: the projections and MLP per token, causal attention C*T*(T+1) per sequence
  // and layer, and the tied head T * C * V.
  const int64_t macs_per_sequence = L * (T * (C * 3 * C + C * C + 2 * C * W) + C * T * (T + 1)) + T * C * V;
  return {.name = name,
          .description = concat("GPT-2: vocabulary ", V, ", ", T, " positions, C ", C, ", ", L, " pre-norm blocks, ",
                                c.n_head, " heads, MLP ", W, " GELU (tanh), final LayerNorm, head tied to the token "
                                "embedding"),
          .task = ModelTask::kLanguageModel,
          .sample_shape = {T},
          .input_dtype = kInt64,
          .num_outputs = V,
          .num_parameters = nn::num_parameters(c),
          .flops_per_sample = train_flops(macs_per_sequence)};
}

std::shared_ptr<Module> make_gpt(const GPTConfig& config, uint64_t seed) {
  Generator g(seed);
  return std::make_shared<GPT>(config, &g);
}

std::shared_ptr<Module> make_gpt2(const GPT2Config& config, uint64_t seed) {
  Generator g(seed);
  return std::make_shared<GPT2>(config, &g);
}

}  // namespace mixtrain::cli
