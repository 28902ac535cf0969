// The mixtrain command line as a CLI11 app (see app.h).
#include "app.h"

namespace mixtrain::cli {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::unique_ptr<CLI::App> make_app(Invocation& inv) {
  auto app = std::make_unique<CLI::App>(
      "mixtrain: mixed-precision (fp32 / bf16 / fp16 / fp8) training on the CPU, an NVIDIA GPU (--device cuda) or "
      "the checked debugging device (--device checked)",
      "mixtrain");
  app->require_subcommand(1);
  // A flag given twice keeps its last value, so wrappers can override their defaults
  // (scripts/demo.sh --epochs 1). Subcommands inherit this; list options opt out.
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->failure_message([](const CLI::App*, const CLI::Error& e) {
    return "mixtrain: error: " + one_line(e.what()) + " (see --help)\n";
  });
  inv.train_cmd = add_train_command(*app, inv.train);
  inv.compare_cmd = add_compare_command(*app, inv.compare);
  inv.bench_cmd = add_bench_command(*app, inv.bench);
  inv.inspect_cmd = add_inspect_command(*app, inv.inspect_file);
  inv.generate_cmd = add_generate_command(*app, inv.generate);
  return app;
}

void check_invocation(const Invocation& inv) {
  auto check_run = [](const RunArgs& a, const std::vector<std::string>& precisions) {
    const DataSpec spec = parse_data_spec(a.data);
    for (const std::string& p : precisions) check_combination(a, spec, train::parse_precision(p));
    train::parse_nonfinite_policy(a.on_nonfinite);
  };
  if (inv.train_cmd != nullptr && inv.train_cmd->parsed()) {
    check_run(inv.train, {inv.train.precision});
    train::parse_param_dtype(inv.train.master_weights);
  }
  if (inv.compare_cmd != nullptr && inv.compare_cmd->parsed()) check_run(inv.compare.run, inv.compare.precisions);
  if (inv.bench_cmd != nullptr && inv.bench_cmd->parsed()) check_run(inv.bench.run, {inv.bench.run.precision});
}

}  // namespace mixtrain::cli
