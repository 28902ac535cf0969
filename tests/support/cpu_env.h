// The CPU settings tests vary: the thread count and the ISA cap (mixtrain/parallel.h, mixtrain/cpu.h).
#pragma once

#include <vector>

#include "mixtrain/cpu.h"
#include "mixtrain/parallel.h"

namespace mixtrain::testing {

// Runs fn on `threads` threads, restoring the previous count (also when fn throws).
template <typename Fn>
auto with_threads(int threads, Fn&& fn) {
  struct Restore {
    int previous = get_num_threads();
    ~Restore() { set_num_threads(previous); }
  } restore;
  set_num_threads(threads);
  return fn();
}

// The vector levels mixtrain's own kernels tell apart (plain loops, AVX2, AVX-512) that this CPU
// reaches under the current cap (MIXTRAIN_MAX_ISA), lowest first. Tests that compare the vector
// variants with the generic one run each of them under a MaxIsaGuard; with one level only they
// skip, saying so, since there is nothing to compare.
inline std::vector<cpu::Isa> kernel_isa_levels() {
  std::vector<cpu::Isa> levels;
  for (cpu::Isa level : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (level <= cpu::isa()) levels.push_back(level);
  return levels;
}

}  // namespace mixtrain::testing
