// mixtrain/nn/functional.h: the stateless neural-network ops (mt::nn::functional, alias F).
//
// dtypes: float32, float64, float16, bfloat16 unless stated. Every kernel computes in fp32 (fp64
// for fp64) and rounds once on store; the accumulation dtype is given per op.
#pragma once

#include <cstdint>
#include <optional>

#include "mixtrain/ops/elementwise.h"
#include "mixtrain/random.h"
#include "mixtrain/tensor.h"

namespace mixtrain::nn::functional {

using mixtrain::gelu;
using mixtrain::relu;
using mixtrain::sigmoid;
using mixtrain::silu;
using mixtrain::tanh;

// Numerically stable (max subtracted); accumulation fp32. Output dtype = input dtype unless given.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// Normalises over the trailing dims `normalized_shape`; weight/bias optional with that shape.
// Mean and variance accumulate in fp32 (biased variance, as PyTorch).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

enum class Reduction { kNone, kMean, kSum };

// logits [N, C] (or [N, C, d...]) and int64/int32 targets [N] (or [N, d...]). Fused log-softmax + NLL,
// fp32 accumulation. Targets equal to ignore_index contribute nothing and are excluded from the
// mean. label_smoothing in [0, 1] mixes the one-hot target with the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::kMean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
// log-probabilities [N, C] and targets [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::kMean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// Binary cross-entropy on probabilities; refused under fp16 autocast (use the logits form).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::kMean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::kMean);

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t padding_h = 0, padding_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
// x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] -> [N, O, H', W'] through oneDNN
// (fp32 accumulation; bf16 per the machine's bf16 path, see ops/linalg.h; fp16 through exact fp32
// conversion; fp64 reference loop).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& opts = {});

struct Pool2dOptions {
  int64_t kernel_h, kernel_w;
  int64_t stride_h = 0, stride_w = 0;  // 0: same as the kernel
  int64_t padding_h = 0, padding_w = 0;
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opts);
// Padding counts toward the divisor (PyTorch's count_include_pad=true default).
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opts);

// weight [V, D], indices int64/int32 of any shape -> [..., D]. The gradient sums repeated rows.
Tensor embedding(const Tensor& indices, const Tensor& weight);

// Zeroes elements with probability p and scales the rest by 1/(1-p) when `training`; the mask is
// drawn from the generator (seeded, independent of the thread count).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

// q [..., T, D], k [..., S, D], v [..., S, Dv] (equal batch dims, e.g. [B, H, ., .]) -> [..., T, Dv];
// softmax(q k^T * scale) v with scale 1/sqrt(D) unless given; `is_causal` masks keys after each
// query position (key s is seen by query t when s <= t, also when T != S). One fused kernel: 16-bit
// inputs (lower precision under autocast) are widened to fp32, scores, probabilities and products
// accumulate in fp32 and the output is rounded once. Saves q, k, v and an fp32 log-sum-exp per
// query; backward recomputes the probabilities, so no [T, S] tensor is kept.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// Multi-head self-attention on a packed projection: qkv [..., T, 3 * C] whose last dim is
// (q | k | v) x num_heads x head_dim (what Linear(C, 3C) produces) -> [..., T, C] with the heads side
// by side (the layout an output projection takes). The same as splitting qkv into q, k, v of shape
// [..., H, T, D] and running scaled_dot_product_attention, then moving heads back next to features,
// but q, k and v are read in place, the output is written in place, and the gradient is one packed
// tensor. Same numerics and autocast policy (lower precision) as scaled_dot_product_attention.
Tensor qkv_attention(const Tensor& qkv, int64_t num_heads, bool is_causal = false,
                     std::optional<double> scale = std::nullopt);

// linear(gelu(x), weight, bias) (exact erf GELU) with the gradients of the unfused composition,
// bit for bit, but saving x instead of gelu(x): backward recomputes gelu(x). x [..., in] any
// floating dtype; weight [out, in]; bias [out] or undefined -> [..., out]. Under autocast gelu runs
// in x's dtype and the product in the region's 16-bit dtype (policy: lower precision, as linear).
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mixtrain::nn::functional
