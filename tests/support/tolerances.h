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

// conv2d on CUDA (cuDNN, src/backends/cuda/kernels/conv_cudnn.cpp) against the CPU (oneDNN; fp64: the
// reference loops), compared element by element as |gpu - cpu| <= rtol * |cpu| + atol * max|cpu|:
// the absolute part is a fraction of the compared tensor's largest magnitude
// (tests/cuda/test_cuda_conv.cpp), because every value is a sum of K products whose rounding error
// follows the size of its terms, not of the sum, which can cancel to ~0. K = C/groups * kh * kw
// forward, O/groups * kh * kw for the input gradient, N * Ho * Wo for the weight and bias gradients
// (up to 16 * 28 * 28 = 12544 in the tests). Both devices accumulate in fp32 (fp64 for fp64) in
// different orders (cuDNN's implicit-GEMM tiles and split reductions, oneDNN's blocked loops).
// fp32: the order-dependent error of a sum of K unit-variance terms is a random walk of K roundings of
// partial sums of size ~sqrt(k), about 2^-24 * K / sqrt(2), against a largest |sum| of ~3.5 sqrt(K)
// over a tensor: 1.6e-6 of the largest value at K = 12544. atol 1e-4 leaves a factor of 60 and still
// fails TF32 (operands kept to 11 significant bits: 1e-4 to 1e-3 of the largest value on typical
// elements, kCudaConvTf32), the check that fp32 stays fp32 unless TF32 is allowed. rtol 1e-5: a few
// fp32 ulps.
inline constexpr Tolerance kCudaConvFp32{1e-5, 1e-4};
// 16-bit: both devices sum in fp32 (the fp32 part above) and round each value once to the storage
// type, so two values straddling a rounding boundary land one 16-bit ulp apart: up to 2^-7 relative
// for bf16 (8 significant bits, a value just above a power of two) and 2^-10 for fp16. This is also
// the check that cuDNN accumulates 16-bit weight gradients in fp32: a sum of 3136 or 12544 terms kept
// in bf16 would be off by ~sqrt(K) * 2^-9 of its size, 10% and more.
inline constexpr Tolerance kCudaConvBf16{1.0 / 128, 1e-4};
inline constexpr Tolerance kCudaConvFp16{1.0 / 1024, 1e-4};
// 16-bit forward with a bias: the GPU rounds the convolution's value before adding the bias (as
// PyTorch's cuDNN path does) where the CPU rounds the biased sum once, which adds half an ulp of the
// convolution's value, at most 2^-8 (bf16) or 2^-11 (fp16) of |conv| <= max|y| + max|bias|. The tests
// keep max|bias| <= max|y| / 2 (and assert it), so that is at most 1.5 * 2^-8 (1.5 * 2^-11) of max|y|;
// with the fp32 part (1e-4) an atol of 2^-7 (2^-10) of max|y| covers it.
inline constexpr Tolerance kCudaConvBiasBf16{1.0 / 128, 1.0 / 128};
inline constexpr Tolerance kCudaConvBiasFp16{1.0 / 1024, 1.0 / 1024};
// fp64: sums of up to 12544 products in fp64 in different orders, ~1e-14 of the largest value by the
// fp32 argument with 2^-53; 1e-10 leaves a wide margin.
inline constexpr Tolerance kCudaConvFp64{1e-10, 1e-10};
// fp32 with TF32 allowed (mt::cuda::set_allow_tf32(true)): where cuDNN picks TF32 kernels, each
// operand keeps 11 significant bits: relative error up to 2^-11 when rounded, 2^-10 when truncated.
// Truncation shrinks every product by ~2^-10 on average, up to ~1e-3 of the sum itself; the rest is
// random, ~2^-10 / sqrt(6) * sqrt(K) term sizes: ~1e-4 of the largest value on a typical element,
// ~5e-4 at 4.5 standard deviations. Worst case ~1.5e-3 of the largest value; atol 3e-3 leaves a
// factor of 2.
inline constexpr Tolerance kCudaConvTf32{1e-5, 3e-3};

