// Kernel tables of the linalg family (front-ends in src/ops/linalg.cpp; kernels in
// src/backends/cpu/kernels/onednn/matmul.cpp and src/backends/cpu/kernels/ref/).
//
// Accumulation dtype: fp32 for fp32, bf16 and fp16 (16-bit values are exact in fp32; the result is
// rounded once on store); fp64 for fp64 (the scalar reference loop, used for gradient checks).
//   fp32  oneDNN f32 matmul
//   bf16  oneDNN bf16 matmul (bf16 inputs, f32 accumulation), or -- where that is slower than
//         fp32, see Bf16Path -- operands converted exactly to fp32, the f32 matmul, one rounding
//   fp16  always the fp32 route: oneDNN 2.6 has no f16 matmul on CPUs (docs/notes/design-choices.md)
//   fp64  reference loop
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// out[..., n, m] = a[..., n, k] @ b[..., k, m] (+ bias[m]).
// a, b and out have the same rank (>= 2); each batch dim of a and b equals out's or is 1
// (broadcast). a and b may have any strides: transposed operands are passed to oneDNN as strided
// memory descriptors, not copied (only layouts oneDNN cannot take are made contiguous first).
// out is contiguous. a, b, bias (optional, contiguous, [m]) and out share one floating dtype.
using MatmulFn = void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);
MT_KERNEL_TABLE(DispatchTable<MatmulFn>, matmul_table, "matmul");
inline const DispatchTable<MatmulFn>& matmul_kernel() { return matmul_table; }

// The fp32 route with mixed operand dtypes: a, b (and bias) may each be fp32, bf16 or fp16; 16-bit
// operands are widened exactly to fp32, the fp32 kernel runs and the result is rounded once into
// out's dtype (fp32, bf16 or fp16). Shapes and strides as for MatmulFn. The numerics equal those
// of the 16-bit kernels whenever every fp32 operand holds exactly widened 16-bit values.
// Keyed by out's dtype.
MT_KERNEL_TABLE(DispatchTable<MatmulFn>, matmul_fp32_route_table, "matmul (fp32 route)");
inline void matmul_fp32_route(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  matmul_fp32_route_table(out.device(), out.dtype())(a, b, bias, out);
}

// out[..., n, m] += a[..., n, k] @ b[..., k, m]: shapes and strides as for MatmulFn, no bias, one
// dtype (fp32 or fp64), out holding the sum so far. What the fused head (linear_cross_entropy) uses to
// sum its weight gradient over blocks of rows in place. Optional: where a backend lacks it, the
// caller makes the product in a temporary and adds it.
using MatmulAccumulateFn = void(const Tensor& a, const Tensor& b, const Tensor& out);
MT_KERNEL_TABLE(DispatchTable<MatmulAccumulateFn>, matmul_accumulate_table, "matmul accumulate");

// out[..., n, m] (fp32) = a[..., n, k] @ b[..., k, m] (+ bias[m]), or += the product (accumulate,
// no bias): a and b share a 16-bit dtype (bf16 or fp16), bias (optional, contiguous, [m]) has it
// too or is fp32, out is fp32 and contiguous; shapes and strides as for MatmulFn. Products of the
// 16-bit values accumulated in fp32 and stored unrounded: the numerics of the fp32 route on widened
// operands, without the widened copies, at the speed of the native 16-bit kernels where the backend
// has them. What the fused head (linear_cross_entropy) uses where uses_fp32_route(device, dtype) is
// false. Optional: where a backend lacks it, the caller widens the operands and runs the fp32
// products. Keyed by a's dtype.
using MatmulWideningFn = void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                              bool accumulate);
MT_KERNEL_TABLE(DispatchTable<MatmulWideningFn>, matmul_widening_table, "matmul (16-bit in, fp32 out)");

// out[j] = sum_i x[i, j] for a 2-D x of any strides; out is 1-D and contiguous, of x's dtype or --
// for an fp32 x -- bf16 or fp16 (the fp32 sum rounded once). The bias gradient of linear.
// Accumulation fp32 (fp64 for fp64) in the blocked row order: the rows are cut into blocks of
// sum_rows_block(rows) rows, each block is summed over its rows in order starting from zero, and
// the block sums are added in block order starting from zero. The blocks depend on the row count
// alone, so results do not depend on the thread count, and an fp32 x of exactly widened 16-bit
// values gives the same bits as the 16-bit x itself. Up to 64 rows this is the plain row order.
// (Blocks rather than one running sum per column let each thread read the rows it wrote in the
// kernel that produced x; see docs/notes/design-choices.md.)
inline constexpr int64_t kSumRowsMaxBlocks = 32;
inline int64_t sum_rows_block(int64_t rows) {
  return std::max<int64_t>(64, (rows + kSumRowsMaxBlocks - 1) / kSumRowsMaxBlocks);
}
using SumRowsFn = void(const Tensor& x, const Tensor& out);
MT_KERNEL_TABLE(DispatchTable<SumRowsFn>, sum_rows_table, "sum_rows");  // keyed by x's dtype
inline void sum_rows(const Tensor& x, const Tensor& out) { sum_rows_table(x.device(), x.dtype())(x, out); }

