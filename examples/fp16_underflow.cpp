// Shows why fp16 training needs a loss scaler and bf16 does not (see fp16_underflow.h).
// Usage: mixtrain_example_fp16_underflow [steps] [--numerics-report DIR]
//   --numerics-report DIR: also writes DIR/report.md, the numerics of the fp32 run (every 50th step):
//   which activations and gradients fp16 could hold as they are.
#include "fp16_underflow.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  using namespace underflow_demo;
  int steps = 300;
  std::string report_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--numerics-report" && i + 1 < argc)
      report_dir = argv[++i];
    else
      steps = std::atoi(argv[i]);
  }
  std::printf("loss multiplied by 2^-20; SGD, %d full-batch steps; MSE shown unmultiplied\n\n", steps);
  std::printf("%-28s %12s %12s %14s %8s %10s\n", "run", "initial MSE", "final MSE", "zero grads", "skipped",
              "scale");
  for (Mode m : {Mode::kFp32, Mode::kBf16, Mode::kFp16NoScaler, Mode::kFp16Scaler}) {
    Result r = run(m, steps);
    std::printf("%-28s %12.5f %12.5f %13.1f%% %8lld %10g\n", mode_name(m), r.initial_loss, r.final_loss,
                100.0 * r.zero_grad_fraction, static_cast<long long>(r.skipped_steps), r.final_scale);
  }
  if (!report_dir.empty()) {
    mixtrain::nn::NumericsMonitor monitor({.every = 50});
    run(Mode::kFp32, steps, 0, &monitor);
    monitor.write_report(report_dir, "Numerics of the fp16 underflow demo (fp32 run, loss x 2^-20)");
    std::printf("\nwrote %s/report.md\n", report_dir.c_str());
  }
  return 0;
}
