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
// cross_entropy(linear(x, weight, bias), target) without the logits: the loss of a language
// model's output head, computed a block of rows at a time so that the [N, V] logits never exist
// whole. x [..., C], weight [V, C], bias [V] or undefined, target int64/int32 of x's shape without
// its last dim (values in [0, V) or ignore_index). Returns a scalar: the mean over the rows whose
// target is not ignore_index (NaN when there are none, as cross_entropy), or the sum.
//
// Autocast: a lower-precision op, cast like linear. Per block: logits = x W^T + b from the
// 16-bit (or fp32) operands, accumulated in fp32 and kept in fp32 (the unfused path rounds them to
// 16 bits first); where the device's 16-bit products are native (bf16 on AMX or AMD Zen 4+ CPUs)
// the 16-bit kernels write fp32 results directly, elsewhere the operands are widened exactly once
// and the fp32 kernels run (the same numbers up to the order of fp32 sums); log-sum-exp, softmax
// and the loss in fp32 (cross_entropy's rule). With autograd the gradient is computed in the same
// pass over the block, so a block's logits are made once:
// dlogits = softmax - target distribution in fp32, rounded through x's 16-bit dtype (the unfused
// path's 16-bit logits gradient; pre-scaled by a power of two so that fp16 neither underflows nor
// overflows), then dx, dW and db accumulated in fp32 over all blocks; backward multiplies them by
// the loss's gradient (in place) and rounds each once into its input's dtype; the gradients go to
// the weight and bias as given (fp32 parameters: rounded through the 16-bit dtype, as autocast's
// cast would). Memory: one block's logits and their gradient ([rows, V] fp32 each; native 16-bit
// products add a [rows, V] 16-bit copy of the gradient), the operands' fp32 copies where 16-bit
// operands take the fp32 route, and, saved for backward, dx [N, C], dW [V, C] and db [V] in
// fp32 (a backend without an accumulating product adds a [V, C] temporary): no [N, V] tensor. The
// gradients are made in the forward, so one forward allows one backward. The unfused
// cross_entropy(linear(...)) is the reference; fp32 and fp64 results equal it within rounding.
struct LinearCrossEntropyOptions {
  Reduction reduction = Reduction::kMean;  // kMean or kSum (per-row losses: use the unfused ops)
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1], as cross_entropy's
  // Rows per block; 0: linear_cross_entropy_block_rows(V). More rows: fewer, larger products.
  int64_t block_rows = 0;
};
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});
// The default block: the rows whose fp32 logits fill kLinearCrossEntropyBlockBytes, rounded down to
// a multiple of 64 (at least 64). Chosen by measurement (docs/performance.md#fused-head-and-loss):
// for GPT-2's vocabulary that is 512 rows, where the head and loss are as fast as unfused (smaller
// blocks make the products slower: 1.28x at 64 rows) and larger ones only add memory.
inline constexpr int64_t kLinearCrossEntropyBlockBytes = int64_t{100} << 20;
int64_t linear_cross_entropy_block_rows(int64_t vocab_size);
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

// linear(gelu(x, approximate), weight, bias) with the gradients of the unfused composition, bit for
// bit, but saving x instead of gelu(x): backward recomputes gelu(x). x [..., in] any floating dtype;
// weight [out, in]; bias [out] or undefined -> [..., out]. Under autocast gelu runs in x's dtype and
// the product in the region's 16-bit dtype (policy: lower precision, as linear).
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApproximation approximate = GeluApproximation::kNone);

}  // namespace mixtrain::nn::functional
