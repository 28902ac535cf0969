// The subcommands of the mixtrain CLI, as a table: each is one file (cmd_<name>.cpp) that defines a
// Command and its make_<name>_command(), and one entry of MIXTRAIN_COMMANDS. A command registers its
// flags on a CLI11 subcommand and runs after a successful parse; errors are thrown (UsageError,
// mt::Error) and printed by main as one line.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"

namespace mixtrain::cli {

class Command {
 public:
  virtual ~Command() = default;
  // Adds the subcommand and its flags to `app`; the flags write into the command's own arguments.
  virtual CLI::App* add(CLI::App& app) = 0;
  // The checks of a parsed command line that need no file (data specs, precision names, flag
  // combinations); throws UsageError or mt::Error. The CLI fuzzer runs them on arbitrary input.
  virtual void check() const {}
  // Whether the command runs kernels (then an invalid MIXTRAIN_MAX_ISA is refused before it starts).
  virtual bool computes() const { return true; }
  virtual int run() = 0;
};

// Every command, in the order --help lists them.
#define MIXTRAIN_COMMANDS(X) X(train) X(compare) X(bench) X(generate) X(tokenize) X(inspect)

#define MIXTRAIN_DECLARE_COMMAND(name) std::unique_ptr<Command> make_##name##_command();
MIXTRAIN_COMMANDS(MIXTRAIN_DECLARE_COMMAND)
#undef MIXTRAIN_DECLARE_COMMAND

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
