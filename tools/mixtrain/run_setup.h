// What one run (train, each precision of compare, bench) needs from its flags and its model's
// descriptor (model_table.h): the checks made before any data is read, the data, the model and the
// Trainer's options.
#pragma once

#include <memory>
#include <string>

#include "cli_common.h"
#include "model_table.h"

namespace mixtrain::cli {

// find_model(--model).describe(args): the model with --context, --embed and the GPT-2 flags applied.
ModelInfo run_model_info(const RunArgs& args);
// find_model(--model).build(args): on the CPU, from --seed or --init-from.
std::shared_ptr<nn::Module> make_run_model(const RunArgs& args);

// Checks the flag combinations (model vs data, master weights vs precision) before any data is
// loaded; throws UsageError.
void check_combination(const RunArgs& args, const DataSpec& spec, train::Precision precision);

// check_combination for each of `precisions` after the data spec and --on-nonfinite parse: what
// train, compare and bench check before anything is read.
void check_run_flags(const RunArgs& args, const std::vector<std::string>& precisions);

// The text codec of a language-model run: --tokenizer, else what --init-from's directory holds; null
// for image models and for a token model without a tokenizer. mt::Error for unreadable files.
std::unique_ptr<TextCodec> run_codec(const RunArgs& args);

// Loads (or generates) the training and evaluation sets for the model. `codec` tokenizes text:FILE
// for a model that reads tokens (null: refused with what to give). mt::Error for missing or corrupt
// files, with the install hint for Fashion-MNIST.
LoadedData load_data(const DataSpec& spec, const RunArgs& args, const ModelInfo& info, const TextCodec* codec);

// The processes training together: mpirun's world size, else 1.
int processes();
// The micro-batches per optimizer step: --grad-accum, or --global-batch-size / (--batch-size x
// processes), refused (UsageError) when that does not divide or when both are given.
int64_t accumulation_steps(const RunArgs& a, int64_t process_count);
// The examples of one optimizer step as the banners say it: "16", "16 x 4 micro-batches = 64",
// "16 per process x 2 processes x 4 micro-batches = 128".
std::string describe_batch(const RunArgs& a, int64_t process_count);
// TrainerOptions for one precision and parameter dtype (callbacks and out_dir left to the caller).
train::TrainerOptions trainer_options(const RunArgs& args, train::Precision precision, DType param_dtype);

}  // namespace mixtrain::cli
