// src/backends/cpu/kernels/optim_blocks.h (internal): the buffered-block helpers shared by the CPU
// optimizer kernels (optim_kernels.cpp: SGD, scaling, norms; adam*.cpp: the AdamW paths): the
// storage types an optimizer updates, fp32 blocks loaded from and stored to 16-bit tensors, and the
// value being optimised (parameter, fp32 master or packed master) block by block. Built without a
// target attribute: every file that includes it compiles it the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/loops.h"
#include "kernels/optim.h"
#include "mixtrain/half.h"

namespace mixtrain::kernels::optim_blocks {

// The three storage types an optimizer updates.
template <typename F>
void dispatch_param(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: f.template operator()<float>(); return;
    case kFloat16: f.template operator()<float16>(); return;
    case kBFloat16: f.template operator()<bfloat16>(); return;
    default: MT_INTERNAL_ASSERT(false, "optimizer kernel: unexpected dtype");
  }
}

// Block size of the buffered loops: a multiple of 16 (the norm's lane count) that keeps a few
// fp32 buffers in L1.
constexpr int64_t kBlock = 256;

template <typename T>
constexpr bool kBlockType = std::is_same_v<T, float> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

template <typename T>
void load_block(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  else if constexpr (std::is_same_v<T, float16>)
    convert_fp16_to_fp32(src, dst, n);
  else
    convert_bf16_to_fp32(src, dst, n);
}

template <typename T>
void store_block(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  else if constexpr (std::is_same_v<T, float16>)
    convert_fp32_to_fp16(src, dst, n);
  else
    convert_fp32_to_bf16(src, dst, n);
}

inline void sqrt_block(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// The value being optimised, block by block: the fp32 master when there is one (the 16-bit
// parameter then receives the rounded result), the packed master (bf16 parameter bits << 16 | low)
// when there is a lower half, else the parameter itself.
template <typename T>
struct ParamBlocks {
  T* param;
  float* master;
  uint16_t* low;
  void load(int64_t s, float* x, int64_t n) const {
    if (master != nullptr) {
      std::memcpy(x, master + s, static_cast<size_t>(n) * sizeof(float));
    } else if (low != nullptr) {
      if constexpr (std::is_same_v<T, bfloat16>)
        for (int64_t j = 0; j < n; ++j) x[j] = unpack_master(param[s + j].x, low[s + j]);
    } else {
      load_block(param + s, x, n);
    }
  }
  void store(int64_t s, const float* x, int64_t n) const {
    if (low != nullptr) {
      if constexpr (std::is_same_v<T, bfloat16>)
        for (int64_t j = 0; j < n; ++j) {
          const PackedMaster packed = pack_master(x[j]);
          param[s + j] = bfloat16::from_bits(packed.param_bits);
          low[s + j] = packed.low;
        }
      return;
    }
    if (master != nullptr) std::memcpy(master + s, x, static_cast<size_t>(n) * sizeof(float));
    store_block(x, param + s, n);
  }
};

inline uint16_t* low_half(const Tensor& master_low) {
  return master_low.defined() ? reinterpret_cast<uint16_t*>(host_ptr<uint8_t>(master_low)) : nullptr;
}

template <typename T>
ParamBlocks<T> param_blocks(const Tensor& param, const Tensor& master, const Tensor& master_low) {
  return {host_ptr<T>(param), master.defined() ? host_ptr<float>(master) : nullptr, low_half(master_low)};
}

// g = grad * inv_scale (the multiply is exact and skipped when inv_scale is 1).
template <typename T>
void load_grad(const T* grad, int64_t s, float* g, int64_t n, float inv) {
  load_block(grad + s, g, n);
  if (inv != 1.0f)
    for (int64_t j = 0; j < n; ++j) g[j] *= inv;
}

}  // namespace mixtrain::kernels::optim_blocks
