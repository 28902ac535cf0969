// The process's default generator and the scalar Philox-4x32-10 block function (mixtrain/random.h).
// In core, the layer that declares them: the kernels draw from philox, the factories from the
// default generator.
#include "mixtrain/random.h"

#include "core/philox.h"

namespace mixtrain {

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace random {

std::array<uint32_t, 4> philox(uint64_t block, uint64_t key, uint32_t stream) {
  std::array<uint32_t, 4> out;
  detail::philox_block(block, key, stream, out.data());
  return out;
}

}  // namespace random

}  // namespace mixtrain
