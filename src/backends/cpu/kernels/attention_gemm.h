// Small dense products for the fused attention kernels (src/backends/cpu/kernels/nn_attention.cpp):
// C[M, N] (+)= A[M, K] @ B[K, N] on one (batch, head) block that sits in L1/L2.
//
// Accumulation: fp32 for float (FMAs in a fixed k order per element), fp64 for double. Each element
// of C is summed over k in increasing order by one thread, so results never depend on the thread
// count. The float version runs a register-blocked kernel, 6 rows x 64 columns of C held in
// registers with AVX-512 and 6 x 16 with AVX2 + FMA, at the widest level cpu::isa() allows
// (mixtrain/cpu.h), and a plain loop on baseline x86-64; double always runs the plain loop (it
// exists for gradient checks).
//
// Why not oneDNN: the blocks are 64-128 wide, the operands are strided views of per-thread scratch
// and the causal band lets whole tiles be skipped; one call per (batch, head, block) through the
// primitive cache would cost more than the arithmetic.
#pragma once

#include <cstdint>
#include <limits>

namespace mixtrain::kernels::attn {

// Causal band of a product: which entries the caller needs or which terms are known to be zero.
// Row i of C (0-based within this call) and reduction index k:
//   n_hi: only C[i, j] with j <= i + n_hi are needed (others may be left unwritten);
//   k_hi: terms with k > i + k_hi are zero (A[i, k] == 0) and may be skipped;
//   k_lo: terms with k < i + k_lo are zero and may be skipped.
// kOff disables a limit. Skipping is done per register tile, so skipped terms must really be zero.
inline constexpr int64_t kOff = std::numeric_limits<int64_t>::min();
struct Band {
  int64_t n_hi = kOff;
  int64_t k_hi = kOff;
  int64_t k_lo = kOff;
};

// A is read at A[i * rsa + k * csa] (any strides: a transposed view is free), B at B[k * ldb + j]
// and C at C[i * ldc + j]. accumulate: C += A @ B, else C = A @ B (a row whose k range is empty
// is set to zero).
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
          float* C, int64_t ldc, bool accumulate, const Band& band = {});
void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsa, int64_t csa, const double* B, int64_t ldb,
          double* C, int64_t ldc, bool accumulate, const Band& band = {});

// out [C, R] = a [R, C]^T, a's rows lda apart, out contiguous: for the operands a product needs in
// the other orientation (k^T for the scores, v^T for dP). Exact (a copy) at every ISA level; float
// moves 8 x 8 blocks through registers from AVX2 on.
void transpose(const float* a, int64_t lda, int64_t R, int64_t C, float* out);
void transpose(const double* a, int64_t lda, int64_t R, int64_t C, double* out);

}  // namespace mixtrain::kernels::attn
