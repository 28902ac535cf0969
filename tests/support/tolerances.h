// Every numeric tolerance the tests use, in one place, each with its reason.
#pragma once

#include "mixtrain/dtype.h"

namespace mixtrain::testing {

struct Tolerance {
  double rtol;
  double atol;
};

// fp64 finite differences: central differences with step 1e-6 have truncation error ~eps^2*f''' and
// rounding error ~1e-16/eps = 1e-10, so analytic and numeric gradients agree to ~1e-7 relative;
// 1e-5 leaves room for ops with larger third derivatives (exp, pow, softmax).
inline constexpr double kGradcheckEps = 1e-6;
inline constexpr Tolerance kGradcheck{1e-5, 1e-7};

// An fp32 kernel against the fp64 (or scalar fp32) reference: fp32 has 24 significand bits
// (eps 1.2e-7); a few roundings plus fp32 accumulation over <= 10^4 terms stay below 1e-5 relative.
inline constexpr Tolerance kFp32VsReference{1e-5, 1e-6};

// An fp32 sum of n signed terms (a parameter gradient summed over rows) against fp64: the error
// follows the terms, not the sum, which can cancel to ~0, so the absolute part must cover it.
// Roundings add like a random walk, ~sqrt(n) * 2^-24 * max|term|: for n <= 100 rows of terms up to
// 16 (products of two unit-normal values) that is ~1e-5; atol 2e-5 (observed: 2e-6 on 70 rows in
// the -O1 sanitizer build, whose unvectorised code rounds some steps differently from -O3).
inline constexpr Tolerance kFp32SumVsReference{1e-5, 2e-5};

// An fp64 kernel against the same closed form written out in fp64 (same C library functions): only
// the order of a few roundings differs (eps 2.2e-16), so 1e-12 relative leaves a wide margin.
inline constexpr Tolerance kFp64VsReference{1e-12, 1e-14};

// A 16-bit kernel against the same math in fp32: inputs are already representable, compute is fp32
// and the only extra error is the final rounding to the 16-bit type: half an ulp, 2^-8 relative for
// bf16 (8 significand bits) and 2^-11 for fp16. Twice that covers one double rounding (e.g. an
// intermediate that is also stored in 16 bits, like a saved activation in backward).
inline constexpr Tolerance kBf16VsFp32{2.0 / 256, 1e-3};
inline constexpr Tolerance kFp16VsFp32{2.0 / 2048, 1e-4};

// A GEMM/conv in 16 bits against fp32 on inputs rounded to 16 bits first: oneDNN accumulates in
// fp32 in a different order than the reference (blocked K), so fp32 reassociation error (~sqrt(K)
// ulp of fp32) adds to the final rounding; the rounding dominates for K <= 4096.
inline constexpr Tolerance kGemmBf16{1.0 / 128, 1e-2};
inline constexpr Tolerance kGemmFp16{1.0 / 1024, 1e-3};
// oneDNN fp32 GEMM against the fp64 triple loop: blocked accumulation in fp32 over K terms gives
// errors ~K * 2^-24 * |a||b| in the worst case; for K <= 2048 and unit-scale inputs that is < 1e-4.
inline constexpr Tolerance kGemmFp32{1e-4, 1e-4};

// A softmax-family backward in 16 bits against fp32: dx = y * (dy - sum(dy * y)) reads the saved
// 16-bit output y (relative error up to u = 2^-8 for bf16, 2^-11 for fp16), so besides the final
// rounding the sum carries an absolute error up to u * sum|dy * y| <= u * max|dy|, which is not
// relative to dx and stays where dx cancels to ~0. With unit-normal dy (max ~4 over a few thousand
// values) that is <= 4u absolute: atol = 4u (observed: under 1u).
inline constexpr Tolerance kSoftmaxBwdBf16{2.0 / 256, 4.0 / 256};
inline constexpr Tolerance kSoftmaxBwdFp16{2.0 / 2048, 4.0 / 2048};

// Final training loss of a small MLP trained with bf16 parameters (fp32 masters, or packed masters
// with a bf16 first moment) against the same run in fp32 with bf16 autocast: both run the same fp32
// Adam update and differ by where bf16 rounding happens (bf16 weights and gradients, truncated
// instead of rounded weights in the forward, a rounded first moment), so the losses drift apart
// over training. Stated bound: within 15% of the fp32 run's loss plus 0.01 nats (measured: 7% for
// fp32 masters, 0.3% for packed ones; tests/optim/test_master_weights.cpp).
inline constexpr Tolerance kBf16ParamsTrainingLoss{0.15, 0.01};

// Final training loss of a small classifier with its Linear layers in FP8 (E4M3 forward, E5M2
// gradients, delayed scaling) against the same run in bf16: FP8 keeps 3 (2) mantissa bits where
// bf16 keeps 7, so the two runs take different paths. Stated bound: within 25% of the bf16 loss
// plus 0.02 nats (tests/amp/test_fp8.cpp).
inline constexpr Tolerance kFp8TrainingLoss{0.25, 0.02};

// Tolerance for comparing a kernel run in `dtype` with the same math in fp32.
constexpr Tolerance vs_fp32(DType dtype) {
  switch (dtype) {
    case kBFloat16: return kBf16VsFp32;
    case kFloat16: return kFp16VsFp32;
    default: return kFp32VsReference;
  }
}

// CUDA against the CPU (tests/cuda). exp, log, tanh, erf, pow are CUDA's on the GPU and the CPU's
// own (fast-math polynomials, glibc) on the host: each within ~2 ulp of the true value, so fp32
// results agree to a few ulp; a 16-bit result then rounds the same way except near a rounding
// boundary, where it moves by one 16-bit ulp (2^-8 bf16, 2^-11 fp16 relative).
inline constexpr Tolerance kCudaTranscendental{1e-5, 1e-6};
// Sums in another order (a block's tree instead of the CPU's lanes): fp32 rounding error grows like
// sqrt(n) * 2^-24 relative to the sum of magnitudes; for the n <= 42000 random-normal sums of the
// tests, 1e-5 of the value plus 1e-4 absolute (sums near zero) covers it with margin.
inline constexpr Tolerance kCudaSumOrder{1e-5, 1e-4};

// `fp32` (a tolerance for fp32 results) widened to one 16-bit ulp for 16-bit outputs.
constexpr Tolerance cuda_vs_cpu(DType dtype, Tolerance fp32 = kCudaTranscendental) {
  switch (dtype) {
    case kBFloat16: return {fp32.rtol + 1.0 / 256, fp32.atol + 1e-3};
    case kFloat16: return {fp32.rtol + 1.0 / 2048, fp32.atol + 1e-4};
    default: return fp32;
  }
}

// `fp32` widened to one whole 16-bit ulp for 16-bit outputs: each device rounds its own fp32 value
// (the two agree to `fp32`) once, so near a rounding midpoint they land on neighbouring 16-bit
// values, one ulp apart: up to 2^-7 relative for bf16 (8 significand bits, a value just above a power
// of two) and 2^-10 for fp16. cuda_vs_cpu's half ulp covers such a flip only in the upper part of a
// binade; the nn, loss and batch_norm tests (tests/cuda/test_cuda_nn.cpp) round tens of thousands of
// values each, where a flip in the lower part is to be expected.
constexpr Tolerance cuda_vs_cpu_rounded(DType dtype, Tolerance fp32 = kCudaTranscendental) {
  switch (dtype) {
    case kBFloat16: return {fp32.rtol + 1.0 / 128, fp32.atol + 1e-3};
    case kFloat16: return {fp32.rtol + 1.0 / 1024, fp32.atol + 1e-4};
    default: return fp32;
  }
}

// cuBLASLt against oneDNN: both accumulate in fp32 (fp64 for fp64) in different orders and round
// once; fp32 sums of k = 130 products differ by a few ulp of the largest partial sum; 16-bit
// outputs by one 16-bit ulp on top (the kGemm* tolerances of the CPU's own 16-bit GEMM tests).
constexpr Tolerance cuda_gemm(DType dtype) {
  switch (dtype) {
    case kBFloat16: return kGemmBf16;
    case kFloat16: return kGemmFp16;
    case kFloat64: return {1e-12, 1e-12};
    default: return kGemmFp32;
  }
}

}  // namespace mixtrain::testing
