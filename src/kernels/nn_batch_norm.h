// Kernel tables of batch normalisation (nn::functional::batch_norm, src/ops/nn_batch_norm.cpp).
//
// x is contiguous and viewed as [N, C, S] (S = product of the dims after the channel dim).
// Per-channel tensors (mean, var, weight, bias, grad_weight, grad_bias) are contiguous [C] in the
// opmath dtype of x: float32 for float32/float16/bfloat16, float64 for float64. weight and bias may
// be undefined (treated as 1 and 0). Keyed by x's dtype, except `batch_norm_update_stats`, keyed
// by the running statistics' dtype.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// mean[c] and biased var[c] over (N, S): two passes (mean, then squared deviations) for accuracy.
using BatchNormStatsFn = void(const Tensor& x, const Tensor& mean, const Tensor& var);
// out = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]; out has x's shape and dtype.
using BatchNormForwardFn = void(const Tensor& x, const Tensor& mean, const Tensor& var, double eps,
                                const Tensor& weight, const Tensor& bias, const Tensor& out);
// Gradients of the forward above. batch_stats: mean/var were the batch statistics of x (so they
// depend on x: training mode); else constants (eval mode). grad_x (x's dtype) may be undefined.
using BatchNormBackwardFn = void(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                                 double eps, const Tensor& weight, bool batch_stats, const Tensor& grad_x,
                                 const Tensor& grad_weight, const Tensor& grad_bias);
// running_mean = (1 - momentum) running_mean + momentum mean;
// running_var = (1 - momentum) running_var + momentum var * count / (count - 1)   (count > 1).
// running_* [C] of one float dtype (any strides); mean/var opmath [C].
using BatchNormUpdateStatsFn = void(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                                    const Tensor& var, double momentum, int64_t count);

MT_KERNEL_TABLE(DispatchTable<BatchNormStatsFn>, batch_norm_stats, "batch_norm");
MT_KERNEL_TABLE(DispatchTable<BatchNormForwardFn>, batch_norm_forward, "batch_norm");
MT_KERNEL_TABLE(DispatchTable<BatchNormBackwardFn>, batch_norm_backward, "batch_norm backward");
MT_KERNEL_TABLE(DispatchTable<BatchNormUpdateStatsFn>, batch_norm_update_stats, "batch_norm running-stats update");

}  // namespace mixtrain::kernels
