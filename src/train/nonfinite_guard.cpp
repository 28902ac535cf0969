// What the Trainer does about inf and NaN (see nonfinite_guard.h): the policy's names, the divergence
// checks of a step and the refusal to write non-finite weights.
#include "train/nonfinite_guard.h"

#include <cmath>
#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/ops/reduce.h"

namespace mixtrain::train {

std::string_view to_string(NonFinitePolicy p) {
  switch (p) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkip: return "skip";
    case NonFinitePolicy::kContinue: return "continue";
  }
  return "?";
}

NonFinitePolicy parse_nonfinite_policy(const std::string& text) {
  for (NonFinitePolicy p : {NonFinitePolicy::kStop, NonFinitePolicy::kSkip, NonFinitePolicy::kContinue})
    if (text == to_string(p)) return p;
  MT_FAIL("non-finite policy ", mixtrain::detail::quote_untrusted(text), " is not one of stop, skip, continue");
}

namespace detail {

int64_t first_nonfinite_parameter(const optim::Optimizer& optimizer) {
  return first_non_finite(optimizer.parameters());
}

void check_finite_before_writing(const optim::Optimizer& optimizer, const std::string& what, int64_t step) {
  const int64_t bad = first_nonfinite_parameter(optimizer);
  if (bad >= 0)
    throw NonFiniteError(mixtrain::detail::concat("Trainer: not writing ", what, ": parameter '",
                                                  optimizer.param_name(bad), "' holds inf or NaN after step ", step,
                                                  " (the last good files are kept; see on_nonfinite, --on-nonfinite)"));
}

std::string divergence_message(const optim::Optimizer& optimizer, const nn::NonFiniteOrigin* origin,
                               const StepPosition& at, const std::string& cause, double loss,
                               const std::string& grad_name) {
  std::string msg =
      mixtrain::detail::concat("Trainer: training diverged at step ", at.step + 1, " (epoch ", at.epoch + 1, ", batch ",
                               at.batch + 1, "): ", cause.empty() ? "" : cause + "; ", "the loss is ", loss);
  const int64_t bad_param = first_nonfinite_parameter(optimizer);
  if (bad_param >= 0)
    msg += mixtrain::detail::concat("; parameter '", optimizer.param_name(bad_param),
                                    "' already holds inf or NaN (the update of the step before overflowed it)");
  else if (!grad_name.empty())
    msg += mixtrain::detail::concat("; the first gradient with inf or NaN is that of '", grad_name, "'");
  if (origin && origin->found()) msg += ". Origin: " + origin->report()->to_string();
  return msg + ". The update was not applied and the last checkpoint and model files are unchanged. Lower the "
               "learning rate, train in bf16 or fp32, or skip such steps (on_nonfinite = skip, --on-nonfinite skip)";
}

bool nonfinite_gate(const optim::Optimizer& optimizer, NonFinitePolicy policy, const nn::NonFiniteOrigin* origin,
                    const StepPosition& at, double loss) {
  if (policy == NonFinitePolicy::kContinue) return true;
  // One read-only pass over the gradients (index i of the list is parameter i; a parameter
  // without a gradient is an undefined tensor, which the check skips).
  const std::vector<Tensor> params = optimizer.parameters();
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) grads.push_back(p.grad());
  const int64_t bad_grad = first_non_finite(grads);
  if (std::isfinite(loss) && bad_grad < 0) return true;
  const std::string grad_name = bad_grad >= 0 ? optimizer.param_name(static_cast<size_t>(bad_grad)) : "";
  if (policy == NonFinitePolicy::kSkip && first_nonfinite_parameter(optimizer) < 0) return false;
  throw NonFiniteError(divergence_message(optimizer, origin, at, "", loss, grad_name));
}

}  // namespace detail
}  // namespace mixtrain::train
