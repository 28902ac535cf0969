// A token dataset of pseudo-random tokens (a linear congruential sequence from `seed`): language-model
// training tests that need data but not text.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "mixtrain/data/token_file.h"

namespace mixtrain::testing {

inline data::TokenFileDataset random_tokens(int64_t count, int64_t context, int64_t vocab, uint32_t seed) {
  std::vector<uint16_t> t(static_cast<size_t>(count));
  uint32_t s = seed;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint16_t>((s >> 8) % static_cast<uint32_t>(vocab));
  }
  return data::TokenFileDataset::from_tokens(std::move(t), context, vocab);
}

}  // namespace mixtrain::testing
