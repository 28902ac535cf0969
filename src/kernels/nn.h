// Kernel tables of the nn ops: softmax / log_softmax, fused attention, layer_norm, max/avg pooling and dropout. Every table is keyed by the dtype of the
// op's floating input (the tensor the gradient flows back to); kernels that also write another
// floating dtype (softmax with an output dtype) dispatch on it inside.
//
// Tensors handed to these kernels are contiguous unless stated; the front-ends in src/ops/nn_*.cpp
// check shapes and make them so.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// ---- softmax (src/backends/cpu/kernels/nn_softmax.cpp). x and y are viewed as [outer, n, inner] with the
// softmax taken over n.
struct SoftmaxParams {
  int64_t outer = 1, n = 1, inner = 1;
  bool log = false;
};
// y may have another floating dtype than x (softmax(x, dim, dtype)).
using SoftmaxFwdFn = void(const Tensor& x, const Tensor& y, const SoftmaxParams& p);
// gy has y's dtype; gx has x's dtype (the table key).
using SoftmaxBwdFn = void(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxParams& p);
MT_KERNEL_TABLE(DispatchTable<SoftmaxFwdFn>, softmax_fwd, "softmax");
MT_KERNEL_TABLE(DispatchTable<SoftmaxBwdFn>, softmax_bwd, "softmax_backward");

// ---- fused attention (src/backends/cpu/kernels/nn_attention.cpp): out = softmax(scale * q k^T [causal]) v
// per (batch, head), without materialising the [T, S] probabilities of more than one query block.
// Tensors are passed as views whose first element is element (0, 0, 0, 0); element (b, h, t, f) of
// q sits at q.data_ptr() + b * q_strides[0] + h * q_strides[1] + t * q_strides[2] + f (the feature
// dim is contiguous), likewise for k, v and out, so q, k and v can be read straight out of a packed
// [B, T, 3, H, D] projection and out written as [B, T, H, D]. Causal: query t sees keys s <= t
// (top-left aligned when T != S).
struct AttentionParams {
  int64_t batch = 1, heads = 1, T = 0, S = 0, D = 0, Dv = 0;
  double scale = 1.0;
  bool causal = false;
  int64_t q_strides[3] = {}, k_strides[3] = {}, v_strides[3] = {}, o_strides[3] = {};
};
// lse: contiguous [batch, heads, T] in the opmath dtype (fp32; fp64 for fp64): the log-sum-exp of
// each query's scaled scores, all backward needs to recompute the probabilities (-inf when S == 0).
using AttentionFwdFn = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const AttentionParams& p);
// gout has out's strides; gq, gk, gv have q's, k's, v's strides (they may be views of one packed
// gradient). Every element of gq, gk and gv is written.
using AttentionBwdFn = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                            const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p);
MT_KERNEL_TABLE(DispatchTable<AttentionFwdFn>, attention_fwd, "scaled_dot_product_attention");
MT_KERNEL_TABLE(DispatchTable<AttentionBwdFn>, attention_bwd, "scaled_dot_product_attention_backward");

// ---- layer_norm (src/backends/cpu/kernels/nn_norm.cpp). x [rows, cols]; weight/bias [cols] of any floating
// dtype or undefined; mean/rstd [rows] in the opmath dtype (fp32, fp64 for fp64 input).
using LayerNormFwdFn = void(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, double eps);
// gx [rows, cols] in x's dtype; gweight/gbias [cols] in weight's/bias's dtypes, undefined when not
// wanted. Weight and bias gradients sum rows in fixed blocks (fp32), then the blocks in order: the
// result does not depend on the thread count.
using LayerNormBwdFn = void(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                            const Tensor& rstd, const Tensor& gx, const Tensor& gweight, const Tensor& gbias);
MT_KERNEL_TABLE(DispatchTable<LayerNormFwdFn>, layer_norm_fwd, "layer_norm");
MT_KERNEL_TABLE(DispatchTable<LayerNormBwdFn>, layer_norm_bwd, "layer_norm_backward");

// ---- pooling (src/backends/cpu/kernels/nn_pool.cpp). x [N, C, H, W] -> y [N, C, OH, OW].
struct Pool2dParams {
  int64_t kh, kw, sh, sw, ph, pw;
};
// argmax [N, C, OH, OW]: where each maximum lies inside its window, as the offset
// (row - window row) * kw + (col - window col) from the window's (padded) top-left corner: the first
// maximum in row-major order on ties, the first NaN when there is one. Its dtype is uint8 when
// kh * kw <= 256 (1 byte saved per output), else int32 (max_pool2d_argmax_dtype).
using MaxPool2dFwdFn = void(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p);
// gx = the gradient of each output added at its argmax (overlapping windows add in output order, in
// fp32), zero elsewhere.
using MaxPool2dBwdFn = void(const Tensor& gy, const Tensor& argmax, const Tensor& gx, const Pool2dParams& p);
inline DType max_pool2d_argmax_dtype(const Pool2dParams& p) { return p.kh * p.kw <= 256 ? kUInt8 : kInt32; }
// Divisor: the window clipped to the padded input (PyTorch's count_include_pad=True).
using AvgPool2dFwdFn = void(const Tensor& x, const Tensor& y, const Pool2dParams& p);
using AvgPool2dBwdFn = void(const Tensor& gy, const Tensor& gx, const Pool2dParams& p);
MT_KERNEL_TABLE(DispatchTable<MaxPool2dFwdFn>, max_pool2d_fwd, "max_pool2d");
MT_KERNEL_TABLE(DispatchTable<MaxPool2dBwdFn>, max_pool2d_bwd, "max_pool2d_backward");
MT_KERNEL_TABLE(DispatchTable<AvgPool2dFwdFn>, avg_pool2d_fwd, "avg_pool2d");
MT_KERNEL_TABLE(DispatchTable<AvgPool2dBwdFn>, avg_pool2d_bwd, "avg_pool2d_backward");

// ---- dropout (src/backends/cpu/kernels/nn_dropout.cpp). Element i is kept when the Philox output
// philox(first_block + i / 4, seed)[i % 4], as a 24-bit uniform in [0, 1), is below 1 - p.
// mask: uint8 (1 kept, 0 dropped); y = x * mask / (1 - p).
using DropoutFwdFn = void(const Tensor& x, const Tensor& y, const Tensor& mask, double p, uint64_t seed,
                          uint64_t first_block);
// gx = gy * mask * scale.
using DropoutBwdFn = void(const Tensor& gy, const Tensor& mask, const Tensor& gx, double scale);
MT_KERNEL_TABLE(DispatchTable<DropoutFwdFn>, dropout_fwd, "dropout");
MT_KERNEL_TABLE(DispatchTable<DropoutBwdFn>, dropout_bwd, "dropout_backward");

}  // namespace mixtrain::kernels
