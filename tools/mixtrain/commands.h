// The subcommands of the mixtrain CLI. Each registers its flags on a CLI11 subcommand and runs after
// a successful parse; errors are thrown (UsageError, mt::Error) and printed by main as one line.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "mixtrain/nn/generation.h"

namespace mixtrain::cli {

struct CompareArgs {
  RunArgs run;
  std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
};

struct BenchArgs {
  RunArgs run;
  int64_t warmup = 5;
  int64_t embed = 0;  // gpt only: embedding width C; 0 = the model's default (256)
  bool json = false;
};

struct GenerateArgs {
  RunArgs run;  // model, gpt2_config, precision, device, threads
  std::string weights;
  std::string prompt;
  std::vector<int64_t> tokens;
  nn::GenerateOptions options;
  bool json = false;
};

CLI::App* add_train_command(CLI::App& app, RunArgs& args);
CLI::App* add_compare_command(CLI::App& app, CompareArgs& args);
CLI::App* add_bench_command(CLI::App& app, BenchArgs& args);
CLI::App* add_inspect_command(CLI::App& app, std::string& file);
CLI::App* add_generate_command(CLI::App& app, GenerateArgs& args);

int run_train(const RunArgs& args);
int run_compare(const CompareArgs& args);
int run_bench(const BenchArgs& args);
int run_inspect(const std::string& file);
int run_generate(const GenerateArgs& args);

// What a run reports as it goes, for compare's plots: every step's loss and, per finished epoch,
// the evaluation's accuracy (NaN when the epoch was not evaluated or the task has none).
struct RunCurves {
  std::vector<double> losses;
  std::vector<double> epoch_accuracy;
};

// One training run (train, and each precision of compare): builds the model from --seed, trains
// it with AdamW through mt::train::Trainer, reports progress. `curves` (optional) receives the
// step losses and the epochs' accuracies.
train::TrainSummary run_training(const RunArgs& args, train::Precision precision, DType param_dtype,
                                 const LoadedData& data, const std::string& out_dir, const std::string& label,
                                 RunCurves* curves = nullptr);

}  // namespace mixtrain::cli
