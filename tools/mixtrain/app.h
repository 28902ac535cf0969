// The mixtrain command line as a CLI11 app: every subcommand and its flags, what a parse chose, and
// the checks of a parsed command line that need no data (main.cpp runs it; the CLI fuzzer parses
// and checks arbitrary command lines with it).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "commands.h"

namespace mixtrain::cli {

struct Invocation {
  RunArgs train;
  CompareArgs compare;
  BenchArgs bench;
  std::string inspect_file;
  GenerateArgs generate;
  CLI::App* train_cmd = nullptr;
  CLI::App* compare_cmd = nullptr;
  CLI::App* bench_cmd = nullptr;
  CLI::App* inspect_cmd = nullptr;
  CLI::App* generate_cmd = nullptr;
};

// The app; its subcommands write into `inv`, which must outlive it.
std::unique_ptr<CLI::App> make_app(Invocation& inv);

// The checks each subcommand makes before it loads anything (data specs, precision names, flag
// combinations); throws UsageError or mt::Error.
void check_invocation(const Invocation& inv);

// The CLI promises one-line errors: newlines become spaces.
std::string one_line(std::string s);

}  // namespace mixtrain::cli
