// src/train/nonfinite_guard.h (internal): the Trainer's checks for inf and NaN and the policy that decides
// what a non-finite step does (trainer.h, "Non-finite training"). Free functions of the optimizer and the
// position, so that the step loop and the checkpoint writer share them without knowing each other.
#pragma once

#include <cstdint>
#include <string>

#include "mixtrain/train/trainer.h"  // NonFinitePolicy, optim::Optimizer, nn::NonFiniteOrigin

namespace mixtrain::train::detail {

// Where a run stands, as the Trainer counts: steps completed, 0-based epoch and batch of the next step.
struct StepPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
};

// The flat index of the first parameter holding inf or NaN, or -1.
int64_t first_nonfinite_parameter(const optim::Optimizer& optimizer);

// Throws NonFiniteError when a parameter is not finite after `step` steps (`what`: the file about to
// be written).
void check_finite_before_writing(const optim::Optimizer& optimizer, const std::string& what, int64_t step);

// NonFiniteError's message for the step being taken at `at`: `cause`, the loss, the first non-finite
// parameter or else the named gradient, and the origin when `origin` (may be null) found one.
std::string divergence_message(const optim::Optimizer& optimizer, const nn::NonFiniteOrigin* origin,
                               const StepPosition& at, const std::string& cause, double loss,
                               const std::string& grad_name);

// The checks and the policy of "Non-finite training" for one step without a GradScaler, after its
// backward: true when the update goes ahead, false when `policy` skips it; throws NonFiniteError when
// the run has diverged.
bool nonfinite_gate(const optim::Optimizer& optimizer, NonFinitePolicy policy, const nn::NonFiniteOrigin* origin,
                    const StepPosition& at, double loss);

}  // namespace mixtrain::train::detail
