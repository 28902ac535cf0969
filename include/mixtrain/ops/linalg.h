// mixtrain/ops/linalg.h: matrix products through oneDNN.
//
// dtypes: float32, bfloat16 (bf16 inputs, fp32 accumulation, bf16 output: oneDNN's bf16 kernels on
// CPUs with AMX; elsewhere the operands are widened exactly to fp32 and the fp32 kernel runs, which
// is faster there -- see docs/performance.md), float16 (operands converted exactly to fp32, fp32
// GEMM, result rounded to fp16: the numerics of 16-bit inputs with fp32 accumulation, without a
// speed-up on CPUs lacking fp16 units), float64 (reference loop, for gradient checks). Operands of
// different dtypes are an error (autocast is the way to mix them). Primitives are created once per
// (shapes, dtypes, transposition, bias) and cached; transposed operands are read in place.
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain {

// a [.., n, k] @ b [.., k, m] -> [.., n, m], batch dims broadcast; 1-D operands as in NumPy.
Tensor matmul(const Tensor& a, const Tensor& b);
// a [B, n, k] @ b [B, k, m] -> [B, n, m].
Tensor bmm(const Tensor& a, const Tensor& b);
// x [.., in] @ weight[out, in]^T + bias [out] -> [.., out] (bias fused into the GEMM).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mixtrain
