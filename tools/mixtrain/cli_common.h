// Shared pieces of the mixtrain CLI: the training flags, the --data spec, dataset loading and the
// conversion of flags into mt::train::TrainerOptions. Argument parsing lives only in tools/mixtrain.
#pragma once

#include <mixtrain/cpu.h>
#include <mixtrain/data/dataset.h>
#include <mixtrain/memory.h>
#include "models.h"
#include <mixtrain/train/trainer.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain::cli {

// A bad combination of flags found after parsing (CLI11 checks each flag alone): one line, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --data: fashion-mnist[:DIR] | mnist:DIR | text:FILE | tokens:TRAIN[,VAL] | synthetic[:N]
struct DataSpec {
  enum class Kind { kFashionMNIST, kMNIST, kText, kTokens, kSynthetic };
  Kind kind = Kind::kFashionMNIST;
  std::string path;                // directory or file
  std::string val_path;            // tokens: the validation file ("" : none)
  int64_t synthetic_size = 10000;  // training examples of synthetic data
};
DataSpec parse_data_spec(const std::string& text);  // throws UsageError
std::string describe(const DataSpec& spec);

// The flags shared by train, compare and bench. Flags that are a Trainer option write into
// `trainer` directly (--epochs, --steps, --batch-size, --seed, --checkpoint-every, --keep-checkpoints,
// --zero, --resume, --resume-override, --find-nonfinite-origin, --numerics-report, --numerics-every,
// --overwrite, --log-every, --lr-min-factor); the others are names the run parses (precision, scaler,
// decay, ...) or describe the model and data.
struct RunArgs {
  std::string model = "mlp";
  std::string init_from;              // --init-from DIR: gpt2 config and weights in Hugging Face's layout
  std::string gpt2_config = "small";  // --gpt2-config: small, medium, large, xl or a config.json
  int64_t context = 0;  // --context: tokens per training sequence of a gpt model (0: the model's context)
  int64_t embed = 0;    // --embed (bench): the width of a resizable model (0: the model's)
  std::string tokenizer;  // --tokenizer DIR|FILE: the BPE tokenizer of a token model ("": beside its weights)
  int64_t sample_every = 0;  // --sample-every N: a generated sample every N steps (0: none)
  std::string data = "fashion-mnist";
  std::string precision = "fp32";
  std::string scaler = "auto";
  std::string master_weights = "fp32";
  bool checkpoint_activations = false;  // --checkpoint-activations: recompute block activations in backward
  bool unfused_head = false;  // --unfused-head: TrainerOptions::fused_lm_head off
  bool compact_state = false;  // --compact-state: packed fp32 masters + bf16 first moment (bf16 parameters)
  std::string weight_update = "master";  // --weight-update: master, stochastic, kahan, nearest (bf16 parameters)
  // --fp8-*: the FP8 recipe of --precision fp8 (amp/fp8.h)
  std::string fp8_format = "hybrid";
  int fp8_history = 1024;
  int fp8_margin = 0;
  std::string fp8_amax = "max";
  double lr = 1e-3;
  double weight_decay = 0.01;
  std::string lr_decay = "cosine";
  std::string augment = "none";
  int threads = 0;  // 0: every core
  std::string device = "cpu";  // --device: cpu, cuda or cuda:N
  std::string out;
  std::string on_nonfinite = "stop";
  double grad_clip = 0;  // --grad-clip NORM: TrainerOptions::clip_grad_norm (0: off)
  // --global-batch-size G: examples per optimizer step over every process; trainer.accumulation_steps
  // is derived from it (G / (batch size x processes)) by trainer_options (0: --grad-accum decides).
  int64_t global_batch_size = 0;
  bool no_tensorboard = false;  // --no-tensorboard: TrainerOptions::tensorboard off
  // The CLI's defaults where they differ from the Trainer's: cosine decay ends at 0.1 x --lr.
  // trainer.resume_from may also be "auto" (the newest checkpoint in --out, else a fresh start) until
  // train resolves it.
  train::TrainerOptions trainer = {.lr_min_factor = 0.1};
};

// Which flags a subcommand registers.
enum class Flags : unsigned {
  kModel = 1,
  kData = 2,
  kPrecision = 4,  // --precision --compact-state (train, bench)
  kTraining = 8,   // --epochs --steps --lr --weight-decay --checkpoint-every --log-every --on-nonfinite --overwrite
                   // --grad-accum --global-batch-size --grad-clip --warmup-steps --eval-every --eval-batches
  kResume = 16,    // --resume --resume-override
  kCommon = 32,  // --batch-size --seed --threads --scaler --master-weights
};
constexpr unsigned operator|(Flags a, Flags b) { return static_cast<unsigned>(a) | static_cast<unsigned>(b); }
constexpr unsigned operator|(unsigned a, Flags b) { return a | static_cast<unsigned>(b); }
void add_run_flags(CLI::App& app, RunArgs& args, unsigned flags);

// Sets the OpenMP thread count (--threads, 0: every core) and returns it.
int apply_threads(int threads);

// --device: "cpu", "cuda" (cuda:0), "cuda:N" or "checked" (mt::parse_device); throws UsageError for
// another text, or for a device this build or machine does not have (with the reason).
Device parse_device(const std::string& text);
// The --device help: every device type this library knows, from its descriptor.
std::string device_help();

struct LoadedData {
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> eval;
};
// `info` of a GPT with `config`, trained on sequences of `tokens` (<= config.context): the sample
// shape and FLOPs of that length, the parameters of the model.
cli::ModelInfo with_sequence_length(cli::ModelInfo info, nn::GPTConfig config, int64_t tokens);

// `n` pseudo-random bytes (Philox keyed by `seed`): random tokens for the gpt model.
std::string random_text(int64_t n, uint64_t seed);

// "1.23 MiB"
std::string human_bytes(double bytes);

// Tables from rows of cells, the first row the header: aligned text (first column left, the others
// right) and markdown.
std::string text_table(const std::vector<std::vector<std::string>>& cells);
std::string markdown_table(const std::vector<std::vector<std::string>>& cells);

// The memory breakdown at the training peak (TrainSummary::peak_breakdown) of named runs, one column
// each: bytes and share of the peak by category, the allocator's cache, and the op, module and
// phase running then.
std::vector<std::vector<std::string>> breakdown_cells(const std::vector<std::pair<std::string, memory::Breakdown>>& runs);

// A CLI11 check that refuses an empty value (--out '' would otherwise mean the default directory).
CLI::Validator non_empty();

// Whether `dir` holds anything but the lock file of io::DirectoryLock.
bool holds_files(const std::string& dir);

// The learning-rate schedule as the run logs and reports name it: "cosine decay to 0.1x", "constant",
// "100 warmup steps, then cosine decay to 0.1x".
std::string describe_lr_decay(const RunArgs& a);

}  // namespace mixtrain::cli
