// Shows why fp16 training needs a loss scaler and bf16 does not (see fp16_underflow.h).
// Usage: mixtrain_example_fp16_underflow [steps]
#include "fp16_underflow.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  using namespace underflow_demo;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  std::printf("loss multiplied by 2^-20; SGD, %d full-batch steps; MSE shown unmultiplied\n\n", steps);
  std::printf("%-28s %12s %12s %14s %8s %10s\n", "run", "initial MSE", "final MSE", "zero grads", "skipped",
              "scale");
  for (Mode m : {Mode::kFp32, Mode::kBf16, Mode::kFp16NoScaler, Mode::kFp16Scaler}) {
    Result r = run(m, steps);
    std::printf("%-28s %12.5f %12.5f %13.1f%% %8lld %10g\n", mode_name(m), r.initial_loss, r.final_loss,
                100.0 * r.zero_grad_fraction, static_cast<long long>(r.skipped_steps), r.final_scale);
  }
  return 0;
}
