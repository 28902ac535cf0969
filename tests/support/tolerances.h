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

// Tolerance for comparing a kernel run in `dtype` with the same math in fp32.
constexpr Tolerance vs_fp32(DType dtype) {
  switch (dtype) {
    case kBFloat16: return kBf16VsFp32;
    case kFloat16: return kFp16VsFp32;
    default: return kFp32VsReference;
  }
}

}  // namespace mixtrain::testing
