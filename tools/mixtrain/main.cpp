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

#include "app.h"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then makes write() fail with EFBIG, which the writers report,
  // instead of killing the process with SIGXFSZ halfway through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  namespace cli = mixtrain::cli;
  using cli::one_line;
  cli::Invocation inv;
  const std::unique_ptr<CLI::App> app = cli::make_app(inv);

  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }

  try {
    // An invalid MIXTRAIN_MAX_ISA is reported here, before any work.
    if (!inv.inspect_cmd->parsed()) mixtrain::cpu::isa();
    if (inv.train_cmd->parsed()) return cli::run_train(inv.train);
    if (inv.compare_cmd->parsed()) return cli::run_compare(inv.compare);
    if (inv.bench_cmd->parsed()) return cli::run_bench(inv.bench);
    if (inv.inspect_cmd->parsed()) return cli::run_inspect(inv.inspect_file);
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