// The CNN of the CLI (tools/mixtrain/models.h) trained 3 AdamW steps (lr 1e-3) in fp32 from the same
// weights and batch on CUDA and on the CPU. The first loss comes from identical weights (fp32
// summation order only: ~1e-6 relative). AdamW's early updates are nearly sign(gradient) * lr on both
// devices, so the weights stay equal up to fp32 rounding except where a gradient within rounding of 0
// flips sign, which moves that weight by 2 lr but changes the loss only by that tiny gradient times
// 2 lr. Stated bound on each step's loss: 1e-3 relative, a factor of ~100 over those effects (the
// placement suite allows 1% over 4 fp32 steps of every model).
inline constexpr Tolerance kCudaCnnTrainingLoss{1e-3, 0.0};

// ---- CUDA fused attention against the CPU's (tests/cuda/test_cuda_attention.cpp), element by element:
//   |gpu - cpu| <= rtol * |cpu| + term * M + atol + term_atol * n * max|x|
// M is the magnitude sum of the element's terms, computed by the test in fp64 from the exact
// probabilities P (dP = gout v^T, delta = rowsum(P dP)):
//   out[t]: sum_s P[t,s] |v[s]|            lse[t]: scale sum_s P[t,s] sum_f |q[t,f]| |k[s,f]|
//   gv[s]:  sum_t P[t,s] |gout[t]|         gq[t]:  scale sum_s P[t,s] (|dP[t,s]| + |delta[t]|) |k[s]|
//                                          gk[s]:  scale sum_t P[t,s] (|dP[t,s]| + |delta[t]|) |q[t]|
// (gq's and gk's weights bound |dS| = scale P |dP - delta|). An element is a sum of signed terms that
// can cancel to ~0 while each term keeps its own error, so the error is bounded by a fraction of M
// (>= |element| for all but lse), not of the element. n is the number of terms (S for out and gq, T
// for gk and gv) and max|x| the bound of the test's inputs.
struct AttentionTolerance {
  double rtol;       // of |cpu|: each device rounds its own 16-bit output once (a flip = one ulp)
  double term;       // of M: the relative error of each term
  double atol;       // absolute floor (elements whose M is ~0)
  double term_atol;  // absolute error of each 16-bit term where relative rounding does not hold (fp16 subnormals)
};

// fp32 reassociation, the same on every path: each score is a dot product of D <= 128 terms summed in
// another order on each device (a random walk of roundings: ~sqrt(D) * 2^-24 of a score magnitude
// scale * sum|q||k| of ~12 for the tests' unit-normal inputs, ~1e-5), which exp turns into the same
// relative error of P, doubled by lse's own; the P-weighted sums over <= 130 terms add ~sqrt(130) *
// 2^-24 ~ 1e-6 of M. Twice ~2e-5 per device: 1e-4 of M covers it (a kernel indexing error is O(1) of M).
inline constexpr double kCudaAttentionFp32Terms = 1e-4;
// The tensor-core kernels (bf16, fp16; src/backends/cuda/kernels/attention_flash.cu) round P to 16 bits before
// P v and P^T gout, and dS = scale P (dP - delta) before dS k and dS^T q, as FlashAttention does; the
// CPU keeps them in fp32. Round to nearest moves each term by at most half an ulp, u = 2^-8 (bf16, 8
// significand bits) or 2^-11 (fp16) of itself: an element moves by at most u * sum |term| <= u * M
// (worst case: every rounding the same way; random ones average out to ~u * sqrt(sum term^2)).
inline constexpr double kCudaFlashAttentionBf16Terms = 1.0 / 256;
inline constexpr double kCudaFlashAttentionFp16Terms = 1.0 / 2048;
// fp16 terms below 2^-14 (subnormal) are rounded to a multiple of 2^-24 instead: an absolute error up
// to 2^-25 each, at most 2^-25 * n * max|x| per element (P <= 1 is the only factor rounded: the forward's
// unnormalised probabilities are divided by a row sum >= 1; dS is bounded the same way per term).
inline constexpr double kCudaFlashAttentionFp16TermAtol = 0x1p-25;

