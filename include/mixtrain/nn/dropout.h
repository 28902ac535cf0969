// mixtrain/nn/dropout.h: Dropout.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "mixtrain/nn/module.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct DropoutOptions {
  // Seed of the module's own Generator. Unset: drawn from the process-wide generator at
  // construction, so mt::manual_seed(s) before building a model makes every mask reproducible and
  // two Dropout modules still draw different masks.
  std::optional<uint64_t> seed;
};

// In training mode zeroes each element with probability p and scales the others by 1 / (1 - p);
// in eval mode (or p = 0) returns the input itself. Any shape and floating dtype.
// The masks come from a Generator owned by the module (counter-based, so they do not depend on
// the thread count); save and restore generator().state() to resume a run bit for bit.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, DropoutOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double p() const { return p_; }
  Generator& generator() const { return *gen_; }

 private:
  double p_;
  std::shared_ptr<Generator> gen_;  // shared by shallow copies, like the parameters of other modules
};

}  // namespace mixtrain::nn
