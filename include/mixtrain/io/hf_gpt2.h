// mixtrain/io/hf_gpt2.h: GPT-2 in Hugging Face's layout: a directory holding config.json and
// model.safetensors as `transformers` writes them (GPT2LMHeadModel.save_pretrained) and reads them
// (GPT2LMHeadModel.from_pretrained).
//
// Names. nn::GPT2's state_dict keys are GPT2Model's ("wte.weight", "h.0.attn.c_attn.weight", ...);
// files name them with the "transformer." prefix of GPT2LMHeadModel, or without it (the published
// GPT-2 files were written from GPT2Model). Both are read; mixtrain writes the prefixed form.
// Layout. Hugging Face's Conv1D layers (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) store their
// weight [in, out], mixtrain's Linear [out, in]: those four weights are transposed both ways.
// Other entries. "lm_head.weight" is the tied head: accepted when equal to the token embedding
// (else refused: an untied head is another model), never written. The causal-mask buffers
// "h.N.attn.bias" and "h.N.attn.masked_bias" of older files are ignored. Any other name, a missing
// parameter or a wrong shape is an mt::Error naming the entry. F32, F16, BF16 and F64 values are
// converted to the model's parameter dtype.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/io/safetensors.h"
#include "mixtrain/nn/gpt2.h"

namespace mixtrain::io {

// config.json's text -> the architecture. Keys that would describe another model are refused with
// an mt::Error naming the key: model_type other than "gpt2", activation_function other than
// "gelu_new"/"gelu_pytorch_tanh" (GELU's tanh form), scale_attn_weights false,
// scale_attn_by_inverse_layer_idx or add_cross_attention true, tie_word_embeddings false. Absent
// keys take GPT2Config's defaults (Hugging Face's). Sizes must be integers within bounds that keep
// every tensor's element count in int64 (vocab_size, n_positions, n_embd, n_inner <= 2^24,
// n_layer, n_head <= 4096). Keys that do not change the computation (token ids, task heads'
// summary_*, generation settings, transformers_version, ...) are ignored. `source` names the text
// in messages. `notes` (may be null) receives what mixtrain will not do as the file says: a
// non-zero attn_pdrop (attention dropout is not applied).
nn::GPT2Config parse_gpt2_config(std::string_view json_text, const std::string& source,
                                 std::vector<std::string>* notes = nullptr);
// The same from a file (at most 1 MiB).
nn::GPT2Config read_gpt2_config(const std::string& path, std::vector<std::string>* notes = nullptr);
// config.json for `config` (model_type gpt2, GPT2LMHeadModel, gelu_new, tied embeddings, and each
// size), as from_pretrained reads it. With `source_json` (the config.json the model came from, as
// parse_gpt2_config accepted it), every key of the source is kept: the sizes, epsilon, dropouts and
// initializer range take `config`'s values, keys the source lacks are added, all others stay as they
// were (bos_token_id, task_specific_params, activation_function, ...).
std::string gpt2_config_json(const nn::GPT2Config& config, std::string_view source_json = {});

// Copies the weights of a Hugging Face safetensors file into `model` (see "Names" above). The model
// keeps its dtype and device. Nothing is written into the model unless every entry checks out.
void load_hf_gpt2_weights(nn::GPT2& model, const std::string& safetensors_path);

// DIR/config.json and DIR/model.safetensors -> a GPT2 on the CPU in fp32.
std::shared_ptr<nn::GPT2> load_hf_gpt2(const std::string& dir, std::vector<std::string>* notes = nullptr);

// Writes DIR/config.json and DIR/model.safetensors (metadata "format": "pt", as transformers requires,
// plus `metadata`); the parameters in their dtype, copied to the host. Each file is written
// atomically; DIR is created when missing.
// `source_json`: the config.json the model was initialised from, whose keys are kept (gpt2_config_json).
void save_hf_gpt2(const nn::GPT2& model, const std::string& dir, const Metadata& metadata = {},
                  std::string_view source_json = {});

// Whether DIR looks like a Hugging Face GPT-2 directory (holds config.json and model.safetensors).
bool is_hf_gpt2_dir(const std::string& dir);

}  // namespace mixtrain::io
