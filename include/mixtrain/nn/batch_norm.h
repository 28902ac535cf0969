// mixtrain/nn/batch_norm.h: the functional batch normalisation op (mt::nn::functional::batch_norm).
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain::nn::functional {

// PyTorch's F.batch_norm. x [N, C, *] (any float dtype) -> same shape and dtype, per channel c:
//   y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c
// training: mean/var are the batch statistics over (N, *) with the biased variance; when running
//   stats are given they are updated in place (not recorded by autograd):
//     running_mean = (1 - momentum) running_mean + momentum mean
//     running_var  = (1 - momentum) running_var  + momentum var * M / (M - 1)   (M = N * prod(*))
//   Needs M > 1.
// eval (training = false): mean/var are running_mean/running_var, which must then be defined.
// weight, bias, running_mean, running_var: [C], optional (undefined tensors), each either of x's
// dtype or float32 (so a 16-bit x may use fp32 parameters and statistics, as in PyTorch).
// Statistics, normalisation and the backward accumulate in fp32 (fp64 for fp64 input); 16-bit
// outputs are rounded once on store. Differentiable with respect to x, weight and bias (gradients
// in their own dtypes). Autocast: runs in the input dtype (unlisted op).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

}  // namespace mixtrain::nn::functional
