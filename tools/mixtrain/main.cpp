// mixtrain: the command-line tool. Its subcommands are the table of commands.h.
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
#include "mixtrain/dist/process_group.h"
#include "wait_policy.h"

int main(int argc, char** argv) {
  // Sleeping, not spinning, OpenMP threads unless the environment says otherwise (wait_policy.h):
  // may run this program again with OMP_WAIT_POLICY=passive before anything else happens.
  mixtrain::cli::apply_default_wait_policy(argv);
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

  // Started by mpirun with several processes: they train one model together (docs/distributed.md).
  // Rank 0 alone prints; a rank that fails ends the whole job at once, with its message, instead of
  // leaving the others waiting in a collective.
  mixtrain::dist::ProcessGroup* group = nullptr;
  try {
    if (mixtrain::dist::launched_by_mpi()) {
      group = &mixtrain::dist::world();
      if (group->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  auto fail = [&](int code, const std::string& message) {
    std::fflush(stdout);
    if (group != nullptr && group->size() > 1)
      group->abort(code, "mixtrain: error on rank " + std::to_string(group->rank()) + ": " + message);
    std::fprintf(stderr, "mixtrain: error: %s\n", message.c_str());
    return code;
  };

  try {
    // An invalid MIXTRAIN_MAX_ISA is reported here, before any work.
    cli::Command* command = inv.chosen();
    if (command == nullptr) return 1;
    if (command->computes()) mixtrain::cpu::isa();
    return command->run();
  } catch (const mixtrain::train::NonFiniteError& e) {
    return fail(3, one_line(e.what()));
  } catch (const cli::UsageError& e) {
    return fail(2, one_line(e.what()));
  } catch (const std::exception& e) {  // mt::Error and the rest
    return fail(1, one_line(e.what()));
  }
}
