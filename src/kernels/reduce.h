// Kernel tables of the reduction family (front-ends in src/ops/reduce.cpp, CPU kernels in
// src/backends/cpu/kernels/reduce.cpp).
//
// The front-end brings every reduction to one form: a contiguous input viewed as
// [outer, reduce, inner], reduced over the middle dim into a contiguous [outer, inner] output.
// Accumulation dtype: fp32 for fp32, fp16 and bf16; fp64 for fp64; int64 for integers and bool.
// Results do not depend on the thread count: the work is cut into pieces whose bounds depend only
// on the shape, and partial results are combined in a fixed order.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

struct ReduceShape {
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
};

// What a reduction kernel combines its elements with (not the losses' Reduction, loss.h, nor the
// collectives' ReduceOp, mixtrain/dist/process_group.h).
enum class ReduceKind : uint8_t { kSum, kMax, kCount };

// Sum: out = scale * sum over the reduce dim (scale 1 for sum, 1/n for mean), accumulated in the
// accumulation dtype and rounded once on store. Max: NaN propagates; `scale` is ignored.
// out has x's dtype or x's accumulation dtype (sum(bf16, dtype=float32) stores fp32 directly);
// integer/bool sums always store int64. Sum is registered for every dtype, max for floating ones.
using ReduceFn = void(const Tensor& out, const Tensor& x, const ReduceShape& shape, double scale);
using ReduceTables = std::array<DispatchTable<ReduceFn>, static_cast<int>(ReduceKind::kCount)>;
MT_KERNEL_TABLE(ReduceTables, reduce_tables, DispatchTable<ReduceFn>{"sum"}, DispatchTable<ReduceFn>{"amax"});
inline const DispatchTable<ReduceFn>& reduce_kernel(ReduceKind op) { return reduce_tables[static_cast<int>(op)]; }

// out[o] (int64) = index of the first maximum of row o of a contiguous [outer, reduce] x; a NaN
// counts as the maximum (PyTorch). Every dtype.
using ArgmaxFn = void(const Tensor& out, const Tensor& x, int64_t outer, int64_t reduce);
MT_KERNEL_TABLE(DispatchTable<ArgmaxFn>, argmax_table, "argmax");
inline const DispatchTable<ArgmaxFn>& argmax_kernel() { return argmax_table; }

}  // namespace mixtrain::kernels