// Tolerance of out, gq, gk, gv for `dtype`; `tensor_cores`: the flash kernels ran (bf16/fp16 with a
// head dim they take), else the warp-per-row kernels (fp32 everywhere, one rounding on the output).
// 16-bit outputs: rtol one 16-bit ulp, 2^-7 (bf16) / 2^-10 (fp16), as cuda_vs_cpu_rounded; atol 1e-6 also
// covers fp16's subnormal outputs (one step of 2^-24). fp64: the same reassociation argument at 2^-53.
constexpr AttentionTolerance cuda_attention(DType dtype, bool tensor_cores) {
  switch (dtype) {
    case kBFloat16:
      return {1.0 / 128, kCudaAttentionFp32Terms + (tensor_cores ? kCudaFlashAttentionBf16Terms : 0.0), 1e-6, 0.0};
    case kFloat16:
      return {1.0 / 1024, kCudaAttentionFp32Terms + (tensor_cores ? kCudaFlashAttentionFp16Terms : 0.0), 1e-6,
              tensor_cores ? kCudaFlashAttentionFp16TermAtol : 0.0};
    case kFloat64: return {0.0, 1e-12, 1e-14, 0.0};
    default: return {0.0, kCudaAttentionFp32Terms, 1e-6, 0.0};
  }
}
// lse (fp32; fp64 for fp64) on every path: nothing 16-bit enters it (the flash forward sums the fp32
// probabilities), so only the scores' reassociation (term, of lse's M) and log/exp's own ulps
// (rtol 1e-6 of |lse|, a few fp32 ulps) remain.
constexpr AttentionTolerance cuda_attention_lse(DType dtype) {
  return dtype == kFloat64 ? AttentionTolerance{1e-14, 1e-12, 1e-14, 0.0}
                           : AttentionTolerance{1e-6, kCudaAttentionFp32Terms, 1e-6, 0.0};
}

// Gradient accumulation against one large batch (train/test_trainer_accumulation.cpp), as the largest
// parameter difference relative to its tensor's largest magnitude after 10 AdamW steps. fp32: the two
// runs sum the same fp32 terms in another order (four means of 16 weighted by 1/4 against one mean of
// 64), a few ulps per step that AdamW's normalisation carries into the update: 1e-6 is the bound the
// recipe promises (measured: 3.8e-7).
inline constexpr Tolerance kAccumulatedVsOneBatch{1e-6, 0.0};
// 16-bit autocast: each micro-batch's weight gradient is a bf16/fp16 GEMM over 16 rows rounded to 16
// bits before the fp32 sum, against one rounding over 64 rows, and AdamW turns the rounding of a tiny
// gradient into a whole lr-sized update. So the two runs differ by about as much as the precision
// itself moves the weights (the same run in fp32), a ratio measured at 1.6 (bf16) and 0.74 (fp16) on
// the test's model: bounded by 2 times the precision's own effect, measured in the same test.
inline constexpr double kAccumulatedVs16BitEffect = 2.0;

// Training with the fused head and loss (linear_cross_entropy) against the unfused head, fp32, 5
// SGD steps: only the order of the fp32 sums differs (the weight gradient is summed block by block),
// ~1e-7 relative per gradient, carried linearly into the weights by SGD, more where a gradient
// cancels (the tied embedding's: the head's sum over rows of (p - y) h, plus the embedding's).
// Measured 3.0e-7 (gpt) and 6.5e-6 (gpt2, tied); 5e-5 leaves a margin over the second.
inline constexpr Tolerance kFusedHeadVsUnfused{5e-5, 0.0};
// The same in bf16/fp16: the fused head keeps the logits in fp32 where the unfused path rounds them
// to 16 bits, so its run is no further from the fp32 run than the unfused 16-bit run is; both
// distances are dominated by the 16-bit activations of the blocks, so they come out close and a
// factor of 2 leaves room for the noise of five Adam steps.
inline constexpr double kFusedHeadVs16BitEffect = 2.0;

}  // namespace mixtrain::testing
