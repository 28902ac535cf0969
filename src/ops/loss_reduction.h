// The public loss reduction (nn::functional::Reduction) as the loss kernels take it.
#pragma once

#include "kernels/loss.h"
#include "mixtrain/nn/functional.h"

namespace mixtrain::ops {

inline kernels::Reduction kernel_reduction(nn::functional::Reduction r) {
  using P = nn::functional::Reduction;
  using K = kernels::Reduction;
  switch (r) {
    case P::kNone: return K::kNone;
    case P::kMean: return K::kMean;
    case P::kSum: return K::kSum;
  }
  MT_FAIL("unknown loss reduction ", static_cast<int>(r));
}

}  // namespace mixtrain::ops
