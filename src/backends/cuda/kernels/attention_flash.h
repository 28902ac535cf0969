// The tensor-core attention kernels of src/backends/cuda/kernels/attention_flash.cu, as attention.cu's
// dispatch sees them: each entry point either takes the call (launches, returns true) or declines it
// without touching anything (returns false), and the caller then runs the warp-per-row kernels.
//
// Taken: bf16 or fp16 tensors on a GPU of compute capability 8.0 or newer whose per-block shared
// memory fits the kernel's tiles; head dims D == Dv, a multiple of 16, at most 128; every row of
// q, k, v, out (and gout, gq, gk, gv) starting on a 16-byte boundary (base pointers 16-byte aligned,
// all batch, head and time strides multiples of 8 elements). Any T, S, batch and head count.
#pragma once

#include "kernels/nn.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels::cuda {

// kernels/nn.h's AttentionFwdFn contract: out (rounded once to q's dtype) and lse (fp32).
bool try_flash_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const AttentionParams& p);

// kernels/nn.h's AttentionBwdFn contract: every element of gq, gk and gv written, deterministically.
bool try_flash_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                             const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p);

}  // namespace mixtrain::kernels::cuda
