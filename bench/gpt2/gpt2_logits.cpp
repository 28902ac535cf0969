// Logits of a Hugging Face GPT-2 directory as mixtrain computes them, for bench/gpt2/interop.py:
//
//   mixtrain_gpt2_logits DIR TOKENS OUT.safetensors [fp32|bf16|fp16]
//
// DIR holds config.json and model.safetensors (io::load_hf_gpt2); TOKENS is comma-separated token
// ids (one sequence). Writes "logits" float32 [1, T, V] (forward in eval mode, under autocast for
// bf16/fp16) and "cached" float32 [1, T, V]: the same positions through incremental decoding
// (the prompt's first token, then one token at a time), as `mixtrain generate` runs.
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/factory.h"
#include "mixtrain/io/hf_gpt2.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/ops/shape_ops.h"

namespace mt = mixtrain;

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: %s DIR TOKENS OUT.safetensors [fp32|bf16|fp16]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<int64_t> tokens;
    std::stringstream in(argv[2]);
    for (std::string t; std::getline(in, t, ',');) tokens.push_back(std::stoll(t));
    const std::string precision = argc == 5 ? argv[4] : "fp32";
    auto model = mt::io::load_hf_gpt2(argv[1]);
    model->eval();
    std::optional<mt::amp::Autocast> autocast;
    if (precision != "fp32") autocast.emplace(mt::DeviceType::kCPU, precision == "bf16" ? mt::kBFloat16 : mt::kFloat16);
    const int64_t T = static_cast<int64_t>(tokens.size());
    mt::Tensor logits;
    {
      mt::NoGradGuard no_grad;
      logits = (*model)(mt::from_vector(tokens, {1, T})).to(mt::kFloat32);
    }
    std::vector<mt::Tensor> steps;
    mt::nn::DecodeCache cache;
    for (int64_t t = 0; t < T; ++t)
      steps.push_back(model->forward_cached(mt::from_vector(std::vector<int64_t>{tokens[t]}, {1, 1}), cache)
                          .to(mt::kFloat32));
    mt::io::save_safetensors(argv[3], mt::io::NamedTensors{{"logits", logits}, {"cached", mt::cat(steps, 1)}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain_gpt2_logits: %s\n", e.what());
    return 1;
  }
}
