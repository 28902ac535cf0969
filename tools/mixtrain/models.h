// The named models of the CLI and its benchmarks (not part of the library), with architectures fixed so
// that results compare with the same models in PyTorch (bench/ scripts build them identically).
//
//   mlp       Flatten, Linear(784,512), ReLU, Linear(512,256), ReLU, Linear(256,10)
//   mlp-wide  Flatten, Linear(784,1024), ReLU, Linear(1024,1024), ReLU, Linear(1024,10)
//   cnn       Conv2d(1,32,3,pad 1), ReLU, MaxPool2d(2), Conv2d(32,64,3,pad 1), ReLU, MaxPool2d(2),
//             Flatten, Linear(3136,128), ReLU, Linear(128,10)
//   gpt       GPT(vocab 256, context 128, C 256, 4 layers, 4 heads, MLP 4C, GELU), see nn/gpt.h
//   gpt-small GPT(vocab 256, context 1024, C 768, 12 layers, 12 heads, MLP 4C, GELU): GPT-2 small's
//             shape with a byte vocabulary, the GPU benchmark of docs/cuda.md (85M parameters)
//   gpt2      nn::GPT2: GPT-2 as Hugging Face has it (BPE vocabulary 50257, learned positions, tied
//             head); GPT-2 small (124M) unless --gpt2-config or --init-from gives another config
//
// mlp, mlp-wide and cnn are Sequentials (keys "0.weight", ...); gpt and gpt-small are nn::GPT.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/dtype.h"
#include "mixtrain/nn/gpt.h"
#include "mixtrain/nn/gpt2.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/shape.h"

namespace mixtrain::cli {

enum class ModelTask {
  kClassification,  // input [B, *sample_shape] float32, target int64 [B] in [0, num_outputs)
  kLanguageModel,   // input int64 [B, T], target int64 [B, T] (next tokens), logits [B, T, V]
};

struct ModelInfo {
  std::string name;
  std::string description;
  ModelTask task;
  Shape sample_shape;      // one sample, without the batch dim: {1, 28, 28} for images, {128} for gpt
  DType input_dtype;       // float32 (images) or int64 (tokens)
  int64_t num_outputs;     // classes, or vocabulary size
  int64_t num_parameters;  // as nn::Module::num_parameters() of the built model
  // Training FLOPs per sample (forward + backward) of the GEMMs and convolutions:
  // 6 * MACs (forward 2 * MACs, backward 4 * MACs: input and weight gradients), the convention of
  // MFU reports. Not counted: elementwise ops, norms, softmax, pooling, and the input gradient the
  // first layer does not need. For gpt a sample is one sequence of `context` tokens, and the
  // attention products (q k^T and att v) are counted in full, 2 * T * C MACs per token and layer,
  // because the kernel computes the whole T x T score matrix before masking.
  int64_t flops_per_sample;
};

// The architectures (model_table.h names them and says what each reads, saves and generates).
// Builders draw their PyTorch-default initialisation from Generator(seed): the same seed gives
// bit-identical parameters on every machine and thread count.
std::shared_ptr<nn::Module> make_mlp(int64_t hidden1, int64_t hidden2, uint64_t seed);
ModelInfo mlp_info(const std::string& name, int64_t hidden1, int64_t hidden2);
std::shared_ptr<nn::Module> make_cnn(uint64_t seed);
ModelInfo cnn_info(const std::string& name);
// A GPT of any configuration (named "gpt": the table renames its entries).
std::shared_ptr<nn::Module> make_gpt(const nn::GPTConfig& config, uint64_t seed = 0);
ModelInfo gpt_model_info(const nn::GPTConfig& config);
// A GPT-2 of `config` with Hugging Face's initialisation, on sequences of n_positions tokens.
std::shared_ptr<nn::Module> make_gpt2(const nn::GPT2Config& config, uint64_t seed = 0);
ModelInfo gpt2_model_info(const nn::GPT2Config& config, const std::string& name);

// By the table's names (model_table.h), with every flag at its default: the model's default
// configuration, initialised from Generator(seed). Throw mt::Error listing the valid names.
const std::vector<std::string>& model_names();
ModelInfo model_info(const std::string& name);
inline int64_t model_flops_per_sample(const std::string& name) { return model_info(name).flops_per_sample; }
std::shared_ptr<nn::Module> make_model(const std::string& name, uint64_t seed = 0);
// The GPT configuration of a byte-level language model of the table ("gpt" or "gpt-small").
nn::GPTConfig gpt_config(const std::string& name);

}  // namespace mixtrain::cli
