// mixtrain/nn/nonfinite_origin.h: where did the first inf or NaN come from?
//
// When a loss turns NaN, every tensor downstream is NaN too; the question is which op made the first
// one. While a NonFiniteOrigin lives, every recorded op is checked right after its forward and every
// backward node right after it returned its gradients (autograd.h's op observers): the first op whose
// outputs hold inf or NaN although all its floating-point inputs were finite is the origin, reported
// with the module path it ran in, its forward or backward side, the dtypes and shapes of its inputs
// and outputs, the first bad value, and the step. A non-finite leaf input (a data batch, a parameter
// or buffer) is reported as the origin too, naming the op that read it.
//
//   mt::nn::NonFiniteOrigin origin(model);    // names the module scopes, starts observing
//   origin.begin_step(step);                   // clears the last finding
//   ... forward, backward ...
//   if (origin.found()) std::cerr << origin.report()->to_string() << "\n";
//
// Cost: one read-only pass over each op's outputs (the GradScaler's inf check), forward and backward;
// the inputs are read only when an output is bad. Ops that record no node (no input requires grad,
// or grad mode off) are not seen; an in-place op is judged on its already-written input, so it can be
// missed as the origin, and the next op reading its result is then reported as reading a non-finite
// value produced by an op (not as the origin). The Trainer uses it with
// TrainerOptions::find_nonfinite_origin (CLI --find-nonfinite-origin).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

struct NonFiniteOriginReport {
  int64_t step = 0;         // as passed to begin_step
  std::string op;           // the node name: "linear", "log", ...
  bool backward = false;    // the op's backward produced it
  bool leaf_input = false;  // the op read a non-finite leaf (data, parameter, buffer): input `index` of it
  std::string scope;        // module path ("blocks.0.attn"; "" = outside any module of the model)
  std::vector<std::string> inputs, outputs;  // describe() of each (backward: gradients in and out)
  int64_t index = 0;        // which output (or, for leaf_input, which input) holds the value
  int64_t element = 0;      // flat index of the first non-finite element in it
  double value = 0;         // that element (inf, -inf or NaN)
  // One paragraph: "step 12: the forward of 'linear' in module 'blocks.0.mlp.0' produced inf ...".
  std::string to_string() const;
};

class NonFiniteOrigin {
 public:
  // Sets the scope names of `model`'s modules (Module::set_scope_names) and starts observing ops on
  // every thread. At most one should live at a time.
  explicit NonFiniteOrigin(Module& model);
  ~NonFiniteOrigin();
  NonFiniteOrigin(const NonFiniteOrigin&) = delete;
  NonFiniteOrigin& operator=(const NonFiniteOrigin&) = delete;

  // Forgets the last finding; later findings carry `step`.
  void begin_step(int64_t step);
  bool found() const;
  std::optional<NonFiniteOriginReport> report() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  uint64_t observer_id_ = 0;
};

}  // namespace mixtrain::nn
