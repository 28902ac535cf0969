// src/data/windows.h (internal): the batch of a language-model dataset, shared by the byte-level text
// and the token files: example i is the window of `context` tokens starting at i * stride, its target
// the same window one token later.
#pragma once

#include <cstdint>
#include <span>

#include "mixtrain/data/dataset.h"

namespace mixtrain::data::windows {

// int64 input and target [B, context] for the windows at `indices` of `tokens` (any integer type).
template <typename Token>
Batch batch(const Token* tokens, std::span<const int64_t> indices, int64_t stride, int64_t context) {
  const int64_t b = static_cast<int64_t>(indices.size()), t = context;
  Tensor input = Tensor::empty({b, t}, kInt64);
  Tensor target = Tensor::empty({b, t}, kInt64);
  int64_t* x = input.data_ptr<int64_t>();
  int64_t* y = target.data_ptr<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    const Token* src = tokens + indices[k] * stride;
    for (int64_t j = 0; j < t; ++j) {
      x[k * t + j] = src[j];
      y[k * t + j] = src[j + 1];
    }
  }
  return {std::move(input), std::move(target)};
}

}  // namespace mixtrain::data::windows
