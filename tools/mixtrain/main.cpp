// mixtrain: the command-line tool. Subcommands train, compare, bench and inspect (commands.h).
//
// Errors are one line on stderr and a non-zero exit: CLI11's message for a bad flag (its exit
// code), "mixtrain: error: ..." with 2 for a bad combination of flags, 3 when training diverged
// (a non-finite loss, gradient or weight; see --on-nonfinite) and 1 for anything else that fails at
// run time (missing dataset, corrupt file, full disk, ...).
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

namespace {

// Errors may span lines (a list of problems): the CLI promises one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then makes write() fail with EFBIG, which the writers report,
  // instead of killing the process with SIGXFSZ halfway through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  namespace cli = mixtrain::cli;
  CLI::App app{"mixtrain: mixed-precision (fp32 / bf16 / fp16) training on the CPU", "mixtrain"};
  app.require_subcommand(1);
  // A flag given twice keeps its last value, so wrappers can override their defaults
  // (scripts/demo.sh --epochs 1). Subcommands inherit this; list options opt out.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "mixtrain: error: " + one_line(e.what()) + " (see --help)\n";
  });

  cli::RunArgs train_args;
  cli::CompareArgs compare_args;
  cli::BenchArgs bench_args;
  std::string inspect_file;
  CLI::App* train = cli::add_train_command(app, train_args);
  CLI::App* compare = cli::add_compare_command(app, compare_args);
  CLI::App* bench = cli::add_bench_command(app, bench_args);
  CLI::App* inspect = cli::add_inspect_command(app, inspect_file);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    // An invalid MIXTRAIN_MAX_ISA is reported here, before any work.
    if (!inspect->parsed()) mixtrain::cpu::isa();
    if (train->parsed()) return cli::run_train(train_args);
    if (compare->parsed()) return cli::run_compare(compare_args);
    if (bench->parsed()) return cli::run_bench(bench_args);
    if (inspect->parsed()) return cli::run_inspect(inspect_file);
  } catch (const mixtrain::train::NonFiniteError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(e.what()).c_str());
    return 3;
  } catch (const cli::UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {  // mt::Error and the rest
    std::fflush(stdout);
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 1;
}