// out (contiguous, same rank and dtype as x, each dim equal to x's or 1) = x summed over the dims
// where out has size 1: the gradient of a broadcast batch dim of matmul.
MT_KERNEL_TABLE(DispatchTable<SumRowsFn>, sum_to_size_table, "sum_to_size");  // keyed by x's dtype
inline void sum_to_size(const Tensor& x, const Tensor& out) { sum_to_size_table(x.device(), x.dtype())(x, out); }

// How bfloat16 matmuls and convolutions compute. kNative runs oneDNN's bf16 kernels; kFp32
// converts the operands exactly to fp32, runs the fp32 kernel and rounds the result once (the same
// numerics: bf16 inputs, fp32 accumulation). kAuto picks kNative where it is faster
// (native_bf16_is_faster) and kFp32 elsewhere.
// The environment variable MIXTRAIN_BF16_PATH=native|fp32|auto overrides kAuto (read once; another
// value is an mt::Error at the first bf16 product).
enum class Bf16Path : uint8_t { kAuto, kNative, kFp32 };
// True where oneDNN's native bf16 kernels beat the fp32 route, under the ISA cap of mixtrain/cpu.h:
// with AMX, and with AVX512-BF16 on AMD cores (Zen 4 and later), which retire a bf16 dot product
// (two multiply-adds per fp32 lane) at the rate of an fp32 FMA. Intel cores without AMX retire it
// at half that rate (measured on an Emerald Rapids core with AMX hidden), where oneDNN 2.6's bf16
// kernels are slower than the fp32 route; below AVX512-BF16 they are emulated or absent. Decided by
// cpuid alone, never by timing, so that a machine always computes the same bits. Measurements:
// docs/performance.md.
bool native_bf16_is_faster();
// Pins the path (kAuto: back to MIXTRAIN_BF16_PATH or the automatic choice). Pinning kNative where
// it cannot run is allowed; the next bf16 product then throws (require_bf16_path_runs).
void set_bf16_path(Bf16Path path);
// The resolved path: kNative or kFp32. Throws mt::Error when MIXTRAIN_BF16_PATH is invalid.
Bf16Path bf16_path();
// Empty when oneDNN's native bf16 kernels can run here (CPU, ISA cap and oneDNN's level allow
// them); else why not, naming the CPU feature and the level. Tests of the native path skip with it.
std::string native_bf16_unavailable_reason();
// Called by the bf16 kernels of `op` ("matmul", "conv2d") before they run: throws mt::Error naming
// the op, the missing CPU feature and what pinned the path when the path is kNative and
// native_bf16_unavailable_reason() is not empty.
void require_bf16_path_runs(const char* op);

// True when matmuls and convolutions of `dtype` run on the fp32 route: fp16 always (oneDNN 2.6 has
// no f16 CPU kernels), bf16 where bf16_path() is kFp32. Callers that feed one 16-bit operand to
// several products can widen it once and pass the fp32 copy to matmul_fp32_route.
bool uses_fp32_route(DType dtype);
// The same question asked of `device`'s backend (a device-generic op asks this one): whether its
// matmuls of `dtype` run on the fp32 route, so that matmul_fp32_route is the way to feed them a
// widened operand. Every backend registers an answer for every dtype.
using UsesFp32RouteFn = bool(DType dtype);
MT_KERNEL_TABLE(DispatchTable<UsesFp32RouteFn>, uses_fp32_route_table, "matmul route");
inline bool uses_fp32_route(Device device, DType dtype) { return uses_fp32_route_table(device, dtype)(dtype); }

// oneDNN primitive caches (matmul and conv), shared counters: primitives created (cache misses)
// and cache hits since the process started.
struct PrimitiveCacheStats {
  int64_t created = 0;
  int64_t hits = 0;
};
PrimitiveCacheStats primitive_cache_stats();

// The oneDNN implementation a matmul of these operands runs ("brg:avx512_core", "gemm:jit", ...),
// creating (and caching) its primitive; "" when the dtype does not run through oneDNN (fp64).
// ", A copied with a padded stride" / ", B ..." follow when an operand is copied first (oneDNN's
// AVX2 GEMM with a stride along K that is a multiple of 4 KiB; see onednn/matmul.cpp).
// Tests use it to check that no layout falls back to oneDNN's slow reference kernels.
std::string matmul_impl_info(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

}  // namespace mixtrain::kernels
