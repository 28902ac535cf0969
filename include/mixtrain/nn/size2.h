// mixtrain/nn/size2.h: a (height, width) pair for 2-D layer options that also accepts one number,
// so `{.padding = 1}` and `{.padding = {1, 2}}` both work (PyTorch's int-or-tuple arguments).
#pragma once

#include <cstdint>

namespace mixtrain::nn {

struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  constexpr Size2() = default;
  constexpr Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit by design
  constexpr Size2(int64_t height, int64_t width) : h(height), w(width) {}
  constexpr bool operator==(const Size2&) const = default;
};

}  // namespace mixtrain::nn
