// The mixtrain command line as a CLI11 app: every subcommand of the table (commands.h) and its
// flags, which one a parse chose, and the checks of a parsed command line that need no data
// (main.cpp runs it; the CLI fuzzer parses and checks arbitrary command lines with it).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"

namespace mixtrain::cli {

struct Invocation {
  std::vector<std::unique_ptr<Command>> commands;
  std::vector<CLI::App*> apps;  // apps[i] is commands[i]'s subcommand
  // The command the parse chose (null before a successful parse).
  Command* chosen() const;
};

// The app; its subcommands write into `inv`'s commands, which must outlive it.
std::unique_ptr<CLI::App> make_app(Invocation& inv);

// The checks the chosen subcommand makes before it loads anything; throws UsageError or mt::Error.
void check_invocation(const Invocation& inv);

// The CLI promises one-line errors: newlines become spaces.
std::string one_line(std::string s);

}  // namespace mixtrain::cli
