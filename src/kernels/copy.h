// Strided copy with dtype conversion (the primitive behind to(), contiguous(), clone(), copy_()),
// fill, and the counter-based random fills of the factories. Both tensors of a copy are on one
// device: moving between devices is Tensor::to(Device), through the backends' host transfers.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// dst and src have the same shape; any strides, any dtypes (16-bit targets round to nearest even).
// dst must not partially overlap src. Keyed by dst's dtype.
using CopyFn = void(const Tensor& dst, const Tensor& src);
// Every element of dst (any strides) set to `value` converted to dst's dtype.
using FillFn = void(const Tensor& dst, double value);
MT_KERNEL_TABLE(DispatchTable<CopyFn>, copy_table, "copy");
MT_KERNEL_TABLE(DispatchTable<FillFn>, fill_table, "fill");

// dst = src rounded to a 16-bit precision and widened back, in one pass: the values of
// src.to(precision).to(kFloat32) (round to nearest even, the converters of half.h), with no 16-bit
// tensor in between. dst and src are fp32, contiguous, of one shape; dst may be src. Keyed by the
// precision (bfloat16 or float16).
using RoundThroughFn = void(const Tensor& dst, const Tensor& src);
MT_KERNEL_TABLE(DispatchTable<RoundThroughFn>, round_through_table, "round through 16 bits");

inline void copy(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.shape() == src.shape(), "copy: shape mismatch, destination ", describe(dst), ", source ", describe(src));
  MT_CHECK(dst.device() == src.device(), "copy: device mismatch, destination on ", dst.device(), ", source on ",
           src.device(), "; use to(device) to move a tensor");
  if (dst.numel() == 0) return;
  copy_table(dst.device(), dst.dtype())(dst, src);
}

inline void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  fill_table(dst.device(), dst.dtype())(dst, value);
}

// Random fills (random.h): element i of a contiguous tensor takes its bits from Philox blocks that
// depend only on (key, first_block, i), so every device and thread count draws the same values.
//   kUniform: [a, b) (16-bit values that round up to b are pulled below it); lane i % 4 of block
//             first_block + i / 4, except fp64, which uses block first_block + i (53 bits);
//   kNormal:  a + b * z, z by Box-Muller from block first_block + i;
//   kInteger: a + (64 random bits of block first_block + i) mod (b - a), b > a.
// Copies without autograd, for kernels and the autograd engine (the Tensor methods of the same
// names are these plus autograd records, in the ops layer): a fresh contiguous copy; `t` itself
// when it already is contiguous, else a copy; `t` in `dtype` (itself when it has it, else a
// converted contiguous copy); `t` with `shape` (a view when its strides allow, else a copy's view).
inline Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy(out, t);
  return out;
}
inline Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }
inline Tensor converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  copy(out, t);
  return out;
}
Tensor reshaped(const Tensor& t, const Shape& shape);

enum class RandomKind : uint8_t { kUniform, kNormal, kInteger };
struct RandomParams {
  RandomKind kind = RandomKind::kUniform;
  uint64_t key = 0;
  uint64_t first_block = 0;
  double a = 0.0, b = 1.0;
  int64_t low = 0, high = 1;  // kInteger's bounds, exact
};
using RandomFillFn = void(const Tensor& t, const RandomParams& p);
MT_KERNEL_TABLE(DispatchTable<RandomFillFn>, random_fill_table, "random fill");

// How many Philox blocks a fill of n elements consumes (what the generator advances by).
inline uint64_t random_blocks(RandomKind kind, DType dtype, int64_t n) {
  const bool block_per_element = kind != RandomKind::kUniform || dtype == kFloat64;
  return block_per_element ? static_cast<uint64_t>(n) : static_cast<uint64_t>((n + 3) / 4);
}

}  // namespace mixtrain::kernels
